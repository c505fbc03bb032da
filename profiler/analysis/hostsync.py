"""Host synchronization: the CUDA calls that hold a host thread until GPU work is done.

What-if replays move a host thread's later work when a call that blocked it
returns earlier.  A call blocks its thread until the op it waits for (``W``)
is done:

- ``cudaStreamSynchronize`` / ``cuStreamSynchronize``: the op on that stream
  (its synchronization row names it) with the latest launch before the call;
- ``cudaEventSynchronize`` / ``cuEventSynchronize``: the op the event's latest
  record at or before the call completes (METRICS.md "Stalls", rules 1 and 2);
- ``cudaDeviceSynchronize`` / ``cuCtxSynchronize``: of the process's ops on
  that device launched before the call, the one that ends last;
- a synchronous copy call (``cudaMemcpy``, ``cuMemcpyDtoH``: no ``Async``):
  the copy it launched.

A call whose ``W`` ended after the call began was *blocked*; it returned
``lag = end - W.end`` after ``W`` (negative when the clocks disagree: the replay
then keeps that offset, so that nothing moves when nothing changed).  Calls with
no ``W`` found are kept as plain host work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from profiler.analysis.dependencies import (
    NO_TIME,
    Dependencies,
    EventIndex,
    GpuOps,
    _stream_keys,
    completed_ops,
    segmented_cummax,
)
from profiler.trace.loader import RUNTIME_TABLE, Trace

STREAM_SYNC = ("cudaStreamSynchronize", "cuStreamSynchronize")
EVENT_SYNC = ("cudaEventSynchronize", "cuEventSynchronize")
DEVICE_SYNC = ("cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize")
COPY_CALL = re.compile(r"^cu(?:da)?Memcpy")
VERSION_SUFFIX = r"_v\d+$"
# every name the classification below can pick, for reading only those calls
BLOCKING_NAMES = "^(?:" + "|".join(STREAM_SYNC + EVENT_SYNC + DEVICE_SYNC) + r")(?:_v\d+)?$|" + COPY_CALL.pattern


@dataclass(frozen=True)
class HostSyncs:
    """Blocking calls, sorted by (thread, start): the op each waited for (-1: none found) and the
    lag after it."""

    gtid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    waited: np.ndarray
    lag: np.ndarray
    blocked: np.ndarray
    copy: np.ndarray | None = None  # a synchronous copy call (cudaMemcpy ...), not a synchronize

    def __len__(self) -> int:
        return int(self.start.size)

    @staticmethod
    def empty() -> HostSyncs:
        z = np.zeros(0, dtype=np.int64)
        return HostSyncs(z, z, z, z, z, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))

    @property
    def returned(self) -> np.ndarray:
        """When each call's thread was free again: its end, and never before an earlier call of the
        thread returned (one thread's calls do not overlap; an export that says so is not trusted)."""
        out = self.end.copy()
        if out.size:
            first = np.r_[True, self.gtid[1:] != self.gtid[:-1]]
            seg = np.cumsum(first) - 1
            out = segmented_cummax(out, seg)
        return out


def host_syncs(trace: Trace, deps: Dependencies) -> HostSyncs:
    """The blocking calls of *trace* and what each waited for."""
    if not trace.has(RUNTIME_TABLE):
        return HostSyncs.empty()
    base = pl.col("name").fill_null("").str.replace(VERSION_SUFFIX, "")
    calls = (
        trace.runtime_calls_named(BLOCKING_NAMES, without="Async")  # no blocking call is asynchronous
        .with_columns(base.alias("call"))
        .with_columns(
            pl.when(pl.col("call").is_in(STREAM_SYNC))
            .then(pl.lit("stream"))
            .when(pl.col("call").is_in(EVENT_SYNC))
            .then(pl.lit("event"))
            .when(pl.col("call").is_in(DEVICE_SYNC))
            .then(pl.lit("device"))
            .when(pl.col("call").str.contains(COPY_CALL.pattern) & ~pl.col("call").str.contains("Async"))
            .then(pl.lit("copy"))
            .alias("what")
        )
        .filter(pl.col("what").is_not_null() & (pl.col("end") >= pl.col("start")).fill_null(False))
        .with_columns(pl.col("pid").fill_null(-1), pl.col("global_tid").fill_null(-1))
    )
    if calls.height == 0:
        return HostSyncs.empty()
    sync_rows = trace.syncs.select(
        pl.col("pid").fill_null(-1), "correlation_id", pl.col("device").alias("s_device"), "stream", "event_id"
    ).unique(["pid", "correlation_id"], keep="first")
    calls = calls.join(sync_rows, on=["pid", "correlation_id"], how="left", maintain_order="left").with_columns(
        pl.col("s_device").fill_null(-1), pl.col("correlation_id").fill_null(-2)
    )
    t = calls["start"].to_numpy().astype(np.int64)
    waited = np.full(calls.height, -1, dtype=np.int64)
    what = calls["what"].to_numpy()
    ops = deps.ops

    sel = np.flatnonzero(what == "stream")
    if sel.size:
        streams = calls[sel].select("pid", pl.col("s_device").alias("device"), "stream")
        waited[sel] = completed_ops(ops, _stream_keys(ops, streams), t[sel])
    sel = np.flatnonzero(what == "event")
    if sel.size:
        events = deps.events if deps.events is not None else EventIndex.of(trace, ops)
        q = calls[sel].select("pid", "event_id")
        ok = q["event_id"].is_not_null().to_numpy()
        got = events.waited_op(q.with_columns(pl.col("event_id").fill_null(-1)), t[sel])
        waited[sel] = np.where(ok, got, -1)
    sel = np.flatnonzero(what == "device")
    if sel.size:
        waited[sel] = _last_ending(ops, calls[sel]["pid"].to_numpy(), calls[sel]["s_device"].to_numpy(), t[sel])
    sel = np.flatnonzero(what == "copy")
    if sel.size:
        waited[sel] = _op_of_call(ops, calls[sel]["pid"].to_numpy(), calls[sel]["correlation_id"].to_numpy())

    end = calls["end"].to_numpy().astype(np.int64)
    w_end = np.where(waited >= 0, ops.end[np.maximum(waited, 0)] if len(ops) else 0, NO_TIME)
    blocked = (waited >= 0) & (w_end > t)
    lag = np.where(blocked, end - w_end, 0)
    gtid = calls["global_tid"].to_numpy().astype(np.int64)
    order = np.lexsort((t, gtid))
    copy = what == "copy"
    return HostSyncs(gtid[order], t[order], end[order], waited[order], lag[order], blocked[order], copy[order])


def _last_ending(ops: GpuOps, pid: np.ndarray, device: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query, of the process's ops on *device* (any device where -1) launched before *t*,
    the row of the one that ends last; -1 where none."""
    out = np.full(t.size, -1, dtype=np.int64)
    has = ops.launch != NO_TIME
    for p_, d_ in set(zip(pid.tolist(), device.tolist(), strict=True)):
        mine = has & (ops.pid == p_) & ((ops.device == d_) if d_ >= 0 else True)
        rows = np.flatnonzero(mine)
        q = np.flatnonzero((pid == p_) & (device == d_))
        if rows.size == 0:
            continue
        rows = rows[np.lexsort((ops.corr[rows], ops.launch[rows]))]  # ends tie: the latest launch wins
        e = ops.end[rows]
        best = np.maximum.accumulate(e)
        at = np.maximum.accumulate(np.where(e == best, np.arange(rows.size), 0))
        k = np.searchsorted(ops.launch[rows], t[q], side="left") - 1
        ok = k >= 0
        out[q[ok]] = rows[at[k[ok]]]
    return out


def _op_of_call(ops: GpuOps, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """The op launched by each call (same process and correlationId), -1 where none."""
    key = pl.DataFrame({"pid": ops.pid, "corr": ops.corr, "row": np.arange(len(ops), dtype=np.int64)})
    q = pl.DataFrame({"pid": pid.astype(np.int64), "corr": corr.astype(np.int64)})
    got = q.join(key.unique(["pid", "corr"], keep="first"), on=["pid", "corr"], how="left", maintain_order="left")
    return got["row"].fill_null(-1).to_numpy().astype(np.int64)
