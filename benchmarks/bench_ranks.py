"""Cross-rank analysis of 64 rank exports: serial, a local pool of 2, Dask with 2 local workers.

    python benchmarks/bench_ranks.py [--ranks 64] [--events 200000]

Makes the exports first (benchmarks/data/ranks/report.<R>.sqlite: 80% kernels,
20% copies, NVTX policy/step/layer ranges, a CUDA launch per op).  Also times,
for reference, reading only the columns the per-rank task reads from every
rank (ADBC, one table after the other, one thread): the floor the serial run
is measured against.  Every worker, the serial one included, is one thread
(``POLARS_MAX_THREADS=1``, reads on the calling thread), so that the
speed-ups are speed-ups in workers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["POLARS_MAX_THREADS"] = "1"  # before polars is imported

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.make_export import make  # noqa: E402
from profiler.analysis.ranks import cross_rank  # noqa: E402
from profiler.parallel import map_ranks, single_threaded  # noqa: E402
from profiler.runs.discover import rank_inputs  # noqa: E402
from profiler.trace.sqlite_io import _read_adbc, ro_uri  # noqa: E402

DATA = HERE / "data" / "ranks"
# what the per-rank task reads: kernel spans and names; copies; the runtime rows of copies (attribution)
QUERIES = (
    "SELECT deviceId, start, end, shortName, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "SELECT deviceId, streamId, start, end, correlationId, globalPid, bytes, copyKind, srcKind, dstKind "
    "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
    "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY)",
    "SELECT start, end, eventType, text, textId, domainId, globalTid, endGlobalTid, rangeId FROM NVTX_EVENTS",
)


def read_floor(paths: list[Path]) -> float:
    t = time.perf_counter()
    for p in paths:
        for sql in QUERIES:
            _read_adbc(ro_uri(p), sql)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=200_000)
    a = ap.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    for r in range(a.ranks):
        p = DATA / f"report.{r}.sqlite"
        if not p.exists():
            make(p, a.events * 4 // 5, a.events // 5, 0, seed=r, annotate=True, steps=5, layers=16)
    print(f"exports ready ({time.perf_counter() - t:.0f} s)")
    paths = rank_inputs(str(DATA))[: a.ranks]
    single_threaded()
    floor = read_floor(paths)
    print(f"{'engine':36s} {'wall s':>7s} {'speed-up':>8s}")
    print(f"{'(read needed columns only, serial)':36s} {floor:7.1f}")
    timings = {}
    docs = {}
    for name, kwargs in (
        ("serial", {}),
        ("--jobs 2", {"jobs": 2}),
        ("dask LocalCluster, 2 workers", {"dask": "local"}),
    ):
        if kwargs.get("dask") == "local":
            from distributed import LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
                t = time.perf_counter()
                res = map_ranks(paths, dask=c.scheduler_address)
                timings[name] = time.perf_counter() - t
        else:
            t = time.perf_counter()
            res = map_ranks(paths, **kwargs)
            timings[name] = time.perf_counter() - t
        docs[name] = cross_rank(res)
        print(f"{name:36s} {timings[name]:7.1f} {timings['serial'] / timings[name]:8.2f}x")
    same = all(d == docs["serial"] for d in docs.values())
    print(f"identical results across engines: {same}")
    for name, t in timings.items():
        print(f"{name:36s} {t / floor:.2f}x the column-read floor")


if __name__ == "__main__":
    main()
