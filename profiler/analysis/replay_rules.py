"""The rules both replays keep, and the checks of them (issue 42).

The project replays a step two ways: ``profiler.predict.simulate`` replays a compiled schedule
(ops by HLO instruction, costs by name: roofline, calibrated or measured) and
``profiler.analysis.replay`` a recorded trace (its GPU ops, their launches and waits: what-if and
savings).  They answer different questions and cannot share one engine (one places ops that have
no recorded time, the other moves recorded ops by their slack), but both keep these rules:

1. **One op at a time per stream.**  A replayed op starts no earlier than the replayed end of
   the op before it on its stream: the trace replay's streams are the recorded CUDA streams
   (where the recording itself had two ops of a stream overlap, from clock skew or a CUDA graph's
   nodes reported on its stream, they overlap by no more than recorded); the schedule replay's
   are its compute stream, one per direction of the host link, one for collectives and one for
   other async work.  So each stream's replayed extent is at least its *serial work* (the sum of
   its ops' replayed durations, less the overlaps its recording had), and the replayed step is at
   least every stream's.
2. **Every op placed, or listed unplaced with its time.**  The trace replay gives every valid op
   of the trace (METRICS.md: ``end >= start``) a replayed start and end, its duration apart.  The
   schedule replay runs every cost it is given on an op of the schedule, or lists it in
   ``Prediction.unplaced`` with its time and why (a name no op runs: a thunk that is no
   instruction, such as a command buffer's, an instruction of another module, an op beyond a
   schedule cut); so ``sum(placed) + sum(unplaced) = sum(given)`` per step.
3. **Loops costed as what they are.**  A ``while`` loop, a ``call`` (XLA's command buffers among
   them) or a ``conditional`` costs its body's ops times the trip count where the thunks inside it
   were timed (a measured time per step of a body's instruction is divided by the times the
   schedule runs it: ``schedule.Schedule.runs``), and its own measured span where they were not
   (the region is then one op on the compute stream); never 0 without a note.  The trace replay
   has no loops: the recording holds every trip's ops.

``check`` says how a replayed timeline breaks rule 1; the tests run it, with rules 2 and 3, over
random schedules and exports and over every archive, run folder and export they reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from profiler.analysis.dependencies import NO_TIME
from profiler.analysis.replay import NO_CHANGE, Change, Replay


@dataclass(frozen=True)
class Broken:
    """How a replayed timeline breaks rule 1: the rows that start too early, by how much, and per
    stream its serial work against its replayed extent."""

    rows: np.ndarray  # rows that start before the op before them on their stream ends (beyond the allowance)
    excess: np.ndarray  # by how much (ns), per row of ``rows``
    short: dict[int, tuple[int, int]]  # stream -> (serial work, replayed extent) where the extent is shorter
    missing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # rows not placed

    @property
    def ok(self) -> bool:
        return self.rows.size == 0 and not self.short and self.missing.size == 0


def prev_on_stream(stream: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """The row before each row on its stream, in *order* (rows in the order each stream runs them;
    default: as given), or -1."""
    n = stream.size
    order = np.arange(n) if order is None else order
    by = order[np.argsort(stream[order], kind="stable")]
    prev = np.full(n, -1, dtype=np.int64)
    same = stream[by[1:]] == stream[by[:-1]]
    prev[by[1:][same]] = by[:-1][same]
    return prev


def check(
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    prev: np.ndarray | None = None,
    allowed: np.ndarray | None = None,
) -> Broken:
    """Rule 1 on a replayed timeline: op rows with their *stream*, replayed *start* and *end*; *prev*:
    the row before each on its stream (default: by start, then row); *allowed*: per row how far it
    may start before that op's end (the overlap its recording had; default none)."""
    stream, start, end = (np.asarray(a, dtype=np.int64) for a in (stream, start, end))
    if prev is None:
        prev = prev_on_stream(stream, np.lexsort((np.arange(start.size), start)))
    allowed = np.zeros(start.size, dtype=np.int64) if allowed is None else np.asarray(allowed, dtype=np.int64)
    has = np.flatnonzero(prev >= 0)
    excess = end[prev[has]] - allowed[has] - start[has]
    bad = excess > 0
    dur = end - start
    short: dict[int, tuple[int, int]] = {}
    for s in np.unique(stream).tolist():
        rows = np.flatnonzero(stream == s)
        work = int(dur[rows].sum() - allowed[rows].sum())
        extent = int(end[rows].max() - start[rows].min())
        if extent < work:
            short[s] = (work, extent)
    return Broken(has[bad], excess[bad], short)


def recorded_overlap(start: np.ndarray, end: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Per op, how far it started before the end of the op before it on its stream as recorded
    (0 where it did not): the overlap rule 1 lets a trace replay keep."""
    has = prev >= 0
    return np.where(has, np.maximum(0, end[np.maximum(prev, 0)] - start), 0)


def check_replay(rp: Replay, change: Change = NO_CHANGE) -> Broken:
    """Rules 1 and 2 on a trace replay (``profiler.analysis.replay.replay``) made with *change*: each
    op after the op before it on its stream (the stream it has under the change: an op moved to a
    stream of its own still follows the op before it, whose output it copies), overlapping it by no
    more than recorded; every op placed (a real start, its duration long: ``missing`` rows)."""
    ops = rp.deps.ops
    prev = change.new_prev(ops)  # the recorded order where no op moved
    stream = ops.skey.astype(np.int64).copy()
    if change.own_stream.size:  # each moved op on a stream of its own
        stream[change.own_stream] = stream.max() + 1 + np.arange(change.own_stream.size)
    broken = check(stream, rp.start, rp.end, prev, recorded_overlap(ops.start, ops.end, prev))
    missing = np.flatnonzero((rp.start <= NO_TIME // 2) | (rp.end < rp.start))
    return Broken(broken.rows, broken.excess, broken.short, missing)
