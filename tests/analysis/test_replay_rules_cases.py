"""The replays' rule checker (``profiler.analysis.replay_rules``) on timelines worked out by hand: the
op before each on its stream, the overlap a recording had, the rows that start too early and by how
much, the streams whose replayed extent is shorter than their serial work.  Written from the mutation
run of ``replay_rules.py`` (docs/testing.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from profiler.analysis.dependencies import NO_TIME, Dependencies, dependencies
from profiler.analysis.replay import NO_CHANGE, Change, replay
from profiler.analysis.replay_rules import Broken, check, check_replay, prev_on_stream, recorded_overlap
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace

MIB = 1 << 20


def recorded(build, ops: list[tuple[str, int, int, int]]) -> tuple[Dependencies, dict[int, int]]:
    """An export of *ops* (kind ``k`` kernel or ``d2h`` copy, start, end, stream), each launched 100 ns
    after the one before from t = 100: its dependency pass, and each op's row by its start."""
    b = ExportBuilder()
    b.gpu(0)
    for i, (kind, start, end, stream) in enumerate(ops):
        at = 100 * (i + 1)
        if kind == "k":
            b.runtime(at, at + 5, b.kernel(start, end, f"k{i}", stream=stream))
        else:
            b.runtime(at, at + 5, b.copy(start, end, kind, MIB, stream=stream), name="cuMemcpyAsync")
    deps = dependencies(open_trace(build(b)))
    return deps, {int(t): i for i, t in enumerate(deps.ops.start)}


def test_the_op_before_each_on_its_stream():
    stream = np.array([5, 7, 5, 7, 5])
    prev = prev_on_stream(stream)  # in the order given
    assert prev.tolist() == [-1, -1, 0, 1, 2] and prev.dtype == np.int64
    assert prev_on_stream(stream, np.array([4, 3, 2, 1, 0])).tolist() == [2, 3, 4, -1, -1]
    assert prev_on_stream(np.array([3])).tolist() == [-1]


def test_the_overlap_a_recording_had():
    """Row 1 started 5 ns before row 0 ended; row 2 10 ns after row 1 ended (no overlap, not -5); row 0
    has no op before it (the -1 is not read as the last row)."""
    start, end = np.array([0, 5, 25]), np.array([10, 15, 30])
    assert recorded_overlap(start, end, np.array([-1, 0, 1])).tolist() == [0, 5, 0]
    assert recorded_overlap(np.array([0, 0]), np.array([50, 60]), np.array([-1, -1])).tolist() == [0, 0]


def test_rows_too_early_and_streams_too_short():
    """Stream 1 runs [0, 10], [5, 15], [15, 20]: the second starts 5 ns before the first ends (row 2
    right at the end of row 1 is fine), and 25 ns of work fit in 20 ns; stream 2's one op is fine."""
    stream, start, end = [1, 1, 1, 2], [0, 5, 15, 0], [10, 15, 20, 5]
    broken = check(stream, start, end)
    assert broken.rows.tolist() == [1] and broken.excess.tolist() == [5]
    assert broken.short == {1: (25, 20)} and broken.missing.size == 0 and broken.missing.dtype == np.int64
    assert not broken.ok
    # the overlap the recording had is allowed: neither early nor short any more
    fine = check(stream, start, end, allowed=[0, 5, 0, 0])
    assert fine.rows.size == 0 and fine.excess.size == 0 and fine.short == {} and fine.ok
    # allowed 4 of the 5: 1 ns early, and 21 ns of work in 20
    part = check(stream, start, end, allowed=[0, 4, 0, 0])
    assert part.rows.tolist() == [1] and part.excess.tolist() == [1] and part.short == {1: (21, 20)}
    # integer nanoseconds whatever the inputs' type (a replay's floats, an allowance given as floats)
    floats = check(stream, np.array(start, dtype=float), np.array(end, dtype=float), allowed=np.array([0, 4.0, 0, 0]))
    assert floats.excess.tolist() == [1] and floats.excess.dtype == broken.excess.dtype == np.int64


def test_the_default_order_is_by_start_then_row_and_a_given_order_wins():
    """Rows given out of time order: row 0 [10, 20] runs after row 1 [0, 12], which it overlaps by 2;
    two rows starting together are taken in row order (row 3 after row 2, overlapping it by 10)."""
    broken = check([1, 1, 2, 2], [10, 0, 0, 0], [20, 12, 10, 10])
    assert broken.rows.tolist() == [0, 3] and broken.excess.tolist() == [2, 10]
    assert broken.short == {1: (22, 20), 2: (20, 10)}
    # the order the caller gives: row 0 first on stream 1 (row 1 starts 10 ns before row 0 does)
    given = check([1, 1], [10, 0], [20, 12], prev=np.array([-1, 0]))
    assert given.rows.tolist() == [1] and given.excess.tolist() == [20]


def test_ok_needs_every_part_empty():
    none = np.zeros(0, dtype=np.int64)
    assert Broken(none, none, {}).ok
    assert not Broken(np.array([0]), np.array([1]), {}).ok
    assert not Broken(none, none, {3: (2, 1)}).ok
    assert not Broken(none, none, {}, np.array([4])).ok


def test_rules_on_a_trace_replay_its_changes_and_ops_not_placed(build):
    """Stream 7 runs A [1000, 2000) then B [2500, 3000); a d2h copy C [1200, 1800) on stream 20.  The
    replay at F = 1 keeps the rules.  B moved by hand to [1500, 2000) starts 500 ns early, and stream
    7's 1500 ns of work fit in 1000; C with no start (NO_TIME), or ending before it starts, is not
    placed."""
    deps, row = recorded(build, [("k", 1000, 2000, 7), ("d2h", 1200, 1800, 20), ("k", 2500, 3000, 7)])
    ops = deps.ops
    a, c, bb = row[1000], row[1200], row[2500]
    rp = replay(deps, 1.0)
    assert check_replay(rp).ok and check_replay(rp, NO_CHANGE).ok
    early = rp.start.copy()
    early[bb] = 1500
    moved = replace(rp, start=early, end=np.where(np.arange(early.size) == bb, 2000, rp.end))
    broken = check_replay(moved)
    assert broken.rows.tolist() == [bb] and broken.excess.tolist() == [500] and broken.missing.size == 0
    assert broken.short == {int(ops.skey[a]): (1500, 1000)}
    lost = rp.start.copy()
    lost[c] = NO_TIME
    assert check_replay(replace(rp, start=lost)).missing.tolist() == [c]
    backwards = rp.end.copy()
    backwards[c] = rp.start[c] - 1
    assert check_replay(replace(rp, end=backwards)).missing.tolist() == [c]


def test_an_op_moved_to_a_stream_of_its_own_is_checked_there(build):
    """Stream 7 runs A [1000, 2000), a d2h copy C [2000, 2400), B [2500, 3000).  B moved by hand to
    [2100, 2600) starts 300 ns before C ends: early while C is on stream 7; with C moved to a stream of
    its own (``Change.own_stream``) B follows A, which it does not overlap, and C, alone on its new
    stream, still follows A."""
    deps, row = recorded(build, [("k", 1000, 2000, 7), ("d2h", 2000, 2400, 7), ("k", 2500, 3000, 7)])
    c, bb = row[2000], row[2500]
    rp = replay(deps, 1.0)
    start, end = rp.start.copy(), rp.end.copy()
    start[bb], end[bb] = 2100, 2600
    moved = replace(rp, start=start, end=end)
    broken = check_replay(moved)
    assert broken.rows.tolist() == [bb] and broken.excess.tolist() == [300]
    own = Change("own stream", own_stream=np.array([c]))
    assert check_replay(moved, own).ok
    start[c] = 1900  # C before A's end: early on its own stream too
    early = check_replay(replace(rp, start=start, end=end), own)
    assert early.rows.tolist() == [c] and early.excess.tolist() == [100]


def test_two_ops_moved_to_streams_of_their_own_get_one_each(build):
    """Stream 7 runs A [1000, 2000), copies C1 [2000, 2400) and C2 [2400, 2800), B [2900, 3400).  Both
    copies moved to streams of their own (each still after the op before it, whose output it copies)
    and B placed by hand at [2000, 2500), right after A: stream 7 (A, B) holds its 1500 ns of work in
    1500; had C2 been left on stream 7 (or given stream 7's id), 1900 ns of work would fit in 1800."""
    ops = [("k", 1000, 2000, 7), ("d2h", 2000, 2400, 7), ("d2h", 2400, 2800, 7), ("k", 2900, 3400, 7)]
    deps, row = recorded(build, ops)
    c1, c2, bb = row[2000], row[2400], row[2900]
    rp = replay(deps, 1.0)
    start, end = rp.start.copy(), rp.end.copy()
    start[bb], end[bb] = 2000, 2500
    own = Change("own streams", own_stream=np.array([c1, c2]))
    assert check_replay(replace(rp, start=start, end=end), own).ok


def test_a_recorded_overlap_is_kept_and_a_removed_copy_is_placed(build):
    """B recorded starting 100 ns before A ends on stream 7 (a trace can hold that): the replay keeps
    the overlap and the check allows what the recording had.  A copy removed by a change lasts 0 ns:
    placed (not ``missing``), its end at its start."""
    deps, row = recorded(build, [("k", 1000, 2000, 7), ("k", 1900, 2400, 7), ("d2h", 2500, 2900, 20)])
    rp = replay(deps, 1.0)
    assert (int(rp.start[row[1900]]), int(rp.end[row[1000]])) == (1900, 2000)
    assert check_replay(rp).ok
    removed = Change("removed", removed=np.array([row[2500]]))
    gone = replay(deps, 1.0, change=removed)
    assert gone.end[row[2500]] == gone.start[row[2500]] and check_replay(gone, removed).ok
