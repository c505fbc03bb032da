"""Write a big nsys-schema export for the benchmarks.

Default: 1,000,000 kernels (1% NCCL) and 200,000 h2d/d2h copies over 8 streams
and 2 devices, plus 20,000 memsets.  Rows are generated with NumPy and inserted
in bulk; the tables use the same DDL as profiler.trace.synthetic.

    python benchmarks/make_export.py benchmarks/data/big.sqlite [--kernels N] [--copies N]
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import numpy as np

from profiler.trace.synthetic import DDL, ENUMS, global_tid


def create(con: sqlite3.Connection, table: str) -> list[str]:
    cols = DDL[table]
    con.execute(f'CREATE TABLE "{table}" ({", ".join(cols)})')
    return [c.split()[0] for c in cols]


def insert(con: sqlite3.Connection, table: str, names: list[str], columns: dict[str, np.ndarray]) -> None:
    n = len(next(iter(columns.values())))
    data = [columns[c].tolist() if c in columns else [None] * n for c in names]
    marks = ", ".join("?" for _ in names)
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
) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    with con:
        names = create(con, "StringIds")
        strings = [f"fusion_{i}" for i in range(500)] + [f"ncclDevKernel_AllReduce_{i}" for i in range(20)]
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", enumerate(strings, start=1))
        for enum, rows in ENUMS.items():
            create(con, enum)
            con.executemany(f"INSERT INTO {enum} VALUES (?, ?, ?)", rows)
        create(con, "META_DATA_EXPORT")
        con.executemany(
            "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
            [("EXPORT_PRODUCT_VERSION", "2023.4.4.54"), ("EXPORT_SCHEMA_VERSION", "3.7.2")],
        )
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
        if annotate:
            add_annotations(con, rng, ks, ke, cs, ce, n_kernels, n_copies, steps, layers, policy)
    con.close()
    tmp.rename(path)
    return path


def add_annotations(
    con: sqlite3.Connection,
    rng: np.random.Generator,
    ks: np.ndarray,
    ke: np.ndarray,
    cs: np.ndarray,
    ce: np.ndarray,
    n_kernels: int,
    n_copies: int,
    steps: int,
    layers: int,
    policy: str,
) -> None:
    """profile-step's NVTX ranges (policy, steps, layers) and a CUDA launch for every kernel and copy."""
    tid = global_tid(100, 100)
    t0, t1 = int(min(ks.min(), cs.min())) - 10_000, int(max(ke.max(), ce.max()))
    names = create(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
    con.execute(
        "INSERT INTO StringIds VALUES (9001, 'cudaLaunchKernel'), (9002, 'cudaMemcpyAsync'), (9003, 'profile-step')"
    )
    launch = np.concatenate([ks, cs]) - 2000
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--copies", type=int, default=200_000)
    p.add_argument("--memsets", type=int, default=20_000)
    p.add_argument("--annotate", action="store_true", help="add NVTX policy/step/layer ranges and CUDA launches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="offload_qkv")
    a = p.parse_args()
    if a.out.exists():
        raise SystemExit(f"{a.out} exists; not overwritten")
    make(a.out, a.kernels, a.copies, a.memsets, seed=a.seed, annotate=a.annotate, policy=a.policy)
    print(a.out)


if __name__ == "__main__":
    main()
