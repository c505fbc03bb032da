"""What ``compare`` and ``record`` accept as runs: a trace, a run folder, a folder of runs or of
exports (the ranks of one job), a glob of exports, or a label in the results database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.analysis.run_metrics import collect
from profiler.capture import no_trace
from profiler.errors import InputError
from profiler.report.store import load_label
from profiler.runs import folder
from profiler.trace import load_trace


def run_folders(path: Path) -> list[Path]:
    """*path* itself when it is a run folder, else its finished run folders in time order."""
    if folder.is_run(path):
        return [path]
    return sorted(d for d in path.iterdir() if d.is_dir() and folder.is_run(d) and not folder.is_partial(d))


@dataclass(frozen=True)
class NoTrace:
    """A run folder without a trace: listed once, with its reason, and left out of the analysis."""

    run_dir: Path
    policy: str | None
    status: str | None
    reason: str

    @classmethod
    def of(cls, run_dir: Path) -> NoTrace:
        try:
            manifest = folder.read_manifest(run_dir)
        except (OSError, ValueError):
            manifest = {}
        manifest = manifest if isinstance(manifest, dict) else {}
        return cls(run_dir, manifest.get("policy"), manifest.get("status"), no_trace.reason(run_dir, manifest))

    def doc(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "policy": self.policy, "status": self.status, "reason": self.reason}

    def line(self) -> str:
        return f"{self.run_dir}" + (f" (policy {self.policy})" if self.policy else "") + f": no trace: {self.reason}"


def trace_of(run_dir: Path) -> Path:
    trace = folder.trace_in(run_dir, folder.manifest_in(run_dir))
    if trace is not None:
        return trace
    raise InputError(run_dir, f"this run has no trace: {NoTrace.of(run_dir).reason}")


def trace_paths(arg: str, skipped: list[NoTrace] | None = None) -> list[Path] | None:
    """The traces *arg* names as a path (a trace, a run folder, a folder of runs or exports, a glob),
    or None when it names none (it may be a label).  With *skipped*, run folders without a trace are
    added to it instead of stopping everything."""
    from profiler.parallel import rank_inputs

    path = Path(arg)
    if path.is_dir():
        folders = run_folders(path)
        if not folders:
            return rank_inputs(arg)  # a folder of exports
        if skipped is None:
            return [trace_of(f) for f in folders]
        found = []
        for run in folders:
            trace = folder.trace_in(run, folder.manifest_in(run))
            if trace is not None:
                found.append(trace)
            else:
                skipped.append(NoTrace.of(run))
        return found
    if path.exists():
        return [path]
    if any(c in arg for c in "*?["):
        return rank_inputs(arg)
    return None


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
