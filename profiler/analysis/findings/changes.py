"""The change each rule's cause makes in the replay (METRICS.md "Savings", the change per kind of
cause): which ops, calls or waits, as rows of the run's replay (``Evidence.replays``)."""

from __future__ import annotations

import numpy as np
import polars as pl

from profiler.analysis.contexts import CONTEXTS
from profiler.analysis.dependencies import D2H, H2D, KIND_OF_CLASS, NO_TIME
from profiler.analysis.findings.evidence import Evidence
from profiler.analysis.intervals import measure_within, union
from profiler.analysis.kernels_slowed import BESIDE
from profiler.analysis.links import run_link
from profiler.analysis.overlap import MEASURABLE
from profiler.analysis.replay import Change
from profiler.analysis.whatif import OP_KEYS

COPY_KINDS = (H2D, D2H)


def _copies(ev: Evidence, device: str | int | None = None, cls: str | None = None) -> np.ndarray:
    """Rows of the h2d/d2h copies (of *device*, of class *cls*)."""
    ops = ev.replays.deps.ops
    sel = np.isin(ops.kind, [KIND_OF_CLASS[cls]] if cls else COPY_KINDS)
    if device is not None:
        sel &= ops.device == int(device)
    return np.flatnonzero(sel)


def removed(what: str, rows: np.ndarray) -> Change:
    return Change(what, removed=np.asarray(rows, dtype=np.int64))


def copies_removed(ev: Evidence, positions: np.ndarray, what: str) -> Change:
    """The copies at *positions* of the trace's copies: removed (zero time, no op waits for them)."""
    _, rows = ev.replays.op_rows(ev.trace.copies, positions, "copy")
    return removed(what, rows)


def attributed_copies(ev: Evidence, op_id: np.ndarray) -> np.ndarray:
    """Rows of the h2d/d2h copies among the breakdown's ops *op_id* (found by position where the
    keys allow, else by the op keys: pid, device, stream, correlation_id, start)."""
    rows = ev.replays.rows_of_ops(ev.breakdown.ops.select("op_id", *OP_KEYS)[op_id])
    return rows[np.isin(ev.replays.deps.ops.kind[rows], COPY_KINDS)]


def layer_copies(ev: Evidence, names: list[str]) -> np.ndarray:
    """Rows of the h2d/d2h copies attributed to the layers *names* (the innermost layer range)."""
    lay = ev.breakdown.layer_assignment().filter(pl.col("layer").is_in(names))
    return attributed_copies(ev, lay["op_id"].to_numpy())


def op_copies(ev: Evidence, name: str) -> np.ndarray:
    """Rows of the h2d/d2h copies attributed to the XLA instruction (or innermost range) *name*."""
    got = ev.breakdown.op_assignment().filter(pl.col("group") == name)
    return attributed_copies(ev, got["op_id"].to_numpy())


def stalls_of(ev: Evidence, rows: np.ndarray, what: str) -> Change:
    """The waits whose blocker is one of the copies *rows*: dropped, a blocking call's that waited
    for one of them too (a TPU's sequencer blocked in its done wait: ``jax_profile``)."""
    rows = np.asarray(rows, dtype=np.int64)
    host = ev.replays.host
    held = np.flatnonzero(host.blocked & np.isin(host.waited, rows)) if host is not None and len(host) else rows[:0]
    return Change(f"the waits on {what} dropped", unwaited=rows, detached=held)


def valid_positions(frame: pl.DataFrame) -> np.ndarray:
    """Positions of the rows of *frame* with ``end >= start`` (the rows the analysis measures)."""
    return np.flatnonzero(frame.select(MEASURABLE.fill_null(False)).to_series().to_numpy())


def contended_copies(ev: Evidence, dev: str, cls: str) -> Change:
    """The device's *cls* copies that ran beside kernels (the ``kernels`` context): removed."""
    copies = ev.trace.copies
    positions = valid_positions(copies)  # the rows ``copy_contexts`` numbers
    ctx = ev.breakdown.copy_contexts
    on = ((copies["device"] == int(dev)) & (copies["cls"] == cls)).fill_null(False).to_numpy()[positions]
    rows = positions[on & (ctx == CONTEXTS.index("kernels"))]
    return copies_removed(
        ev, rows, f"the {rows.size} {cls} copies of {ev.device_word} {dev} that ran beside kernels removed"
    )


def at_rate(ev: Evidence, picked: np.ndarray, gbps: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(rows, durations) of the copies at positions *picked* of the trace's copies at *gbps*
    (decimal GB/s: bytes per ns), each rounded to the nearest ns."""
    copies = ev.trace.copies
    rate = np.broadcast_to(np.asarray(gbps, dtype=np.float64), (picked.size,))
    nbytes = copies["bytes"].fill_null(0).to_numpy()[picked]
    new = np.floor(nbytes / rate + 0.5).astype(np.int64)
    found, rows = ev.replays.op_rows(copies, picked, "copy")
    return rows, new[found]


def _offload(ev: Evidence, dev: str, cls: str | None = None) -> tuple[np.ndarray, pl.DataFrame]:
    """Positions in the trace's copies of the device's valid h2d/d2h copies (of *cls*), and those rows."""
    copies = ev.trace.copies
    pos = valid_positions(copies)
    v = copies[pos]
    want = ["h2d", "d2h"] if cls is None else [cls]
    on = ((v["device"] == int(dev)) & v["cls"].is_in(want)).fill_null(False).to_numpy()
    return pos[on], v.filter(pl.Series(on))


def link_gbps(ev: Evidence, dev: str) -> tuple[float, str]:
    """The host link's rate per direction for GPU *dev*, and how it was chosen."""
    chosen = run_link(ev.gpu_names, dev, ev.link)
    how = {"assumed": "assumed", "given": "given"}.get(chosen.source, "by the GPU's model")
    return chosen.link.gbps, f"{chosen.link.name} at {chosen.link.gbps:g} GB/s, {how}"


def slow_link(ev: Evidence, dev: str, cls: str, gbps: float, link: str) -> Change:
    """The device's *cls* copies at the link's rate (never longer than recorded)."""
    pos, _ = _offload(ev, dev, cls)
    rows, dur = at_rate(ev, pos, gbps)
    return Change(f"the {rows.size} {cls} copies of {ev.device_word} {dev} at {link}", durations=(rows, dur))


def pinned(ev: Evidence, dev: str) -> Change:
    """The device's pageable copies at the duration a pinned copy of the same size takes there: the
    rate of the trace's pinned copies of that direction and size class (power of two) on that GPU,
    else the link's rate."""
    pos, c = _offload(ev, dev)
    c = c.with_columns(
        pl.Series("_pos", pos),
        pl.col("bytes").fill_null(0).clip(lower_bound=1).log(2).floor().cast(pl.Int64).alias("size_class"),
    )
    rates = (
        c.filter((pl.col("host_kind") != "pageable") & (pl.col("end") > pl.col("start")))
        .group_by("cls", "size_class")
        .agg((pl.col("bytes").sum() / (pl.col("end") - pl.col("start")).sum()).alias("pinned_gbps"))
    )
    link, how = link_gbps(ev, dev)
    pg = c.filter(pl.col("host_kind") == "pageable").join(rates, on=["cls", "size_class"], how="left")
    own = int(pg["pinned_gbps"].is_not_null().sum())
    rows, dur = at_rate(ev, pg["_pos"].to_numpy(), pg["pinned_gbps"].fill_null(link).to_numpy())
    src = f"{own} at the trace's own pinned rate, {pg.height - own} at the link's: {how}"
    return Change(
        f"the {rows.size} pageable copies of {ev.device_word} {dev} at pinned speed ({src})", durations=(rows, dur)
    )


def sync_calls(ev: Evidence, steps: list[dict]) -> Change:
    """The synchronous copy calls (inside *steps*, else all) no longer hold their thread."""
    host = ev.replays.host
    if host is None or not len(host) or host.copy is None:
        return Change("no synchronous copy call changed")
    sel = host.copy.copy()
    if steps:
        lo = np.array(sorted(s["start_ns"] for s in steps))
        hi = np.array([s["end_ns"] for s in sorted(steps, key=lambda s: s["start_ns"])])
        i = np.searchsorted(lo, host.start, side="right") - 1
        sel &= (i >= 0) & (host.start < hi[np.maximum(i, 0)])
    calls = np.flatnonzero(sel)
    return Change(f"the {calls.size} synchronous copy calls returning at once", detached=calls)


def own_stream(ev: Evidence, dev: str, stream: int) -> Change:
    """The device's h2d/d2h copies on *stream*: on a stream of their own."""
    ops = ev.replays.deps.ops
    rows = _copies(ev, dev)
    rows = rows[ops.stream[rows] == int(stream)]
    return Change(f"the {rows.size} h2d/d2h copies of stream {stream} on a stream of their own", own_stream=rows)


def kernels_alone(ev: Evidence, dev: str, groups: list[dict]) -> Change:
    """The kernels of *groups* (name, grid, block) that ran beside copies on *dev*: at the group's
    median alone (never longer than recorded)."""
    k = ev.trace.kernels
    side = ev.breakdown.kernel_sides
    shape = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
    want = pl.DataFrame(
        [(g["name"], *g["grid"], *g["block"], g["alone"]["median_ns"]) for g in groups],
        schema={"name": k.schema["name"], **{c: k.schema[c] for c in shape}, "alone": pl.Int64},
        orient="row",
    )
    pos = np.flatnonzero((side == BESIDE) & (k["device"].fill_null(-1).to_numpy() == int(dev)))
    got = (
        k[pos]
        .select("name", *shape)
        .with_columns(pl.Series("_pos", pos))
        .join(want, on=["name", *shape], how="inner", nulls_equal=True)
        .sort("_pos")
    )
    found, rows = ev.replays.op_rows(k, got["_pos"].to_numpy(), "kernel")
    return Change(
        f"the {rows.size} kernels of {len(groups)} group(s) on {ev.device_word} {dev} at their median alone",
        durations=(rows, got["alone"].to_numpy()[found]),
    )


def at_edges(ev: Evidence, dev_t0_t1: tuple[np.ndarray, np.ndarray, np.ndarray], edge: np.ndarray) -> Change:
    """The h2d/d2h copies exposed, or stalling an op, in the first or last *edge* of each step's GPU
    span (per device: t0, t1): removed."""
    dev, t0, t1 = dev_t0_t1
    lo = np.r_[t0, np.maximum(t1 - edge, t0 + edge)]
    hi = np.r_[t0 + edge, t1]
    edges = union(np.r_[dev, dev].astype(np.int64), lo, hi)
    ops = ev.replays.deps.ops
    rows = _copies(ev)
    inside = measure_within(edges, ops.device[rows].astype(np.int64), ops.start[rows], ops.end[rows]) > 0
    chosen = set(rows[inside].tolist())
    st = ev.breakdown.stalls
    if st is not None and st.deps is ev.replays.deps:
        hit = np.flatnonzero((st.stall > 0) & (st.ready != NO_TIME) & (st.blocker >= 0))
        hit = hit[np.isin(ops.kind[st.blocker[hit]], COPY_KINDS)]
        at = measure_within(edges, ops.device[hit].astype(np.int64), st.ready[hit], st.ready[hit] + st.stall[hit]) > 0
        chosen |= set(st.blocker[hit[at]].tolist())
    out = np.array(sorted(chosen), dtype=np.int64)
    return removed(f"the {out.size} h2d/d2h copies at the steps' edges removed", out)
