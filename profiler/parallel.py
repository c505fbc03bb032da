"""Running the per-rank task over many exports: serially, in a local process pool, or on Dask.

Every engine runs the same function (``runs.result.rank_result``) on one
path at a time and gets back only its small result; results come back in the
order of the paths given.  Workers read the exports where they lie, so with
Dask they must see the same file system and have this package installed.

``load_sides``: compare's two sides, analysed at once in the same local pool.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from profiler.conventions import DEFAULT_RANK_PATTERN, rank_from_name
from profiler.errors import ProfilerError
from profiler.runs.discover import NoTrace, trace_paths
from profiler.runs.result import load_runs, rank_result
from profiler.stored.summary import RunSummary
from profiler.threads import THREADS_ENV, usable_cores


def single_threaded() -> int:
    """Make this process one single-threaded worker among others on the same cores: polars
    on one thread (when it is not imported yet), the analysis's pieces one after the other
    (``threads.THREADS_ENV``) and table reads on the calling thread.
    Returns the previous number of read threads."""
    if "polars" not in sys.modules:
        os.environ.setdefault("POLARS_MAX_THREADS", "1")
    os.environ.setdefault(THREADS_ENV, "1")
    from profiler.trace.sqlite_io import set_read_threads

    return set_read_threads(1)


def _worker_rank_result(path: str, nsys: str | None, pattern: str) -> dict[str, Any]:
    """``rank_result`` on a Dask worker: single-threaded, one rank per core."""
    single_threaded()
    with _malloc_keeps_freed_memory():
        return rank_result(path, nsys, pattern)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
DEFAULT_MMAP_THRESHOLD = 128 * 1024  # glibc's, fixed once MALLOC_TRIM_THRESHOLD_ is set


@contextmanager
def _malloc_keeps_freed_memory() -> Iterator[None]:
    """While one rank is analyzed, let glibc keep freed memory for reuse.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which
    also freezes glibc's mmap threshold at 128 KiB: every array over that
    size is then mapped and unmapped on its own, and every free of heap memory
    is given back, so the next allocation faults the pages in again.  That
    made the rank task about 25% slower on a Dask worker than in a plain
    process.  For the task's duration both thresholds are raised; the
    worker's settings are put back when it ends (memory is then trimmed as
    the worker asked).  Nothing is changed where that variable is not set.
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
    mmap = os.environ.get("MALLOC_MMAP_THRESHOLD_", "")
    libc = None
    if trim.isdigit() and int(trim) < 64 << 20 and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
            libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)
        except (OSError, AttributeError):
            libc = None
    try:
        yield
    finally:
        if libc is not None:
            libc.mallopt(M_MMAP_THRESHOLD, int(mmap) if mmap.isdigit() else DEFAULT_MMAP_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, int(trim))


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
        _on_dask(args, dask, scheduler_file, nsys, pattern, done)
    elif jobs > 1 and len(args) > 1:
        task = partial(rank_result, nsys=nsys, pattern=pattern)
        _on_pool(args, min(jobs, len(args)), task, done, partial(_worker_died, pattern=pattern))
    else:
        for a in args:
            done(rank_result(a, nsys, pattern))
    return [results[a] for a in args]


def _on_dask(
    args: list[str],
    address: str | None,
    scheduler_file: str | None,
    nsys: str | None,
    pattern: str,
    done: Callable[[dict[str, Any]], None],
) -> None:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise ProfilerError("--dask needs dask.distributed: pip install 'dask[distributed]'") from None
    try:
        client = Client(scheduler_file=scheduler_file) if scheduler_file else Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ProfilerError(f"cannot reach the Dask scheduler {address or scheduler_file}: {exc}") from None
    try:
        futures = client.map(_worker_rank_result, args, nsys=nsys, pattern=pattern, pure=False)
        for fut in dask_completed(futures):
            done(fut.result())
    finally:
        client.close()


Task = Callable[[str], dict[str, Any]]


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while workers are started: a spawned interpreter keeps an ignored SIGINT, so
    Ctrl-C reaches this process alone (one line: interrupted), never a worker's traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, prev)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """On Ctrl-C: the workers (which ignore it) end now rather than after their tasks, and the pool's
    manager thread is waited for: left running into the interpreter's exit, it raced the exit's own
    clean-up (Python 3.11: a traceback "Bad file descriptor" after "interrupted", or exit -2, in 3 of 25)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _on_pool(
    args: list[str],
    jobs: int,
    task: Task,
    done: Callable[[dict[str, Any]], None],
    died: Callable[[str, Exception], dict[str, Any]],
) -> None:
    """*task* on every arg by *jobs* workers: this process and jobs - 1 spawned ones, all taking
    args from one queue (*task* is pickled to the workers: a module-level function or a partial of one).

    This process starts working at once, while the others start up (about a
    second: a fresh interpreter importing polars and NumPy); with more args than
    workers each spawned worker keeps one arg queued so that it never waits for
    this one.  If a spawned worker dies (killed, out of memory) or its task raises,
    ``died(arg, exc)`` says what each arg it held gives, and this process does the rest.
    """
    from profiler.trace.sqlite_io import set_read_threads

    queue = deque(args)
    inflight: dict[Future[dict[str, Any]], str] = {}
    per_worker = 2 if len(args) > jobs else 1
    prev_pool = os.environ.get(THREADS_ENV)
    prev_threads = single_threaded()
    try:
        with ProcessPoolExecutor(jobs - 1, mp_context=get_context("spawn"), initializer=single_threaded) as pool:
            broken = False
            try:
                while queue or inflight:
                    while queue and not broken and len(inflight) < per_worker * (jobs - 1):
                        try:
                            with _sigint_ignored():  # a submit may start a worker
                                inflight[pool.submit(task, queue[0])] = queue[0]
                            queue.popleft()
                        except BrokenProcessPool:
                            broken = True
                    if queue:
                        done(task(queue.popleft()))
                    finished, _ = wait(inflight, timeout=0 if queue else None, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        arg = inflight.pop(fut)
                        try:
                            res = fut.result()
                        except Exception as exc:
                            res = died(arg, exc)
                        done(res)
            except KeyboardInterrupt:
                _stop_workers(pool)
                raise
    finally:
        set_read_threads(prev_threads)
        if prev_pool is None:  # this process's own analyses after the pool: side by side again
            os.environ.pop(THREADS_ENV, None)


def _worker_died(path: str, exc: Exception, pattern: str) -> dict[str, Any]:
    """A rank whose worker died, marked failed."""
    return {"path": path, "rank": rank_from_name(Path(path), pattern), "error": f"{path}: worker died ({exc!r})"}


# --- compare's two sides --------------------------------------------------------------------------
def side_task(arg: str, db: Path, nsys: str | None = None) -> dict[str, Any]:
    """``load_runs`` of one side: ``{"arg", "runs", "skipped"}``, or ``{"arg", "error", "exit_code"}``
    for its bad input (the one line it would have printed alone)."""
    skipped: list[NoTrace] = []
    try:
        runs = load_runs(arg, db, nsys, skipped)
    except ProfilerError as exc:
        return {"arg": arg, "error": str(exc), "exit_code": exc.exit_code}
    return {"arg": arg, "runs": runs, "skipped": skipped}


# an analysis holds about this many times its export's size at its peak (1M kernels: a 149 MiB
# export, 700 MiB; 10M kernels: 4.6 GiB): two sides at once must fit in what the machine has free
PEAK_PER_EXPORT_BYTE = 5


def _names_traces(arg: str) -> bool:
    try:
        return trace_paths(arg, []) is not None
    except ProfilerError:  # said in its turn, by load_runs
        return False


def _export_bytes(arg: str) -> int:
    """The largest export a side names (each side's runs are analysed one after the other)."""
    sizes = []
    for p in trace_paths(arg, []) or []:
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            continue
    return max(sizes, default=0)


def available_memory() -> int | None:
    """Bytes of memory the kernel says are available (``MemAvailable``), None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def sides_fit_at_once(sides: list[str]) -> bool:
    """Whether the sides' analyses fit in the available memory side by side (unknown: yes)."""
    free = available_memory()
    return free is None or PEAK_PER_EXPORT_BYTE * sum(_export_bytes(a) for a in sides) < free


def load_sides(
    sides: list[str], db: Path, nsys: str | None = None, skipped: list[NoTrace] | None = None
) -> list[list[RunSummary]]:
    """``load_runs`` of each side (compare's base and head), in order, run folders without a trace
    added to *skipped*.  The sides that name traces are analysed at once, one in this process and
    the others in spawned workers (``_on_pool``, as ``analyze --ranks``); in this process alone when
    fewer than two sides name traces, one core is usable, or the analyses would not fit in memory
    side by side (``sides_fit_at_once``).  A side's bad input fails with its own
    one-line error, the first side's first, as when they are loaded one after the other."""
    traced = list(dict.fromkeys(a for a in sides if _names_traces(a)))
    jobs = min(usable_cores(), len(traced)) if sides_fit_at_once(traced) else 1
    results: dict[str, dict[str, Any]] = {}
    if jobs >= 2:
        task = partial(side_task, db=db, nsys=nsys)
        _on_pool(traced, jobs, task, lambda r: results.__setitem__(r["arg"], r), lambda arg, _exc: task(arg))
    out = []
    for arg in sides:
        res = results.get(arg) or side_task(arg, db, nsys)
        if "error" in res:
            err = ProfilerError(res["error"])
            err.exit_code = res["exit_code"]
            raise err
        if skipped is not None:
            skipped += res["skipped"]
        out.append(res["runs"])
    return out
