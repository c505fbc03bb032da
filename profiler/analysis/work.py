"""The work in a window and where its time went: what ``compare`` reads beyond the copies.

Two equal windows can hold different work (fewer calls of the same kernels, slower collectives),
so a run also records, per device:

- ``kernels``: per kernel name, ``calls`` and ``duration_sum_ns`` (time per call = the ratio);
- ``split``: the window cut into disjoint parts that add up to it, from the unions of METRICS.md
  ("Per device"): ``compute_ns = |U(compute) ∩ W|``; ``nccl_ns = |U(NCCL) ∩ W \\ U(compute)|``
  (collective time not under compute); ``exposed_copies_ns = |U(h2d, d2h) ∩ W \\ U(kernels)|``;
  ``other_ns``: the rest of ``|U(all valid ops) ∩ W|`` (memsets, d2d/p2p copies alone);
  ``idle_ns = |W| - |U(all valid ops) ∩ W|``.

``W`` is the device window (``window_ns``) for the run, and each step's span for the steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.intervals import Intervals, measure_within_each, union
from profiler.analysis.overlap import KernelSets, valid

SPLIT_KEYS = ("compute_ns", "nccl_ns", "exposed_copies_ns", "other_ns", "idle_ns")


def _union_of(frame: pl.DataFrame) -> Intervals:
    return union(*(frame[c].to_numpy() for c in ("device", "start", "end")))


def union_all(*sets: Intervals) -> Intervals:
    """``a ∪ b ∪ ...`` of canonical sets: one running maximum over their intervals (the same set as
    ``join`` gives, without its sweep over every boundary)."""
    return union(*(np.concatenate([getattr(iv, c) for iv in sets]) for c in ("group", "start", "end")))


def minus(a: Intervals, b: Intervals) -> Intervals:
    """``a \\ b`` (``intervals.difference``, the same canonical set) by binary search: per interval of
    *a*, the gaps between the intervals of *b* that overlap it, clipped to it; no sort."""
    pieces = []
    for g in np.unique(a.group).tolist():
        a0, a1 = np.searchsorted(a.group, [g, g + 1])
        b0, b1 = np.searchsorted(b.group, [g, g + 1])
        s_a, e_a, s_b, e_b = a.start[a0:a1], a.end[a0:a1], b.start[b0:b1], b.end[b0:b1]
        lo = np.searchsorted(e_b, s_a, side="right")  # the first interval of b ending after a's start
        n = np.searchsorted(s_b, e_a, side="left") - lo  # how many of b overlap (or touch) it
        row = np.repeat(np.arange(s_a.size), n + 1)
        k = np.arange(row.size) - np.repeat(np.cumsum(n + 1) - (n + 1), n + 1)  # piece k of its interval
        j = lo[row] + k  # piece k lies between b's intervals j - 1 and j
        start = np.where(k == 0, s_a[row], e_b[np.maximum(j - 1, 0)] if e_b.size else 0)
        end = np.where(k == n[row], e_a[row], s_b[np.minimum(j, max(s_b.size - 1, 0))] if s_b.size else 0)
        start, end = np.maximum(start, s_a[row]), np.minimum(end, e_a[row])
        keep = end > start
        pieces.append((np.full(int(keep.sum()), g, dtype=np.int64), start[keep], end[keep]))
    if not pieces:
        return Intervals.empty()
    return Intervals(*(np.concatenate([p[i] for p in pieces]).astype(np.int64) for i in range(3)))


def time_split(
    ks: KernelSets, copies: pl.DataFrame, memsets: pl.DataFrame, device: np.ndarray, start: np.ndarray, end: np.ndarray
) -> dict[str, np.ndarray]:
    """Per window ``[start, end)`` of *device*: the ``SPLIT_KEYS`` parts (module docstring), one
    array each, adding up to ``end - start``.  *copies*, *memsets*: valid ops with ``device``."""
    offload = _union_of(copies.filter(pl.col("cls").is_in(["h2d", "d2h"])))
    active = union_all(ks.any, _union_of(copies), _union_of(memsets))
    nccl_only = minus(ks.nccl, ks.compute)
    exposed = minus(offload, ks.any)
    compute, nccl, exp, busy = measure_within_each([ks.compute, nccl_only, exposed, active], device, start, end)
    other = busy - compute - nccl - exp
    return {
        "compute_ns": compute,
        "nccl_ns": nccl,
        "exposed_copies_ns": exp,
        "other_ns": other,
        "idle_ns": (end - start) - busy,
    }


def kernel_work(kernels: pl.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """Per device, per kernel name: ``calls``, ``duration_sum_ns``, ``nccl``."""
    if "name" not in kernels.columns or kernels.height == 0:
        return {}
    agg = (
        valid(kernels.select("device", "name", "start", "end", "is_nccl"))  # not a copy of every column
        .group_by("device", "name")
        .agg(
            pl.len().alias("calls"),
            (pl.col("end") - pl.col("start")).sum().alias("dur"),
            pl.col("is_nccl").fill_null(False).any().alias("nccl"),
        )
        .sort("device", "name")
    )
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for d, name, calls, dur, nccl in agg.iter_rows():
        out.setdefault(str(d), {})[str(name)] = {"calls": int(calls), "duration_sum_ns": int(dur), "nccl": bool(nccl)}
    return out


def run_work(
    kernels: pl.DataFrame,
    copies: pl.DataFrame,
    memsets: pl.DataFrame,
    ks: KernelSets,
    windows: dict[str, list[int] | None],
    steps: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``work`` of a run: per device its kernels and the split of its window; per included
    step (``steps``: by_step rows with start_ns, end_ns, excluded) the split on every device."""
    copies, memsets = valid(copies), valid(memsets)
    devs = [(int(d), w) for d, w in windows.items() if w]
    dev = np.array([d for d, _ in devs], dtype=np.int64)
    w0 = np.array([w[0] for _, w in devs], dtype=np.int64)
    w1 = np.array([w[1] for _, w in devs], dtype=np.int64)
    kept = [s for s in steps if not s.get("excluded")] if dev.size else []
    # the device windows, then each included step on every device: one split, the sets built once
    s0 = np.repeat(np.array([s["start_ns"] for s in kept], dtype=np.int64), dev.size)
    s1 = np.repeat(np.array([s["end_ns"] for s in kept], dtype=np.int64), dev.size)
    both = time_split(ks, copies, memsets, np.r_[dev, np.tile(dev, len(kept))], np.r_[w0, s0], np.r_[w1, s1])
    whole = {k: v[: dev.size] for k, v in both.items()}
    split = {k: v[dev.size :] for k, v in both.items()}
    per_kernel = kernel_work(kernels)
    devices = {
        str(d): {
            "span_ns": int(w1[i] - w0[i]),
            "split": {k: int(whole[k][i]) for k in SPLIT_KEYS},
            "kernels": per_kernel.get(str(d), {}),
        }
        for i, d in enumerate(dev.tolist())
    }
    step_rows = []
    for j, s in enumerate(kept):
        rows = slice(j * dev.size, (j + 1) * dev.size)
        step_rows.append(
            {
                "name": s["name"],
                "duration_ns": int(s["end_ns"] - s["start_ns"]),
                "devices": {
                    str(d): {k: int(split[k][rows][i]) for k in SPLIT_KEYS} for i, d in enumerate(dev.tolist())
                },
            }
        )
    return {"devices": devices, "steps": step_rows}


# --- comparing two runs' work (compare) -------------------------------------------------------
TOP_KERNEL_CHANGES = 8
NOTABLE_SHARE = 0.01  # a kernel name whose time is under this share of both sides' kernel time is not listed
NOTABLE_CHANGE = 0.05  # calls or time per call that changed by less than this is not listed


def _kernels(work: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per kernel name over all devices: calls, duration_sum_ns, nccl."""
    out: dict[str, dict[str, Any]] = {}
    for dev in work["devices"].values():
        for name, k in dev["kernels"].items():
            e = out.setdefault(name, {"calls": 0, "duration_sum_ns": 0, "nccl": k["nccl"]})
            e["calls"] += k["calls"]
            e["duration_sum_ns"] += k["duration_sum_ns"]
    return out


def _per_gpu(work: dict[str, Any]) -> dict[str, float]:
    """The window and its split, per GPU (the mean over devices)."""
    devs = list(work["devices"].values())
    n = len(devs) or 1
    out = {"span_ns": sum(d["span_ns"] for d in devs) / n}
    out.update({k: sum(d["split"][k] for d in devs) / n for k in SPLIT_KEYS})
    return out


def _step_split(work: dict[str, Any]) -> dict[str, float] | None:
    """The mean included step and its split, per GPU (mean over steps and devices): the parts add
    up to the mean step."""
    steps = work["steps"]
    if not steps:
        return None
    n_dev = len(steps[0]["devices"]) or 1
    out = {"step_ns": sum(s["duration_ns"] for s in steps) / len(steps)}
    for k in SPLIT_KEYS:
        out[k] = sum(d[k] for s in steps for d in s["devices"].values()) / (len(steps) * n_dev)
    return out


def work_rate(base: dict[str, Any], head: dict[str, Any]) -> float | None:
    """Head's kernel work per GPU-second over base's, the work of a kernel name counted at base's
    time per call (head's for a name base never ran): 1.0 = the same work in the same time.  None
    when the two ran no kernel name in common (another accelerator or compiler): no work is then
    counted at base's cost, and the ratio would only compare each side's kernel-busy share."""
    bk, hk = _kernels(base), _kernels(head)
    b_time = sum(k["duration_sum_ns"] for k in bk.values())
    b_span = sum(d["span_ns"] for d in base["devices"].values())
    h_span = sum(d["span_ns"] for d in head["devices"].values())
    if not (b_time and b_span and h_span) or not set(bk) & set(hk):
        return None

    def per_call(name: str) -> float:
        k = bk.get(name) or hk[name]
        return k["duration_sum_ns"] / k["calls"]

    h_work = sum(k["calls"] * per_call(n) for n, k in hk.items())
    return (h_work / h_span) / (b_time / b_span)


def work_compare(base: dict[str, Any] | None, head: dict[str, Any] | None) -> dict[str, Any] | None:
    """What changed in the work of the window: the rate (``work_rate``), per GPU the window's split,
    per step (both sides with steps) the mean step's split, and the kernel names whose calls or time
    per call changed most (by the time the change cost: calls x per-call time)."""
    if not base or not head or not base["devices"] or not head["devices"]:
        return None
    bk, hk = _kernels(base), _kernels(head)
    total = max(sum(k["duration_sum_ns"] for k in bk.values()), sum(k["duration_sum_ns"] for k in hk.values()), 1)
    rows = []
    for name in sorted(set(bk) | set(hk)):
        b, h = bk.get(name), hk.get(name)
        b_calls, h_calls = (b or {}).get("calls", 0), (h or {}).get("calls", 0)
        b_pc = b["duration_sum_ns"] / b["calls"] if b else None
        h_pc = h["duration_sum_ns"] / h["calls"] if h else None
        b_t, h_t = (b or {}).get("duration_sum_ns", 0), (h or {}).get("duration_sum_ns", 0)
        calls_rel = (h_calls - b_calls) / b_calls if b_calls else None
        pc_rel = (h_pc - b_pc) / b_pc if b_pc and h_pc is not None else None
        notable = max(b_t, h_t) >= NOTABLE_SHARE * total and (
            calls_rel is None or pc_rel is None or abs(calls_rel) >= NOTABLE_CHANGE or abs(pc_rel) >= NOTABLE_CHANGE
        )
        if not notable:
            continue
        rows.append(
            {
                "name": name,
                "nccl": (b or h)["nccl"],
                "calls": {"base": b_calls, "head": h_calls, "relative": calls_rel},
                "per_call_ns": {"base": b_pc, "head": h_pc, "relative": pc_rel},
                "time_ns": {"base": b_t, "head": h_t, "delta": h_t - b_t},
            }
        )
    rows.sort(key=lambda r: (-abs(r["time_ns"]["delta"]), r["name"]))
    b_steps, h_steps = _step_split(base), _step_split(head)
    return {
        "rate": work_rate(base, head),
        "names_in_common": len(set(bk) & set(hk)),
        "gpus": {"base": len(base["devices"]), "head": len(head["devices"])},
        "window": {"base": _per_gpu(base), "head": _per_gpu(head)},
        "step": {"base": b_steps, "head": h_steps} if b_steps and h_steps else None,
        "kernels": rows[:TOP_KERNEL_CHANGES],
        "kernels_listed": len(rows),
    }
