"""Independent pieces of one analysis side by side, in a pool of threads, when asked.

Work that shares nothing while it runs (the savings' replays, one per finding, and the copy-free
replay) can run in threads of one process: no copy of the arrays, results as the serial order
gives them.  ``PROFILE_STEP_THREADS=N`` sets the most threads.  The default is 1, everything in the
calling thread: on a quiet 2-core machine two threads gave the same wall time (1.01x) for 7% more
peak memory on a 1.36M-kernel export, since the scalar replay's segment loop holds the GIL
(benchmarks/README, issue 45).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from profiler.errors import ProfilerError

THREADS_ENV = "PROFILE_STEP_THREADS"

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """The most threads an analysis runs side by side: ``$PROFILE_STEP_THREADS``, else 1."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise ProfilerError(f"{THREADS_ENV}={raw!r}: give a whole number of threads, 1 or more")
    return int(raw)


def map_in_threads(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, computed by up to ``thread_count()`` threads; in the order of
    *items*, and the first item's exception (in that order) is the one raised."""
    todo = list(items)
    n = min(thread_count(), len(todo))
    if n <= 1:
        return [fn(x) for x in todo]
    with ThreadPoolExecutor(n, thread_name_prefix="profile-step") as pool:
        return list(pool.map(fn, todo))
