"""Our NVTX projection against nsys's own ``nvtx_gpu_proj_trace`` report on real traces."""

from __future__ import annotations

import polars as pl
import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.trace import open_trace
from tests.helpers.cli import nsys_stats_csv

pytestmark = [pytest.mark.nsys, pytest.mark.shared]

TRACES = [
    "gpubootcamp__jacobi_memcpy_nvlink_report",  # MPI-style ranges around copies and kernels
    "gpubootcamp__report4",
    "y768prof__report2",  # 21k nested NVTX ranges, 1000 kernels
    "aiprof__baseline_nvtx",  # PyTorch emit_nvtx: 19k ranges, copies and kernels
    "alcf__lineprofiling_seq_parallel_fp32-ranks8-nodes2-T1_0",  # an NCCL-domain range
]


def nsys_projection(nsys, path) -> dict[tuple[int, str, int], int]:
    rows = [r for r in nsys_stats_csv(nsys, "nvtx_gpu_proj_trace", path) if r["Orig Start (ns)"]]
    return {(int(r["Orig Start (ns)"]), r["Name"], int(r["TID"])): int(r["NumGPUOps"]) for r in rows}


@pytest.mark.parametrize("name", TRACES)
def test_gpu_ops_per_range_equal_nsys(nsys, shared_traces, name):
    path = shared_traces / f"{name}.sqlite"
    theirs = nsys_projection(nsys, path)
    assert theirs, "nsys projected no range"
    bd = Breakdown(open_trace(path))
    counts = bd.pairs.group_by("range_id").len()
    rng = bd.ranges.ranges.join(counts, on="range_id", how="left").with_columns(pl.col("len").fill_null(0))
    ours = {(s, n, t): c for s, n, t, c in rng.select("start", "name", "tid", "len").iter_rows()}
    by_start: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for (s, n, t), c in ours.items():
        by_start.setdefault((s, t), []).append((n, c))
    matched = set()
    for (s, full, t), count in theirs.items():
        # nsys shows a domain's ranges as "DOMAIN:message", and cuts "A::b" names to ":b"
        cands = [
            (n, c)
            for n, c in by_start.get((s, t), [])
            if full == n or full.endswith(":" + n) or (full.startswith(":") and n.endswith(full))
        ]
        assert cands, (s, full, t)
        assert cands[0][1] == count, (s, full, t)
        matched.add((s, cands[0][0], t))
    # and nsys leaves out exactly the ranges without GPU ops
    assert all(c == 0 for k, c in ours.items() if k not in matched)
