"""The what-if replay of a change, propagated in waves from the recorded timeline.

The recorded timeline is the replay with nothing changed (every op's slack is measured on it, so
it satisfies the replay's rule; a blocking call returns as recorded).  A change only shortens ops,
drops inputs or lets calls return sooner, so every replayed time is at most the recorded one.  On
a trace whose dependencies all run forward in recorded time (no cycle can form), the change is
propagated from the ops and calls it touches, in waves: each wave recomputes, at once, the ops and
calls whose inputs moved, until nothing moves (the unique solution of the replay's rule on a graph
without cycles).  Where the change dies out quickly (a GPU waiting for its host's launches) that
costs a few array passes; where it does not within ``MAX_WAVES`` waves, or reaches more than a
quarter of the ops (``WAVE_WORK``), ``Waves.replay`` says so (None) and the scalar replay
(``replay.replay``) gives the answer.
"""

from __future__ import annotations

import numpy as np

from profiler.analysis.dependencies import NO_TIME, Dependencies, index_dtype
from profiler.analysis.hostsync import HostSyncs
from profiler.analysis.replay import Change, Recorded, Replay, previous_call, scaled_durations, stream_floor

MAX_WAVES = 64
# the most ops the waves recompute in all, as a share of the ops (and at least WAVE_WORK_MIN): a
# change that reaches more spreads through the trace (a GPU that runs behind its host carries
# every change to its end), where one scalar pass over the segments costs less
WAVE_WORK, WAVE_WORK_MIN = 0.25, 10_000


class Waves:
    """The recorded replay graph of a run, for propagating a change in waves (see the module)."""

    def __init__(self, deps: Dependencies, host: HostSyncs | None, recorded: Recorded | None = None) -> None:
        ops = deps.ops
        n = len(ops)
        self.deps, self.n = deps, n
        self.host = host if host is not None and len(host) else None
        self.modeled = host is not None
        if recorded is None or recorded.host is not self.host:
            recorded = Recorded.of(deps, self.host)
        self.dur = scaled_durations(deps, 1.0)
        self.prev = ops.prev
        self.tgt, self.blk = (a.astype(np.int64) for a in deps.blockers_of)
        by_blk = np.argsort(self.blk, kind="stable")
        self.edge_by_blk = by_blk
        # per op, its waits as a slice of the edges (by target), and the edges it blocks (by blocker)
        self.in_lo, self.in_hi = _slices(self.tgt, n)
        self.out_lo, self.out_hi = _slices(self.blk[by_blk], n)
        had = recorded.had_blockers
        self.slack = recorded.slack
        self.floor = recorded.floor
        self.epoch = recorded.epoch.astype(index_dtype(len(self.host) + 1 if self.host else 1))
        self.children = _children(self.prev)
        self.no_input = (self.prev < 0) & (ops.launch == NO_TIME) & ~had
        if self.host is not None:
            h = self.host
            self.h_prev = previous_call(h)
            self.h_next = np.full(len(h), -1, dtype=np.int64)
            has = self.h_prev >= 0
            self.h_next[self.h_prev[has]] = np.flatnonzero(has)
            on = np.flatnonzero(self.epoch >= 0)
            order = on[np.argsort(self.epoch[on], kind="stable")]
            self.ops_by_epoch, self.epoch_sorted = order, self.epoch[order]
            waits = np.flatnonzero(h.blocked & (h.waited >= 0))
            order = waits[np.argsort(h.waited[waits], kind="stable")]
            self.calls_by_waited, self.waited_sorted = order, h.waited[order]

    @staticmethod
    def of(deps: Dependencies, host: HostSyncs | None, recorded: Recorded | None = None) -> Waves | None:
        """The graph, or None when some dependency does not run forward in recorded time (a cycle
        could form: the scalar replay resolves it)."""
        g = Waves(deps, host, recorded)
        ops = deps.ops
        has = np.flatnonzero(g.prev >= 0)
        if not _forward(ops.start, g.prev[has], has):
            return None
        if not _forward(ops.start, g.blk, g.tgt):
            return None
        h = g.host
        if h is not None:
            returned = h.returned
            w = np.flatnonzero(h.blocked & (h.waited >= 0))
            if not (ops.start[h.waited[w]] < returned[w]).all():
                return None
            on = g.epoch >= 0
            if not (returned[g.epoch[on]] < ops.start[on]).all():
                return None
        return g

    def replay(self, change: Change) -> Replay | None:
        """The replay with *change*, propagated in waves; None when it has not settled after
        ``MAX_WAVES`` waves, or when a new stream edge runs backward in time."""
        ops, n = self.deps.ops, self.n
        dur = self.dur.copy()
        dirty = [np.zeros(0, dtype=np.int64)]
        if change.durations is not None and change.durations[0].size:
            rows, new = change.durations
            dur[rows] = np.minimum(dur[rows], np.maximum(new, 0))
            dirty.append(rows)
        if change.removed.size:
            dur[change.removed] = 0
            dirty.append(change.removed)
        keep = change.edges_kept(self.tgt, self.blk, n) if not change.empty else np.ones(self.tgt.size, dtype=bool)
        dirty.append(self.tgt[~keep])
        prev, children, no_input, floor = self.prev, self.children, self.no_input, self.floor
        if change.own_stream.size:
            prev = change.new_prev(ops)
            floor = stream_floor(self.deps, prev, self.slack)
            moved = np.flatnonzero(prev != self.prev)
            has = prev[moved] >= 0
            if not _forward(ops.start, prev[moved[has]], moved[has]):
                return None
            dirty.append(moved)
            children = _children(prev)
        if change.own_stream.size:
            has_in = np.zeros(n, dtype=bool)
            has_in[self.tgt[keep]] = True
            no_input = (prev < 0) & (ops.launch == NO_TIME) & ~has_in
        elif not keep.all():  # the targets of dropped waits with no wait left, no op before, no launch
            lost = np.unique(self.tgt[~keep])
            kept = np.r_[0, np.cumsum(keep)]
            alone = lost[(kept[self.in_hi[lost]] == kept[self.in_lo[lost]]) & (prev[lost] < 0)]
            alone = alone[ops.launch[alone] == NO_TIME]
            if alone.size:
                no_input = no_input.copy()
                no_input[alone] = True
        end = ops.end.copy()
        h = self.host
        n_calls = len(h) if h is not None else 0
        shift = np.zeros(n_calls + 1, dtype=np.int64)
        detached = np.zeros(n_calls, dtype=bool)
        calls = np.zeros(0, dtype=np.int64)
        if h is not None and change.detached.size:
            detached[change.detached] = True
            calls = np.unique(change.detached)
        todo = _distinct(np.concatenate(dirty), n)
        touched = []
        work, budget = 0, max(self.n * WAVE_WORK, WAVE_WORK_MIN)
        for _ in range(MAX_WAVES):
            if todo.size == 0 and calls.size == 0:
                break
            moved_calls = np.zeros(0, dtype=np.int64)
            if calls.size:
                moved_calls = self._calls(calls, end, shift, detached)
            changed = np.zeros(0, dtype=np.int64)
            if moved_calls.size:  # their epochs' launches move
                lo = np.searchsorted(self.epoch_sorted, moved_calls, side="left")
                hi = np.searchsorted(self.epoch_sorted, moved_calls, side="right")
                todo = _distinct(np.r_[todo, self.ops_by_epoch[_ranges(lo, hi)]], n)
            if todo.size:
                work += todo.size
                if work > budget:  # the change spreads: the scalar replay is cheaper
                    return None
                new = self._ends(todo, prev, floor, keep, no_input, dur, end, shift)
                hit = new != end[todo]
                changed = todo[hit]
                end[changed] = new[hit]
                touched.append(changed)
            order, lo, hi = children
            nxt_ops = [order[_ranges(lo[changed], hi[changed])]]
            if changed.size:
                e = self.edge_by_blk[_ranges(self.out_lo[changed], self.out_hi[changed])]
                nxt_ops.append(self.tgt[e[keep[e]]])
            todo = _distinct(np.concatenate(nxt_ops), n)
            calls = np.zeros(0, dtype=np.int64)
            if h is not None:
                parts = [self.h_next[moved_calls][self.h_next[moved_calls] >= 0]]
                if changed.size:
                    lo = np.searchsorted(self.waited_sorted, changed, side="left")
                    hi = np.searchsorted(self.waited_sorted, changed, side="right")
                    parts.append(self.calls_by_waited[_ranges(lo, hi)])
                calls = np.unique(np.concatenate(parts))
        else:
            return None
        start = end - dur
        return Replay(
            self.deps,
            1.0,
            start,
            end,
            no_input,
            h,
            shift[:n_calls] if h is not None else None,
            ops.launch + shift[self.epoch] if h is not None else None,
            host_sync_modeled=self.modeled,
            touched=np.concatenate(touched) if touched else np.zeros(0, dtype=np.int64),
        )

    def _ends(
        self,
        rows: np.ndarray,
        prev: np.ndarray,
        floor: np.ndarray,
        keep: np.ndarray,
        no_input: np.ndarray,
        dur: np.ndarray,
        end: np.ndarray,
        shift: np.ndarray,
    ) -> np.ndarray:
        """The replay's rule for *rows*, from the current ends and shifts."""
        ops = self.deps.ops
        p = prev[rows]
        launch = ops.launch[rows]
        m = np.where(launch != NO_TIME, launch + shift[self.epoch[rows]], NO_TIME)
        lo, hi = self.in_lo[rows], self.in_hi[rows]
        some = np.flatnonzero(hi > lo)
        if some.size:
            e = _ranges(lo[some], hi[some])
            vals = np.where(keep[e], end[self.blk[e]], NO_TIME)
            first = np.r_[0, np.cumsum(hi[some] - lo[some])[:-1]]
            m[some] = np.maximum(m[some], np.maximum.reduceat(vals, first))
        # after its launch and blockers by its slack, after the op before it on its stream by its floor
        s = np.maximum(m + self.slack[rows], np.where(p >= 0, end[np.maximum(p, 0)] + floor[rows], NO_TIME))
        return np.where(no_input[rows], ops.start[rows] + dur[rows], s + dur[rows])

    def _calls(self, calls: np.ndarray, end: np.ndarray, shift: np.ndarray, detached: np.ndarray) -> np.ndarray:
        """Recompute the blocking calls *calls* (the host rule of ``replay.replay``); the calls whose
        return moved."""
        h = self.host
        assert h is not None
        began = h.start[calls] + shift[self.h_prev[calls]]
        w = h.waited[calls]
        blocked = h.blocked[calls] & ~detached[calls]
        back = np.where(
            detached[calls],
            began,
            np.where(
                blocked, np.maximum(began, end[np.maximum(w, 0)] + h.lag[calls]), began + h.end[calls] - h.start[calls]
            ),
        )
        new = back - h.end[calls]
        hit = new != shift[calls]
        shift[calls[hit]] = new[hit]
        return calls[hit]


def _children(prev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ops that follow each op on its stream (several once some moved to a stream of their
    own): (rows by the op they follow, and per op its slice of them)."""
    rows = np.flatnonzero(prev >= 0)
    p = prev[rows]
    order = rows if p.size < 2 or bool((p[1:] >= p[:-1]).all()) else rows[np.argsort(p, kind="stable")]
    order = order.astype(index_dtype(prev.size), copy=False)
    lo, hi = _slices(prev[order], prev.size)
    return order, lo, hi


def _slices(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """For sorted *keys* in ``[0, n)``: per value, the slice of *keys* that holds it."""
    count = np.bincount(keys, minlength=n)
    hi = np.cumsum(count).astype(index_dtype(keys.size + 1))
    return hi - count.astype(hi.dtype), hi


def _distinct(rows: np.ndarray, n: int) -> np.ndarray:
    """The distinct values of *rows* (each in ``[0, n)``), sorted: by a mask when there are many."""
    if rows.size * 16 < n:
        return np.unique(rows)
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return np.flatnonzero(mask)


def _forward(start: np.ndarray, u: np.ndarray, v: np.ndarray) -> bool:
    """Whether every edge u -> v runs forward in (recorded start, row): no cycle of such edges."""
    su, sv = start[u], start[v]
    return bool(((su < sv) | ((su == sv) & (u < v))).all())


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` over i."""
    n = hi - lo
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.repeat(lo - np.r_[0, np.cumsum(n)[:-1]], n)
    return first + np.arange(total, dtype=np.int64)
