"""Runs that ended without a trace: why, in one line, and the failures of nsys worth a retry.

Under load nsys can lose its agent ("Connection to Agent lost. This is most likely a bug.
Internal reason: 'End of file'.") or its importer can crash while turning the raw capture
(``.qdstrm``) into a report ("Importer error status: Importation failed." and an exception block
of about 30 lines), and exit 0 without writing a report.  That is nsys's failure, not the script's:
``nsys_failure`` spots it so that the capture is tried once more, and ``describe`` says it in one
line, with where the raw capture and nsys's output are.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from profiler.conventions import LOG, MANIFEST, STARTUP_FACTS
from profiler.stored.console import IMPORT_FAILED, QUADD_MESSAGE, ConsoleFilter
from profiler.stored.folder import has_trace

AGENT_LOST = re.compile(r"Connection to Agent lost\b.*")
IMPORTER_STATUS = re.compile(r"^Importer error status: (.*?)\.?\s*$")
ERROR_TEXT = re.compile(r'^\s*Value: "(.*)"\s*$')
GENERATED = "Generated:"  # nsys's line before the paths of the files it wrote, one a line
FIRST_ATTEMPT_LOG = "output.attempt1.log"
NO_TRACE_KEY = "no_trace_reason"  # the manifest's one-line reason when a run has no trace
RAW_CAPTURE = ".qdstrm"  # nsys's raw capture, before its importer makes the report of it
_REASON_CHARS = 240
_DETAIL_CHARS = 64


def _lines(log: Path) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [ln.split("\r")[-1].rstrip() for ln in text.splitlines()]


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def importer_failure(lines: list[str]) -> str | None:
    """What nsys's importer said when it failed, in a few words ("Importation failed: Wrong event
    order has been detected ..."), else None."""
    status = next((m.group(1) for ln in lines if (m := IMPORTER_STATUS.match(ln))), None)
    crashed = any(IMPORT_FAILED.match(ln) for ln in lines)
    if status is None and not crashed:
        return None
    detail = None
    for i, ln in enumerate(lines):  # the block's ErrorText, else its Status
        if ln.strip() == "Type: ErrorText" and i + 1 < len(lines) and (m := ERROR_TEXT.match(lines[i + 1])):
            detail = m.group(1).split("\\n")[0].rstrip(":")
            break
        if detail is None and "] = Status: " in ln:
            detail = ln.split("] = Status: ", 1)[1].strip()
    words = status or "the import failed"
    return _short(f"{words}: {detail}" if detail else words, _DETAIL_CHARS)


def generated_nothing(lines: list[str]) -> bool:
    """nsys said ``Generated:`` and listed no file after it: its importer stopped without a word (seen
    under load with 2024.2.3 beside another nsys: the report's progress bar ended at 100% with no newline,
    then ``Generated:``, no export and no path; exit code 0)."""
    for i, ln in enumerate(lines):
        if ln.rstrip().endswith(GENERATED):
            return not any(rest.strip() for rest in lines[i + 1 :])
    return False


def nsys_failure(run_dir: Path, exit_code: int | None = None) -> str | None:
    """nsys's own failure when the run wrote no report because of it ("nsys lost its agent (...)",
    "nsys's importer failed (...)", and with a non-zero *exit_code* "nsys failed before the script
    started (...)": the start-up hook wrote no facts and the log holds only nsys's lines), else None."""
    if has_trace(run_dir):
        return None
    lines = _lines(run_dir / LOG)
    for line in lines:
        found = AGENT_LOST.search(line)
        if found:
            return f"nsys lost its agent ({found.group(0).strip()})"
    imported = importer_failure(lines)
    if imported:
        return f"nsys's importer failed ({imported})"
    if generated_nothing(lines):
        return "nsys's importer failed (it said Generated: and listed no file)"
    said = [ln.strip() for ln in lines if ln.strip()]
    if exit_code not in (None, 0) and not (run_dir / STARTUP_FACTS).exists() and not last_words(run_dir / LOG):
        told = [m.group(1) for ln in said if (m := QUADD_MESSAGE.match(ln))]  # what nsys's exception said
        last = _short((told or said)[-1], _DETAIL_CHARS) if said else "nothing said"
        return f"nsys failed before the script started (exit code {exit_code}: {last})"
    return None


def keep_raw_capture(run_dir: Path, elsewhere: Path | None = None) -> Path | None:
    """The raw capture nsys left (``*.qdstrm`` in *run_dir*, or in *elsewhere*, nsys's temporary
    folder, from where it is moved into *run_dir*), when the run has no report; else None."""
    if has_trace(run_dir):
        return None
    found = sorted(run_dir.glob(f"*{RAW_CAPTURE}"))
    if not found and elsewhere is not None and elsewhere.is_dir():
        left = _raw_captures_in(elsewhere)
        target = run_dir / f"trace{RAW_CAPTURE}"
        try:
            if left:
                shutil.move(str(left[-1]), target)
                found = [target]
        except FileNotFoundError:  # nsys's daemon removed it meanwhile: nothing to keep
            pass
    return found[-1] if found else None


def _raw_captures_in(folder: Path) -> list[Path]:
    """The raw captures under *folder*, sorted.  nsys's daemon may still be removing its session
    folders there after nsys exits (``quadd_session_*``): a folder that vanishes while walked is
    skipped (``os.walk`` ignores it) instead of failing the run as ``Path.rglob`` does."""
    return sorted(
        Path(root) / name for root, _, names in os.walk(folder) for name in names if name.endswith(RAW_CAPTURE)
    )


def set_aside(run_dir: Path) -> None:
    """Before a second attempt: the first attempt's log kept as ``output.attempt1.log``, everything else
    it left (nsys's leftovers and raw capture, the XLA dump, the script's facts) removed; the manifest
    stays."""
    log = run_dir / LOG
    if log.is_file():
        log.replace(run_dir / FIRST_ATTEMPT_LOG)
    for left in run_dir.iterdir():
        if left.name in (MANIFEST, FIRST_ATTEMPT_LOG) or left.name.startswith(f".{MANIFEST}."):
            continue
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left)
        else:
            left.unlink()


def last_words(log: Path) -> str:
    """The last line of the child's output that is not nsys's own ("" when none)."""
    keep = ConsoleFilter()
    kept = [ln for ln in _lines(log) if keep.keep(ln) and ln.strip()]
    last = kept[-1].strip() if kept else ""
    return _short(last, _REASON_CHARS)


def reason(run_dir: Path, manifest: dict[str, Any] | None) -> str:
    """Why *run_dir* has no trace, in one line: the manifest's reason, else its status, exit code and
    last output.  A reason written before nsys's failures were told apart ("...; last output: }") is
    said again from the log."""
    manifest = manifest or {}
    said = manifest.get(NO_TRACE_KEY)
    told_apart = isinstance(said, str) and said.startswith(("nsys lost its agent", "nsys's importer", "nsys failed"))
    if isinstance(said, str) and said and (told_apart or nsys_failure(run_dir, manifest.get("exit_code")) is None):
        return said
    retried = (manifest.get("retried") or {}).get("reason")
    return describe(run_dir, manifest.get("status"), manifest.get("exit_code"), retried)


def describe(run_dir: Path, status: str | None, exit_code: int | None, retried: str | None = None) -> str:
    """The one-line reason for a run of *status* that left no trace in *run_dir*: what failed (nsys's
    agent, its importer, the script, nothing said) and whether it was retried."""
    failed = nsys_failure(run_dir, exit_code)
    if failed:
        what, _, detail = failed.partition(" (")
        again = ", on the retry too" if retried and retried.split(" (")[0] == what else ""
        head = f"{what}{'' if 'started' in what else ' and wrote no report'}{again} ({detail}"
        if retried and not again:
            head += f" (on the retry; the first attempt: {retried})"
    elif status == "running":
        head = "the capture never finished (profile-step was stopped before nsys wrote a report)"
    elif status == "interrupted":
        head = "interrupted before nsys wrote a report"
    elif exit_code not in (None, 0):
        head = f"the capture ended with exit code {exit_code} and no report"
    else:
        head = "nsys exited without writing a report"
    if retried and not failed:
        head += f" (on the retry; the first attempt: {retried})"
    words = last_words(run_dir / LOG)
    if words and not failed:
        head += f"; last output: {words}"
    return head


def raw_capture(run_dir: Path) -> Path | None:
    """The raw capture (``.qdstrm``) kept in a run folder without a report, else None."""
    raw = sorted(run_dir.glob(f"*{RAW_CAPTURE}")) if run_dir.is_dir() else []
    return raw[-1] if raw else None
