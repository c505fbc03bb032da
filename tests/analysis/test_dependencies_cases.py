"""Rules 1 to 3 of "Stalls" (METRICS.md; ``dependencies.dependencies``) on exports built with known
answers, derived by hand: cases found by mutation testing of dependencies.py (docs/testing.md).
Host calls at t (runtime rows), GPU ops [start, end); a stream wait's time is its activity row's
start, 10 ns after its call (``ExportBuilder.sync``)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from profiler.analysis.dependencies import dependencies, search_in_groups
from profiler.analysis.hostsync import host_syncs
from profiler.synthetic.export import ExportBuilder, global_tid
from profiler.trace import open_trace

# nsys's times can be absolute (about 1.7e18 ns): there a float64 holds only multiples of 256
T = 1_700_000_000_000_000_000 // 256 * 256


def test_a_wait_on_its_own_streams_work_applies_to_no_op(build):
    # 50 launch a (s7) [60,500); 100 record e5 on s7 (completes a); wait e5 on s7 at 120;
    # 300 launch b (s7) [520,600).  The wait resolves (rule 2: a), but its blocker is on the
    # waiting stream itself: ignored (rule 3), so no (target, blocker) pair is listed
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.kernel(60, 500, "a", stream=7))
    b.event_record(100, 5, stream=7)
    b.stream_wait(110, 5, stream=7)
    b.runtime(300, 305, b.kernel(520, 600, "b", stream=7))
    deps = dependencies(open_trace(build(b)))
    assert deps.waits == {0: {"total": 1, "resolved": 1, "unresolved": 0}}
    assert (deps.target.tolist(), deps.blocker.tolist()) == ([], [])


def test_waits_and_records_without_any_gpu_op(build):
    # a record at 100 and a wait at 210 on event 5, and no kernel, copy or memset: the record
    # completes nothing (rule 1), so the wait is unresolved
    b = ExportBuilder()
    b.gpu(0)
    b.event_record(100, 5, stream=7)
    b.stream_wait(200, 5, stream=8)
    deps = dependencies(open_trace(build(b)))
    assert len(deps.ops) == 0
    assert deps.waits == {0: {"total": 1, "resolved": 0, "unresolved": 1}}
    assert deps.target.size == 0


def test_a_record_just_after_the_wait_at_absolute_times(build):
    # at T ~ 1.7e18 ns: launch a T (s7) [T+10,T+20); wait e5 on s8 at T+200 (call T+190);
    # record e5 on s7 at T+230; launch b T+300 (s8) [T+310,T+320).  The only record of e5 comes
    # 30 ns after the wait: unresolved (rule 2).  (As float64, T+200 is T+256, after the record.)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(T, T + 5, b.kernel(T + 10, T + 20, "a", stream=7))
    b.stream_wait(T + 190, 5, stream=8)
    b.event_record(T + 230, 5, stream=7)
    b.runtime(T + 300, T + 305, b.kernel(T + 310, T + 320, "b", stream=8))
    deps = dependencies(open_trace(build(b)))
    assert deps.waits == {0: {"total": 1, "resolved": 0, "unresolved": 1}}
    assert deps.target.size == 0


@pytest.mark.parametrize(
    "table",
    [
        # a wait on e5 whose row has no process (globalPid NULL, which nsys's schema allows): it
        # matches no process's records
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        # a record of e5 whose event row has no process: its call cannot be found (runtime rows are
        # matched within a process), so it has no time and completes nothing
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    ],
)
def test_a_wait_or_record_without_a_process_resolves_nothing(build, table):
    # process 1: launch a 50 (s7) [60,100), record e5 on s7 at 150 (completes a), wait on e5 on
    # s8 at 210 (call 200), launch b 300 (s8). With the wait's or the record's process NULL, the
    # wait is unresolved
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.kernel(60, 100, "a", stream=7, pid=1), pid=1)
    b.event_record(150, 5, stream=7, pid=1)
    b.stream_wait(200, 5, stream=8, pid=1)
    b.runtime(300, 305, b.kernel(310, 320, "b", stream=8, pid=1), pid=1)
    path = build(b)
    with sqlite3.connect(path) as con:
        con.execute(f"UPDATE {table} SET globalPid = NULL")
    con.close()
    deps = dependencies(open_trace(path))
    assert deps.waits == {0: {"total": 1, "resolved": 0, "unresolved": 1}}
    assert deps.target.size == 0


def _a_recorded_as_e5() -> ExportBuilder:
    """GPU 0: launch a at 50 on s7, a [60,100); a record of e5 on s7 at 150 (it completes a)."""
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.kernel(60, 100, "a", stream=7))
    b.event_record(150, 5, stream=7)
    return b


def test_waits_on_the_last_stream_after_and_past_its_last_launch(build):
    # launch a 50 (s7) [60,100); record e5 on s7 at 150 (completes a); wait e5 on s8 at 210
    # (call 200); launch b 300 (s8) [310,400); wait e5 on s8 again at 510 (call 500).
    # The first wait applies to b, the first op on s8 launched at or after 210 (the last row of the
    # launches, its stream the last one); the second finds no op launched after it: resolved, not applied
    b = _a_recorded_as_e5()
    b.stream_wait(200, 5, stream=8)
    b.runtime(300, 305, b.kernel(310, 400, "b", stream=8))
    b.stream_wait(500, 5, stream=8)
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.start.tolist() == [60, 310]
    assert deps.waits == {0: {"total": 2, "resolved": 2, "unresolved": 0}}
    assert (deps.target.tolist(), deps.blocker.tolist()) == ([1], [0])


def test_a_wait_on_an_event_never_recorded_beside_two_recorded_ones(build):
    # launch a 50 (s7) [60,100); records of e5 at 150 and of e6 at 170 on s7 (both complete a);
    # a wait on e7 at 210 (call 200), which no record names: unresolved (rule 2), while e5's and
    # e6's records are there to be picked by mistake
    b = _a_recorded_as_e5()
    b.event_record(170, 6, stream=7)
    b.stream_wait(200, 7, stream=8)
    b.runtime(300, 305, b.kernel(310, 400, "b", stream=8))
    deps = dependencies(open_trace(build(b)))
    assert deps.waits == {0: {"total": 1, "resolved": 0, "unresolved": 1}}
    assert deps.target.size == 0


def test_a_record_after_the_only_launched_op(build):
    # launch a 50 (s7) [60,100), the trace's only op with a launch; record e5 on s7 at 150
    # (completes a, rule 1); b (s8) [310,400) has no runtime row.  The wait on e5 at 210 (call 200)
    # resolves to a, and applies to no op: none on s8 was launched after it (rule 3)
    b = _a_recorded_as_e5()
    b.stream_wait(200, 5, stream=8)
    b.kernel(310, 400, "b", stream=8)
    deps = dependencies(open_trace(build(b)))
    assert deps.waits == {0: {"total": 1, "resolved": 1, "unresolved": 0}}
    assert deps.target.size == 0


def test_search_in_groups_at_the_limits_of_packed_keys():
    # Times spread over 2**62 in groups 0 and 3: (group, time) would not fit one int64 key
    # (3 * 2**62 > 2**63), so this goes the bisection way.  Group 3 is rows 2..3, times [0, 2**62]:
    # time 1 goes after its 0 (row 3, "left"); time 2**62 in group 0 ("right") after both rows of
    # group 0 (row 2)
    g = np.array([0, 0, 3, 3], dtype=np.int64)
    t = np.array([0, 1 << 62, 0, 1 << 62], dtype=np.int64)
    assert search_in_groups(g, t, np.array([3]), np.array([1]), "left").tolist() == [3]
    assert search_in_groups(g, t, np.array([0]), np.array([1 << 62]), "right").tolist() == [2]
    # Group 2**20 and times [0, 2**39]: packed into one int64 key, 2**20 * (2**39 + 3) + t + 1,
    # about 2**59, where a float64 holds only multiples of 128: time 1 ("left") goes after time 0,
    # at row 1, only if the keys stay integers
    g = np.array([1 << 20, 1 << 20], dtype=np.int64)
    t = np.array([0, 1 << 39], dtype=np.int64)
    assert search_in_groups(g, t, np.array([1 << 20]), np.array([1]), "left").tolist() == [1]


def test_a_wait_on_a_stream_without_ops(build):
    # launch a 50 (s7) [60,100); record e5 on s7 at 150 (completes a); a wait on e5 on s9 at 210
    # (call 200), a stream no op ran on; launch b 300 (s8) [310,400).  The wait resolves to a
    # (rule 2) and applies to no op (rule 3: none on s9), not to b on s8 (the streams are
    # numbered s7 0, s8 1 by their ops)
    b = _a_recorded_as_e5()
    b.stream_wait(200, 5, stream=9)
    b.runtime(300, 305, b.kernel(310, 400, "b", stream=8))
    deps = dependencies(open_trace(build(b)))
    assert deps.waits == {0: {"total": 1, "resolved": 1, "unresolved": 0}}
    assert deps.target.size == 0


def test_a_trace_without_runtime_rows(build):
    # a (s7) [60,100), a record of e5 on s7 at 150, a wait on e5 on s8 at 210, b (s8)
    # [310,400), and the runtime table dropped (an export without CUDA API calls): no op has a
    # launch time and the record has no time, so it completes nothing and the wait is unresolved
    b = ExportBuilder()
    b.gpu(0)
    b.kernel(60, 100, "a", stream=7)
    b.event_record(150, 5, stream=7)
    b.stream_wait(200, 5, stream=8)
    b.kernel(310, 400, "b", stream=8)
    path = build(b)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.close()
    deps = dependencies(open_trace(path))
    assert deps.ops.start.tolist() == [60, 310]
    assert deps.ops.has_launch.tolist() == [False, False]
    assert deps.waits == {0: {"total": 1, "resolved": 0, "unresolved": 1}}
    assert deps.target.size == 0


def test_an_event_synchronize_in_a_trace_without_stream_waits(build):
    # launch a 50 (s7) [60,500); record e5 on s7 at 100 (call [100,150)); cudaEventSynchronize(e5)
    # [200,600).  No stream wait: the record index is built for the blocking call alone.  The
    # record completes a (rule 1: the last launch before 100), so the call waited for a (the
    # latest record of e5 at or before 200): blocked, as a ends at 500 > 200, and returned 600 - 500
    # = 100 ns after it
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.kernel(60, 500, "a", stream=7))
    b.event_record(100, 5, stream=7)
    b.sync(200, "event_sync", event_id=5, duration=400)
    trace = open_trace(build(b))
    host = host_syncs(trace, dependencies(trace))
    assert (host.start.tolist(), host.end.tolist(), host.waited.tolist()) == ([200], [600], [0])
    assert (host.blocked.tolist(), host.lag.tolist()) == ([True], [100])


def test_a_record_just_after_a_launch_at_absolute_times(build):
    # at T ~ 1.7e18 ns: launch a T-1000 (s7) [T-990,T-900); launch b T+100 (s7) [T+110,T+200);
    # record e5 on s7 at T+120: it completes b, the last launch before it (rule 1; as float64,
    # T+120 would be T, before b's launch, and complete a).  The wait on e5 on s8 at T+310 (call
    # T+300) resolves to it (rule 2) and applies to c, launched T+400 on s8 (rule 3).  Rows in
    # stream order: a 0, b 1, c 2
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(T - 1000, T - 995, b.kernel(T - 990, T - 900, "a", stream=7))
    b.runtime(T + 100, T + 105, b.kernel(T + 110, T + 200, "b", stream=7))
    b.event_record(T + 120, 5, stream=7)
    b.stream_wait(T + 300, 5, stream=8)
    b.runtime(T + 400, T + 405, b.kernel(T + 410, T + 500, "c", stream=8))
    deps = dependencies(open_trace(build(b)))
    assert (deps.target.tolist(), deps.blocker.tolist()) == ([2], [1])


def test_a_correlation_id_past_int32(build):
    # CUPTI's correlation ids are 32-bit unsigned: a kernel's id 2**31 + 7 (past int32's largest,
    # 2**31 - 1) and another's 5 are held as they are, not wrapped to int32's negative range
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.kernel(60, 100, "a", stream=7, correlation=(1 << 31) + 7))
    b.runtime(150, 155, b.kernel(160, 200, "b", stream=7, correlation=5))
    ops = dependencies(open_trace(build(b))).ops
    assert (ops.corr.tolist(), ops.launch.tolist()) == ([(1 << 31) + 7, 5], [50, 150])


def test_launches_in_input_order_leave_unknown_ones_null(build):
    # kernel a [160,200) launched at 150 by thread (pid 100, tid 100); kernel b [60,100) on another
    # stream without a runtime row.  In input order (the kernels as written: a, b), a's launch is
    # (150, that thread's global id) and b's is NULL in both columns (no launch, no thread), as
    # attribution's own search of the runtime rows gives them
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(150, 155, b.kernel(160, 200, "a", stream=7))
    b.kernel(60, 100, "b", stream=8)
    launches = dependencies(open_trace(build(b))).ops.launches_in_input_order()
    assert launches.rows() == [(150, global_tid(100, 100)), (None, None)]
