"""``profile-step whatif``: the step on another host link, per device and per step.

The replay (``replay.py``, METRICS.md "What-if") gives every op a new start
and end.  Per device this reports the recorded span and the replayed one
(``span_ns = w1' - w0``), and the stalls of the replayed timeline (the same
rule 4 as ``analyze``).  Per step, a step's GPU work is the ops attributed
to it as everywhere else (launched inside the step range on its thread, else
by GPU time); the host is assumed to wait for its step's GPU work, as a
training loop that reads the loss does, so the predicted step time is the
measured one less how much earlier the step's last GPU op ends.

Host synchronization is modeled (``hostsync.py``): a call that blocked a host
thread returns when what it waited for ends in the replay, and the thread's
later calls, launches included, move with it.  A step whose thread blocked
inside it then moves with its thread: its predicted time is the measured one
plus how far its end moved less how far its start moved (``"model": "host"``);
otherwise the GPU rule above applies (``"model": "gpu"``).  Under clock skew
that makes a dependency cycle, host calls are not moved and
``host_sync_modeled`` is false.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import D2H, H2D, Dependencies, GpuOps, dependencies
from profiler.analysis.hostsync import HostSyncs, host_syncs
from profiler.analysis.intervals import length_by_group, union
from profiler.analysis.replay import Change, Replay, replay
from profiler.analysis.stalls import empty_stalls, op_stalls
from profiler.trace.loader import Trace

if TYPE_CHECKING:
    from profiler.analysis.breakdown import Breakdown

OP_KEYS = ["pid", "device", "stream", "correlation_id", "start"]


def whatif(
    trace: Trace,
    factor: float,
    steps: pl.DataFrame | None = None,
    step_ops: pl.DataFrame | None = None,
    deps: Dependencies | None = None,
    model_host: bool = True,
    explain: bool = False,
) -> dict[str, Any]:
    """The what-if document for copy durations scaled by *factor*.

    *steps* (index, name, start, end, excluded) and *step_ops* (index, plus the
    op keys pid, device, stream, correlation_id, start) come from the steps
    analysis; without them the output has no per-step rows.  *explain*: also
    the copy-free replay per device and where each device's saving comes from
    (``explained``).
    """
    deps = dependencies(trace) if deps is None else deps
    host = host_syncs(trace, deps) if model_host else None
    rp = replay(deps, factor, host)
    ops = deps.ops
    replayed_stalls = op_stalls(deps, rp.start, rp.end, rp.launch).by_device()
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
        for dev, rows in step_rows(rp, steps, step_ops).items():
            if str(dev) in devices:
                devices[str(dev)]["steps"] = rows
    doc = {"copy_scale": factor, "host_sync_modeled": rp.host_sync_modeled, "devices": devices}
    if explain:
        doc["stalls_measured"] = bool(sum(w["total"] for w in deps.waits.values()))
        explained(doc, trace, deps, host if rp.host_sync_modeled else None, factor)
    return doc


def explained(doc: dict[str, Any], trace: Trace, deps: Dependencies, host: HostSyncs | None, factor: float) -> None:
    """Add to the what-if document *doc*, per device: ``copy_free_span_ns`` (every h2d/d2h copy removed,
    on every device: zero time, and no op waits for them), ``copy_busy_ns`` (its h2d/d2h copy time, a
    union) and, with several devices, ``saving_by_copies_of`` (the saving on its window when only one
    device's copies are scaled) and ``host_waits_on`` (blocking calls of the threads that launch its
    work that waited for another device's ops: how many, and how long they held their thread);
    and ``other_host_model``: the spans with host synchronization modeled the other way, with what
    the trace says about its blocking calls."""
    ops = deps.ops
    dev_of = {str(d): ops.device == d for d in np.unique(ops.device).tolist()}
    w0 = {d: int(ops.start[on].min()) for d, on in dev_of.items()}
    copies = (ops.kind == H2D) | (ops.kind == D2H)
    dur = ops.end - ops.start
    scaled = np.floor(dur.astype(np.float64) * factor + 0.5).astype(np.int64)
    busy = length_by_group(union(ops.device[copies], ops.start[copies], ops.end[copies]))
    alone: dict[str, dict[str, int]] = {}
    free = replay(deps, 1.0, host, Change("every copy removed", removed=np.flatnonzero(copies)))
    for d, on in dev_of.items():
        rows = np.flatnonzero(on & copies)
        doc["devices"][d]["copy_free_span_ns"] = int(free.end[on].max()) - w0[d]
        doc["devices"][d]["copy_busy_ns"] = int(busy.get(int(d), 0))
        if len(dev_of) > 1 and rows.size:
            one = replay(deps, 1.0, host, Change(f"GPU {d}'s copies scaled", durations=(rows, scaled[rows])))
            alone[d] = {
                e: doc["devices"][e]["measured_span_ns"] - (int(one.end[o].max()) - w0[e]) for e, o in dev_of.items()
            }
    if len(dev_of) > 1:
        for d in dev_of:
            doc["devices"][d]["saving_by_copies_of"] = {e: alone[e][d] for e in alone}
            doc["devices"][d]["host_waits_on"] = _host_waits(ops, host, int(d))
    other = replay(deps, factor, None if host is not None else host_syncs(trace, deps))
    h = host_syncs(trace, deps)
    blocked = h.blocked if len(h) else np.zeros(0, dtype=bool)
    doc["other_host_model"] = {
        "host_sync_modeled": other.host_sync_modeled,
        "spans": {d: int(other.end[on].max()) - w0[d] for d, on in dev_of.items()},
        "blocking_calls": int(blocked.sum()),
        "median_lag_ns": int(np.median(h.lag[blocked])) if blocked.any() else None,
    }


def _host_waits(ops: GpuOps, host: HostSyncs | None, device: int) -> dict[str, dict[str, int]]:
    """Per other device: the blocking calls of the threads that launch *device*'s ops that waited for
    an op of that device (calls, and the time they held their thread)."""
    if host is None or not len(host):
        return {}
    threads = np.unique(ops.gtid[(ops.device == device) & (ops.gtid >= 0)])
    mine = np.isin(host.gtid, threads) & host.blocked & (host.waited >= 0)
    out: dict[str, dict[str, int]] = {}
    on = ops.device[host.waited[mine]]
    held = (host.end - host.start)[mine]
    for e in np.unique(on).tolist():
        if e != device:
            sel = on == e
            out[str(e)] = {"calls": int(sel.sum()), "blocked_ns": int(held[sel].sum())}
    return out


def keyed_step_ops(ops: GpuOps, step_ops: pl.DataFrame) -> pl.DataFrame:
    """*step_ops* (index and the op keys) with each op's row of *ops* (``row``), and its device."""
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
    return step_ops.select("index", *(pl.col(k).cast(pl.Int64).fill_null(-1) for k in OP_KEYS)).join(
        table, on=OP_KEYS, how="inner"
    )


def step_rows(
    rp: Replay, steps: pl.DataFrame, step_ops: pl.DataFrame, keyed: pl.DataFrame | None = None
) -> dict[int, list[dict[str, Any]]]:
    """Per device, per step: measured and predicted step time, and the step's GPU span before and after
    (*keyed*: ``keyed_step_ops`` of *step_ops*, when the caller has it)."""
    ops = rp.deps.ops
    keyed = keyed_step_ops(ops, step_ops) if keyed is None else keyed
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
    # a step whose thread blocked inside it moves with its thread
    if "global_tid" not in steps.columns:
        steps = steps.with_columns(pl.lit(None, pl.Int64).alias("global_tid"))
    ranges = steps.select("index", "start", "end", "global_tid")
    gt = ranges["global_tid"].fill_null(-1).to_numpy()
    s_from = rp.shift_at(gt, ranges["start"].to_numpy())
    s_to = rp.shift_at(gt, ranges["end"].to_numpy())
    host_moved = {int(i): (int(a), int(b)) for i, a, b in zip(ranges["index"].to_list(), s_from, s_to, strict=True)}
    blocked_in = _blocked_inside(rp, ranges)
    out: dict[int, list[dict[str, Any]]] = {}
    for dev, idx, first, last, first2, last2, name, s0, s1, excluded in spans.iter_rows():
        measured = int(s1 - s0)
        if int(idx) in blocked_in:
            a, b = host_moved[int(idx)]
            model, predicted = "host", measured + b - a
        else:
            model, predicted = "gpu", measured - int(last - last2)
        out.setdefault(int(dev), []).append(
            {
                "name": name,
                "excluded": excluded,
                "measured_ns": measured,
                "predicted_ns": predicted,
                "saving_ns": measured - predicted,
                "model": model,
                "gpu_span_ns": int(last - first),
                "replayed_gpu_span_ns": int(last2 - first2),
            }
        )
    return out


def _blocked_inside(rp: Replay, ranges: pl.DataFrame) -> set[int]:
    """The steps whose thread made a blocking call inside the step (host synchronization modeled)."""
    host = rp.host
    if host is None or not len(host):
        return set()
    out = set()
    for idx, s0, s1, gt in ranges.iter_rows():
        on = (host.gtid == gt) & host.blocked & (host.start >= s0) & (host.end <= s1)
        if on.any():
            out.add(int(idx))
    return out


def step_frames(bd: Breakdown) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """The steps of ``analyze --by step`` as ``whatif`` reads them: (steps: index, name, start, end,
    excluded, global_tid; step_ops: index, the op keys and ``op_id``, the op's row of ``bd.ops``), or None
    without steps."""
    ranges = bd.step_ranges()
    if ranges.height == 0:
        return None
    info = bd.by_step(copies=False)
    steps = pl.DataFrame(
        [{"index": s["index"], "name": s["name"], "start": s["start_ns"], "end": s["end_ns"]} for s in info["steps"]],
        schema={"index": pl.Int64, "name": pl.String, "start": pl.Int64, "end": pl.Int64},
    ).with_columns(pl.Series("excluded", [s["excluded"] for s in info["steps"]], pl.String))
    tids = ranges.select(pl.col("index").cast(pl.Int64), pl.col("global_tid").cast(pl.Int64))
    steps = steps.join(tids, on="index", how="left")
    assigned, _ = bd.step_assignment(ranges)
    step_ops = bd.ops.select(*OP_KEYS)[
        assigned["op_id"].to_numpy()
    ].with_columns(  # the key columns gathered, not every column
        assigned["index"].cast(pl.Int64).alias("index"), assigned["op_id"]
    )
    return steps, step_ops


def trace_whatif(
    trace: Trace,
    factor: float,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    model_host: bool = True,
    breakdown: Breakdown | None = None,
    explain: bool = False,
) -> dict[str, Any]:
    """``whatif`` with the trace's own steps (the steps analysis of ``analyze --by step``).

    *breakdown*: the trace's analysis when the caller has one (its stalls' dependencies and steps
    are reused, and the caller can read the measured stalls from it); else made here."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.xla.names import DEFAULT_LAYER_PATTERN

    bd = breakdown if breakdown is not None else Breakdown(trace, layer_pattern or DEFAULT_LAYER_PATTERN, step_range)
    deps = bd.stalls.deps if bd.stalls is not None else None
    frames = step_frames(bd)
    if frames is None:
        return whatif(trace, factor, deps=deps, model_host=model_host, explain=explain)
    return whatif(trace, factor, *frames, deps=deps, model_host=model_host, explain=explain)


def measured_stalls(bd: Breakdown, devices: list[str]) -> dict[str, dict[str, Any]]:
    """The recorded timeline's METRICS.md ``stalls`` of each of *devices* (as ``analyze`` gives them),
    from the analysis the what-if was made with: its dependencies are not found twice."""
    per_device = bd.stalls.by_device() if bd.stalls is not None else {}
    return {dev: per_device.get(int(dev), empty_stalls()) for dev in devices}


def step_medians(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per device of a what-if document: the median of the included steps' measured and predicted
    times (``None`` without included steps) and the GPU span measured and replayed.

    The dashboard's "predicted step time" of a (run, GPU): the same steps as the median step of
    ``analyze`` (warm-up and outliers left out), each predicted as ``whatif`` predicts it.
    """
    out: dict[str, dict[str, Any]] = {}
    for dev, d in doc["devices"].items():
        included = [s for s in d["steps"] if not s["excluded"]]
        out[dev] = {
            "steps": len(included),
            "measured_ns": float(np.median([s["measured_ns"] for s in included])) if included else None,
            "predicted_ns": float(np.median([s["predicted_ns"] for s in included])) if included else None,
            "measured_span_ns": d["measured_span_ns"],
            "span_ns": d["span_ns"],
        }
    return out
