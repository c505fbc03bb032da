"""Attributing GPU ops to NVTX ranges (METRICS.md, "Per NVTX range").

A GPU op belongs to a range when the CUDA API call that launched it (the
runtime row with the same correlationId in the same process) starts inside
the range (``start <= t < end``) on the same thread.  Push/pop ranges and
start/end ranges that end on the thread they started on take part; a
start/end range that ends on another thread is reported and left out.
Ranges still open at the end of the capture extend to the end of the trace
and are reported.  The matching is a binary search per thread over ops sorted
by launch time (memory proportional to the pairs found).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from profiler.trace.loader import (
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    NVTX_PUSH_POP,
    NVTX_START_END,
    Trace,
)

I64 = pl.Int64
OP_KINDS = ("kernel", "copy", "memset")
KIND_TABLES = {"kernel": KERNEL_TABLE, "copy": MEMCPY_TABLE, "memset": MEMSET_TABLE}


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


def gpu_ops(trace: Trace, kinds: tuple[str, ...] = OP_KINDS, launched: Any = None) -> pl.DataFrame:
    """Every valid kernel, copy and memset (or only the *kinds* asked for) with its launch:
    op_id, kind, device, stream, start, end, name, is_nccl, cls, bytes, host_kind, pid,
    launch_start, launch_gtid (NULL when unknown).

    *launched*: the stalls' ``dependencies.GpuOps`` of the same trace, whose launches (searched
    in the same runtime rows) are taken when they are of the same ops, instead of searched again."""
    common = ["device", "stream", "start", "end", "correlation_id", "pid"]
    none = pl.lit(None, pl.String)
    frames = []
    if "kernel" in kinds:
        frames.append(
            trace.kernels.select(
                *common,
                "name",
                "is_nccl",
                none.alias("cls"),
                pl.lit(None, I64).alias("bytes"),
                none.alias("host_kind"),
                pl.lit("kernel").alias("kind"),
            )
        )
    if "copy" in kinds or (not frames and "memset" not in kinds):
        copies = trace.copies if "copy" in kinds else trace.copies.clear()  # no kinds: an empty frame
        frames.append(
            copies.select(
                *common,
                none.alias("name"),
                pl.lit(False).alias("is_nccl"),
                "cls",
                "bytes",
                "host_kind",
                pl.lit("copy").alias("kind"),
            )
        )
    if "memset" in kinds:
        frames.append(
            trace.memsets.select(
                *common,
                none.alias("name"),
                pl.lit(False).alias("is_nccl"),
                pl.lit("memset").alias("cls"),
                "bytes",
                none.alias("host_kind"),
                pl.lit("memset").alias("kind"),
            )
        )
    ops = pl.concat(frames).filter(pl.col("end") >= pl.col("start"))
    tables = tuple(KIND_TABLES[k] for k in kinds)
    ops = ops.with_row_index("op_id").with_columns(pl.col("op_id").cast(I64))
    # every kind: the launches come from all runtime rows, as the stalls' ops' did (reused, not read again)
    if launched is not None and kinds == OP_KINDS and _same_ops(ops, launched):
        return pl.concat([ops, launched.launches_in_input_order()], how="horizontal")
    return with_launches(ops, trace.launches_of(tables))


def _same_ops(ops: pl.DataFrame, launched: Any) -> bool:
    """Whether the GpuOps *launched* are the rows of *ops*, in their order (same count and starts)."""
    if launched.row is None or len(launched) != ops.height:
        return False
    return bool(np.array_equal(launched.in_input_order(launched.start), ops["start"].to_numpy()))


def _launch_key() -> pl.Expr:
    """pid above bit 32, correlation id below: one int64 per (process, correlation id)."""
    return pl.col("pid") * (1 << 32) + pl.col("correlation_id")


def with_launches(ops: pl.DataFrame, runtime: pl.DataFrame) -> pl.DataFrame:
    """*ops* with ``launch_start`` and ``launch_gtid``: the start and thread of the CUDA call
    with the same pid and correlation id (the first such row), NULL where there is none.

    A binary search per op over the runtime rows' sorted keys; nsys writes
    runtime rows in correlation order, so the sort is nearly free (none when they are in order).
    """
    in_range = (pl.col("correlation_id") >= 0) & (pl.col("correlation_id") < 1 << 32) & (pl.col("pid") >= 0)
    known = pl.col("pid").is_not_null() & pl.col("correlation_id").is_not_null()
    rt = runtime.select("pid", "correlation_id", "start", "global_tid")
    if rt.select(~known.all()).item():
        rt = rt.filter(known)
    if not (rt.select(in_range.all()).item() and ops.select(in_range.all()).item()):
        return _with_launches_by_join(ops, rt)  # ids outside the packed key's range
    keys = rt.select(_launch_key())[:, 0].to_numpy()
    rows = None
    if keys.size > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        rows = np.argsort(keys, kind="stable")
        keys = keys[rows]
    first = np.r_[True, keys[1:] != keys[:-1]] if keys.size else np.zeros(0, dtype=bool)
    if not first.all():
        pick = np.flatnonzero(first)
        keys, rows = keys[pick], (pick if rows is None else rows[pick])
    if keys.size == 0:
        return ops.with_columns(pl.lit(None, I64).alias("launch_start"), pl.lit(None, I64).alias("launch_gtid"))
    o_key = ops.select(_launch_key().fill_null(-1))[:, 0].to_numpy()
    pos = np.minimum(np.searchsorted(keys, o_key), keys.size - 1)
    miss = pl.Series(keys[pos] != o_key)
    rows_of = pos if rows is None else rows[pos]
    picked = [
        rt.get_column(col).cast(I64).gather(rows_of).set(miss, None).alias(out)
        for col, out in (("start", "launch_start"), ("global_tid", "launch_gtid"))
    ]
    return ops.with_columns(picked)


def _with_launches_by_join(ops: pl.DataFrame, runtime: pl.DataFrame) -> pl.DataFrame:
    launches = runtime.select(
        "pid",
        "correlation_id",
        pl.col("start").alias("launch_start"),
        pl.col("global_tid").alias("launch_gtid"),
    ).unique(["pid", "correlation_id"], keep="first", maintain_order=True)
    return ops.join(launches, on=["pid", "correlation_id"], how="left", maintain_order="left")


def _contained(
    point_key: np.ndarray,
    point_t: np.ndarray,
    point_id: np.ndarray,
    range_key: np.ndarray,
    range_start: np.ndarray,
    range_end: np.ndarray,
    range_id: np.ndarray,
) -> pl.DataFrame:
    """(op_id, range_id) for every point with ``start <= t < end`` of a range with the same key.

    Per key, points are sorted by time; each range then covers one contiguous
    block of them, found by binary search and expanded with NumPy.  Memory
    and time grow with the number of pairs produced, never with ops x ranges.
    """
    out_ops, out_ranges = [], []
    for key in np.intersect1d(np.unique(point_key), np.unique(range_key)):
        pm = point_key == key
        order = np.argsort(point_t[pm], kind="stable")
        t, ids = point_t[pm][order], point_id[pm][order]
        rm = range_key == key
        lo = np.searchsorted(t, range_start[rm], side="left")
        hi = np.searchsorted(t, range_end[rm], side="left")
        counts = np.maximum(hi - lo, 0)
        some = counts > 0
        if not some.any():
            continue
        out_ops.append(ids[_blocks(lo[some], counts[some])])
        out_ranges.append(np.repeat(range_id[rm][some], counts[some]))
    if not out_ops:
        return pl.DataFrame(schema={"op_id": I64, "range_id": I64})
    ops_col, ranges_col = (x[0] if len(x) == 1 else np.concatenate(x) for x in (out_ops, out_ranges))
    return pl.DataFrame({"op_id": ops_col, "range_id": ranges_col}, schema={"op_id": I64, "range_id": I64})


def _blocks(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``lo[0], lo[0]+1, ..., lo[0]+counts[0]-1, lo[1], ...`` (every count at least 1): one array,
    a running sum of steps of one that jumps to each block's first position."""
    starts = np.cumsum(counts) - counts
    step = np.ones(int(starts[-1] + counts[-1]), dtype=np.int64)
    step[0] = lo[0]
    step[starts[1:]] = lo[1:] - (lo[:-1] + counts[:-1] - 1)
    return np.cumsum(step, out=step)


def attribute(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """(op_id, range_id) for every range that encloses an op's launch on the launching thread."""
    return _contained_by(ops, "launch_gtid", "launch_start", ranges, "global_tid")


def attribute_by_time(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """(op_id, range_id) for ops whose GPU start lies in the range, same process, any thread.

    A fallback for ranges pushed on a thread that launches nothing itself
    (a training loop whose runtime dispatches from worker threads).
    """
    return _contained_by(ops, "pid", "start", ranges, "pid")


def _contained_by(ops: pl.DataFrame, op_key: str, op_time: str, ranges: pl.DataFrame, range_key: str) -> pl.DataFrame:
    """``_contained`` over the ops and ranges whose key (and the ops' time) is known."""
    # the three columns read: a filter of the whole frame would copy names and the rest too
    o = ops.select("op_id", op_key, op_time).filter(pl.col(op_key).is_not_null() & pl.col(op_time).is_not_null())
    r = ranges.filter(pl.col(range_key).is_not_null())
    return _contained(
        o[op_key].to_numpy(),
        o[op_time].to_numpy(),
        o["op_id"].to_numpy(),
        r[range_key].to_numpy(),
        r["start"].to_numpy(),
        r["end"].to_numpy(),
        r["range_id"].to_numpy(),
    )
