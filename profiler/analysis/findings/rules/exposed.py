"""The tool's own question on any trace: how much of the copy time ran with no kernel beside it,
which copies, where in the window, and what to try."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.findings import Finding, changes, rule
from profiler.analysis.findings.config import exceeds, under
from profiler.analysis.findings.evidence import LHS, PIPELINED, CannotDecide, Evidence, flag_value
from profiler.analysis.findings.rules.text import dur, names, pct, share, size
from profiler.analysis.intervals import Intervals, measure_within

TOP = 3  # copies and stretches named
SMALL = 256 * 1024  # copies below this size are bound by latency more than by the link


def tenths(iv: Intervals, g: int, w0: int, span: int) -> list[int]:
    """The length of *iv* (group *g*) in each tenth of the window ``[w0, w0 + span)``."""
    edges = w0 + (np.arange(11, dtype=np.int64) * span) // 10
    return [int(x) for x in measure_within(iv, np.full(10, g), edges[:-1], edges[1:])]


def each_exposed(ev: Evidence, copies: pl.DataFrame, dev: int) -> pl.DataFrame:
    """*copies* (of *dev*) with ``exposed_ns``: each copy's own time outside every kernel."""
    start, end = copies["start"].to_numpy(), copies["end"].to_numpy()
    hidden = measure_within(ev.breakdown.kernel_sets.any, np.full(copies.height, dev), start, end)
    return copies.with_columns(pl.Series("exposed_ns", (end - start) - hidden))


def _most_exposed(copies: pl.DataFrame, w0: int) -> list[dict[str, Any]]:
    """The copies with the most time outside every kernel, longest first."""
    top = copies.filter(pl.col("exposed_ns") > 0).sort(["exposed_ns", "start"], descending=[True, False]).head(TOP)
    return [
        {
            "cls": c,
            "bytes": int(b),
            "stream": int(st),
            "at_ns": int(s - w0),
            "duration_ns": int(e - s),
            "exposed_ns": int(x),
            "host": h,
        }
        for c, b, st, s, e, x, h in top.select(
            "cls", "bytes", "stream", "start", "end", "exposed_ns", "host_kind"
        ).iter_rows()
    ]


def at(ns: float, span: int) -> str:
    """A time into the window, in the unit of the window's length (one decimal)."""
    unit, div = next(((u, d) for u, d in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)) if span >= 10 * d), ("ns", 1))
    return f"{ns / div:.{0 if div == 1 else 1}f} {unit}"


def _where_text(by_tenth: list[int], total: int, span: int) -> str:
    """Where the exposed time lies: the fewest tenths of the window holding 80% of it (adjacent ones
    joined), or "spread" when that takes more than three."""
    x = np.array(by_tenth, dtype=np.int64)
    order = np.argsort(-x, kind="stable")
    k = int(np.searchsorted(np.cumsum(x[order]), 0.8 * total)) + 1
    if k > TOP:
        return f"spread over the window: {dur(int(x.min()))} to {dur(int(x.max()))} of it in each tenth"
    runs: list[list[int]] = []
    for i in sorted(int(i) for i in order[:k]):  # at most three tenths
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{_range(a * span // 10, (b + 1) * span // 10, span)} ({dur(int(x[a : b + 1].sum()))})" for a, b in runs]
    held = int(x[order[:k]].sum())
    return (
        f"{pct(held / total)} of it in {k} tenth{'s' if k > 1 else ''} of the window: {', '.join(parts)} from its start"
    )


def _range(lo: float, hi: float, span: int) -> str:
    a, b = at(lo, span), at(hi, span)
    return a if a == b else f"{a}-{b}"


def _class_text(cls: str, m: dict[str, Any], sizes: pl.Series) -> str:
    lo, hi, mid = int(sizes.min()), int(sizes.max()), int(sizes.median())
    each = (
        f"of {size(lo)}"
        if m["count"] == 1
        else f"of {size(lo)} each"
        if lo == hi
        else f"of {size(mid)} (median; {size(lo)} to {size(hi)})"
    )
    return f"{m['count']} {cls} {each}, {size(m['bytes'])} in all, {dur(m['exposed_ns'])} exposed"


SCHEDULERS = {LHS: "the latency hiding scheduler (--lhs)", PIPELINED: "pipelined host offloading (--pipelined-offload)"}


def _scheduling_tip(ev: Evidence) -> str:
    """XLA's flags that schedule copies under compute: those the run did not have on (all of them when
    its flags are unknown), or, when it had them all, that they did not hide these copies."""
    try:
        off = [text for flag, text in SCHEDULERS.items() if not flag_value(ev.xla_flags, flag)]
    except CannotDecide:
        off = list(SCHEDULERS.values())
    if off:
        return f"let XLA schedule its copies under compute: {' and '.join(off)}"
    return (
        "this run already had the latency hiding scheduler and pipelined host offloading on, and they did not "
        "hide these copies: offload fewer activations, or give XLA more compute to hide each copy under"
    )


def _advice(ev: Evidence, dev: str, d: dict[str, Any], copies: pl.DataFrame, pageable_ns: int, outside_ns: int) -> str:
    """What to try, from what the exposed time is made of."""
    exposed = int(d["copies"]["offload"]["exposed_ns"])
    kernels_busy = int(d["compute"]["busy_ns"] + d["nccl"]["busy_ns"])
    busy = int(d["copies"]["offload"]["busy_ns"])
    small = copies.filter(pl.col("bytes") < SMALL)
    tips = []
    if pageable_ns * 2 >= exposed:
        tips.append('pin the host buffers (cudaHostAlloc, memory_kind="pinned_host"): pageable copies do not overlap')
    if kernels_busy == 0:
        where = f"{ev.device_word} {dev}"
        tips.append(f"no kernel ran on {where}: nothing there can hide its copies; overlap them with other work")
    elif kernels_busy < busy:
        tips.append(
            f"the kernels run {dur(kernels_busy)} in all, less than the copies' {dur(busy)}: no schedule hides "
            "them all, move fewer bytes (keep data on the device, offload fewer or smaller activations)"
        )
    if kernels_busy and outside_ns * 4 >= exposed:
        tips.append(
            f"{dur(outside_ns)} of it lies before the first kernel or after the last (inputs in, results out): "
            "overlap those with the previous or next iteration"
        )
    if small.height and int(small["exposed_ns"].sum()) * 2 >= exposed:
        tips.append(
            f"copies under {size(SMALL)} ({small.height}, median {size(float(small['bytes'].median() or 0))}) "
            "hold most of it: each pays a fixed cost in latency; move the same bytes in fewer, larger copies"
        )
    if kernels_busy == 0:
        pass
    elif ev.on_tpu:
        tips.append(
            "XLA:GPU's scheduling flags (--lhs, --pipelined-offload) do not apply to a TPU: offload fewer "
            "activations, or give XLA more compute to hide each copy under (an unrolled layer loop)"
        )
    elif ev.is_xla:
        tips.append(_scheduling_tip(ev))
    else:
        tips.append(
            "issue each copy on a stream of its own ahead of the kernels that need it (prefetch), in chunks that "
            "pipeline with compute"
        )
    return "; ".join(tips)


@rule("exposed-copies")
def exposed_copies(ev: Evidence) -> list[Finding]:
    out = []
    c = ev.offload_copies
    iv = ev.exposed_offload
    pageable = ev.exposed_pageable
    for dev, d in ev.devices.items():
        off = d["copies"]["offload"]
        busy, exposed = int(off["busy_ns"]), int(off["exposed_ns"])
        w0, span = int(d["window_ns"][0]), int(d["span_ns"])
        if not busy or not exceeds(exposed / busy, ev.config["exposed_copies_fraction"]):
            continue
        if under(exposed, ev.config["exposed_copies_min_share"] * span):
            continue
        g = int(dev)
        mine = _of_group(iv, g)
        k0, k1 = ev.kernel_bounds.get(g, (int(d["window_ns"][1]),) * 2)
        outside = int(exposed - measure_within(mine, np.array([g]), np.array([k0]), np.array([max(k0, k1)]))[0])
        mine_pageable = _of_group(pageable, g)
        pageable_ns = int((mine_pageable.end - mine_pageable.start).sum())
        per_class = {
            cls: {key: d["copies"][cls][key] for key in ("count", "bytes", "busy_ns", "exposed_ns")}
            for cls in ("h2d", "d2h")
        }
        on = (c["device"] == g).fill_null(False).to_numpy()
        mine_copies = each_exposed(ev, c.filter(pl.Series(on)), g)
        exposed_at = ev.offload_positions[on][mine_copies["exposed_ns"].to_numpy() > 0]
        top = _most_exposed(mine_copies, w0)
        classes = " and ".join(
            _class_text(cls, m, mine_copies.filter(pl.col("cls") == cls)["bytes"])
            for cls, m in per_class.items()
            if m["count"]
        )
        both = sum(m["exposed_ns"] for m in per_class.values()) - exposed
        if both > 0:
            classes += f" (both directions at once for {dur(both)})"
        longest = np.argsort(-(mine.end - mine.start), kind="stable")[:10]
        by_tenth = tenths(mine, g, w0, span)
        worst = [f"{t['cls']} {size(t['bytes'])} at {at(t['at_ns'], span)} ({dur(t['exposed_ns'])})" for t in top]
        out.append(
            Finding(
                "exposed-copies",
                "problem",
                f"{ev.device_word} {dev}: {pct(exposed / busy)} of the h2d/d2h copy time ran with no kernel beside it: "
                f"{dur(exposed)} of {dur(busy)}, {share(exposed / span) if span else '0%'} of the {dur(span)} window. "
                f"Copies: {classes}; {_where_text(by_tenth, exposed, span)}; "
                f"most exposed: {names(worst)}",
                _advice(ev, dev, d, mine_copies, pageable_ns, outside),
                where={"device": dev},
                evidence={
                    "exposed_ns": exposed,
                    "busy_ns": busy,
                    "classes": per_class,
                    "longest_exposed": [
                        {"from_ns": int(mine.start[i] - w0), "to_ns": int(mine.end[i] - w0)} for i in longest
                    ],
                    "by_tenth_ns": by_tenth,
                    "outside_kernels_span_ns": outside,
                    "pageable_exposed_ns": pageable_ns,
                    "most_exposed": top,
                },
                view="timeline",
                attributed_ns=exposed,
                change=changes.copies_removed(
                    ev,
                    exposed_at,
                    f"the {exposed_at.size} h2d/d2h copies of {ev.device_word} {dev} with exposed time removed",
                ),
                **ev.basis_device(dev),
            )
        )
    return out


def _of_group(iv: Intervals, g: int) -> Intervals:
    lo, hi = np.searchsorted(iv.group, g, side="left"), np.searchsorted(iv.group, g, side="right")
    return Intervals(iv.group[lo:hi], iv.start[lo:hi], iv.end[lo:hi])
