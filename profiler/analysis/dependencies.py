"""Who waited for whom on the GPU: CUDA event records and stream waits.

METRICS.md, "Stalls: what the copies cost", inputs and rules 1 to 3:

- Process of a row: ``globalPid >> 24`` (``globalTid >> 24`` for runtime rows); a
  stream is ``(device, streamId)`` in its process, where the device of a record or a
  wait is that of its context's ops (``Trace.context_devices``: nsys leaves
  ``deviceId`` 0 on those rows, and stream ids repeat across GPUs); the launch time of a GPU op,
  and the time ``t_rec`` of an event record, is the ``start`` of the runtime row
  with the same correlationId in the same process.  A stream wait is a
  synchronization row with both ``streamId`` and ``eventId`` set (never judged
  by ``syncType``); its time ``t_w`` is the row's ``start``.  Only valid ops
  (``end >= start``) take part.
1. A record completes the op on its stream with the latest launch time
   ``< t_rec`` (ties: the larger correlationId); none: it completes nothing.
2. A wait resolves to the record of the same eventId with the latest
   ``t_rec <= t_w`` (ties: the larger correlationId).  If there is none, or
   that record completes no op, the wait is unresolved; otherwise the op that
   record completes is the wait's blocker.
3. A resolved wait applies to the first op on the waiting stream whose launch
   time is ``>= t_w`` (ties: the smaller correlationId).  A wait whose blocker
   is on that same stream is ignored (streams run in order).

Every rule is a binary search per record or wait over ops sorted once; no
Python loop per op.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from profiler.analysis.attribution import with_launches
from profiler.trace.loader import Trace

NO_TIME = np.iinfo(np.int64).min // 4  # "no launch time": below every real time, safe to add to
# Op kinds (the classes a blocker or a stalled op falls into).
COMPUTE, NCCL, H2D, D2H, OTHER_COPY, MEMSET = range(6)
KIND_OF_CLASS = {"h2d": H2D, "d2h": D2H}

_FILL = {"pid": -1, "device": -1, "stream": -1}


@dataclass(frozen=True)
class GpuOps:
    """Every valid GPU op of a trace as NumPy columns, in stream order: sorted by
    (process, device, stream), then start, then correlationId.

    ``skey`` numbers the streams (non-decreasing along the rows); ``launch`` is
    ``NO_TIME`` where the op has no runtime row; ``kind`` is one of the kind codes.
    """

    pid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    kind: np.ndarray
    launch: np.ndarray
    gtid: np.ndarray  # the thread (serialized global id) of the launch call, -1 where unknown
    skey: np.ndarray
    streams: pl.DataFrame  # pid, device, stream, skey
    row: np.ndarray | None = None  # per op, its row among the valid kernels, copies and memsets (in that order)

    def __len__(self) -> int:
        return int(self.start.size)

    def in_input_order(self, values: np.ndarray) -> np.ndarray:
        """*values* (one per op, in stream order) in the order of ``row``: kernels, copies, memsets."""
        if self.row is None:
            raise ValueError("these ops do not know their input rows")
        out = np.empty_like(values)
        out[self.row] = values
        return out

    def launches_in_input_order(self) -> pl.DataFrame:
        """launch_start, launch_gtid (NULL where unknown) of the ops in the order of ``row``, as
        ``attribution.with_launches`` gives them for the same ops and runtime rows."""
        start, gtid = self.in_input_order(self.launch), self.in_input_order(self.gtid)
        return pl.DataFrame(
            {
                "launch_start": pl.Series(start, dtype=pl.Int64).set(pl.Series(start == NO_TIME), None),
                "launch_gtid": pl.Series(gtid, dtype=pl.Int64).set(pl.Series(gtid == -1), None),
            }
        )

    @cached_property
    def prev(self) -> np.ndarray:
        """The row of the op before each op on its stream (by start, then correlationId), or -1."""
        prev = np.arange(-1, len(self) - 1, dtype=index_dtype(len(self)))
        if len(self):
            first = np.r_[True, self.skey[1:] != self.skey[:-1]]
            prev[first] = -1
        return prev

    @cached_property
    def has_launch(self) -> np.ndarray:
        return self.launch != NO_TIME

    @cached_property
    def by_launch(self) -> np.ndarray:
        """Rows of the ops with a launch time, sorted by (stream, launch time, correlationId).

        Streams run their ops in launch order, so this is nearly always the
        stream order itself; it is sorted only when it is not.
        """
        rows = np.flatnonzero(self.has_launch)
        g, t, c = self.skey[rows], self.launch[rows], self.corr[rows]
        if rows.size > 1:
            same = g[1:] == g[:-1]
            dt = t[1:] - t[:-1]
            ordered = ~same | (dt > 0) | ((dt == 0) & (c[1:] >= c[:-1]))
            if not ordered.all():
                rows = rows[np.lexsort((c, t, g))]
        return rows


@dataclass(frozen=True)
class Dependencies:
    """The waits of a trace resolved to blockers (rules 1 to 3).

    ``target``/``blocker`` list, per applied wait (resolved and not ignored,
    with an op to apply to), the op that waits and the op it waits for, as
    rows of ``ops``.  ``waits`` counts wait rows per device of the wait.
    """

    ops: GpuOps
    target: np.ndarray
    blocker: np.ndarray
    waits: dict[int, dict[str, int]]
    events: EventIndex | None = None

    @cached_property
    def blockers_of(self) -> tuple[np.ndarray, np.ndarray]:
        """(targets sorted, their blockers): the applied waits grouped by the op that waits."""
        order = np.lexsort((self.blocker, self.target))
        return self.target[order], self.blocker[order]


def gpu_ops(trace: Trace, runtime: pl.DataFrame | None = None) -> GpuOps:
    """Every valid kernel, copy and memset of *trace*, with launch times, in stream order
    (*runtime*: the trace's runtime rows when already at hand, else ``trace.runtime``)."""
    none = pl.lit(None, pl.Int64)
    common = ("pid", "device", "stream", "start", "end", "correlation_id")
    k = trace.kernel_ops
    c = trace.copies
    m = trace.memsets
    frames = [
        k.select(*common, pl.when(pl.col("is_nccl").fill_null(False)).then(NCCL).otherwise(COMPUTE).alias("kind")),
        c.select(
            *common,
            pl.col("cls").replace_strict(KIND_OF_CLASS, default=OTHER_COPY, return_dtype=pl.Int64).alias("kind"),
        ),
        m.select(*common, pl.lit(MEMSET, pl.Int64).alias("kind")),
    ]
    ops = (  # one pass: no concatenated copy before the filter
        pl.concat([f.lazy().with_columns(pl.col(x).cast(pl.Int64) for x in (*common, "kind")) for f in frames])
        .filter(pl.col("end") >= pl.col("start"))
        .with_columns(pl.col(x).fill_null(v) for x, v in _FILL.items())
        .collect()
    )
    del frames
    if ops.height and trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        ops = with_launches(ops, trace.runtime if runtime is None else runtime)
    else:
        ops = ops.with_columns(none.alias("launch_start"), none.alias("launch_gtid"))

    names = {"pid": "pid", "device": "device", "stream": "stream", "start": "start", "end": "end"}
    names |= {"corr": "correlation_id", "kind": "kind", "launch": "launch_start", "gtid": "launch_gtid"}
    # column by column out of the frame: each frame column goes as its array is made
    cols = {
        k: _int_column(ops.drop_in_place(c), NO_TIME if k == "launch" else -1, _NARROW.get(k)) for k, c in names.items()
    }
    del ops
    # stream order; NumPy's lexsort is several times faster here than a multi-column polars sort
    order = np.lexsort((cols["corr"], cols["start"], cols["stream"], cols["device"], cols["pid"]))
    for k in cols:  # one column at a time: each unsorted column is freed as its sorted copy is made
        cols[k] = cols[k][order]
    pid, dev, stream = cols["pid"], cols["device"], cols["stream"]
    new = np.ones(pid.size, dtype=bool)
    if pid.size:
        new[1:] = (pid[1:] != pid[:-1]) | (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    skey = np.cumsum(new) - 1
    heads = np.flatnonzero(new)
    streams = pl.DataFrame(
        {
            "skey": np.arange(heads.size, dtype=np.int64),
            "pid": pid[heads],
            "device": dev[heads],
            "stream": stream[heads],
        }
    )
    return GpuOps(**cols, skey=_narrow(skey, np.int32), streams=streams, row=_narrow(order, np.int32))


# Columns of GpuOps held narrower than int64 when their values fit (times and threads stay
# int64): a million ops hold about 100 MB.
_NARROW = {"pid": np.int32, "device": np.int32, "stream": np.int32, "corr": np.int32, "kind": np.int8}


def index_dtype(n: int) -> type[np.signedinteger]:
    """The dtype of row numbers (and -1) among *n* rows: int32 when they fit."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def _narrow(values: np.ndarray, dtype: type[np.signedinteger] | None) -> np.ndarray:
    """*values* as *dtype* when every value fits in it, else as int64."""
    if dtype is not None and values.size:
        info = np.iinfo(dtype)
        if info.min <= int(values.min()) and int(values.max()) <= info.max:
            return values.astype(dtype)
    return values.astype(np.int64, copy=False)


def _int_column(column: pl.Series, fill: int, dtype: type[np.signedinteger] | None = None) -> np.ndarray:
    return _narrow(column.fill_null(fill).to_numpy(), dtype)


def search_in_groups(groups: np.ndarray, times: np.ndarray, qg: np.ndarray, qt: np.ndarray, side: str) -> np.ndarray:
    """``np.searchsorted`` of each query time *qt* within the rows of its group *qg*.

    *groups* is sorted and *times* sorted within each group.  Returns global
    positions: the insertion point of the query inside its group's slice
    (``side`` as in NumPy).  A bisection over all queries at once.
    """
    if times.size and qt.size:
        packed = _packed_search(groups, times, qg, qt, side)
        if packed is not None:
            return packed
    lo = np.searchsorted(groups, qg, side="left")
    hi = np.searchsorted(groups, qg, side="right")
    last = max(times.size - 1, 0)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        tm = times[np.minimum(mid, last)] if times.size else np.zeros_like(mid)
        right = (tm < qt) if side == "left" else (tm <= qt)
        lo = np.where(active & right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)


def _packed_search(
    groups: np.ndarray, times: np.ndarray, qg: np.ndarray, qt: np.ndarray, side: str
) -> np.ndarray | None:
    """``search_in_groups`` as one ``np.searchsorted`` over (group, time) packed into one int64,
    when groups and the span of times are small enough (else None).  Query times outside the
    times' range are clipped to just outside it, which keeps their insertion points."""
    t0, t1 = int(times.min()), int(times.max())
    g0, g1 = int(min(groups.min(), qg.min())), int(max(groups.max(), qg.max()))
    width = t1 - t0 + 3
    if g0 < 0 or width >= 1 << 40 or (g1 + 1) >= 1 << 22:
        return None
    key = groups.astype(np.int64) * width + (times - t0 + 1)
    q = qg.astype(np.int64) * width + (np.clip(qt, t0 - 1, t1 + 1) - t0 + 1)
    return np.searchsorted(key, q, side=side)


def _stream_keys(ops: GpuOps, rows: pl.DataFrame) -> np.ndarray:
    """The stream key of each row's (pid, device, stream), or -1 where no op ran on that stream."""
    keyed = rows.select(
        *(pl.col(x).cast(pl.Int64).fill_null(v) for x, v in _FILL.items()), pl.int_range(pl.len()).alias("_row")
    ).join(ops.streams, on=["pid", "device", "stream"], how="left")
    return keyed.sort("_row")["skey"].fill_null(-1).to_numpy().astype(np.int64)


def _launches(trace: Trace, rows: pl.DataFrame, runtime: pl.DataFrame | None = None) -> np.ndarray:
    """Start of the runtime row with each row's (pid, correlation_id), ``NO_TIME`` where none
    (*runtime*: as in ``gpu_ops``)."""
    if rows.height == 0 or not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return np.full(rows.height, NO_TIME, dtype=np.int64)
    got = with_launches(
        rows.select(pl.col("pid").cast(pl.Int64), pl.col("correlation_id").cast(pl.Int64)),
        trace.runtime if runtime is None else runtime,
    )
    return got["launch_start"].fill_null(NO_TIME).to_numpy().astype(np.int64)


def completed_ops(ops: GpuOps, rec_skey: np.ndarray, t_rec: np.ndarray) -> np.ndarray:
    """Rule 1: per record, the row of the op it completes, or -1."""
    out = np.full(t_rec.size, -1, dtype=np.int64)
    rows = ops.by_launch
    ok = (rec_skey >= 0) & (t_rec != NO_TIME)
    if rows.size == 0 or not ok.any():
        return out
    g, t = ops.skey[rows], ops.launch[rows]
    q = np.flatnonzero(ok)
    pos = search_in_groups(g, t, rec_skey[q], t_rec[q], "left") - 1  # last launch < t_rec; ties: larger corr
    hit = (pos >= 0) & (g[np.maximum(pos, 0)] == rec_skey[q])
    out[q[hit]] = rows[pos[hit]]
    return out


@dataclass(frozen=True)
class EventIndex:
    """A trace's event records, sorted for rule 2: per (process, event id), by time then correlationId,
    with the op each record completes (rule 1)."""

    keys: pl.DataFrame  # pid, event_id, ek: one row per (process, event id) recorded
    ek: np.ndarray  # per sorted record
    t_rec: np.ndarray
    completes: np.ndarray

    @staticmethod
    def of(trace: Trace, ops: GpuOps, runtime: pl.DataFrame | None = None) -> EventIndex:
        """The index of *trace*'s records against *ops* (*runtime*: as in ``gpu_ops``)."""
        records = trace.event_records_given(runtime).filter(pl.col("event_id").is_not_null())
        records = records.with_columns(pl.col("pid").fill_null(-1))
        t_rec = _launches(trace, records, runtime)
        completes = completed_ops(ops, _stream_keys(ops, records), t_rec)
        keys = records.select("pid", "event_id").unique(maintain_order=True).with_row_index("ek")
        ek = records.join(keys, on=["pid", "event_id"], how="left", maintain_order="left")["ek"].to_numpy()
        rows = np.flatnonzero(t_rec != NO_TIME)
        corr = records["correlation_id"].fill_null(-1).to_numpy()[rows]
        rows = rows[np.lexsort((corr, t_rec[rows], ek[rows]))]
        return EventIndex(keys, ek[rows].astype(np.int64), t_rec[rows], completes[rows])

    def waited_op(self, rows: pl.DataFrame, t: np.ndarray) -> np.ndarray:
        """Rule 2 for each row (pid, event_id) at time *t*: the op that the record of that event with
        the latest time ``<= t`` (ties: the larger correlationId) completes, or -1."""
        out = np.full(t.size, -1, dtype=np.int64)
        if rows.height == 0 or self.ek.size == 0:
            return out
        q = rows.select(pl.col("pid").fill_null(-1), "event_id").join(
            self.keys, on=["pid", "event_id"], how="left", maintain_order="left"
        )
        qk = q["ek"].fill_null(-1).to_numpy().astype(np.int64)
        pos = search_in_groups(self.ek, self.t_rec, qk, t, "right") - 1
        hit = (qk >= 0) & (t != NO_TIME) & (pos >= 0) & (self.ek[np.maximum(pos, 0)] == qk)
        out[hit] = self.completes[pos[hit]]
        return out


def _runtime_rows(trace: Trace) -> pl.DataFrame | None:
    """``trace.runtime`` if the trace holds it, else the same rows read without keeping them."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return None
    return trace.runtime if "runtime" in trace.__dict__ else trace.read_runtime()


def dependencies(trace: Trace, ops: GpuOps | None = None) -> Dependencies:
    """Resolve every stream wait of *trace* to the op it waits for (rules 1 to 3)."""
    # the runtime rows (the biggest table) are read once for the ops' launch times, the records'
    # and the window's calls of the records and waits, and let go when this pass ends, unless
    # the trace keeps them already
    runtime = _runtime_rows(trace) if ops is None else None
    waits = trace.syncs_given(runtime).filter(pl.col("stream").is_not_null() & pl.col("event_id").is_not_null())
    if runtime is None and waits.height:
        runtime = _runtime_rows(trace)
    ops = gpu_ops(trace, runtime) if ops is None else ops
    empty = np.zeros(0, dtype=np.int64)
    if waits.height == 0:
        return Dependencies(ops, empty, empty, {})
    waits = waits.with_columns(pl.col("pid").fill_null(-1))
    events = EventIndex.of(trace, ops, runtime)
    del runtime
    t_w = waits["start"].fill_null(NO_TIME).to_numpy().astype(np.int64)
    blocker = events.waited_op(waits, t_w)  # rules 2 and 1
    resolved = blocker >= 0

    # rule 3: the first op on the waiting stream launched at or after the wait
    w_skey = _stream_keys(ops, waits)
    target = np.full(t_w.size, -1, dtype=np.int64)
    b_skey = ops.skey[np.maximum(blocker, 0)] if len(ops) else np.full(blocker.size, -1, dtype=np.int64)
    same_stream = resolved & (w_skey >= 0) & (b_skey == w_skey)
    ask = np.flatnonzero(resolved & ~same_stream & (w_skey >= 0))
    rows = ops.by_launch
    if ask.size and rows.size:
        g, t = ops.skey[rows], ops.launch[rows]
        p = search_in_groups(g, t, w_skey[ask], t_w[ask], "left")
        hit = (p < rows.size) & (g[np.minimum(p, rows.size - 1)] == w_skey[ask])
        target[ask[hit]] = rows[p[hit]]
    applied = target >= 0

    w_dev = waits["device"].fill_null(-1).to_numpy()
    counts: dict[int, dict[str, int]] = {}
    for dev in np.unique(w_dev):
        on = w_dev == dev
        n_res = int((resolved & on).sum())
        counts[int(dev)] = {"total": int(on.sum()), "resolved": n_res, "unresolved": int(on.sum()) - n_res}
    return Dependencies(ops, target[applied], blocker[applied], counts, events)


def segmented_cummax(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum of *values* restarting where the (non-decreasing) segment id *seg* changes."""
    if values.size == 0:
        return values.copy()
    # each segment's values lifted above every earlier segment's: one running maximum, no sort
    # (NO_TIME, far below every time, stands in just below the smallest other value)
    empty = values == NO_TIME
    hi = int(values.max())
    if hi == NO_TIME:  # nothing but NO_TIME
        return values.copy()
    lo = int(np.min(values, where=~empty, initial=hi))
    span = hi - lo + 2
    if (int(seg[-1]) + 1) * span < 1 << 62:
        # in place: one array lifted, accumulated and brought back
        off = seg.astype(np.int64)
        off *= span
        out = values - lo
        out[empty] = -1
        out += off
        np.maximum.accumulate(out, out=out)
        out -= off
        del off
        none = out < 0
        out += lo
        out[none] = NO_TIME
        return out
    uniq, rank = np.unique(values, return_inverse=True)
    n = np.int64(uniq.size)
    code = seg.astype(np.int64) * n + rank
    return uniq[np.maximum.accumulate(code) - seg.astype(np.int64) * n]
