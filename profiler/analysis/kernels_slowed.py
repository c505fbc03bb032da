"""Kernels slowed by copies: the kernels' side of "Copy bandwidth by context".

METRICS.md, "Kernels slowed by copies": per device, over its valid kernels
(``end > start``, compute and NCCL alike):

- ``alone``: the kernel overlaps no valid copy of its device, of any class;
- ``beside``: ``2 * |k ∩ U(h2d and d2h copies)| >= end - start``;
- otherwise neither, not counted.

An async op's start or done (``copy-start.6``, ``slice-start.9``, ``*-done.N``: a TPU's core issuing
a transfer or waiting on it, converted as kernels of its one line) is in neither side: it does no
work a copy could slow, and a transfer's start begins its own copy, so it is beside one by
construction.

Kernels are grouped by (name, grid, block); a group counts with at least 3
``alone`` and 3 ``beside`` kernels.  Medians are lower medians (the element
at ``(n - 1) // 2`` of the sorted durations); ``excess_ns = beside.count *
max(0, beside.median_ns - alone.median_ns)``.  Two sweeps (the unions of all
copies and of the offload copies) and one group-by: no loop per kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.intervals import measure_within_each, rows_where, union
from profiler.trace.loader import SHAPE_COLUMNS

ALONE, BESIDE, NEITHER = 0, 1, -1
# an async op's start or done by its HLO instruction name (``copy-start.6``, ``all-gather-done.2.1``)
ASYNC_MARKER = r"-(?:start|done)(?:\.\d+)*$"
MIN_CALLS = 3  # a group counts with this many kernels alone and this many beside copies
TOP = 10
KEYS = ("device", "name", *SHAPE_COLUMNS)
SIZE_BIAS_NOTE = (
    "grouping by name and launch shape narrows the size bias (a longer kernel is more likely to meet a copy) "
    "but does not remove it"
)


def persistent(grid: list[int | None] | tuple[int | None, ...], sms: int | None) -> bool:
    """Whether a launch *grid* holds exactly as many blocks as the GPU's *sms*: a persistent kernel
    (cuBLAS's nvjet GEMMs on Hopper), whose launch shape is the same for a problem of any size, so
    that its (name, grid, block) group mixes every size (the size bias, whole)."""
    return sms is not None and None not in grid and grid[0] * grid[1] * grid[2] == sms  # type: ignore[operator]


def persistent_in(entry: dict[str, Any] | None, sms: int | None) -> int:
    """The excess time of one GPU's listed groups (``kernels_beside_copies``' entry, its ``top``) of
    persistent kernels (*sms*: the GPU's)."""
    return sum(g["excess_ns"] for g in (entry or {}).get("top") or [] if persistent(g["grid"], sms))


def persistent_excess(run: Any, device: str | None = None) -> int:
    """The excess time of a run's (a ``RunSummary``) listed groups of persistent kernels, on *device* or
    over all its GPUs (``top``: up to ``TOP`` groups a GPU; SMs from the GPU's name): what the compare
    gate leaves out of ``kernel_excess_ns`` and the dashboard says of it, as the findings leave those
    groups out."""
    from profiler.xla.targets import sm_count

    out = 0
    for dev, entry in (run.kernels_beside_copies or {}).items():
        if device is None or dev == device:
            out += persistent_in(entry, sm_count(run.device_name(dev)))
    return out


def _spans(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(frame[c].to_numpy() for c in ("device", "start", "end"))  # type: ignore[return-value]


def kernel_sides(kernels: pl.DataFrame, copies: pl.DataFrame) -> np.ndarray:
    """Per row of *kernels*: ``ALONE``, ``BESIDE`` or ``NEITHER`` (also for invalid kernels and async
    starts and dones)."""
    out = np.full(kernels.height, NEITHER, dtype=np.int8)
    marker = pl.col("name").fill_null("").str.contains(ASYNC_MARKER)
    rows = rows_where(kernels, (pl.col("end") > pl.col("start")) & pl.col("device").is_not_null() & ~marker)
    if rows.size == 0:
        return out
    good = copies.filter((pl.col("end") >= pl.col("start")) & pl.col("device").is_not_null())
    offload = good.filter(pl.col("cls").is_in(["h2d", "d2h"]))
    sets = [union(*_spans(good)), union(*_spans(offload))]
    dev, s, e = (a[rows] for a in _spans(kernels))
    ov_all, ov_off = measure_within_each(sets, dev, s, e)
    out[rows] = np.where(ov_all == 0, ALONE, np.where(2 * ov_off >= e - s, BESIDE, NEITHER))
    return out


_CODE_LIMIT = 1 << 61  # the product of the codes' bounds stays below this (int64, with the side doubling it)


def _codes(col: pl.Series) -> tuple[np.ndarray, int]:
    """Nonnegative int64 codes of *col*, equal exactly where the values are (NULL: 0, a code of
    its own), and a bound above them: the value less the minimum when the values span a short
    range, else the dense rank.  Strings are coded by their categorical's physical code first."""
    if col.dtype == pl.String:
        col = col.cast(pl.Categorical).to_physical()
    lo, hi = col.min(), col.max()
    if lo is None:
        return np.zeros(col.len(), dtype=np.int64), 1
    if int(hi) - int(lo) < 1 << 24:
        return (col.cast(pl.Int64) - (int(lo) - 1)).fill_null(0).to_numpy(), int(hi) - int(lo) + 2
    rank = col.rank("dense").fill_null(0).cast(pl.Int64)
    return rank.to_numpy(), int(rank.max()) + 1


def _dense(key: np.ndarray) -> tuple[np.ndarray, int]:
    """*key* renumbered 0 .. n-1 (same order), and n."""
    ranked = pl.Series(key).rank("dense").cast(pl.Int64) - 1
    return ranked.to_numpy(), int(ranked.max()) + 1


def group_keys(frame: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """One int64 per row of *frame*, equal exactly where the rows' *columns* are (NULLs equal):
    the columns' codes in mixed radix, renumbered densely whenever the next digit would overflow."""
    key, bound = np.zeros(frame.height, dtype=np.int64), 1
    for name in columns:
        code, b = _codes(frame[name])
        if bound * b >= _CODE_LIMIT:
            key, bound = _dense(key)
        key = key * b + code
        bound *= b
    return key


def _per_side(kernels: pl.DataFrame, sides: np.ndarray, rows: np.ndarray) -> pl.DataFrame:
    """Per (name, launch shape, device, side) of the kernels at *rows* (their sides *sides*):
    count, lower median duration, is_nccl; groups of at least ``MIN_CALLS``.  Grouped by one
    integer key (``group_keys``), not by the names and shapes themselves; each group's keys are
    taken from its first kernel."""
    idx = pl.Series(rows)
    keyed = pl.DataFrame(
        {
            "key": group_keys(kernels, KEYS)[rows] * 2 + sides,
            "dur": kernels.select(pl.col("end") - pl.col("start")).to_series().gather(idx),
            "row": np.arange(rows.size, dtype=np.int64),
        }
    )
    groups = (
        keyed.group_by("key")
        .agg(
            pl.len().alias("count"),
            pl.col("dur").sort().get((pl.len() - 1) // 2).alias("median_ns"),  # the lower median
            pl.col("row").first(),
        )
        .filter(pl.col("count") >= MIN_CALLS)
    )
    del keyed
    first = rows[groups["row"].to_numpy()]
    return kernels[first].select(
        *KEYS,
        pl.Series("side", sides[groups["row"].to_numpy()]),
        groups["count"],
        groups["median_ns"],
        "is_nccl",  # a function of the name: the same on every kernel of a group
    )


def kernel_groups(
    kernels: pl.DataFrame, copies: pl.DataFrame, side: np.ndarray | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the groups that count, the calls per device and side).

    The groups: device, name, grid_x .. block_z, is_nccl, alone_count, alone_median_ns,
    beside_count, beside_median_ns, slowdown, excess_ns.  The calls: device, side, calls.
    *kernels* needs device, start, end, name, is_nccl and the shape columns (``Trace.kernels``);
    *side*: their ``kernel_sides`` when the caller has them.
    """
    side = kernel_sides(kernels, copies) if side is None else side
    rows = np.flatnonzero(side != NEITHER)
    sides = side[rows]
    del side
    calls = (
        pl.DataFrame({"device": kernels["device"].gather(rows), "side": pl.Series(sides)})
        .group_by("device", "side")
        .agg(pl.len().alias("calls"))
    )
    per_side = _per_side(kernels, sides, rows)
    alone = per_side.filter(pl.col("side") == ALONE).select(
        *KEYS, "is_nccl", pl.col("count").alias("alone_count"), pl.col("median_ns").alias("alone_median_ns")
    )
    beside = per_side.filter(pl.col("side") == BESIDE).select(
        *KEYS, pl.col("count").alias("beside_count"), pl.col("median_ns").alias("beside_median_ns")
    )
    groups = alone.join(beside, on=list(KEYS), how="inner", nulls_equal=True).with_columns(
        (pl.col("beside_median_ns") / pl.col("alone_median_ns")).alias("slowdown"),
        (pl.col("beside_count") * (pl.col("beside_median_ns") - pl.col("alone_median_ns")).clip(lower_bound=0))
        .cast(pl.Int64)
        .alias("excess_ns"),
    )
    order = ["excess_ns", "device", "name", *SHAPE_COLUMNS]
    groups = groups.sort(order, descending=[True] + [False] * (len(order) - 1), nulls_last=True)
    return groups, calls


def _shape(row: dict[str, Any], part: str) -> list[int | None]:
    return [row[f"{part}_{axis}"] for axis in "xyz"]


def group_entry(row: dict[str, Any]) -> dict[str, Any]:
    """One group of ``top`` (METRICS.md) from a row of ``kernel_groups``."""
    return {
        "name": row["name"],
        "grid": _shape(row, "grid"),
        "block": _shape(row, "block"),
        "alone": {"count": row["alone_count"], "median_ns": row["alone_median_ns"]},
        "beside": {"count": row["beside_count"], "median_ns": row["beside_median_ns"]},
        "slowdown": row["slowdown"],
        "excess_ns": row["excess_ns"],
    }


def empty_entry() -> dict[str, Any]:
    return {"groups": 0, "calls_alone": 0, "calls_beside": 0, "excess_ns": 0, "top": []}


def kernels_beside_copies(
    kernels: pl.DataFrame, copies: pl.DataFrame, groups: tuple[pl.DataFrame, pl.DataFrame] | None = None
) -> dict[int, dict[str, Any]]:
    """METRICS.md ``kernels_beside_copies`` per device that has a counted kernel or a group
    (*groups*: ``kernel_groups`` of these kernels and copies, when already computed)."""
    groups, calls = kernel_groups(kernels, copies) if groups is None else groups
    out: dict[int, dict[str, Any]] = {}
    for dev, side, n in calls.iter_rows():
        out.setdefault(int(dev), empty_entry())["calls_alone" if side == ALONE else "calls_beside"] = int(n)
    for (dev,), rows in groups.group_by("device", maintain_order=True):
        e = out.setdefault(int(dev), empty_entry())
        e["groups"] = rows.height
        e["excess_ns"] = int(rows["excess_ns"].sum())
        e["top"] = [group_entry(r) for r in rows.head(TOP).iter_rows(named=True)]
    return out


def add_kernels_beside(
    devices: dict[str, dict[str, Any]],
    kernels: pl.DataFrame,
    copies: pl.DataFrame,
    groups: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> None:
    """Add ``kernels_beside_copies`` to each device of a METRICS.md ``devices`` object (*groups*:
    ``kernel_groups(kernels, copies)`` when already computed, e.g. ``Breakdown.kernel_groups``)."""
    per = kernels_beside_copies(kernels, copies, groups) if devices else {}
    for dev, d in devices.items():
        d["kernels_beside_copies"] = per.get(int(dev), empty_entry())


def no_baseline(entry: dict[str, Any]) -> bool:
    """True when kernels ran beside copies but none alone: nothing to compare them with."""
    return entry["groups"] == 0 and entry["calls_beside"] > 0 and entry["calls_alone"] == 0


def kernel_totals(devices: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A run's ``kernels_beside_copies`` per device and ``kernel_excess_ns`` over all devices (None
    when no device has the metric, a run recorded without it, or no device has a group that counts:
    no kernel was measured both beside copies and alone, so nothing was measured lost, not 0 lost;
    e.g. a TPU's unrolled step, whose every op runs at one place of the schedule)."""
    per = {dev: d["kernels_beside_copies"] for dev, d in devices.items() if "kernels_beside_copies" in d}
    counted = any(e["groups"] for e in per.values())
    return {
        "kernels_beside_copies": per,
        "kernel_excess_ns": sum(e["excess_ns"] for e in per.values()) if counted else None,
    }
