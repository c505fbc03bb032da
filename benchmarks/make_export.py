"""Write a big nsys-schema export for the benchmarks.

Default: 1,000,000 kernels (1% NCCL) and 200,000 h2d/d2h copies over 8 streams
and 2 devices, plus 20,000 memsets.  Rows are generated with NumPy and inserted
in bulk; the tables use the same DDL as profiler.synthetic.export.

With ``--events``: CUDA launches for every op, and the event records and stream
waits XLA's async copies synchronize through: every copy waits for the compute
stream (a record on a compute stream just before the copy's launch, a wait on
the copy stream), and every other copy's consumer waits for it (a record on
the copy stream, a wait on a compute stream).  Event ids come from a pool of
1,024 and are reused, as XLA reuses its events.  Launches follow GPU order, so
the dependencies are consistent (no cycles).

    python benchmarks/make_export.py benchmarks/data/big.sqlite [--kernels N] [--copies N] [--events]
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from profiler.synthetic.export import DDL, ENUMS, global_tid


@contextmanager
def partial_db(path: Path) -> Iterator[sqlite3.Connection]:
    """A new SQLite file written fast (no journal, no sync) as ``<path>.partial``, committed, closed and
    renamed to *path* when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    with con:
        yield con
    con.close()
    tmp.rename(path)


def add_enums_and_meta(con: sqlite3.Connection) -> None:
    """The enum tables (``ENUMS``) and the export's META_DATA_EXPORT rows (nsys 2023.4.4, schema 3.7.2)."""
    for enum, rows in ENUMS.items():
        create(con, enum)
        con.executemany(f"INSERT INTO {enum} VALUES (?, ?, ?)", rows)
    create(con, "META_DATA_EXPORT")
    con.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
        [("EXPORT_PRODUCT_VERSION", "2023.4.4.54"), ("EXPORT_SCHEMA_VERSION", "3.7.2")],
    )


def create(con: sqlite3.Connection, table: str) -> list[str]:
    cols = DDL[table]
    con.execute(f'CREATE TABLE "{table}" ({", ".join(cols)})')
    return [c.split()[0] for c in cols]


CHUNK = 500_000  # rows converted to Python objects at a time: a 10M-kernel export stays in a few hundred MiB


def insert(con: sqlite3.Connection, table: str, names: list[str], columns: dict[str, np.ndarray]) -> None:
    n = len(next(iter(columns.values())))
    marks = ", ".join("?" for _ in names)
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        data = [columns[c][lo:hi].tolist() if c in columns else [None] * (hi - lo) for c in names]
        con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', zip(*data, strict=True))


def make(
    path: Path,
    n_kernels: int,
    n_copies: int,
    n_memsets: int,
    seed: int = 0,
    annotate: bool = False,
    steps: int = 10,
    layers: int = 48,
    policy: str = "offload_qkv",
    events: bool = False,
) -> Path:
    rng = np.random.default_rng(seed)
    with partial_db(path) as con:
        names = create(con, "StringIds")
        strings = [f"fusion_{i}" for i in range(500)] + [f"ncclDevKernel_AllReduce_{i}" for i in range(20)]
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", enumerate(strings, start=1))
        add_enums_and_meta(con)
        names = create(con, "TARGET_INFO_GPU")
        insert(
            con,
            "TARGET_INFO_GPU",
            names,
            {
                "vmId": np.array([0, 0]),
                "id": np.array([0, 1]),
                "name": np.array(["NVIDIA H200", "NVIDIA H200"]),
            },
        )

        def timeline(n: int, mean_gap: int, mean_len: int) -> tuple[np.ndarray, np.ndarray]:
            start = np.cumsum(rng.integers(1, 2 * mean_gap, n)) + 1_000_000_000
            return start, start + rng.integers(1, 2 * mean_len, n)

        # kernels: 4 compute streams per device, one launch every ~2 us, ~3 us long
        ks, ke = timeline(n_kernels, 1000, 1500)
        dev = rng.integers(0, 2, n_kernels)
        nccl = rng.random(n_kernels) < 0.01
        short = np.where(nccl, rng.integers(501, 521, n_kernels), rng.integers(1, 501, n_kernels))
        names = create(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        insert(
            con,
            "CUPTI_ACTIVITY_KIND_KERNEL",
            names,
            {
                "start": ks,
                "end": ke,
                "deviceId": dev,
                "contextId": np.ones(n_kernels, int),
                "streamId": rng.integers(0, 4, n_kernels) + 7,
                "correlationId": np.arange(n_kernels),
                "globalPid": np.full(n_kernels, global_tid(100, 0)),
                "demangledName": short,
                "shortName": short,
                **{
                    c: np.zeros(n_kernels, int)
                    for c in (
                        "registersPerThread",
                        "gridX",
                        "gridY",
                        "gridZ",
                        "blockX",
                        "blockY",
                        "blockZ",
                        "staticSharedMemory",
                        "dynamicSharedMemory",
                        "localMemoryPerThread",
                        "localMemoryTotal",
                        "gridId",
                    )
                },
            },
        )
        # copies: 4 copy streams per device, spread over the same time
        span = int(ke.max() - ks.min())
        cs, ce = timeline(n_copies, span // n_copies // 2, span // n_copies // 2)
        kind = rng.choice([1, 2], n_copies)
        names = create(con, "CUPTI_ACTIVITY_KIND_MEMCPY")
        insert(
            con,
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            names,
            {
                "start": cs,
                "end": ce,
                "deviceId": rng.integers(0, 2, n_copies),
                "contextId": np.ones(n_copies, int),
                "streamId": rng.integers(0, 4, n_copies) + 20,
                "correlationId": np.arange(n_copies) + n_kernels,
                "globalPid": np.full(n_copies, global_tid(100, 0)),
                "bytes": rng.integers(1 << 16, 1 << 24, n_copies),
                "copyKind": kind,
                "srcKind": np.where(kind == 1, 1, 2),
                "dstKind": np.where(kind == 2, 1, 2),
            },
        )
        ms, me = timeline(n_memsets, span // max(n_memsets, 1), 500)
        names = create(con, "CUPTI_ACTIVITY_KIND_MEMSET")
        insert(
            con,
            "CUPTI_ACTIVITY_KIND_MEMSET",
            names,
            {
                "start": ms,
                "end": me,
                "deviceId": rng.integers(0, 2, n_memsets),
                "contextId": np.ones(n_memsets, int),
                "streamId": np.full(n_memsets, 7),
                "correlationId": np.arange(n_memsets) + n_kernels + n_copies,
                "globalPid": np.full(n_memsets, global_tid(100, 0)),
                "value": np.zeros(n_memsets, int),
                "bytes": np.full(n_memsets, 4096),
            },
        )
        copy_dev = con.execute("SELECT deviceId, streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY rowid").fetchall()
        if annotate or events:
            add_launches(con, ks, cs, n_kernels, n_copies)
        if annotate:
            add_annotations(con, ks, ke, cs, ce, steps, layers, policy)
        if events:
            add_events(con, rng, cs - LAUNCH_LEAD, np.array(copy_dev), n_kernels + n_copies + n_memsets)
    return path


LAUNCH_LEAD = 2000  # ns between a launch call and its op's GPU start
RECORD_NAME, WAIT_NAME = 9004, 9005


def add_launches(con: sqlite3.Connection, ks: np.ndarray, cs: np.ndarray, n_kernels: int, n_copies: int) -> None:
    """A CUDA launch call, on one thread, LAUNCH_LEAD ns before every kernel and copy."""
    tid = global_tid(100, 100)
    names = create(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
    con.execute(
        "INSERT INTO StringIds VALUES (9001, 'cudaLaunchKernel'), (9002, 'cudaMemcpyAsync'), (9003, 'profile-step'), "
        f"({RECORD_NAME}, 'cuEventRecord'), ({WAIT_NAME}, 'cuStreamWaitEvent')"
    )
    launch = np.concatenate([ks, cs]) - LAUNCH_LEAD
    insert(
        con,
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        names,
        {
            "start": launch,
            "end": launch + 500,
            "eventClass": np.ones(launch.size, int),
            "globalTid": np.full(launch.size, tid),
            "correlationId": np.arange(n_kernels + n_copies),
            "nameId": np.r_[np.full(n_kernels, 9001), np.full(n_copies, 9002)],
            "returnValue": np.zeros(launch.size, int),
        },
    )


def add_events(
    con: sqlite3.Connection, rng: np.random.Generator, copy_launch: np.ndarray, copy_dev: np.ndarray, first_corr: int
) -> None:
    """Event records and stream waits around every copy (see the module docstring)."""
    n = copy_launch.size
    dev, stream = copy_dev[:, 0], copy_dev[:, 1]
    compute = rng.integers(0, 4, n) + 7
    consumer = rng.random(n) < 0.5
    m = int(consumer.sum())
    # producer: record on a compute stream 5 ns before the copy's launch, wait on the copy stream 3 ns before
    # consumer: record on the copy stream 1 ns after the launch, wait on a compute stream 2 ns after
    rec_t = np.r_[copy_launch - 5, copy_launch[consumer] + 1]
    rec_dev = np.r_[dev, dev[consumer]]
    rec_stream = np.r_[compute, stream[consumer]]
    wait_t = np.r_[copy_launch - 3, copy_launch[consumer] + 2]
    wait_stream = np.r_[stream, rng.integers(0, 4, m) + 7]
    event = rng.integers(0, 1024, n + m)
    k = n + m
    rec_corr = np.arange(k) + first_corr
    wait_corr = rec_corr + k
    tid = global_tid(100, 100)
    names = [c.split()[0] for c in DDL["CUPTI_ACTIVITY_KIND_RUNTIME"]]
    insert(
        con,
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        names,
        {
            "start": np.r_[rec_t, wait_t],
            "end": np.r_[rec_t, wait_t] + 1,
            "eventClass": np.ones(2 * k, int),
            "globalTid": np.full(2 * k, tid),
            "correlationId": np.r_[rec_corr, wait_corr],
            "nameId": np.r_[np.full(k, RECORD_NAME), np.full(k, WAIT_NAME)],
            "returnValue": np.zeros(2 * k, int),
        },
    )
    names = create(con, "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
    insert(
        con,
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        names,
        {
            "deviceId": rec_dev,
            "contextId": np.ones(k, int),
            "streamId": rec_stream,
            "correlationId": rec_corr,
            "globalPid": np.full(k, global_tid(100, 0)),
            "eventId": event,
        },
    )
    names = create(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    insert(
        con,
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        names,
        {
            "start": wait_t,
            "end": wait_t + 1,
            "deviceId": rec_dev,
            "contextId": np.ones(k, int),
            "streamId": wait_stream,
            "correlationId": wait_corr,
            "globalPid": np.full(k, global_tid(100, 0)),
            "syncType": np.full(k, 3),
            "eventId": event,
        },
    )


def add_annotations(
    con: sqlite3.Connection,
    ks: np.ndarray,
    ke: np.ndarray,
    cs: np.ndarray,
    ce: np.ndarray,
    steps: int,
    layers: int,
    policy: str,
) -> None:
    """profile-step's NVTX ranges (policy, steps, layers)."""
    tid = global_tid(100, 100)
    t0, t1 = int(min(ks.min(), cs.min())) - 10_000, int(max(ke.max(), ce.max()))
    names = create(con, "NVTX_EVENTS")
    rows = [(t0 - 1, None, 75, "profile-step", 1), (t0, t1 + 1, 59, f"policy={policy}", 1)]
    edges = np.linspace(t0, t1 + 1, steps + 1).astype(np.int64)
    for s in range(steps):
        rows.append((int(edges[s]), int(edges[s + 1]), 59, f"step={s}", 1))
        ledges = np.linspace(edges[s], edges[s + 1], layers + 1).astype(np.int64)
        rows += [(int(ledges[i]), int(ledges[i + 1]), 59, f"layer={i}", 1) for i in range(layers)]
    insert(
        con,
        "NVTX_EVENTS",
        names,
        {
            "start": np.array([r[0] for r in rows]),
            "end": np.array([r[1] for r in rows], dtype=object),
            "eventType": np.array([r[2] for r in rows]),
            "text": np.array([r[3] for r in rows], dtype=object),
            "globalTid": np.full(len(rows), tid),
            "domainId": np.array([r[4] for r in rows]),
        },
    )


def export_parser(doc: str) -> argparse.ArgumentParser:
    """A generator's command line: its docstring's first line as description, and OUT, the export it writes."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("out", type=Path)
    return p


def refuse_existing(out: Path) -> None:
    """Stop with one line where *out* exists: a generator never overwrites an export."""
    if out.exists():
        raise SystemExit(f"{out} exists; not overwritten")


def main() -> None:
    p = export_parser(__doc__)
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--copies", type=int, default=200_000)
    p.add_argument("--memsets", type=int, default=20_000)
    p.add_argument("--annotate", action="store_true", help="add NVTX policy/step/layer ranges and CUDA launches")
    p.add_argument("--events", action="store_true", help="add CUDA launches, event records and stream waits")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="offload_qkv")
    a = p.parse_args()
    refuse_existing(a.out)
    make(a.out, a.kernels, a.copies, a.memsets, seed=a.seed, annotate=a.annotate, policy=a.policy, events=a.events)
    print(a.out)


if __name__ == "__main__":
    main()
