"""What ``compare`` and ``record`` accept as runs: a trace, a run folder, a folder of runs or of
exports (the ranks of one job), a glob of exports, or a label in the results database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.run_metrics import collect, find_manifest
from profiler.conventions import MANIFEST, PARTIAL_SUFFIX, TRACE_STEM
from profiler.errors import InputError
from profiler.report.store import load_label
from profiler.trace import load_trace


def run_folders(path: Path) -> list[Path]:
    """*path* itself when it is a run folder, else its finished run folders in time order."""
    if (path / MANIFEST).is_file():
        return [path]
    return sorted(
        d for d in path.iterdir() if d.is_dir() and (d / MANIFEST).is_file() and not d.name.endswith(PARTIAL_SUFFIX)
    )


def trace_of(run_dir: Path) -> Path:
    for name in (f"{TRACE_STEM}.sqlite", f"{TRACE_STEM}.nsys-rep"):
        if (run_dir / name).is_file():
            return run_dir / name
    raise InputError(run_dir, "this run has no trace (see its manifest.json and output.log)")


def trace_paths(arg: str) -> list[Path] | None:
    """The traces *arg* names as a path (a trace, a run folder, a folder of runs or exports, a glob),
    or None when it names none (it may be a label)."""
    from profiler.parallel import rank_inputs

    path = Path(arg)
    if path.is_dir():
        folders = run_folders(path)
        return [trace_of(f) for f in folders] if folders else rank_inputs(arg)  # run folders, else exports
    if path.exists():
        return [path]
    if any(c in arg for c in "*?["):
        return rank_inputs(arg)
    return None


def load_runs(arg: str, db: Path, nsys: str | None = None) -> list[dict[str, Any]]:
    """The runs *arg* names, analyzed (or read back from the results database)."""
    traces = trace_paths(arg)
    if traces is not None:
        return [collect(load_trace(t, nsys), find_manifest(t)) for t in traces]
    if db.is_file():
        return load_label(db, arg)
    raise InputError(arg, f"is neither a trace, a run folder, nor a label (no results database {db})")
