"""Attributing GPU ops to NVTX ranges (METRICS.md, "Per NVTX range").

A GPU op belongs to a range when the CUDA API call that launched it (the
runtime row with the same correlationId in the same process) starts inside
the range (``start <= t < end``) on the same thread.  Push/pop ranges and
start/end ranges that end on the thread they started on take part; a
start/end range that ends on another thread is reported and left out.
Ranges still open at the end of the capture extend to the end of the trace
and are reported.  The matching is one inequality join in polars.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profiler.trace.loader import NVTX_PUSH_POP, NVTX_START_END, Trace

I64 = pl.Int64
OP_KINDS = ("kernel", "copy", "memset")


@dataclass(frozen=True)
class Ranges:
    """The NVTX ranges usable for attribution, and what had to be left out."""

    ranges: pl.DataFrame  # range_id, name, domain, start, end, global_tid, pid, tid, open, depth
    cross_thread: int  # start/end ranges ending on another thread: not attributable
    open: int  # ranges with no end: extended to the end of the trace


def nvtx_ranges(nvtx: pl.DataFrame, trace_end: int | None) -> Ranges:
    """Push/pop and start/end ranges with an id, their nesting depth per thread, and open ends closed."""
    rng = nvtx.filter(pl.col("event_type").is_in([NVTX_PUSH_POP, NVTX_START_END])).drop("range_id")
    cross = rng.filter(
        (pl.col("event_type") == NVTX_START_END)
        & pl.col("end_global_tid").is_not_null()
        & (pl.col("end_global_tid") != pl.col("global_tid"))
    )
    rng = rng.join(
        cross.select("start", "global_tid", "end_global_tid"),
        how="anti",
        on=["start", "global_tid", "end_global_tid"],
        nulls_equal=True,
    )
    end_fill = trace_end if trace_end is not None else pl.col("start").max()
    rng = (
        rng.with_columns(
            pl.col("end").is_null().alias("open"),
            pl.coalesce(pl.col("end"), pl.lit(end_fill) if trace_end is not None else end_fill).alias("end"),
            pl.col("text").fill_null("").alias("name"),
        )
        .filter(pl.col("end") >= pl.col("start"))
        .sort("global_tid", "start", pl.col("end"), descending=[False, False, True])
        .with_row_index("range_id")
        .with_columns(pl.col("range_id").cast(I64))
    )
    return Ranges(
        ranges=rng.select("range_id", "name", "domain", "start", "end", "global_tid", "pid", "tid", "open"),
        cross_thread=cross.height,
        open=int(rng["open"].sum()),
    )


def gpu_ops(trace: Trace) -> pl.DataFrame:
    """Every valid kernel, copy and memset with its launch: op_id, kind, device, stream, start,
    end, name, is_nccl, cls, bytes, host_kind, pid, launch_start, launch_gtid (NULL when unknown)."""
    common = ["device", "stream", "start", "end", "correlation_id", "pid"]
    none = pl.lit(None, pl.String)
    k = trace.kernels.select(
        *common,
        "name",
        "is_nccl",
        none.alias("cls"),
        pl.lit(None, I64).alias("bytes"),
        none.alias("host_kind"),
        pl.lit("kernel").alias("kind"),
    )
    c = trace.copies.select(
        *common,
        none.alias("name"),
        pl.lit(False).alias("is_nccl"),
        "cls",
        "bytes",
        "host_kind",
        pl.lit("copy").alias("kind"),
    )
    m = trace.memsets.select(
        *common,
        none.alias("name"),
        pl.lit(False).alias("is_nccl"),
        pl.lit("memset").alias("cls"),
        "bytes",
        none.alias("host_kind"),
        pl.lit("memset").alias("kind"),
    )
    ops = pl.concat([k, c, m]).filter(pl.col("end") >= pl.col("start")).with_row_index("op_id")
    launches = trace.runtime.select(
        "pid",
        "correlation_id",
        pl.col("start").alias("launch_start"),
        pl.col("global_tid").alias("launch_gtid"),
    ).unique(["pid", "correlation_id"], keep="first")
    return ops.with_columns(pl.col("op_id").cast(I64)).join(
        launches, on=["pid", "correlation_id"], how="left"
    )


def attribute(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """(op_id, range_id) for every range that encloses an op's launch on the launching thread."""
    launched = ops.filter(pl.col("launch_start").is_not_null()).select("op_id", "launch_start", "launch_gtid")
    if launched.height == 0 or ranges.height == 0:
        return pl.DataFrame(schema={"op_id": I64, "range_id": I64})
    return launched.join_where(
        ranges.select(
            "range_id", "global_tid", pl.col("start").alias("r_start"), pl.col("end").alias("r_end")
        ),
        pl.col("launch_gtid") == pl.col("global_tid"),
        pl.col("launch_start") >= pl.col("r_start"),
        pl.col("launch_start") < pl.col("r_end"),
    ).select("op_id", "range_id")


def attribute_by_time(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """(op_id, range_id) for ops whose GPU start lies in the range, same process, any thread.

    A fallback for ranges pushed on a thread that launches nothing itself
    (a training loop whose runtime dispatches from worker threads).
    """
    if ops.height == 0 or ranges.height == 0:
        return pl.DataFrame(schema={"op_id": I64, "range_id": I64})
    return (
        ops.select("op_id", "pid", pl.col("start").alias("op_start"))
        .join_where(
            ranges.select(
                "range_id",
                pl.col("pid").alias("r_pid"),
                pl.col("start").alias("r_start"),
                pl.col("end").alias("r_end"),
            ),
            pl.col("pid") == pl.col("r_pid"),
            pl.col("op_start") >= pl.col("r_start"),
            pl.col("op_start") < pl.col("r_end"),
        )
        .select("op_id", "range_id")
    )
