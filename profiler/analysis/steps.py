"""Training steps from the ``step=N`` NVTX ranges that ``profiler.annotate`` writes."""

from __future__ import annotations

from typing import Any

import polars as pl

from profiler.conventions import DOMAIN, POLICY_PREFIX, STEP_PREFIX, WARMUP_PREFIX

RANGE_TYPES = (59, 60)  # push/pop and start/end ranges


def annotated_ranges(nvtx: pl.DataFrame, prefix: str) -> pl.DataFrame:
    """Closed ranges of the profile-step domain named ``<prefix><value>``: value, start, end, duration."""
    return (
        nvtx.filter(
            pl.col("event_type").is_in(RANGE_TYPES)
            & (pl.col("domain") == DOMAIN)
            & pl.col("text").str.starts_with(prefix)
            & pl.col("end").is_not_null()
        )
        .select(
            pl.col("text").str.strip_prefix(prefix).alias("value"),
            "start",
            "end",
            (pl.col("end") - pl.col("start")).alias("duration_ns"),
        )
        .sort("start")
    )


def step_summary(nvtx: pl.DataFrame) -> dict[str, Any]:
    """Steps and warm-up steps seen, and the policy the trace is labelled with (step times and
    their median, outliers left out, come from ``Breakdown.by_step``)."""
    steps = annotated_ranges(nvtx, STEP_PREFIX)
    warm = annotated_ranges(nvtx, WARMUP_PREFIX)
    policies = annotated_ranges(nvtx, POLICY_PREFIX)["value"].unique(maintain_order=True).to_list()
    return {
        "policy": policies[0] if len(policies) == 1 else (policies or None),
        "steps": steps.height,
        "warmup_steps": warm.height,
        "step_ns": steps["duration_ns"].to_list(),
    }
