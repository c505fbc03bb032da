"""What of nsys's own output reaches the console while a run is profiled.

Everything goes to the run's ``output.log``; the console gets the script's output without nsys's
own lines: its progress bars and report-writing chatter ("Generating '/tmp/...qdstrm'", "Generated:"
and the paths of the still ``.partial`` run folder, blank lines between them), its start and stop
messages, and its failures (the importer's exception block of about 30 lines, a lost agent), which
profile-step says in one line of its own (``no_trace``).
"""

from __future__ import annotations

import re

NSYS_PROGRESS = re.compile(r"^\s*(\[\d+/\d+\]\s*)?\[[= ]*\d+%")
NSYS_CHATTER = re.compile(
    r"^(Capture range (started|ended) in the application\.|Generating '.*\.qdstrm'|Generated:)\s*$"
)
# nsys's own one-line messages (2023.4 and 2024.2): collection, its end, its failures
NSYS_LINE = re.compile(
    r"^(Collecting data\.\.\.|Processing events\.\.\.|Processing \[\d+\] events|Saving temporary \".*\" file"
    r"|Creating final output files\.\.\.|Importer error status: .*|Connection to Agent lost\b.*"
    r"|The target application terminated\. One or more process it created re-parented\."
    r"|Waiting for termination of re-parented processes|Use the `--wait` option to modify this behavior\."
    r"|The application terminated before the collection started\. No report was generated\."
    r"|Unable to retrieve the importer version: .*|Failed to create '.*': File exists\."
    r"|Use `--force-overwrite true` to overwrite existing files\.|End of file"
    r"|Please refer to the troubleshooting section of the docs:|https://docs\.nvidia\.com/nsight-systems/\S*)\s*$"
)
# nsys's client throwing before the script starts ("Local Endpoint is not available." beside another
# nsys, 2024.2.3): where it threw, the exception's type and text, and QuadD's tagged message
NSYS_THROW = re.compile(
    r"^(\S+\.(cpp|h|hpp)\(\d+\): Throw in function .*|Dynamic exception type: .*|std::exception::what: .*"
    r"|\[QuadDCommon::\w+\*\] = .*)$"
)
QUADD_MESSAGE = re.compile(r"^\[QuadDCommon::\w+\*\] = (.*)$")
# the importer's crash: this line, then the exception's facts and a braced block ("Error { ... }")
IMPORT_FAILED = re.compile(r"^Import Failed with unexpected exception: ")


class ConsoleFilter:
    """``keep(line)``: whether a line of the child's output is echoed (stateful: after nsys starts
    writing its report, blank lines and the indented paths it lists are its own; after the importer's
    "Import Failed" line, everything up to the end of its braced block is)."""

    def __init__(self) -> None:
        self.in_report = False
        self.in_import_error = False
        self.depth = 0  # braces open in the importer's block

    def _import_error(self, text: str) -> bool:
        """Whether *text* is part of the importer's crash block (and follow its braces)."""
        if IMPORT_FAILED.match(text):
            self.in_import_error, self.depth = True, 0
            return True
        if not self.in_import_error:
            return False
        stripped = text.strip()
        if stripped.endswith("{"):
            self.depth += 1
        elif stripped == "}":
            self.depth -= 1
            if self.depth <= 0:
                self.in_import_error = False
        elif NSYS_CHATTER.match(text):  # "Generated:" with the raw capture's path: the block has ended
            self.in_import_error = False
            return False
        return True

    def keep(self, line: str) -> bool:
        text = line.split("\r")[-1].rstrip("\n")
        if self._import_error(text):
            return False
        if NSYS_PROGRESS.match(text) or NSYS_LINE.match(text) or NSYS_THROW.match(text):
            return False
        if NSYS_CHATTER.match(text):
            self.in_report = self.in_report or not text.startswith("Capture range")
            return False
        if self.in_report and (not text.strip() or text.startswith((" ", "\t"))):
            return False
        self.in_report = False
        return True
