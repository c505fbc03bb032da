"""Runs, traces and rank files from the paths a user gives.

``trace_paths`` is what ``analyze``, ``findings``, ``compare`` and ``record`` accept: a trace, a run
folder, a folder of runs or of exports (the ranks of one job) or a glob; run folders without a
trace become ``NoTrace`` entries, listed once.  ``rank_inputs`` is the exports of one job
(``analyze --ranks``, the recipe).  ``discover`` is what the dashboard shows: run folders, folders
of runs, trace files and the traces a ``CATALOG.tsv`` lists, each as a ``RunRef`` with an id.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.conventions import JAX_TRACE_SUFFIXES, is_jax_trace_name
from profiler.errors import InputError
from profiler.runs.catalog import CATALOG, Provenance, allowed, read_catalog
from profiler.stored import folder, no_trace

TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
# files beside a trace that are not traces: the dashboard's cache, an export being written
CACHE_MARKS = (*folder.CACHE_SUFFIXES, ".partial.")


def is_trace(path: Path) -> bool:
    """Whether *path* is named like an nsys export or report, or a JAX profiler trace (and not like a
    cache beside one)."""
    named = path.suffix in TRACE_SUFFIXES or is_jax_trace_name(path.name)
    return named and not any(m in path.name for m in CACHE_MARKS)


def _once(found: list[Path]) -> list[Path]:
    """A report whose export sits beside it counts once, as the export."""
    return [p for p in found if p.suffix == ".sqlite" or not p.with_suffix(".sqlite").is_file()]


def rank_inputs(arg: str) -> list[Path]:
    """The rank exports named by *arg*: a folder (exports in it, or run folders' traces) or a glob."""
    path = Path(arg)
    if path.is_dir():
        names = (*TRACE_SUFFIXES, *JAX_TRACE_SUFFIXES)
        found = [p for s in names for p in path.glob(f"*{s}")]
        found += [p for s in names for p in path.glob(f"*/*{s}")]
    else:
        found = [Path(p) for p in glob.glob(arg)]
        if not found and not any(c in arg for c in "*?["):
            raise InputError(arg, "no such folder")
    found = _once([p for p in found if p.is_file() and is_trace(p)])
    if not found:
        raise InputError(arg, "holds no nsys exports or reports (*.sqlite, *.nsys-rep) or JAX profiler traces")
    return sorted(set(found))


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
    path = Path(arg)
    if path.is_dir() and (path / "plugins" / "profile").is_dir():  # a jax.profiler.trace folder
        from profiler.trace.jax_profile import find

        return [find(path)]
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


def one_trace(arg: str) -> Path:
    """The one trace *arg* names: a trace file, or a run folder's trace (as :func:`trace_paths` finds
    it); a folder holding several traces, or none, is the user's one-line error, naming them."""
    path = Path(arg)
    if not path.is_dir():
        return path
    found = trace_paths(arg) or []
    if len(found) != 1:
        names = ", ".join(str(p) for p in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        raise InputError(
            arg, f"holds {len(found)} traces ({names}{more}): give one of them" if found else "holds no trace"
        )
    return found[0]


# Where a run comes from: a profile-step run folder, a SYNTHETIC demonstration run (made by
# profiler/synthetic/demo.py, never a measurement), a public trace listed in a CATALOG.tsv, a trace file.
SOURCES = ("run", "synthetic", "external", "trace")


@dataclass
class RunRef:
    """A run the dashboard knows: an id, its trace, and its manifest when profile-step made it."""

    id: str
    trace: Path
    name: str
    manifest: dict[str, Any] | None = None
    partial: bool = False
    source: str = "trace"
    provenance: Provenance | None = None
    group: str = ""  # the folder given (and its first sub-folder) the run was found under
    no_trace: str | None = None  # a run folder without a trace: why (listed once, never analyzed)

    @property
    def synthetic(self) -> bool:
        return self.source == "synthetic"


def _ref(trace: Path, name: str, run_dir: Path | None = None, manifest: dict[str, Any] | None = None) -> RunRef:
    rid = folder.run_id(trace)
    partial = run_dir is not None and folder.is_partial(run_dir)
    source = "trace"
    if manifest is not None:
        source = "synthetic" if manifest.get("synthetic") is True else "run"
    return RunRef(rid, trace, name, manifest, partial, source)


def discover(paths: list[Path], depth: int = 2, licences: tuple[str, ...] | None = None) -> list[RunRef]:
    """Runs under *paths*: run folders, folders of runs, trace files, *depth* folders deep.

    A folder with a ``CATALOG.tsv`` contributes the traces it lists (under *licences* when
    given), each with its provenance; a trace two catalogues list (same repository, commit and
    path: ``sample_traces/public`` and ``../shared/traces``) is shown once, from the first.
    """
    refs: dict[str, RunRef] = {}
    listed: set[tuple[str, str, str]] = set()

    def add(ref: RunRef) -> None:
        refs.setdefault(ref.id, ref)

    def visit(path: Path, name: str, level: int) -> None:
        if path.is_file():
            if is_trace(path) and _once([path]):
                add(_ref(path, name))  # a report whose export sits beside it is shown once, as the export
            return
        if not path.is_dir():
            return
        if folder.is_run(path):
            manifest = folder.manifest_in(path)
            trace = folder.trace_in(path, manifest)
            ref = _ref(trace or path / folder.TRACE_FILES[0], name, path, manifest)  # no trace: an error card
            if trace is None:
                ref.no_trace = no_trace.reason(path, manifest)
            add(ref)
            return
        if (path / CATALOG).is_file():
            for file, prov in read_catalog(path).items():
                trace = path / file
                origin = (prov.repo, prov.commit, prov.path)
                if allowed(prov, licences) and trace.is_file() and is_trace(trace) and origin not in listed:
                    listed.add(origin)
                    ref = _ref(trace, f"{name}/{file}" if level else file)
                    ref.source, ref.provenance = "external", prov
                    add(ref)
            return
        if level >= depth:
            return
        for child in sorted(path.iterdir()):
            visit(child, f"{name}/{child.name}" if level else child.name, level + 1)

    for path in paths:
        before = set(refs)
        if path.is_file() and path.suffix == ".json":
            continue  # a plan document (``discover_plans``)
        if path.is_file():
            add(_ref(path, path.name))
        else:
            visit(path, path.name, 0)
        for rid in set(refs) - before:  # runs of one folder (and sub-folder) belong together
            ref = refs[rid]
            ref.group = str(path / ref.name.split("/")[0]) if "/" in ref.name else str(path)
    return list(refs.values())
