"""``profile-step whatif``: the step on another host link, per device and per step.

The replay (``replay.py``, METRICS.md "What-if") gives every op a new start
and end.  Per device this reports the recorded span and the replayed one
(``span_ns = w1' - w0``), and the stalls of the replayed timeline (the same
rule 4 as ``analyze``).  Per step, a step's GPU work is the ops attributed
to it as everywhere else (launched inside the step range on its thread, else
by GPU time); the host is assumed to wait for its step's GPU work, as a
training loop that reads the loss does, so the predicted step time is the
measured one less how much earlier the step's last GPU op ends.  Host launch
times are kept as recorded (``host_sync_modeled`` is false): work launched
after a host synchronization is not moved earlier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import Dependencies, dependencies
from profiler.analysis.replay import Replay, replay
from profiler.analysis.stalls import empty_stalls, op_stalls
from profiler.trace.loader import Trace

HOST_SYNC_MODELED = False
_KEYS = ["pid", "device", "stream", "correlation_id", "start"]


def whatif(
    trace: Trace,
    factor: float,
    steps: pl.DataFrame | None = None,
    step_ops: pl.DataFrame | None = None,
    deps: Dependencies | None = None,
) -> dict[str, Any]:
    """The what-if document for copy durations scaled by *factor*.

    *steps* (index, name, start, end, excluded) and *step_ops* (index, plus the
    op keys pid, device, stream, correlation_id, start) come from the steps
    analysis; without them the output has no per-step rows.
    """
    deps = dependencies(trace) if deps is None else deps
    rp = replay(deps, factor)
    ops = deps.ops
    replayed_stalls = op_stalls(deps, rp.start, rp.end).by_device()
    devices: dict[str, Any] = {}
    for dev in np.unique(ops.device).tolist():
        on = ops.device == dev
        w0, w1 = int(ops.start[on].min()), int(ops.end[on].max())
        devices[str(dev)] = {
            "measured_span_ns": w1 - w0,
            "span_ns": int(rp.end[on].max()) - w0,
            "steps": [],
            "stalls": replayed_stalls.get(int(dev), empty_stalls()),
        }
    if steps is not None and step_ops is not None:
        for dev, rows in _step_rows(rp, steps, step_ops).items():
            if str(dev) in devices:
                devices[str(dev)]["steps"] = rows
    return {"copy_scale": factor, "host_sync_modeled": HOST_SYNC_MODELED, "devices": devices}


def _step_rows(rp: Replay, steps: pl.DataFrame, step_ops: pl.DataFrame) -> dict[int, list[dict[str, Any]]]:
    """Per device, per step: measured and predicted step time, and the step's GPU span before and after."""
    ops = rp.deps.ops
    table = pl.DataFrame(
        {
            "pid": ops.pid,
            "device": ops.device,
            "stream": ops.stream,
            "correlation_id": ops.corr,
            "start": ops.start,
            "row": np.arange(len(ops), dtype=np.int64),
        }
    )
    keyed = step_ops.select("index", *(pl.col(k).cast(pl.Int64).fill_null(-1) for k in _KEYS)).join(
        table, on=_KEYS, how="inner"
    )
    if keyed.height == 0:
        return {}
    rows = keyed["row"].to_numpy()
    spans = (
        keyed.with_columns(
            pl.Series("end", ops.end[rows]),
            pl.Series("start2", rp.start[rows]),
            pl.Series("end2", rp.end[rows]),
        )
        .group_by("device", "index")
        .agg(
            pl.col("start").min().alias("first"),
            pl.col("end").max().alias("last"),
            pl.col("start2").min().alias("first2"),
            pl.col("end2").max().alias("last2"),
        )
        .join(steps.select("index", "name", "start", "end", "excluded"), on="index")
        .sort("device", "index")
    )
    out: dict[int, list[dict[str, Any]]] = {}
    for dev, _idx, first, last, first2, last2, name, s0, s1, excluded in spans.iter_rows():
        measured = int(s1 - s0)
        saving = int(last - last2)
        out.setdefault(int(dev), []).append(
            {
                "name": name,
                "excluded": excluded,
                "measured_ns": measured,
                "predicted_ns": measured - saving,
                "saving_ns": saving,
                "gpu_span_ns": int(last - first),
                "replayed_gpu_span_ns": int(last2 - first2),
            }
        )
    return out


def trace_whatif(
    trace: Trace, factor: float, layer_pattern: str | None = None, step_range: str | None = None
) -> dict[str, Any]:
    """``whatif`` with the trace's own steps (the steps analysis of ``analyze --by step``)."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.analysis.xla_names import DEFAULT_LAYER_PATTERN

    bd = Breakdown(trace, layer_pattern or DEFAULT_LAYER_PATTERN, step_range)
    deps = bd.stalls.deps if bd.stalls is not None else None
    ranges = bd.step_ranges()
    if ranges.height == 0:
        return whatif(trace, factor, deps=deps)
    info = bd.by_step(copies=False)
    steps = pl.DataFrame(
        [{"index": s["index"], "name": s["name"], "start": s["start_ns"], "end": s["end_ns"]} for s in info["steps"]],
        schema={"index": pl.Int64, "name": pl.String, "start": pl.Int64, "end": pl.Int64},
    ).with_columns(pl.Series("excluded", [s["excluded"] for s in info["steps"]], pl.String))
    assigned, _ = bd.step_assignment(ranges)
    step_ops = (
        bd.ops[assigned["op_id"].to_numpy()]
        .select(*_KEYS)
        .with_columns(assigned["index"].cast(pl.Int64).alias("index"))
    )
    return whatif(trace, factor, steps, step_ops, deps=deps)
