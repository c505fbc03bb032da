"""What ``compare`` and ``record`` accept as runs: the traces ``runs.discover.trace_paths`` names,
analyzed, or a label in the results database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.run_metrics import collect
from profiler.errors import InputError
from profiler.report.store import load_label
from profiler.runs import folder
from profiler.runs.discover import NoTrace, trace_paths
from profiler.trace import load_trace


def load_runs(
    arg: str, db: Path, nsys: str | None = None, skipped: list[NoTrace] | None = None
) -> list[dict[str, Any]]:
    """The runs *arg* names, analyzed (or read back from the results database); run folders without
    a trace go to *skipped* when it is given."""
    traces = trace_paths(arg, skipped)
    if traces is not None:
        return [collect(load_trace(t, nsys), folder.manifest_of(t)) for t in traces]
    if db.is_file():
        return load_label(db, arg)
    raise InputError(arg, f"is neither a trace, a run folder, nor a label (no results database {db})")
