"""Late copies back (issue 43, item 3): one definition for predicted schedules and measured traces.

A host-to-device copy is *late* when the compute between its start and its done (its *window*)
is shorter than its own transfer time: the step waits ``transfer - window`` for it, however
fast the compute is.  The inputs are one row per copy back with ``transfer_ns`` and ``window_ns``:

- predicted (``profiler.predict.simulate``): each async host-to-device copy of the compiled
  schedule; its transfer is its cost on the link, its window the compute the replay placed on the
  compute stream between its start and its done;
- measured (the findings rule ``late-copies-back``): each host-to-device copy of a trace that some
  GPU op waited for (through a CUDA event); its transfer is its recorded duration, its window the
  time any kernel of its GPU ran while it ran.

``in_loop``: the copy is in a loop's body (``lax.scan``), where the fix is another one.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from profiler.units import human_time

COLUMNS = {"start": pl.String, "layer": pl.String, "in_loop": pl.Boolean, "transfer_ns": pl.Int64,
           "window_ns": pl.Int64}  # fmt: skip
# What moves them earlier, as tried on tests/scripts/late_scan.py compiled for an H100 (docs/plan.md, "Late
# copies back"): in a scan no flag does (with pipelined host offloading the same copies wait as long), fetching
# by hand one iteration ahead gives each copy a whole iteration's compute (20x); unrolled, each copy has 3x the
# compute beside it that it has in the scan, and no flag changed that either.
SCAN_FIX = (
    "in a scan this XLA starts each copy back in the iteration that uses it and no flag moves it "
    "(--xla_gpu_enable_pipelined_host_offloading, the latency hiding scheduler: tried); fetch the next layer's "
    "activation one iteration ahead in the scan's carry (a custom_vjp), or unroll the layer loop"
)
UNROLLED_FIX = (
    "no flag of this XLA starts them earlier (the latency hiding scheduler, --xla_gpu_memory_limit_slop_factor: "
    "tried); offload fewer activations, or ones used later in their layer's backward pass"
)
LONGER_FIX = (
    "they start early, with at least half their time of compute beside them, but take longer than it: offload "
    "fewer or smaller activations, or use a faster host link"
)


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows of copies back (the ``COLUMNS`` keys) as a frame."""
    return pl.DataFrame(rows, schema=COLUMNS)


def late(copies: pl.DataFrame) -> pl.DataFrame:
    """The late ones among *copies* (``transfer_ns``, ``window_ns``), with ``waited_ns`` = transfer - window,
    longest wait first."""
    return (
        copies.filter(pl.col("window_ns") < pl.col("transfer_ns"))
        .with_columns((pl.col("transfer_ns") - pl.col("window_ns")).alias("waited_ns"))
        .sort("waited_ns", descending=True, maintain_order=True)
    )


def summary(copies: pl.DataFrame) -> dict[str, Any]:
    """``of`` (copies back), ``count`` (late ones), ``waited_ns``, their ``transfer_ns`` and ``window_ns``
    (summed), ``in_loop`` (late ones in a loop's body) and the ``worst`` (its row)."""
    lc = late(copies)
    worst = lc.row(0, named=True) if lc.height else None
    return {
        "of": copies.height,
        "count": lc.height,
        "waited_ns": int(lc["waited_ns"].sum()),
        "transfer_ns": int(lc["transfer_ns"].sum()),
        "window_ns": int(lc["window_ns"].sum()),
        "in_loop": int(lc["in_loop"].sum()),
        "worst": worst,
    }


def per_step(s: dict[str, Any], steps: int) -> dict[str, Any]:
    """A ``summary`` over *steps* steps as one step's: counts and times divided (rounded)."""
    keys = ("of", "count", "waited_ns", "transfer_ns", "window_ns", "in_loop")
    return s | {k: round(s[k] / steps) for k in keys} if steps > 1 else s


def sentence(s: dict[str, Any], per: str = "per step") -> str:
    """What a ``summary`` with late copies says: how many, the time waited (*per*: its scope) and why."""
    return (
        f"{s['count']} of {s['of']} host-to-device copies have less compute between start and done than their "
        f"transfer: {human_time(s['waited_ns'])} waited {per} ({human_time(s['transfer_ns'])} of copying, "
        f"{human_time(s['window_ns']) + ' of' if s['window_ns'] else 'no'} compute beside it)"
    )


def fix(s: dict[str, Any]) -> str:
    """What to do: fewer bytes when the late copies already have half their transfer of compute beside them
    (starting them earlier gains little), else the scan's fix when most are in a loop's body."""
    if 2 * s["window_ns"] >= s["transfer_ns"]:
        return LONGER_FIX
    return SCAN_FIX if 2 * s["in_loop"] >= s["count"] else UNROLLED_FIX
