"""Runs that ended without a trace: why, in one line, and the one failure worth a retry.

nsys can lose its agent under load ("Connection to Agent lost. This is most likely a bug.
Internal reason: 'End of file'.") and exit 0 without writing a report.  That is nsys's
failure, not the script's: ``agent_lost`` spots it so that the capture is tried once more.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from profiler.capture.console import ConsoleFilter
from profiler.conventions import LOG, MANIFEST
from profiler.runs.folder import has_trace

AGENT_LOST = re.compile(r"Connection to Agent lost\b.*")
FIRST_ATTEMPT_LOG = "output.attempt1.log"
NO_TRACE_KEY = "no_trace_reason"  # the manifest's one-line reason when a run has no trace
_REASON_CHARS = 240


def _lines(log: Path) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [ln.split("\r")[-1].rstrip() for ln in text.splitlines()]


def agent_lost(run_dir: Path) -> str | None:
    """nsys's "Connection to Agent lost ..." line when the run wrote no report because of it, else None."""
    if has_trace(run_dir):
        return None
    for line in _lines(run_dir / LOG):
        found = AGENT_LOST.search(line)
        if found:
            return found.group(0).strip()
    return None


def set_aside(run_dir: Path) -> None:
    """Before a second attempt: the first attempt's log kept as ``output.attempt1.log``, everything else
    it left (nsys's leftovers, the XLA dump, the script's facts) removed; the manifest stays."""
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
    """The last line of the child's output that is not nsys's progress chatter ("" when none)."""
    keep = ConsoleFilter()
    kept = [ln for ln in _lines(log) if keep.keep(ln) and ln.strip()]
    last = kept[-1].strip() if kept else ""
    return last if len(last) <= _REASON_CHARS else last[: _REASON_CHARS - 3] + "..."


def reason(run_dir: Path, manifest: dict[str, Any] | None) -> str:
    """Why *run_dir* has no trace, in one line: the manifest's reason, else its status, exit code and last output."""
    manifest = manifest or {}
    if isinstance(manifest.get(NO_TRACE_KEY), str) and manifest[NO_TRACE_KEY]:
        return manifest[NO_TRACE_KEY]
    return describe(run_dir, manifest.get("status"), manifest.get("exit_code"))


def describe(run_dir: Path, status: str | None, exit_code: int | None, retried: str | None = None) -> str:
    """The one-line reason for a run of *status* that left no trace in *run_dir*."""
    lost = AGENT_LOST.search(" ".join(_lines(run_dir / LOG)))
    if lost:
        again = ", on the retry too" if retried else ""
        head = f"nsys lost its agent and wrote no report{again} ({lost.group(0).strip()})"
    elif status == "running":
        head = "the capture never finished (profile-step was stopped before nsys wrote a report)"
    elif status == "interrupted":
        head = "interrupted before nsys wrote a report"
    elif exit_code not in (None, 0):
        head = f"the capture ended with exit code {exit_code} and no report"
    else:
        head = "nsys exited without writing a report"
    if retried and not lost:
        head += " (on the retry; the first attempt: nsys lost its agent)"
    words = last_words(run_dir / LOG)
    if words and not lost:
        head += f"; last output: {words}"
    return head
