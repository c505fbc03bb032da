"""The what-if replay (METRICS.md "What-if: another host link") on exports built with known answers,
derived by hand: cases found by mutation testing of replay.py (docs/testing.md, ``replay``).
Host calls at t (runtime rows, 100 ns apart on one thread), GPU ops [start, end)."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.dependencies import dependencies
from profiler.analysis.hostsync import HostSyncs, host_syncs
from profiler.analysis.replay import Change, replay
from profiler.synthetic.export import ExportBuilder, global_tid
from profiler.trace import open_trace

MIB = 1 << 20


def test_an_op_waiting_for_two_copies_follows_the_later_one(build):
    # 100 launch Ca h2d (s20) [200,1500)    150 record e1 on s20
    # 200 launch Cb h2d (s21) [300,800)     300 record e2 on s21
    # 400 wait e2 on s7, 500 launch J (s7) [900,1000):   M = max(500, Cb 800) = 800, slack 100
    # 600 wait e1 on s8, 700 wait e2 on s8, 800 launch K (s8) [1600,1700):
    #     M = max(800, Ca 1500, Cb 800) = 1500, slack 100 (the latest blocker, not the last one listed)
    # 900 wait e1 on s9, 1000 wait e2 on s9, 1100 launch L (s9) [1600,1650): M = max(1100, 1500), slack 100
    # Replayed, copies at F = 0.5 (no host synchronization): Ca [200,850) (slack 100 after its
    # launch, 650 long), Cb [300,550); J starts max(500, 550) + 100 = 650; K max(800, 850, 550) + 100
    # = 950; L max(1100, 850, 550) + 100 = 1200.
    b = ExportBuilder()
    b.gpu(0)
    for t, stream, (s, e), event in ((100, 20, (200, 1500), 1), (200, 21, (300, 800), 2)):
        b.runtime(t, t + 5, b.copy(s, e, "h2d", MIB, stream=stream), name="cuMemcpyAsync")
        b.event_record(t + 50 if event == 1 else t + 100, event, stream=stream)
    for waits, launch, stream, (s, e) in (
        ((400,), 500, 7, (900, 1000)),
        ((600, 700), 800, 8, (1600, 1700)),
        ((900, 1000), 1100, 9, (1600, 1650)),
    ):
        for t, event in zip(waits, (2,) if len(waits) == 1 else (1, 2), strict=True):
            b.stream_wait(t, event, stream=stream)
        b.runtime(launch, launch + 5, b.kernel(s, e, f"k{stream}", stream=stream))
    deps = dependencies(open_trace(build(b)))
    ops = deps.ops
    key = {(int(st), int(s)): i for i, (st, s) in enumerate(zip(ops.stream, ops.start, strict=True))}
    rows = [key[(20, 200)], key[(21, 300)], key[(7, 900)], key[(8, 1600)], key[(9, 1600)]]
    half = replay(deps, 0.5)
    assert [(int(half.start[r]), int(half.end[r])) for r in rows] == [
        (200, 850),
        (300, 550),
        (650, 750),
        (950, 1050),
        (1200, 1250),
    ]
    same = replay(deps, 1.0)  # F = 1 gives the recorded timeline back
    assert (same.start == ops.start).all() and (same.end == ops.end).all()


def _a_then_b() -> ExportBuilder:
    """One stream, s7: launch A h2d at 50, [100,1000); launch B kernel at 200, [1000,1100), queued
    behind A (slack 0)."""
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.copy(100, 1000, "h2d", MIB, stream=7), name="cuMemcpyAsync")
    b.runtime(200, 205, b.kernel(1000, 1100, "k", stream=7))
    return b


def test_an_op_queued_behind_the_first_op_of_the_trace(build):
    # one stream; A is the trace's first op (row 0), B is queued behind it:
    # 50 launch A h2d (s7) [100,1000): M = launch 50, slack 50
    # 200 launch B kernel (s7) [1000,1100): M = max(A's end 1000, launch 200) = 1000, slack 0
    # Replayed at F = 0.5: A [100,550) (450 long); B starts max(550, 200) + 0 = 550: [550,650).
    deps = dependencies(open_trace(build(_a_then_b())))
    assert deps.ops.start.tolist() == [100, 1000] and deps.ops.prev.tolist() == [-1, 0]
    half = replay(deps, 0.5)
    assert (half.start.tolist(), half.end.tolist()) == ([100, 550], [550, 650])
    same = replay(deps, 1.0)
    assert (same.start.tolist(), same.end.tolist()) == ([100, 1000], [1000, 1100])


def test_an_op_without_a_launch_keeps_its_gap_after_the_first_op(build):
    # one stream; A is row 0; B has no runtime row (no launch time), so only A's end sets it:
    # 50 launch A h2d (s7) [100,1000): slack 50;  B (s7) [1200,1300): M = A's end 1000, slack 200
    # Replayed at F = 0.5: A [100,550); B starts 550 + 200 = 750: [750,850).
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.copy(100, 1000, "h2d", MIB, stream=7), name="cuMemcpyAsync")
    b.kernel(1200, 1300, "k", stream=7)
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.prev.tolist() == [-1, 0]
    half = replay(deps, 0.5)
    assert (half.start.tolist(), half.end.tolist()) == ([100, 750], [550, 850])


def test_launches_move_with_their_own_threads_blocking_calls_only(build):
    # three threads of one process (tids 50, 70, 100), host synchronization modeled, F = 0.5:
    # tid 100: cudaMemcpy call [0,1010), C1 h2d (s20) [10,1000); launch K1 1100 (s7) [1200,1300)
    # tid 50:  cudaMemcpy call [2000,2510), C2 h2d (s21) [2010,2500); launch K2 2600 (s8) [2700,2800)
    # tid 70:  no blocking call; launch K3 1100 (s9) [1150,1250)
    # C1 [10,505): call 1 returns 10 ns after it, 515, 495 early: K1's launch 605, K1 [705,805).
    # C2 [2010,2255): call 2 returns 2265, 245 early: K2's launch 2355, K2 [2455,2555).
    # K3's thread never blocked: its launch stays at 1100, K3 [1150,1250) as recorded.
    b = ExportBuilder()
    b.gpu(0)
    for tid, (call, copy, stream) in ((100, ((0, 1010), (10, 1000), 20)), (50, ((2000, 2510), (2010, 2500), 21))):
        b.runtime(*call, b.copy(*copy, "h2d", 8 * MIB, stream=stream), name="cudaMemcpy_v3020", tid=tid)
    for tid, launch, stream, (s, e) in (
        (100, 1100, 7, (1200, 1300)),
        (50, 2600, 8, (2700, 2800)),
        (70, 1100, 9, (1150, 1250)),
    ):
        b.runtime(launch, launch + 5, b.kernel(s, e, f"k{stream}", stream=stream), tid=tid)
    trace = open_trace(build(b))
    deps = dependencies(trace)
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.host_sync_modeled
    got = {int(st): (int(s), int(e)) for st, s, e in zip(deps.ops.stream, rp.start, rp.end, strict=True)}
    assert got == {20: (10, 505), 7: (705, 805), 21: (2010, 2255), 8: (2455, 2555), 9: (1150, 1250)}


def _a_copy_call_then_a_sync_that_did_not_wait() -> ExportBuilder:
    """tid 70: launch K at 20 on s7, K [50,100).  tid 100: a cudaMemcpy call [0,1010) with its copy C
    h2d on s20 [10,1000); cudaStreamSynchronize(s7) [1100,1200), after K's end; launch K2 at 1300 on
    s8, K2 [1400,1500)."""
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(20, 25, b.kernel(50, 100, "k", stream=7), tid=70)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020")
    b.sync(1100, "stream_sync", stream=7, duration=100)
    b.runtime(1300, 1305, b.kernel(1400, 1500, "k2", stream=8))
    return b


def test_a_blocking_call_that_did_not_wait_moves_with_the_call_before_it(build):
    # tid 70: launch K (s7) at 20, K [50,100).  tid 100, host synchronization modeled, F = 0.5:
    #   cudaMemcpy call [0,1010), C h2d (s20) [10,1000): C [10,505), the call returns at 515 (495 early)
    #   cudaStreamSynchronize(s7) [1100,1200): K ended long before, so it did not wait: it begins
    #   495 early (605) and lasts its 100 ns: returns at 705, 495 early too
    #   launch K2 1300 (s8) [1400,1500): launch 805, K2 [905,1005)
    # tid 50 (its calls come first in thread order): cudaMemcpy call [3000,3510), C3 h2d (s21)
    #   [3010,3500): nothing of it moved before, C3 [3010,3255)
    b = _a_copy_call_then_a_sync_that_did_not_wait()
    b.runtime(3000, 3510, b.copy(3010, 3500, "h2d", 8 * MIB, stream=21), name="cudaMemcpy_v3020", tid=50)
    trace = open_trace(build(b))
    deps = dependencies(trace)
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.host_sync_modeled
    got = {int(st): (int(s), int(e)) for st, s, e in zip(deps.ops.stream, rp.start, rp.end, strict=True)}
    assert got == {7: (50, 100), 20: (10, 505), 8: (905, 1005), 21: (3010, 3255)}


def test_a_blocking_call_that_found_no_op_to_wait_for(build):
    # one thread, host synchronization modeled, F = 0.5: cudaMemcpy call [0,1010), C h2d (s20)
    # [10,1000): C [10,505), the call returns at 515 (495 early); cudaStreamSynchronize(s9)
    # [1100,1150): s9 has no op, so it waited for none (waited -1) and moves with the call before
    # it: 495 early; launch K 1300 (s21, the last stream) [1400,1500), slack 100: launch 805,
    # K [905,1005).  (Reading the missing op as the last segment would make K wait for the call
    # that K's launch waits for: a cycle, and a replay without the host.)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020")
    b.sync(1100, "stream_sync", stream=9, duration=50)
    b.runtime(1300, 1305, b.kernel(1400, 1500, "k", stream=21))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    host = host_syncs(trace, deps)
    assert host.waited.tolist() == [0, -1] and host.blocked.tolist() == [True, False]
    rp = replay(deps, 0.5, host)
    assert rp.host_sync_modeled and rp.host is not None
    assert rp.shift.tolist() == [-495, -495]
    assert (rp.start.tolist(), rp.end.tolist()) == ([10, 905], [505, 1005])


def _first_call_after_the_last_threads_call(build):
    # two threads of one process, host synchronization modeled, F = 0.5; the host's calls are
    # sorted by thread: call 0 is tid 50's (its first and only), call 1 tid 100's (the last one).
    # tid 100: cudaMemcpy call [0,1010), C h2d (s20) [10,1000) (launch 0, slack 10, lag 10):
    #   C [10,505), call 1 returns 505 + 10 = 515, 495 early (shift -495);
    #   launch X 1100 (s7) [1200,1300) (slack 100): launch 605, X [705,805)
    # tid 50: cudaStreamSynchronize(s7) [1250,1310) waits for X (lag 1310 - 1300 = 10): it begins
    #   at 1250 (nothing before it on its thread moved), X is done by 805 + 10 = 815, so it returns
    #   as soon as it begins, 1250: 60 early (shift -60); launch K 1400 (s8) [1500,1600) (slack 100):
    #   launch 1340, K [1440,1540)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020", tid=100)
    b.runtime(1100, 1105, b.kernel(1200, 1300, "x", stream=7), tid=100)
    b.sync(1250, "stream_sync", stream=7, duration=60, tid=50)
    b.runtime(1400, 1405, b.kernel(1500, 1600, "k", stream=8), tid=50)
    trace = open_trace(build(b))
    deps = dependencies(trace)
    return deps, replay(deps, 0.5, host_syncs(trace, deps))


def test_a_threads_first_call_begins_unmoved_after_another_threads_call(build):
    # previous_call gives a thread's first call -1, the shifts' zero entry (-2 would read the
    # last call's shift, -495, and K's launch would move to 905)
    deps, rp = _first_call_after_the_last_threads_call(build)
    assert rp.host_sync_modeled and rp.shift is not None and rp.factor == 0.5
    assert rp.shift.tolist() == [-60, -495]
    got = {int(st): (int(s), int(e)) for st, s, e in zip(deps.ops.stream, rp.start, rp.end, strict=True)}
    assert got == {20: (10, 505), 7: (705, 805), 8: (1440, 1540)}


def test_how_far_a_threads_host_work_moves(build):
    # Replay.shift_at (the whatif's host-paced steps), on the replay above: a thread's work moves
    # by the shift of its last call that returned at or before the time (none: 0); a thread that
    # made no blocking call does not move
    _, rp = _first_call_after_the_last_threads_call(build)
    t50, t100 = global_tid(100, 50), global_tid(100, 100)
    gtid = np.array([t50, t50, t100, t100, t100 + 1, -1, t50 - 1])
    t = np.array([1309, 1310, 1009, 1010, 5000, 5000, 5000])
    assert rp.shift_at(gtid, t).tolist() == [0, -60, 0, -495, 0, 0, 0]


def test_how_far_host_work_moves_after_the_only_call(build):
    # one blocking call: tid 100's cudaMemcpy [0,1010), C h2d [10,1000): at F = 0.5 C [10,505),
    # the call returns at 515, 495 early; the thread's work after it moves by -495
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020")
    trace = open_trace(build(b))
    deps = dependencies(trace)
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    g = global_tid(100, 100)
    assert rp.shift_at(np.array([g, g]), np.array([1009, 1010])).tolist() == [0, -495]


def test_the_copy_scale_must_be_finite_and_not_negative(build):
    # one copy [100,1000); scales below 0, infinite or not a number are refused by name, 0 is not
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(50, 55, b.copy(100, 1000, "h2d", MIB, stream=7), name="cuMemcpyAsync")
    deps = dependencies(open_trace(build(b)))
    for bad in (-0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^the copy scale must be a finite number >= 0, got"):
            replay(deps, bad)
    zero = replay(deps, 0.0)  # the copy lasts 0 ns: [100,100)
    assert (zero.start.tolist(), zero.end.tolist()) == ([100], [100])


def test_a_trace_without_gpu_ops_replays_to_nothing(build):
    # one runtime call and no kernel, copy or memset: the replay has no op, with integer times,
    # and says whether host synchronization was asked for (an empty HostSyncs: asked, none kept)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 10, 1, name="cudaFree")
    deps = dependencies(open_trace(build(b)))
    assert len(deps.ops) == 0
    rp = replay(deps, 0.5, HostSyncs.empty())
    assert rp.deps is deps and rp.factor == 0.5 and rp.host is None and rp.host_sync_modeled is True
    assert [(x.dtype, x.size) for x in (rp.start, rp.end, rp.kept)] == [(np.int64, 0), (np.int64, 0), (np.bool_, 0)]
    assert replay(deps, 0.5).host_sync_modeled is False


def test_a_change_sets_durations_down_to_zero_and_never_longer(build):
    # one stream: launch A h2d (s7) 50, [100,1000); launch B 200, [1000,1100) (slack 0 after A).
    # Change: A to last 0 ns (a shorter duration wins; a negative one counts as 0), B to 500
    # (longer than its 100: it keeps 100).  A [100,100), B starts max(100, 200) + 0 = 200: [200,300)
    deps = dependencies(open_trace(build(_a_then_b())))
    for a_new in (0, -5):
        change = Change("shorter", durations=(np.array([0, 1]), np.array([a_new, 500])))
        rp = replay(deps, 1.0, None, change)
        assert (rp.start.tolist(), rp.end.tolist()) == ([100, 200], [100, 300])


def test_an_op_without_a_launch_after_the_first_op_that_a_blocking_call_moved(build):
    # tid 100, host synchronization modeled, F = 0.5:
    #   cudaMemcpy call [0,1010), C h2d (s20) [10,1000): C [10,505), the call returns at 515 (495 early)
    #   launch A 1100 (s7) [1200,1300): A is row 0 (s7 sorts first); its launch 605, A [705,805)
    #   B (s7) [1400,1500), no runtime row: only A's end sets it (slack 100); it starts a segment of
    #   its own (no launch, so not moved by the call), and follows A: 805 + 100, B [905,1005)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020")
    b.runtime(1100, 1105, b.kernel(1200, 1300, "a", stream=7))
    b.kernel(1400, 1500, "b", stream=7)
    trace = open_trace(build(b))
    deps = dependencies(trace)
    assert deps.ops.stream.tolist() == [7, 7, 20] and deps.ops.prev.tolist() == [-1, 0, -1]
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert (rp.start.tolist(), rp.end.tolist()) == ([705, 905, 10], [805, 1005, 505])


def test_a_copy_moved_to_its_own_stream_before_an_op_that_waits(build):
    # s7: launch C1 h2d 0, [10,100) (slack 10); launch K 70, [500,600): it follows C1 and waits
    #   for D through e1 (the wait at 60 applies to K, launched at 70): M = max(100, 70, 500) = 500,
    #   slack 0
    # s20: launch D h2d 30, [40,500) (slack 10); record e1 on s20 at 40 (completes D)
    # C1 moved to a stream of its own, copies at F = 0.5: C1 [10,55), D [40,270); K no longer
    # follows C1 and still waits for D: max(70, 270) + 0, K [270,370)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 5, b.copy(10, 100, "h2d", MIB, stream=7), name="cuMemcpyAsync")
    b.runtime(30, 35, b.copy(40, 500, "h2d", MIB, stream=20), name="cuMemcpyAsync")
    b.event_record(40, 1, stream=20, duration=5)
    b.stream_wait(50, 1, stream=7, duration=20)
    b.runtime(70, 75, b.kernel(500, 600, "k", stream=7))
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.start.tolist() == [10, 500, 40] and deps.blockers_of[0].tolist() == [1]
    rp = replay(deps, 0.5, None, Change("own stream", own_stream=np.array([0])))
    assert (rp.start.tolist(), rp.end.tolist()) == ([10, 270, 40], [55, 370, 270])


def test_ops_recorded_before_their_launch_keep_their_offset(build):
    # skewed clocks: launch K1 1000 (s7), recorded [500,600): slack 500 - 1000 = -500; launch K2
    # 1100, [650,700): M = max(600, 1100) = 1100, slack -450.  Replayed at F = 1 nothing moves:
    # K1 starts 1000 - 500 = 500, K2 max(600, 1100) - 450 = 650.  K3 (s9) [300,400) has no launch
    # and nothing before it: it keeps its recorded start, the only op the replay says kept it
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(1000, 1005, b.kernel(500, 600, "k1", stream=7))
    b.runtime(1100, 1105, b.kernel(650, 700, "k2", stream=7))
    b.kernel(300, 400, "k3", stream=9)
    deps = dependencies(open_trace(build(b)))
    rp = replay(deps, 1.0)
    assert (rp.start.tolist(), rp.end.tolist()) == ([500, 650, 300], [600, 700, 400])
    assert rp.kept.tolist() == [False, False, True]


def test_a_blocking_call_that_did_not_wait_at_absolute_times(build):
    # at T ~ 1.7e18 ns (float64 would keep only multiples of 256 there), host synchronization
    # modeled, F = 0.5: launch K T+20 (s7) [T+50,T+100); cudaStreamSynchronize(s7) [T+1100,T+1200):
    # K was done, so it did not wait, and nothing before it moved: it returns as recorded (shift 0);
    # launch K2 T+1300 (s8) [T+1400,T+1500) stays where it was
    t = 1_700_000_000_000_000_000 // 256 * 256
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(t + 20, t + 25, b.kernel(t + 50, t + 100, "k", stream=7))
    b.sync(t + 1100, "stream_sync", stream=7, duration=100)
    b.runtime(t + 1300, t + 1305, b.kernel(t + 1400, t + 1500, "k2", stream=8))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.host_sync_modeled and rp.shift is not None and rp.shift.tolist() == [0]
    assert (rp.start - t).tolist() == [50, 1400] and (rp.end - t).tolist() == [100, 1500]


def test_an_op_that_waits_behind_two_ops_of_its_stream(build):
    # s20: launch D h2d 5, [50,150); record e1 on s20 at 30 (completes D)
    # s7: launch A 0, [1000,1100); launch B 100, [1100,1200) (follows A: one segment, slack 0);
    #     wait e1 on s7 at 160 (call 150); launch C 200, [1200,1300): C waits for D, so it heads a
    #     segment of its own, after B, the second op of A's segment: M = max(1200, 200, 150) = 1200
    # F = 1 gives every op back; at F = 0.5 only D moves ([50,100)), and nothing waits on it past B
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(5, 10, b.copy(50, 150, "h2d", MIB, stream=20), name="cuMemcpyAsync")
    b.event_record(30, 1, stream=20, duration=5)
    b.runtime(0, 4, b.kernel(1000, 1100, "a", stream=7))
    b.runtime(100, 105, b.kernel(1100, 1200, "b", stream=7))
    b.stream_wait(150, 1, stream=7, duration=20)
    b.runtime(200, 205, b.kernel(1200, 1300, "c", stream=7))
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.start.tolist() == [1000, 1100, 1200, 50] and deps.blockers_of[0].tolist() == [2]
    same = replay(deps, 1.0)
    assert (same.start.tolist(), same.end.tolist()) == ([1000, 1100, 1200, 50], [1100, 1200, 1300, 150])
    half = replay(deps, 0.5)
    assert (half.start.tolist(), half.end.tolist()) == ([1000, 1100, 1200, 50], [1100, 1200, 1300, 100])


def test_a_wait_behind_launches_a_blocking_call_moved(build):
    # host synchronization modeled, F = 0.5.  tid 100: cudaMemcpy call [0,1010), C h2d (s20)
    # [10,1000): C [10,505), the call returns at 515, 495 early: every later launch of tid 100
    # moves by -495.  tid 70: launch D h2d (s21) 20, [30,60) (slack 10): D [30,45); record e1 on
    # s21 at 40 (completes D).
    # s7 (tid 100): launch H 1100 [1200,1300) (slack 100): H [705,805); launch X 1400 [1500,1600),
    #   X's launch sets it (slack 100): max(805, 905) + 100, X [1005,1105)
    # s8 (tid 100): launch G 1100 [1150,1160) (slack 50): G [655,665); launch W 1410 [1450,1460)
    #   (slack 40): max(665, 915) + 40, W [955,965); record e2 on s8 at 1420 (completes W)
    # s7: waits on e1 and e2 at 1660 and 1670; launch Y 1700 [1800,1900): it follows X and waits
    #   for D and W: M = max(1600, 1700, 60, 1460) = 1700, slack 100; replayed
    #   max(1105, 1205, 45, 965) + 100, Y [1305,1405)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 1010, b.copy(10, 1000, "h2d", 8 * MIB, stream=20), name="cudaMemcpy_v3020")
    b.runtime(20, 25, b.copy(30, 60, "h2d", MIB, stream=21), name="cuMemcpyAsync", tid=70)
    b.event_record(40, 1, stream=21, tid=70, duration=5)
    for launch, stream, (s, e) in (
        (1100, 7, (1200, 1300)),
        (1100, 8, (1150, 1160)),
        (1400, 7, (1500, 1600)),
        (1410, 8, (1450, 1460)),
    ):
        b.runtime(launch, launch + 5, b.kernel(s, e, f"k{stream}", stream=stream))
    b.event_record(1420, 2, stream=8, duration=5)
    b.stream_wait(1650, 1, stream=7, duration=5)
    b.stream_wait(1660, 2, stream=7, duration=5)
    b.runtime(1700, 1705, b.kernel(1800, 1900, "y", stream=7))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    assert deps.ops.start.tolist() == [1200, 1500, 1800, 1150, 1450, 10, 30]
    assert deps.blockers_of[1].tolist() == [4, 6]
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.start.tolist() == [705, 1005, 1305, 655, 955, 10, 30]
    assert rp.end.tolist() == [805, 1105, 1405, 665, 965, 505, 45]


def _cycle_under_skew() -> ExportBuilder:
    """test_costs' cycle under skew, its first ops: launch C h2d 100 (s20) [300,400); record e1 on s20
    at 150; wait e1 on s7 at 170 -> the next op launched on s7, A (launch 200) [1000,1100); record e2
    on s7 at 300 (completes A); wait e2 on s20 at 320 -> the next op launched on s20."""
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(100, 105, b.copy(300, 400, "h2d", MIB, stream=20), name="cuMemcpyAsync")
    b.event_record(150, 1, stream=20, duration=5)
    b.stream_wait(160, 1, stream=7, duration=20)
    b.runtime(200, 205, b.kernel(1000, 1100, "A", stream=7))
    b.event_record(300, 2, stream=7, duration=5)
    b.stream_wait(310, 2, stream=20, duration=20)
    return b


def test_a_dependency_cycle_with_blocking_calls_replays_without_the_host(build):
    # (test_costs' cycle under skew, plus a blocking call.)  launch C h2d 100 (s20) [300,400);
    # record e1 on s20 at 150; wait e1 on s7 at 170 -> A (launch 200) [1000,1100); record e2 on s7
    # at 300 (completes A); wait e2 on s20 at 320 -> D (launch 500) [50,80); B launch 400 (s7)
    # [500,600), before A on s7.  D is before C on s20: A, C and D form a cycle.  A
    # cudaStreamSynchronize(s7) at [2000,2050) makes host synchronization possible, but a cycle
    # gives it up: the replay is the one without the host, and says so.  At F = 0.5 the ops on the
    # cycle keep their starts: A [1000,1100), D [50,80), C [300,350); B keeps its slack after its
    # launch: [500,600); so do E1 (launch 600, s8) [700,800) and E2 behind it (launch 650) [800,900);
    # F (launch 700, s7) [1100,1200) follows A, on the cycle (slack 0): [1100,1200)
    b = _cycle_under_skew()
    b.runtime(400, 405, b.kernel(500, 600, "B", stream=7))
    b.runtime(500, 505, b.kernel(50, 80, "D", stream=20))
    b.runtime(700, 705, b.kernel(1100, 1200, "F", stream=7))
    b.runtime(600, 605, b.kernel(700, 800, "E1", stream=8))
    b.runtime(650, 655, b.kernel(800, 900, "E2", stream=8))
    b.sync(2000, "stream_sync", stream=7, duration=50)
    trace = open_trace(build(b))
    deps = dependencies(trace)
    host = host_syncs(trace, deps)
    assert len(host) == 1
    rp = replay(deps, 0.5, host)
    assert rp.host is None and rp.shift is None and not rp.host_sync_modeled
    assert rp.deps is deps and rp.factor == 0.5
    # kept their recorded start: the ops on the cycle (A, D, C), not those that followed their inputs
    assert rp.kept.tolist() == [False, True, False, False, False, True, True]
    assert rp.start.tolist() == [500, 1000, 1100, 700, 800, 50, 300]
    assert rp.end.tolist() == [600, 1100, 1200, 800, 900, 80, 350]
    # with a change (B, off the cycle, shortened to 50 ns), the replay without the host keeps it
    shorter = replay(deps, 0.5, host, Change("B shorter", durations=(np.array([0]), np.array([50]))))
    assert not shorter.host_sync_modeled
    assert shorter.start.tolist() == [500, 1000, 1100, 700, 800, 50, 300]
    assert shorter.end.tolist() == [550, 1100, 1200, 800, 900, 80, 350]


def test_a_trace_whose_every_op_waits_on_a_cycle(build):
    # test_costs' cycle under skew without B, and with F after A: launch C h2d 100 (s20) [300,400);
    # record e1 on s20 at 150; wait e1 on s7 at 170 -> A (launch 200) [1000,1100); record e2 on s7
    # at 300 (completes A); wait e2 on s20 at 320 -> D (launch 500) [50,80), before C on s20;
    # F (launch 700, s7) [1100,1200): M = max(700, A's end 1100), slack 0.  Stream order: A, F (s7),
    # D, C (s20).  A waits for C, C follows D, D waits for A: no segment is free of the cycle (the
    # node order is empty).  At F = 0.5 the ops on the cycle keep their starts: A [1000,1100),
    # D [50,80), C [300,350); F, behind A (row 0, its op before), follows it: [1100,1200)
    b = _cycle_under_skew()
    b.runtime(500, 505, b.kernel(50, 80, "D", stream=20))
    b.runtime(700, 705, b.kernel(1100, 1200, "F", stream=7))
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.start.tolist() == [1000, 1100, 50, 300]
    rp = replay(deps, 0.5)
    assert rp.kept.tolist() == [True, False, True, True]
    assert rp.start.tolist() == [1000, 1100, 50, 300]
    assert rp.end.tolist() == [1100, 1200, 80, 350]


def test_ops_behind_a_cycle_follow_each_other_in_dependency_order(build):
    # test_a_trace_whose_every_op_waits_on_a_cycle's ops, and on s8: E (launch 600) [700,800), slack
    # 100; record e3 on s7 at 750 (completes F); wait e3 on s8 at 860 -> G (launch 900)
    # [1250,1300): M = max(900, E's end 800, F's end 1200) = 1200, slack 50.  Stream order: A, F
    # (s7), E, G (s8), D, C (s20).  E is free of the cycle; G waits behind F, itself behind the
    # cycle, and follows E on its stream.  At F = 0.5: A [1000,1100), D [50,80), C [300,350) keep
    # their starts; E keeps its slack after its launch, [700,800); F follows A, [1100,1200); then G
    # (after F, not before it though its row comes first): max(900, 800, 1200) + 50 = 1250
    b = _cycle_under_skew()
    b.runtime(500, 505, b.kernel(50, 80, "D", stream=20))
    b.runtime(600, 605, b.kernel(700, 800, "E", stream=8))
    b.runtime(700, 705, b.kernel(1100, 1200, "F", stream=7))
    b.event_record(750, 3, stream=7, duration=5)
    b.stream_wait(850, 3, stream=8, duration=20)
    b.runtime(900, 905, b.kernel(1250, 1300, "G", stream=8))
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.start.tolist() == [1000, 1100, 700, 1250, 50, 300]
    rp = replay(deps, 0.5)
    assert rp.kept.tolist() == [True, False, False, False, True, True]
    assert rp.start.tolist() == [1000, 1100, 700, 1250, 50, 300]
    assert rp.end.tolist() == [1100, 1200, 800, 1300, 80, 350]


def test_a_removed_or_unwaited_copy_no_longer_holds_the_op_that_waited(build):
    # launch C h2d 0 (s20), [500,1000) (slack 500); record e1 on s20 at 50 (completes C); wait e1
    # on s7 at 70 (call 60); launch K 100 (s7) [1000,1100): M = max(100, 1000) = 1000, slack 0.
    # C removed: it lasts 0 ns [500,500), and K no longer waits for it: K [100,200) (waiting for
    # C's new end would give [500,600)).  C unwaited: C keeps [500,1000), K [100,200)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 5, b.copy(500, 1000, "h2d", MIB, stream=20), name="cuMemcpyAsync")
    b.event_record(50, 1, stream=20, duration=5)
    b.stream_wait(60, 1, stream=7, duration=20)
    b.runtime(100, 105, b.kernel(1000, 1100, "k", stream=7))
    deps = dependencies(open_trace(build(b)))
    assert deps.ops.stream.tolist() == [7, 20] and deps.blockers_of[1].tolist() == [1]
    gone = replay(deps, 1.0, None, Change("C removed", removed=np.array([1])))
    assert (gone.start.tolist(), gone.end.tolist()) == ([100, 500], [200, 500])
    free = replay(deps, 1.0, None, Change("C unwaited", unwaited=np.array([1])))
    assert (free.start.tolist(), free.end.tolist()) == ([100, 500], [200, 1000])


def test_three_blocking_calls_of_one_thread_move_in_turn(build):
    # tid 70: launch K 20 (s7) [50,100).  tid 100 (the only thread with blocking calls: 0, 1, 2),
    # host synchronization modeled, F = 0.5:
    #   call 0, cudaMemcpy [0,1010), C h2d (s20) [10,1000): C [10,505), returns at 515 (-495)
    #   call 1, cudaStreamSynchronize(s7) [1100,1200): K was done, it did not wait: it begins 495
    #     early (605) and lasts its 100 ns (-495); launch K2 1300 (s8) [1400,1500): 805, K2 [905,1005)
    #   call 2, cudaStreamSynchronize(s8) [1600,1700): K2 was done (1500): it begins after call 1's
    #     shift, 1105, returns at 1205 (-495); launch K3 1800 (s9) [1900,2000): 1305, K3 [1405,1505)
    b = _a_copy_call_then_a_sync_that_did_not_wait()
    b.sync(1600, "stream_sync", stream=8, duration=100)
    b.runtime(1800, 1805, b.kernel(1900, 2000, "k3", stream=9))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.shift is not None and rp.shift.tolist() == [-495, -495, -495]
    got = {int(st): (int(s), int(e)) for st, s, e in zip(deps.ops.stream, rp.start, rp.end, strict=True)}
    assert got == {7: (50, 100), 8: (905, 1005), 9: (1405, 1505), 20: (10, 505)}


def test_a_blocking_call_waits_for_an_op_that_itself_waits(build):
    # tid 70: launch C h2d 0 (s20) [10,1000) (slack 10); record e1 on s20 at 20 (completes C); wait
    #   e1 on s7 at 40 (call 30); launch W 50 (s7) [1000,1100): M = max(50, 1000) = 1000, slack 0
    # tid 100: cudaStreamSynchronize(s7) [200,1110) waits for W (lag 10); launch K 1200 (s8)
    #   [1300,1400) (slack 100)
    # Host synchronization modeled, F = 0.5: C [10,505); W max(50, 505) = 505, [505,605); the call
    # returns at 605 + 10 = 615 (-495); K's launch 705, K [805,905)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 5, b.copy(10, 1000, "h2d", MIB, stream=20), name="cuMemcpyAsync", tid=70)
    b.event_record(20, 1, stream=20, tid=70, duration=5)
    b.stream_wait(30, 1, stream=7, tid=70, duration=15)
    b.runtime(50, 55, b.kernel(1000, 1100, "w", stream=7), tid=70)
    b.sync(200, "stream_sync", stream=7, duration=910)
    b.runtime(1200, 1205, b.kernel(1300, 1400, "k", stream=8))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    assert deps.ops.stream.tolist() == [7, 8, 20] and deps.blockers_of[1].tolist() == [2]
    rp = replay(deps, 0.5, host_syncs(trace, deps))
    assert rp.shift is not None and rp.shift.tolist() == [-495]
    assert (rp.start.tolist(), rp.end.tolist()) == ([505, 805, 10], [605, 905, 505])


def test_an_op_that_started_before_its_blocker_ended_never_overlaps_the_op_before_it(build):
    # skewed clocks: 100 launch C h2d (s20) [200,1500), 150 record e1 on s20 (completes C);
    # 300 launch A (s7) [1000,1100); 400 wait e1 on s7; 500 launch B (s7), recorded [1100,1200),
    # before its blocker C ended: M = max(A's end 1100, 500, C's end 1500) = 1500, slack -400.
    # At F = 0.5, C [200,850) and M' = max(1100, 500, 850) = 1100: M' + slack = 700 would run B
    # beside A on stream 7 (issue 42's rule 1); B starts at the end of A as recorded, [1100,1200)
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(100, 105, b.copy(200, 1500, "h2d", MIB, stream=20), name="cuMemcpyAsync")
    b.event_record(150, 1, stream=20)
    b.runtime(300, 305, b.kernel(1000, 1100, "a", stream=7))
    b.stream_wait(400, 1, stream=7)
    b.runtime(500, 505, b.kernel(1100, 1200, "b", stream=7))
    trace = open_trace(build(b))
    deps = dependencies(trace)
    assert deps.ops.start.tolist() == [1000, 1100, 200] and deps.blockers_of[0].tolist() == [1]
    for rp in (replay(deps, 0.5), replay(deps, 0.5, host_syncs(trace, deps))):
        assert (rp.start.tolist(), rp.end.tolist()) == ([1000, 1100, 200], [1100, 1200, 850])
    same = replay(deps, 1.0)
    assert (same.start.tolist(), same.end.tolist()) == ([1000, 1100, 200], [1100, 1200, 1500])


def test_an_overlap_the_recording_had_is_kept_and_not_widened(build):
    # a CUDA graph's nodes on one stream, or skew: A (s7) launched at 0, [0,100); B (s7) launched at
    # 10, recorded [60,160): B overlapped A by 40.  A shortened to 50 ns (a change): B starts at
    # max(M' + slack, A's end - 40) = max(50 - 40, 50 - 40) = 10, [10,110): 40 ns over A's
    # replayed [0,50), as recorded, never more
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 5, b.kernel(0, 100, "a", stream=7))
    b.runtime(10, 15, b.kernel(60, 160, "b", stream=7))
    deps = dependencies(open_trace(build(b)))
    rp = replay(deps, 1.0, change=Change("a shorter", durations=(np.array([0]), np.array([50]))))
    assert (rp.start.tolist(), rp.end.tolist()) == ([0, 10], [50, 110])
