"""What-if: the recorded timeline replayed with every h2d/d2h copy's duration scaled.

METRICS.md, "What-if: another host link": every ``h2d``/``d2h`` copy lasts
``round(F * duration)``; each valid op keeps its stream, its launch time and
its blockers (the stream waits of "Stalls", on any device).  From the
recorded trace, ``M = max(end of the op before it on its stream, its launch
time, its blockers' ends)`` and ``slack = start - M`` (negative under clock
skew); replayed, the op starts at ``M' + slack``, ``M'`` being the same
maximum over replayed ends, but never before ``e'_prev + min(0, start - e_prev)``
(``e_prev``: the end of the op before it on its stream, recorded; ``e'_prev``
replayed): one op at a time per stream, and where the recording had two
overlap (clock skew, a CUDA graph's nodes on one stream) no more than they did
(``profiler.analysis.replay_rules``, rule 1).  It lasts its (scaled) duration.
An op with none of the three inputs, or on a cycle of dependencies (only skewed
traces have them), keeps its recorded start.

How it is computed.  A stream's ops are cut into *segments*, each starting
at an op that waits for another stream (or at the stream's first op).
Inside a segment only the head has inputs from elsewhere, and the replayed
ends follow ``e'_j = max(e'_{j-1} + g_j, L_j + slack_j) + d_j`` with
``g_j = max(slack_j, min(0, start_j - e_{j-1}))``, that is
``e'_j = max(e'_{j-1}, L_j + slack_j - g_j) + a_j`` (``a_j = g_j + d_j``), which
unrolls to ``e'_j = max(e'_head, C_j) + P_j`` with ``P`` a running sum of ``a``
and ``C`` a running maximum of ``L_k + slack_k - g_k - P_{k-1}``: both are
computed for every op at once.  Only the heads are then visited, one per
segment in dependency order (a loop over segments, not over ops).  Segments
caught in a cycle are resolved op by op: ops on the cycle keep their recorded
start, the rest follow in dependency order.

A ``Change`` (METRICS.md "Savings") changes one cause and nothing else: some
ops' durations (never longer), copies removed (zero duration, and no op waits
for them), waits dropped, blocking calls
that no longer block their thread, copies moved to a stream of their own.  The
slack of every op is still measured on the recorded graph: an op freed from an
input starts its own slack after the inputs it keeps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from profiler.analysis.dependencies import (
    D2H,
    H2D,
    NO_TIME,
    Dependencies,
    GpuOps,
    search_in_groups,
    segmented_cummax,
)
from profiler.analysis.hostsync import HostSyncs


def _rows() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Change:
    """One cause changed in the replay (rows are rows of ``deps.ops``; calls index ``HostSyncs``).

    - ``durations``: (rows, new durations): those ops last at most that long;
    - ``removed``: copies removed: zero duration, and no op waits for them;
    - ``unwaited``: no op waits for these ops any more (their waits are dropped);
    - ``detached``: blocking calls whose thread no longer waits (they return when they begin);
    - ``own_stream``: ops moved to a stream of their own: the ops after them on their stream no
      longer wait for them (each still follows the op before it, whose output it copies).
    """

    what: str = "nothing"
    durations: tuple[np.ndarray, np.ndarray] | None = None
    removed: np.ndarray = field(default_factory=_rows)
    unwaited: np.ndarray = field(default_factory=_rows)
    detached: np.ndarray = field(default_factory=_rows)
    own_stream: np.ndarray = field(default_factory=_rows)

    @property
    def empty(self) -> bool:
        sizes = [self.removed.size, self.unwaited.size, self.detached.size, self.own_stream.size]
        return not any(sizes) and (self.durations is None or self.durations[0].size == 0)

    def edges_kept(self, tgt: np.ndarray, blk: np.ndarray, n: int) -> np.ndarray:
        """Per applied wait (target, blocker): whether the change keeps it."""
        keep = np.ones(tgt.size, dtype=bool)
        if self.removed.size or self.unwaited.size:
            gone = np.zeros(n, dtype=bool)
            gone[self.removed] = True
            gone[self.unwaited] = True
            keep &= ~gone[blk]
        return keep

    def new_prev(self, ops: GpuOps) -> np.ndarray:
        """The op before each op on its stream once ``own_stream`` ops have a stream of their own:
        the ops that stay skip the moved ones (they follow the op that stays before them); a moved
        op still follows the op before it, whose output it copies."""
        prev = ops.prev.astype(np.int64)
        if self.own_stream.size == 0:
            return prev
        n = len(ops)
        moved = np.zeros(n, dtype=bool)
        moved[self.own_stream] = True
        rows = np.arange(n, dtype=np.int64)
        first = prev < 0  # rows are in stream order: a stream starts where an op has no op before it
        seg = np.cumsum(first) - 1
        # per row, the last staying row at or before it on its stream (-1: none)
        last = np.maximum.accumulate(np.where(moved, -1, rows))
        last = np.where(last >= np.flatnonzero(first)[seg], last, -1)  # not from the stream before
        before = np.r_[-1, last[:-1]]
        before = np.where(first, -1, before)
        return np.where(moved, prev, before)


NO_CHANGE = Change()


@dataclass(frozen=True)
class Replay:
    """Replayed start and end of every op of ``deps.ops`` (same rows); with host synchronization
    modeled, the blocking calls, how far each one's return moved, and the replayed launch times."""

    deps: Dependencies
    factor: float
    start: np.ndarray
    end: np.ndarray
    kept: np.ndarray  # ops that kept their recorded start (no inputs, or on a cycle)
    host: HostSyncs | None = None
    shift: np.ndarray | None = None  # per blocking call of ``host``
    launch: np.ndarray | None = None  # replayed launch times (``NO_TIME`` stays so)
    host_sync_modeled: bool = False  # asked for, and not given up for a dependency cycle
    touched: np.ndarray | None = None  # when known: the only ops whose end differs from the recorded one

    def shift_at(self, gtid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """How far the host work of thread *gtid* at recorded time *t* moves (0 without host modeling)."""
        out = np.zeros(t.size, dtype=np.int64)
        if self.host is None or self.shift is None or len(self.host) == 0:
            return out
        threads, hkey = np.unique(self.host.gtid, return_inverse=True)
        okey = np.searchsorted(threads, gtid)
        ok = (okey < threads.size) & (threads[np.minimum(okey, threads.size - 1)] == gtid)
        rows = np.flatnonzero(ok)
        pos = search_in_groups(hkey.astype(np.int64), self.host.returned, okey[rows], t[rows], "right") - 1
        hit = (pos >= 0) & (hkey[np.maximum(pos, 0)] == okey[rows])
        out[rows[hit]] = self.shift[pos[hit]]
        return out


def stream_floor(deps: Dependencies, prev: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """Per op, the least it starts after the replayed end of the op before it on its stream (*prev*):
    ``max(slack, min(0, start - e_prev))`` with recorded times (``slack`` where no op is before it)."""
    ops = deps.ops
    has = prev >= 0
    gap = ops.start - np.where(has, ops.end[np.maximum(prev, 0)], ops.start)
    return np.where(has, np.maximum(slack, np.minimum(0, gap)), slack)


def scaled_durations(deps: Dependencies, factor: float) -> np.ndarray:
    """Every op's duration, h2d/d2h copies' multiplied by *factor* and rounded to the nearest ns
    (halves up)."""
    ops = deps.ops
    dur = ops.end - ops.start
    copy = (ops.kind == H2D) | (ops.kind == D2H)
    if factor != 1.0:
        dur = dur.copy()
        dur[copy] = np.floor(dur[copy].astype(np.float64) * factor + 0.5).astype(np.int64)
    return dur


@dataclass(frozen=True)
class Recorded:
    """What every replay of one trace shares (the recorded graph): each op's slack, whether it had
    blockers, its launch epoch under *host* (see ``launch_epochs``) and its ``stream_floor`` on the
    recorded streams."""

    slack: np.ndarray
    had_blockers: np.ndarray
    epoch: np.ndarray
    host: HostSyncs | None
    floor: np.ndarray

    @staticmethod
    def of(deps: Dependencies, host: HostSyncs | None) -> Recorded:
        ops = deps.ops
        n = len(ops)
        launch, prev_rec = ops.launch, ops.prev
        tgt, blk = deps.blockers_of
        block_rec = np.full(n, NO_TIME, dtype=np.int64)
        if tgt.size:  # targets are sorted: one reduceat per run of equal targets
            first = np.flatnonzero(np.r_[True, tgt[1:] != tgt[:-1]])
            block_rec[tgt[first]] = np.maximum.reduceat(ops.end[blk], first)
        had_blockers = np.zeros(n, dtype=bool)
        had_blockers[tgt] = True
        prev_end = np.where(prev_rec >= 0, ops.end[np.maximum(prev_rec, 0)], NO_TIME)
        m_rec = np.maximum(np.maximum(prev_end, launch), block_rec)
        no_input_rec = (prev_rec < 0) & (launch == NO_TIME) & ~had_blockers
        slack = np.where(no_input_rec, 0, ops.start - m_rec)
        host = host if host is not None and len(host) else None
        return Recorded(slack, had_blockers, launch_epochs(ops, host), host, stream_floor(deps, prev_rec, slack))


def replay(
    deps: Dependencies,
    factor: float = 1.0,
    host: HostSyncs | None = None,
    change: Change = NO_CHANGE,
    recorded: Recorded | None = None,
) -> Replay:
    """The what-if timeline for copy durations scaled by *factor* (1.0 reproduces the trace), with
    *change* applied on top (see ``Change``).

    With *host* (``hostsync.host_syncs``), host synchronization is modeled: a
    call that blocked its thread returns ``lag`` after the replayed end of what it
    waited for (or at once, when that is done before the replayed call), and
    every later call of that thread, launches included, moves by as much as that
    call's return moved.  *recorded*: ``Recorded.of(deps, host)``, when several replays share it.
    """
    if not np.isfinite(factor) or factor < 0:
        raise ValueError(f"the copy scale must be a finite number >= 0, got {factor}")
    ops = deps.ops
    n = len(ops)
    d_new = scaled_durations(deps, factor)
    if change.durations is not None and change.durations[0].size:
        rows, new = change.durations
        d_new[rows] = np.minimum(d_new[rows], np.maximum(new, 0))
    if change.removed.size:
        d_new[change.removed] = 0
    modeled = host is not None
    host = host if host is not None and len(host) else None
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Replay(deps, factor, z, z, np.zeros(0, dtype=bool), host_sync_modeled=modeled)
    if recorded is None or recorded.host is not host:
        recorded = Recorded.of(deps, host)
    launch = ops.launch
    # the recorded graph: slack (start - M); the changed graph: its waits and streams
    slack = recorded.slack
    tgt, blk = deps.blockers_of
    has_blockers = recorded.had_blockers
    if not change.empty:
        keep = change.edges_kept(tgt, blk, n)
        if not keep.all():
            tgt, blk = tgt[keep], blk[keep]
            has_blockers = np.zeros(n, dtype=bool)
            has_blockers[tgt] = True
    prev = change.new_prev(ops) if change.own_stream.size else ops.prev
    no_input = (prev < 0) & (launch == NO_TIME) & ~has_blockers
    detached = np.zeros(len(host) if host is not None else 0, dtype=bool)
    if host is not None and change.detached.size:
        detached[change.detached] = True

    # host epochs: the last blocking call of the launching thread that returned before the launch
    epoch = recorded.epoch
    # segments: a new one at each stream's first op, at each op that waits for another stream, and
    # where the launching thread's epoch changes (inside a segment every launch moves alike)
    head = (prev < 0) | has_blockers | (epoch != epoch[np.maximum(prev, 0)])
    if change.own_stream.size:  # a segment's ops follow each other row by row: where not, a new one
        head |= prev != np.arange(-1, n - 1)
    seg = np.cumsum(head) - 1
    heads = np.flatnonzero(head)
    g = recorded.floor if prev is ops.prev else stream_floor(deps, prev, slack)
    a = g + d_new
    a_in = np.where(head, 0, a)
    csum = np.cumsum(a_in)
    p = csum - csum[heads][seg]  # P_j: sum of a over the segment's ops after the head, up to j
    p_before = p - a_in  # P_{j-1}
    term = np.where(head | (launch == NO_TIME), NO_TIME, launch + slack - g - p_before)
    c = segmented_cummax(term, seg)
    del head, a, a_in, csum, p_before, term  # not read below: freed before the loop's lists are made

    n_seg = heads.size
    n_sync = len(host) if host is not None else 0
    seg_epoch = epoch[heads]
    head_end = np.full(n_seg, NO_TIME, dtype=np.int64)
    shift = np.zeros(n_sync + 1, dtype=np.int64)  # per blocking call; the last entry: no call (0)
    done = np.zeros(n_seg + n_sync, dtype=bool)
    head_prev = prev[heads]
    seg_prev = np.where(head_prev >= 0, seg[np.maximum(head_prev, 0)], -1)
    starts_of = np.searchsorted(tgt, heads, side="left")
    stops_of = np.searchsorted(tgt, heads, side="right")
    order = _node_order(seg_prev, seg, tgt, blk, n_seg, seg_epoch, host, detached)

    # visit the nodes in dependency order (plain Python ints: a scalar loop over segments and calls).
    # The replayed end of op r is max(head_end[seg[r]], c[r] + shift[epoch of seg[r]]) + p[r]; the
    # ops it is asked for (the op before each head, each wait's blocker, each blocked call's op)
    # are gathered once: (segment, c, p, epoch) per head, per wait and per call.
    def gathered(rows: np.ndarray) -> tuple[list[int], list[int], list[int], list[int]]:
        s_ = seg[rows]
        return s_.tolist(), c[rows].tolist(), p[rows].tolist(), seg_epoch[s_].tolist()

    pr_seg, pr_c, pr_p, pr_e = gathered(np.maximum(head_prev, 0))
    has_prev_l = (head_prev >= 0).tolist()
    b_seg, b_c, b_p, b_e = gathered(blk)
    h_rows = heads
    hl_l = launch[h_rows].tolist()
    no_in_l = no_input[h_rows].tolist()
    add_l = (slack[h_rows] + d_new[h_rows]).tolist()  # a head ends its slack and duration after M
    add_prev_l = (g[h_rows] + d_new[h_rows]).tolist()  # ... and at least this after the op before it
    kept_end_l = (ops.start[h_rows] + d_new[h_rows]).tolist()  # a head with no input keeps its start
    lo_l, hi_l = starts_of.tolist(), stops_of.tolist()
    seg_epoch_l = seg_epoch.tolist()
    head_end_l = head_end.tolist()
    shift_l = shift.tolist()
    if host is not None:
        h_start, h_end = host.start.tolist(), host.end.tolist()
        h_lag, h_blocked = host.lag.tolist(), (host.blocked & ~detached).tolist()
        h_detached = detached.tolist()
        h_prev = previous_call(host).tolist()
        w_seg, w_c, w_p, w_e = gathered(np.maximum(host.waited, 0))
    for node in order.tolist():
        if node >= n_seg:  # a blocking call
            k = node - n_seg
            began = h_start[k] + shift_l[h_prev[k]]
            if h_detached[k]:
                back = began  # the thread does not wait: the call returns as it begins
            elif h_blocked[k]:
                s_ = w_seg[k]
                w_end = max(head_end_l[s_], w_c[k] + shift_l[w_e[k]]) + w_p[k]
                back = max(began, w_end + h_lag[k])
            else:
                back = began + h_end[k] - h_start[k]
            shift_l[k] = back - h_end[k]
            continue
        if no_in_l[node]:
            head_end_l[node] = kept_end_l[node]
        else:
            m = hl_l[node] + shift_l[seg_epoch_l[node]]
            for j in range(lo_l[node], hi_l[node]):
                s_ = b_seg[j]
                m = max(m, max(head_end_l[s_], b_c[j] + shift_l[b_e[j]]) + b_p[j])
            e = m + add_l[node]
            if has_prev_l[node]:
                s_ = pr_seg[node]
                e = max(e, max(head_end_l[s_], pr_c[node] + shift_l[pr_e[node]]) + pr_p[node] + add_prev_l[node])
            head_end_l[node] = e
    done[order] = True

    head_end = np.array(head_end_l, dtype=np.int64)
    shift = np.array(shift_l, dtype=np.int64)
    if not done.all():
        if host is not None:  # a cycle (clock skew): replay without moving host calls
            return replay(deps, factor, None, change)
        end = np.maximum(head_end[seg], c) + p
        start = end - d_new
        kept = no_input.copy()
        stuck = np.flatnonzero(~done[seg])
        _resolve_cycles(deps, prev, tgt, blk, stuck, start, end, d_new, slack, g, no_input, kept)
        return Replay(deps, factor, start, end, kept)
    end = np.maximum(head_end[seg], c + shift[seg_epoch[seg]]) + p
    start = end - d_new
    return Replay(
        deps,
        factor,
        start,
        end,
        no_input.copy(),
        host,
        shift[:n_sync],
        launch + shift[epoch],
        host_sync_modeled=modeled,
    )


def launch_epochs(ops: GpuOps, host: HostSyncs | None) -> np.ndarray:
    """Per op, the index of the last blocking call of its launching thread that returned at or before
    its launch; -1 (the extra, zero entry of the shifts) where none."""
    epoch = np.full(len(ops), -1, dtype=np.int64)
    if host is None:
        return epoch
    threads, hkey = np.unique(host.gtid, return_inverse=True)
    okey = np.searchsorted(threads, ops.gtid)
    ok = (okey < threads.size) & (ops.launch != NO_TIME)
    ok &= threads[np.minimum(okey, threads.size - 1)] == ops.gtid
    rows = np.flatnonzero(ok)
    pos = search_in_groups(hkey.astype(np.int64), host.returned, okey[rows], ops.launch[rows], "right") - 1
    hit = (pos >= 0) & (hkey[np.maximum(pos, 0)] == okey[rows])
    epoch[rows[hit]] = pos[hit]
    return epoch


def previous_call(host: HostSyncs) -> np.ndarray:
    """Per blocking call, the one before it on its thread, or -1."""
    prev = np.arange(len(host), dtype=np.int64) - 1
    if len(host):
        prev[np.r_[True, host.gtid[1:] != host.gtid[:-1]]] = -1
    return prev


def _node_order(
    seg_prev: np.ndarray,
    seg: np.ndarray,
    tgt: np.ndarray,
    blk: np.ndarray,
    n_seg: int,
    seg_epoch: np.ndarray,
    host: HostSyncs | None,
    detached: np.ndarray | None = None,
) -> np.ndarray:
    """Segments (ids below n_seg) and blocking calls (n_seg + k) in dependency order (Kahn's
    algorithm); nodes on or behind a cycle are left out."""
    has_prev = seg_prev >= 0
    froms = [seg_prev[has_prev], seg[blk]]
    tos = [np.flatnonzero(has_prev), seg[tgt]]
    n = n_seg
    if host is not None:
        n += len(host)
        by_call = np.flatnonzero(seg_epoch >= 0)
        froms.append(n_seg + seg_epoch[by_call])  # a call's return moves the launches after it
        tos.append(by_call)
        prev_call = previous_call(host)
        k = np.flatnonzero(prev_call >= 0)
        froms.append(n_seg + prev_call[k])
        tos.append(n_seg + k)
        blocked = host.blocked if detached is None or detached.size == 0 else host.blocked & ~detached
        k = np.flatnonzero(blocked)
        froms.append(seg[host.waited[k]])  # a blocked call waits for the segment of its op
        tos.append(n_seg + k)
    edges_from, edges_to = np.concatenate(froms), np.concatenate(tos)
    indeg = np.bincount(edges_to, minlength=n)
    order_e = np.argsort(edges_from, kind="stable")
    e_to = edges_to[order_e]
    first = np.searchsorted(edges_from[order_e], np.arange(n + 1))
    first_l, to_l, indeg_l = first.tolist(), e_to.tolist(), indeg.tolist()
    queue = deque(np.flatnonzero(indeg == 0).tolist())
    out: list[int] = []
    while queue:
        s = queue.popleft()
        out.append(s)
        for j in range(first_l[s], first_l[s + 1]):
            t = to_l[j]
            indeg_l[t] -= 1
            if indeg_l[t] == 0:
                queue.append(t)
    return np.array(out, dtype=np.int64)


def _resolve_cycles(
    deps: Dependencies,
    prev: np.ndarray,
    tgt: np.ndarray,
    blk: np.ndarray,
    stuck: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    d_new: np.ndarray,
    slack: np.ndarray,
    floor: np.ndarray,
    no_input: np.ndarray,
    kept: np.ndarray,
) -> None:
    """Ops whose segments wait on a cycle, op by op: ops on a cycle keep their recorded start,
    the others follow in dependency order.  Writes into *start*, *end* and *kept*."""
    ops = deps.ops
    stuck_set = set(stuck.tolist())
    inputs: dict[int, list[int]] = {i: [] for i in stuck_set}
    for i in stuck_set:
        if prev[i] >= 0:
            inputs[i].append(int(prev[i]))
    for t, b in zip(tgt.tolist(), blk.tolist(), strict=True):
        if t in stuck_set:
            inputs[t].append(b)
    on_cycle = _on_cycle({i: [j for j in js if j in stuck_set] for i, js in inputs.items()})
    ready = {i: False for i in stuck_set}
    for i in on_cycle:
        start[i] = ops.start[i]
        end[i] = ops.start[i] + d_new[i]
        kept[i] = True
        ready[i] = True
    # the rest in dependency order (inputs outside the stuck set are final already)
    waiting = {i: [j for j in inputs[i] if j in stuck_set and not ready[j]] for i in stuck_set if not ready[i]}
    users: dict[int, list[int]] = {}
    for i, js in waiting.items():
        for j in js:
            users.setdefault(j, []).append(i)
    count = {i: len(js) for i, js in waiting.items()}
    queue = deque(i for i, k in count.items() if k == 0)
    while queue:
        i = queue.popleft()
        if no_input[i]:
            start[i] = ops.start[i]
        else:
            m = int(ops.launch[i])
            for j in inputs[i]:
                if j != prev[i]:
                    m = max(m, int(end[j]))
            start[i] = m + slack[i]
            if prev[i] >= 0:
                start[i] = max(start[i], int(end[prev[i]]) + floor[i])
        end[i] = start[i] + d_new[i]
        for u in users.get(i, []):
            count[u] -= 1
            if count[u] == 0:
                queue.append(u)
    assert all(k == 0 for k in count.values()), "replay: a dependency cycle was not broken"


def _on_cycle(graph: dict[int, list[int]]) -> set[int]:
    """Nodes of *graph* (node -> the nodes it depends on) that lie on a cycle: members of
    strongly connected components with more than one node (Tarjan's algorithm, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: set[int] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            succ = graph.get(v, [])
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.update(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out
