"""Running the per-rank task over many exports: serially, in a local process pool, or on Dask.

Every engine runs the same function (``analysis.ranks.rank_result``) on one
path at a time and gets back only its small result; results come back in the
order of the paths given.  Workers read the exports where they lie, so with
Dask they must see the same file system and have this package installed.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from profiler.analysis.ranks import DEFAULT_RANK_PATTERN, rank_result
from profiler.errors import InputError, ProfilerError

TRACE_GLOBS = ("*.sqlite", "*.nsys-rep", "*.qdrep")
CACHE_MARKS = (".profile-step.db", ".ops.parquet", ".ranges.parquet", ".partial.")


def rank_inputs(arg: str) -> list[Path]:
    """The rank exports named by *arg*: a folder (exports in it, or run folders' traces) or a glob."""
    path = Path(arg)
    if path.is_dir():
        found = [p for g in TRACE_GLOBS for p in path.glob(g)]
        found += [p for g in TRACE_GLOBS for p in path.glob(f"*/{g}")]
    else:
        found = [Path(p) for p in glob.glob(arg)]
        if not found and not any(c in arg for c in "*?["):
            raise InputError(arg, "no such folder")
    found = [
        p
        for p in found
        if p.is_file() and p.suffix in (".sqlite", ".nsys-rep", ".qdrep") and not any(m in p.name for m in CACHE_MARKS)
    ]
    # a report whose export sits beside it counts once, as the export
    found = [p for p in found if p.suffix == ".sqlite" or not p.with_suffix(".sqlite").is_file()]
    if not found:
        raise InputError(arg, "holds no nsys exports or reports (*.sqlite, *.nsys-rep)")
    return sorted(set(found))


def _single_threaded() -> None:
    """Worker start-up: one process per core, so polars stays on one thread."""
    os.environ["POLARS_MAX_THREADS"] = "1"


def map_ranks(
    paths: list[Path],
    jobs: int = 1,
    dask: str | None = None,
    scheduler_file: str | None = None,
    nsys: str | None = None,
    pattern: str = DEFAULT_RANK_PATTERN,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """``rank_result`` for every path, by the chosen engine, in path order."""
    args = [str(p) for p in paths]
    results: dict[str, dict[str, Any]] = {}

    def done(res: dict[str, Any]) -> None:
        results[res["path"]] = res
        if progress:
            progress(len(results), len(args), res)

    if dask or scheduler_file:
        try:
            from distributed import Client
            from distributed import as_completed as dask_completed
        except ImportError:
            raise ProfilerError("--dask needs dask.distributed: pip install 'dask[distributed]'") from None
        try:
            client = Client(scheduler_file=scheduler_file) if scheduler_file else Client(dask, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ProfilerError(f"cannot reach the Dask scheduler {dask or scheduler_file}: {exc}") from None
        try:
            futures = client.map(rank_result, args, nsys=nsys, pattern=pattern, pure=False)
            for fut in dask_completed(futures):
                done(fut.result())
        finally:
            client.close()
    elif jobs > 1:
        with ProcessPoolExecutor(
            max_workers=jobs, mp_context=get_context("spawn"), initializer=_single_threaded
        ) as pool:
            futures = [pool.submit(rank_result, a, nsys, pattern) for a in args]
            for fut in as_completed(futures):
                done(fut.result())
    else:
        for a in args:
            done(rank_result(a, nsys, pattern))
    return [results[a] for a in args]
