"""Rules about the recording itself: what it lost."""

from __future__ import annotations

import polars as pl

from profiler.analysis.findings import Finding, rule
from profiler.analysis.findings.config import at_least
from profiler.analysis.findings.evidence import CannotDecide, Evidence
from profiler.analysis.findings.rules.text import pct


@rule("gpu-records-lost")
def gpu_records_lost(ev: Evidence) -> list[Finding]:
    """Nearly all of XLA's thunk ranges (host side, NVTX) launched no GPU work the trace recorded: the
    recording lost its CUDA activity.  Seen on an H200 (2026-12-04): Nsight Systems 2023.4.4 under a
    CUDA 13 driver kept 6 of 2,220 thunks' work in the capture window (17 kernels in all); in a
    healthy trace most thunks launch something (72% of the H200 step's, its copy-dones and the like
    being the rest)."""
    thunks = ev.breakdown.ranges.ranges.filter(pl.col("xla_kind") == "thunk").select("range_id")
    if thunks.height == 0:
        raise CannotDecide("no XLA thunk ranges: nothing says what the GPU should have run")
    launched = ev.breakdown.pairs.join(thunks, on="range_id")["range_id"].n_unique()
    total = thunks.height
    lost = total - launched
    if lost < ev.config["lost_min_thunks"] or not at_least(lost / total, ev.config["lost_thunks_share"]):
        return []
    return [
        Finding(
            "gpu-records-lost",
            "problem",
            f"{lost} of XLA's {total} thunks ({pct(lost / total)}) launched no kernel, copy or memset that the trace "
            "recorded: the recording lost its CUDA activity, and its GPU numbers cover only what was kept",
            "record with an Nsight Systems at least as new as the driver's CUDA (2023.4.4 loses a CUDA 13 driver's "
            "activity), or with JAX's profiler (jax.profiler.trace; profile-step analyze reads its folder)",
            evidence={"thunks": total, "thunks_without_gpu_records": lost},
            view="timeline",
            no_saving="not modelled: a fault of the recording; the work it lost is not in the trace",
        )
    ]
