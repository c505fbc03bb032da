"""The per-report task of the ``offload_overlap`` recipe: analyze one report, return its table rows.

It runs wherever nsys's recipe framework sends it (this process, a process
pool, a Dask worker), so it lives in this package, is picklable by reference
and returns only small, plain data.  It never raises: a report that cannot
be read comes back as ``error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.conventions import DEFAULT_RANK_PATTERN, TRACE_STEM, rank_from_name
from profiler.errors import InputError, ProfilerError

REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite")


def expand_inputs(args: list[str]) -> list[str]:
    """Reports and exports named by *args*: files, folders (of exports, reports or run folders) or globs.

    A report whose export lies beside it counts once, as the export (as in
    ``analyze --ranks``); the order is kept, duplicates dropped.
    """
    from profiler.runs.discover import rank_inputs

    found: list[str] = []
    for arg in args:
        path = Path(arg)
        if arg.endswith(REPORT_SUFFIXES) and not path.exists() and not any(c in arg for c in "*?["):
            raise InputError(arg, "no such file")
        if path.is_file():
            if not path.name.endswith(REPORT_SUFFIXES):
                raise InputError(arg, "not an nsys report or export (.nsys-rep, .qdrep, .sqlite)")
            found.append(str(path))
        else:
            found += [str(p) for p in rank_inputs(arg)]
    return list(dict.fromkeys(found))


def report_names(paths: list[str]) -> dict[str, str]:
    """A short name per input, unique among them: the file's stem (a run folder's name for the
    ``trace.*`` in it), else its name, else with its folder."""
    candidates = [
        lambda p: Path(p).parent.name if Path(p).stem == TRACE_STEM and Path(p).parent.name else Path(p).stem,
        lambda p: Path(p).name,
        lambda p: f"{Path(p).parent.name}/{Path(p).name}",
        lambda p: str(Path(p).resolve()),
    ]
    names: dict[str, str] = {}
    pending = list(paths)
    for make in candidates:
        made = {p: make(p) for p in pending}
        counts: dict[str, int] = {}
        for n in made.values():
            counts[n] = counts.get(n, 0) + 1
        clashes = {n for n, c in counts.items() if c > 1 or n in names.values()}
        for p, n in made.items():
            if n not in clashes:
                names[p] = n
        pending = [p for p in pending if p not in names]
        if not pending:
            break
    for p in pending:  # the same path twice: expand_inputs never gives that
        names[p] = str(Path(p).resolve())
    return names


def report_rank(path: Path, pattern: str = DEFAULT_RANK_PATTERN) -> int | None:
    """The rank the file (or its run folder) is named by, else its run manifest's rank."""
    from profiler.stored.folder import manifest_of

    rank = rank_from_name(path, pattern)
    if rank is None:
        manifest = manifest_of(path)
        if manifest and manifest.get("rank") is not None:
            rank = int(manifest["rank"])
    return rank


def analyze_documents(
    path: str, nsys: str | None = None, layer_pattern: str | None = None, step_range: str | None = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``analyze --json`` (with the findings of the default configuration), ``analyze --by layer
    --json`` and ``analyze --by step --json`` of one report."""
    from profiler.analysis.findings.config import FindingsConfig
    from profiler.runs.result import build
    from profiler.stored.folder import manifest_of
    from profiler.trace import load_trace

    trace = load_trace(path, nsys)
    run = build(
        trace,
        manifest_of(trace.source_path),
        layer_pattern=layer_pattern,
        step_range=step_range,
        findings=FindingsConfig(),
    )  # one analysis, three of its documents
    return (
        run.analysis_json(),
        run.analysis_json("layer", with_findings=False),
        run.analysis_json("step", with_findings=False),
    )


def map_report(
    path: str,
    name: str | None = None,
    nsys: str | None = None,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    rank_pattern: str = DEFAULT_RANK_PATTERN,
) -> dict[str, Any]:
    """``{"path", "rows"}`` with the report's rows per table, or ``{"path", "error"}``."""
    from profiler.recipes.tables import report_rows

    p = Path(path)
    try:
        ident = {"file": name or p.stem, "rank": report_rank(p, rank_pattern)}
        plain, layers, steps = analyze_documents(path, nsys, layer_pattern, step_range)
        return {"path": path, "rows": report_rows(ident, plain, layers, steps, {"input": path})}
    except ProfilerError as exc:
        return {"path": path, "error": str(exc)}
    except Exception as exc:  # one report must never take the others down
        return {"path": path, "error": f"{path}: {type(exc).__name__}: {exc}"}
