"""What of nsys's own output reaches the console while a run is profiled.

Everything goes to the run's ``output.log``; the console gets the script's output without nsys's
progress bars and report-writing chatter ("Generating '/tmp/...qdstrm'", "Generated:" and the
paths of the still ``.partial`` run folder, blank lines between them), which profile-step's own
summary replaces.
"""

from __future__ import annotations

import re

NSYS_PROGRESS = re.compile(r"^\s*(\[\d+/\d+\]\s*)?\[[= ]*\d+%")
NSYS_CHATTER = re.compile(
    r"^(Capture range (started|ended) in the application\.|Generating '.*\.qdstrm'|Generated:)\s*$"
)


class ConsoleFilter:
    """``keep(line)``: whether a line of the child's output is echoed (stateful: after nsys starts
    writing its report, blank lines and the indented paths it lists are its own)."""

    def __init__(self) -> None:
        self.in_report = False

    def keep(self, line: str) -> bool:
        text = line.split("\r")[-1].rstrip("\n")
        if NSYS_PROGRESS.match(text):
            return False
        if NSYS_CHATTER.match(text):
            self.in_report = self.in_report or not text.startswith("Capture range")
            return False
        if self.in_report and (not text.strip() or text.startswith((" ", "\t"))):
            return False
        self.in_report = False
        return True
