"""What the copies cost (METRICS.md "Stalls", "Copy bandwidth by context", "What-if"),
on exports built with known answers, checked to the nanosecond.

Each scenario draws its timeline in a comment and works the answer out by
hand.  Times: host calls at t (runtime rows), GPU ops [start, end).  A stream
wait written at t has its synchronization row at t + 10 (``ExportBuilder.sync``),
which is its METRICS.md time ``t_w``.
"""

from __future__ import annotations

import sqlite3

import pytest

from profiler.analysis.whatif import trace_whatif
from profiler.runs.result import analyze
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.costs_runs import launched, prefetch_stall

MIB = 1 << 20


def stalls_of(path, dev: str = "0") -> dict:
    return analyze(open_trace(path))["devices"][dev]["stalls"]


def test_compute_kernel_stalled_by_h2d_prefetch(build):
    b = ExportBuilder()
    prefetch_stall(b)
    st = stalls_of(build(b))
    assert st["waits"] == {"total": 1, "resolved": 1, "unresolved": 0}
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 700}
    assert st["by_blocker"]["offload"] == {"count": 1, "stall_ns": 700}
    assert st["by_blocker"]["d2h"] == {"count": 0, "stall_ns": 0}
    assert st["by_blocker"]["kernel"] == {"count": 0, "stall_ns": 0}
    assert st["compute_stalled_by_offload_ns"] == 700
    assert st["nccl_stalled_by_offload_ns"] == 0


def test_nccl_kernel_stalled_by_h2d_counts_as_nccl(build):
    b = ExportBuilder()
    b.gpu(0)
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20)
    b.event_record(150, 5, stream=20)
    b.stream_wait(160, 5, stream=9)
    launched(b, 300, "kernel", 1250, 1400, "ncclDevKernel_AllReduce", stream=9)
    # no op before on s9: ready = launch 300; dep 1200 -> stall = 1200 - 300 = 900
    st = stalls_of(build(b))
    assert st["nccl_stalled_by_offload_ns"] == 900
    assert st["compute_stalled_by_offload_ns"] == 0
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 900}


def test_d2h_waits_for_the_kernel_that_produced_it(build):
    # host: 1000 launch P (s7)  1050 record e3 on s7  1060 wait e3 on s21 (t_w 1070)  1080 launch D2H (s21)
    # s7   P [1100,2000)      s21  D2H [2005,3000)
    # D2H: ready = launch 1080; dep = 2000 -> stall = min(2005, 2000) - 1080 = 920, blocker: a kernel
    b = ExportBuilder()
    launched(b, 1000, "kernel", 1100, 2000, "producer", stream=7)
    b.event_record(1050, 3, stream=7)
    b.stream_wait(1060, 3, stream=21)
    launched(b, 1080, "copy", 2005, 3000, "d2h", 4 * MIB, stream=21)
    st = stalls_of(build(b))
    assert st["by_blocker"]["kernel"] == {"count": 1, "stall_ns": 920}
    assert st["by_blocker"]["offload"] == {"count": 0, "stall_ns": 0}
    assert st["compute_stalled_by_offload_ns"] == 0


def test_event_id_reused_resolves_to_the_latest_record_before_the_wait(build):
    # e5 is recorded on s20 after each of three copies; each wait takes the record just before it
    # copy1 launch 100 [200,300), record 150 | copy2 launch 1000 [1100,1900), record 1050
    # copy3 launch 5000 [5100,5200), record 5050
    # wait 1060 (t_w 1070) on s7 -> record 1050 -> copy2; kernel K launch 1080, starts 1950: ready 1080, dep 1900
    # stall = 1900 - 1080 = 820 (copy1 would give none: it ends at 300)
    b = ExportBuilder()
    for launch, s, e, rec in ((100, 200, 300, 150), (1000, 1100, 1900, 1050), (5000, 5100, 5200, 5050)):
        launched(b, launch, "copy", s, e, "h2d", MIB, stream=20)
        b.event_record(rec, 5, stream=20)
    b.stream_wait(1060, 5, stream=7)
    launched(b, 1080, "kernel", 1950, 2000, "k", stream=7)
    # a wait exactly at a record's time takes that record (t_rec <= t_w): record 5050, wait row at 5040+10
    b.stream_wait(5040, 5, stream=8)
    launched(b, 5060, "kernel", 5300, 5400, "k2", stream=8)  # dep 5200 > ready 5060 -> 5200 - 5060 = 140
    st = stalls_of(build(b))
    assert st["waits"] == {"total": 2, "resolved": 2, "unresolved": 0}
    assert st["by_blocker"]["h2d"] == {"count": 2, "stall_ns": 820 + 140}


def test_wait_without_a_record_and_wait_before_its_record_are_unresolved(build):
    b = ExportBuilder()
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20)
    b.stream_wait(120, 99, stream=7)  # event 99 is never recorded
    b.stream_wait(130, 5, stream=7)  # event 5 is recorded later (t_w 140 < t_rec 150)
    b.event_record(150, 5, stream=20)
    launched(b, 300, "kernel", 1250, 1300, "k", stream=7)
    st = stalls_of(build(b))
    assert st["waits"] == {"total": 2, "resolved": 0, "unresolved": 2}
    assert st["by_blocker"]["offload"]["stall_ns"] == 0


def test_record_that_completes_nothing_leaves_its_wait_unresolved(build):
    b = ExportBuilder()
    b.event_record(50, 5, stream=20)  # nothing was launched on s20 before it
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20)
    b.stream_wait(160, 5, stream=7)
    launched(b, 300, "kernel", 1250, 1300, "k", stream=7)
    assert stalls_of(build(b))["waits"] == {"total": 1, "resolved": 0, "unresolved": 1}


def test_wait_on_the_streams_own_work_is_ignored(build):
    b = ExportBuilder()
    launched(b, 50, "kernel", 60, 500, "a", stream=7)
    b.event_record(100, 5, stream=7)
    b.stream_wait(110, 5, stream=7)
    launched(b, 300, "kernel", 520, 600, "b", stream=7)
    st = stalls_of(build(b))
    assert st["waits"] == {"total": 1, "resolved": 1, "unresolved": 0}  # resolved, then ignored (rule 3)
    assert all(v == {"count": 0, "stall_ns": 0} for v in st["by_blocker"].values())


def test_two_processes_with_the_same_stream_and_event_ids(build):
    # pid 100: the copy ends at 1200; pid 200: its copy ends at 400. Same streams, same event id 5.
    # pid 200's kernel (launch 300, start 450) waits for pid 200's copy: ready 300, dep 400 -> 100.
    # Matched across processes it would wait for the copy ending at 1200 instead.
    b = ExportBuilder()
    prefetch_stall(b)  # pid 100: stall 700
    launched(b, 100, "copy", 200, 400, "h2d", MIB, stream=20, pid=200, tid=7)
    b.event_record(150, 5, stream=20, pid=200, tid=7)
    b.stream_wait(160, 5, stream=7, pid=200, tid=7)
    launched(b, 300, "kernel", 450, 500, "k", stream=7, pid=200, tid=7)
    st = stalls_of(build(b))
    assert st["waits"]["total"] == 2
    assert st["by_blocker"]["h2d"] == {"count": 2, "stall_ns": 700 + 100}


def test_ops_without_runtime_rows(build):
    # s20: copy1 launched 100 [200,1550); copy2 has no runtime row [1560,1800)
    # the record at 1250 completes copy1: copy2 has no launch time to compare (rule 1)
    # s7: X has no runtime row [1220,1240); K launched 1290 [1600,1700)
    # the wait (t_w 1270) applies to K, the first op with a launch time >= t_w (X has none) (rule 3)
    # K: ready = max(X.end 1240, 1290) = 1290; dep = 1550 -> stall = min(1600, 1550) - 1290 = 260
    b = ExportBuilder()
    launched(b, 100, "copy", 200, 1550, "h2d", MIB, stream=20)
    b.copy(1560, 1800, "h2d", MIB, stream=20)
    b.event_record(1250, 5, stream=20)
    b.stream_wait(1260, 5, stream=7)
    b.kernel(1220, 1240, "x", stream=7)
    launched(b, 1290, "kernel", 1600, 1700, "k", stream=7)
    st = stalls_of(build(b))
    assert st["waits"] == {"total": 1, "resolved": 1, "unresolved": 0}
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 260}


def test_clock_skew_op_starting_before_its_blocker_ends(build):
    # as prefetch_stall, but B's recorded start (1150) is before the copy's end (1200):
    # stall = min(1150, 1200) - 500 = 650; and a C that starts before its ready time: no stall
    b = ExportBuilder()
    prefetch_stall(b, b_start=1150)
    b.event_record(170, 5, stream=20)
    b.stream_wait(310, 5, stream=9)
    launched(b, 400, "kernel", 350, 450, "skewed", stream=9)  # starts before its launch (400): no stall
    st = stalls_of(build(b))
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 650}


def test_stall_ns_per_range_goes_to_the_range_of_the_blocking_copy(build):
    b = ExportBuilder()
    prefetch_stall(b)  # the h2d copy is launched at 100 ...
    b.nvtx(90, 110, "layer_1")  # ... inside layer_1 on the same thread
    b.nvtx(290, 310, "layer_2")  # the stalled kernel B is launched in layer_2
    doc = analyze(open_trace(build(b)), by="range")
    ranges = {r["name"]: r for r in doc["ranges"]}
    assert ranges["layer_1"]["copies"]["h2d"]["stall_ns"] == 700
    assert ranges["layer_1"]["copies"]["offload"]["stall_ns"] == 700
    assert ranges["layer_1"]["copies"]["d2h"]["stall_ns"] == 0
    # the stalled kernel's own range carries nothing: a stall belongs to the copy that caused it
    assert ranges["layer_2"]["copies"]["offload"]["stall_ns"] == 0


def test_stall_of_a_copy_on_another_device_counts_where_the_copy_is(build):
    # the copy runs on device 1, the stalled kernel on device 0 (a cross-device wait)
    b = ExportBuilder()
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20, device=1)
    b.event_record(150, 5, stream=20, device=1)
    b.stream_wait(160, 5, stream=7, device=0)
    launched(b, 300, "kernel", 1210, 1500, "k", stream=7, device=0)
    b.nvtx(90, 110, "layer_1")
    doc = analyze(open_trace(build(b)), by="range")
    assert doc["devices"]["0"]["stalls"]["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 900}
    assert doc["devices"]["1"]["stalls"]["by_blocker"]["h2d"]["stall_ns"] == 0
    (entry,) = doc["ranges"]
    assert (entry["name"], entry["device"], entry["copies"]["h2d"]["stall_ns"]) == ("layer_1", "1", 900)


def test_no_event_tables_gives_zeros(build):
    b = ExportBuilder()
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20)
    st = stalls_of(build(b))
    assert st == {
        "waits": {"total": 0, "resolved": 0, "unresolved": 0},
        "by_blocker": {c: {"count": 0, "stall_ns": 0} for c in ("h2d", "d2h", "offload", "kernel", "other")},
        "compute_stalled_by_offload_ns": 0,
        "nccl_stalled_by_offload_ns": 0,
    }


def test_bad_event_rows_are_counted_not_fatal(build, tmp_path):
    """NULLs where nsys never writes them, unknown syncType values, ids that match nothing."""
    b = ExportBuilder(omit={"CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"})
    launched(b, 100, "copy", 200, 1200, "h2d", MIB, stream=20)
    launched(b, 300, "kernel", 1210, 1500, "k", stream=7)
    b.runtime(150, 160, 500, name="cuEventRecord")
    path = build(b)
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (deviceId INTEGER, contextId INTEGER, "
            "greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, eventId INTEGER)"
        )
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, end INTEGER, deviceId INTEGER, "
            "contextId INTEGER, greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
            "syncType INTEGER, eventId INTEGER)"
        )
        gpid = (1 << 48) | (100 << 24)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (?, 1, NULL, ?, ?, ?, ?)",
            [
                (0, 20, 500, gpid, 5),  # good: completes the copy
                (0, 20, None, gpid, 6),  # no correlation id: no time, ignored
                (0, None, 501, gpid, 7),  # no stream; its correlation id matches no runtime row
                (0, 20, 500, None, None),  # no process, no event id
            ],
        )
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, 0, 1, NULL, ?, ?, ?, ?, ?)",
            [
                (170, 180, 7, 600, gpid, 99, 5),  # unknown syncType: a wait all the same -> stall 700
                (171, 181, 7, 601, gpid, 3, 6),  # event 6 has no usable record: unresolved
                (172, 182, 7, 602, gpid, 3, 7),  # event 7's record has no time: unresolved
                (173, 183, 7, 603, gpid, 3, 12345),  # no such event: unresolved
                (None, None, 7, 604, gpid, 3, 5),  # no time: unresolved
                (174, 184, 4294967295, 605, gpid, 3, 5),  # no stream: an event synchronize, not a wait
                (175, 185, None, 606, gpid, 3, None),  # neither: not a wait
                (176, 186, 77, 607, None, 3, 5),  # no process: unresolved
            ],
        )
    con.close()
    st = stalls_of(path)
    assert st["waits"] == {"total": 6, "resolved": 1, "unresolved": 5}
    # the good wait applies to K (launch 300, nothing before it on s7): 1200 - 300
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 900}


def test_contexts_and_slowdown(build):
    # d2h copies of 2 MiB on device 0; kernels [0,1000); another copy stream
    # c1 [2000,3000): alone            -> 2 MiB / 1000 ns
    # c2 [500,1500):  half under kernels (500 of 1000): 2*500 >= 1000 -> kernels
    # c3 [4000,5000) with a small h2d [4000,4600) beside it: copies (600 of 1000)
    # c4 [6000,7000) with kernel [6000,6300) and copy [6600,6900): 300 and 300 -> mixed
    # c5 [8000,8000): zero length, not counted; c6 of 1 MiB - 1 byte: too small
    b = ExportBuilder()
    b.kernel(0, 1000, "k1")
    b.kernel(6000, 6300, "k2")
    for s, e in ((2000, 3000), (500, 1500), (4000, 5000), (6000, 7000), (8000, 8000)):
        b.copy(s, e, "d2h", 2 * MIB, stream=20)
    b.copy(9000, 9100, "d2h", MIB - 1, stream=20)
    b.copy(4000, 4600, "h2d", 1000, stream=21)
    b.copy(6600, 6900, "d2d", 1000, stream=22)
    d2h = analyze(open_trace(build(b)))["devices"]["0"]["copies"]["d2h"]
    ctx = d2h["contexts"]
    per = 2 * MIB
    assert ctx["alone"] == {"count": 1, "bytes": per, "duration_sum_ns": 1000, "gbps": per / 1000}
    assert ctx["kernels"] == {"count": 1, "bytes": per, "duration_sum_ns": 1000, "gbps": per / 1000}
    assert ctx["copies"] == {"count": 1, "bytes": per, "duration_sum_ns": 1000, "gbps": per / 1000}
    assert ctx["mixed"] == {"count": 1, "bytes": per, "duration_sum_ns": 1000, "gbps": per / 1000}
    assert d2h["slowdown_with_kernels"] == pytest.approx(1.0)


def test_slowdown_with_kernels_when_copies_crawl_beside_kernels(build):
    b = ExportBuilder()
    b.kernel(0, 10_000, "memory_bound")
    b.copy(0, 4000, "h2d", 4 * MIB, stream=20)  # beside kernels: 4 MiB in 4000 ns
    b.copy(20_000, 21_000, "h2d", 4 * MIB, stream=20)  # alone: 4 MiB in 1000 ns
    h2d = analyze(open_trace(build(b)))["devices"]["0"]["copies"]["h2d"]
    assert h2d["slowdown_with_kernels"] == pytest.approx(4.0)
    off = analyze(open_trace(build(b)))["devices"]["0"]["copies"]["offload"]
    assert off["contexts"]["alone"]["count"] == 1 and off["contexts"]["kernels"]["count"] == 1


# --- what-if ---------------------------------------------------------------------------------


def test_whatif_prefetch_scenario_by_hand(build):
    b = ExportBuilder()
    prefetch_stall(b)
    path = build(b)
    t = open_trace(path)
    same = trace_whatif(t, 1.0)["devices"]["0"]
    assert same["measured_span_ns"] == same["span_ns"] == 1500 - 60
    assert same["stalls"]["compute_stalled_by_offload_ns"] == 700
    # F = 0.5: the copy [200,700); B: slack = 1210 - max(500, 300, 1200) = 10; M' = max(500, 300, 700) -> [710,1000)
    half = trace_whatif(t, 0.5)["devices"]["0"]
    assert half["span_ns"] == 1000 - 60
    assert half["stalls"]["compute_stalled_by_offload_ns"] == 700 - 500  # min(710,700) - 500
    # F = 0: the copy [200,200); B: M' = 500 -> [510,800); nothing stalls
    zero = trace_whatif(t, 0.0)["devices"]["0"]
    assert zero["span_ns"] == 800 - 60
    assert zero["stalls"]["by_blocker"]["h2d"] == {"count": 0, "stall_ns": 0}


def test_whatif_steps(build):
    b = ExportBuilder()
    prefetch_stall(b)
    b.nvtx(40, 1600, "step=0", domain_id=1)
    b.domain(1, "profile-step")
    path = build(b)
    doc = trace_whatif(open_trace(path), 0.5)
    (step,) = doc["devices"]["0"]["steps"]
    assert step["name"] == "step=0"
    assert step["measured_ns"] == 1560
    assert step["saving_ns"] == 1500 - 1000
    assert step["predicted_ns"] == 1560 - 500
    assert (step["gpu_span_ns"], step["replayed_gpu_span_ns"]) == (1440, 940)


def test_whatif_dependency_cycle_under_skew_keeps_recorded_starts(build):
    # host: C launch 100 (s20), record e1 on s20 at 150, wait e1 on s7 at 160 -> applies to A (launch 200)
    #       record e2 on s7 at 300 (completes A), wait e2 on s20 at 310 -> applies to D (launch 500)
    #       B launch 400 (s7)
    # GPU (skewed): D [50,80)  C [300,400) h2d  B [500,600)  A [1000,1100)
    # D is before C on s20, so C depends on D; D waits for A; A waits for C: A, C, D form a cycle.
    b = ExportBuilder()
    launched(b, 100, "copy", 300, 400, "h2d", MIB, stream=20)  # C
    b.event_record(150, 1, stream=20)
    b.stream_wait(160, 1, stream=7)
    launched(b, 200, "kernel", 1000, 1100, "A", stream=7)
    b.event_record(300, 2, stream=7)
    b.stream_wait(310, 2, stream=20)
    launched(b, 400, "kernel", 500, 600, "B", stream=7)
    launched(b, 500, "kernel", 50, 80, "D", stream=20)
    t = open_trace(build(b))
    one = trace_whatif(t, 1.0)["devices"]["0"]
    assert one["span_ns"] == one["measured_span_ns"] == 1100 - 50
    half = trace_whatif(t, 0.5)["devices"]["0"]
    assert half["span_ns"] == 1100 - 50  # A keeps its start; C is [300,350)


def sync_copy_loop(b: ExportBuilder) -> None:
    # one thread, everything on stream 7:
    # cudaMemcpy h2d  call [0,1010)     copy [10,1000)
    # launch kernel   call 1020          kernel [1030,1100)
    # cudaMemcpy d2h  call [1110,2110)  copy [1120,2100)
    # step=0 [0,2120)
    b.domain(1, "profile-step")
    b.nvtx(0, 2120, "step=0", domain_id=1)
    c1 = b.copy(10, 1000, "h2d", 8 * MIB, stream=7)
    b.runtime(0, 1010, c1, name="cudaMemcpy_v3020")
    launched(b, 1020, "kernel", 1030, 1100, "k", stream=7)
    c2 = b.copy(1120, 2100, "d2h", 8 * MIB, stream=7)
    b.runtime(1110, 2110, c2, name="cudaMemcpy_v3020")


def test_whatif_host_synchronization_by_hand(build):
    b = ExportBuilder()
    sync_copy_loop(b)
    t = open_trace(build(b))
    # F = 0.5: copy1 [10,505); call 1 returns 10 ns after it (its lag): 515, 495 earlier than recorded;
    # the kernel's launch moves to 525: [535,605); copy2's call starts at 615: [625,1115); call 2 returns at 1125
    doc = trace_whatif(t, 0.5)
    assert doc["host_sync_modeled"] is True
    dev = doc["devices"]["0"]
    assert (dev["measured_span_ns"], dev["span_ns"]) == (2090, 1105)
    (step,) = dev["steps"]
    assert step["model"] == "host"
    assert step["predicted_ns"] == 2120 - (2110 - 1125)  # the step ends as its thread's last call returns
    # host launch times as recorded: copy1 [10,505), kernel [1030,1100), copy2 [1120,1610)
    fixed = trace_whatif(t, 0.5, model_host=False)
    assert fixed["host_sync_modeled"] is False
    assert fixed["devices"]["0"]["span_ns"] == 1600
    assert fixed["devices"]["0"]["steps"][0]["model"] == "gpu"
    assert trace_whatif(t, 1.0)["devices"]["0"]["span_ns"] == 2090  # F = 1: nothing moves


def test_whatif_cli_links(build):
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    prefetch_stall(b)
    path = build(b)
    out = run_cli("whatif", str(path), "--link", "nvlink-c2c", "--json")
    assert out.returncode == 0, out.stderr
    import json

    doc = json.loads(out.stdout)
    assert doc["copy_scale"] == pytest.approx(63.0 / 450.0)
    assert doc["link"] == {"from": "PCIe Gen5 x16", "to": "NVLink-C2C", "from_gbps": 63.0, "to_gbps": 450.0}
    text = run_cli("whatif", str(path), "--copy-scale", "0.5")
    assert text.returncode == 0, text.stderr
    assert "span" in text.stdout
    unknown = run_cli("whatif", str(path), "--link", "pcie9")
    assert unknown.returncode == 2 and "unknown link" in unknown.stderr and "Traceback" not in unknown.stderr


def test_whatif_refuses_a_copy_scale_that_is_not_a_finite_number(build, capsys):
    # the replay refuses them too (test_replay_cases); the command says so in one line, exit 2
    from profiler.cli import main

    b = ExportBuilder()
    b.gpu(0)
    prefetch_stall(b)
    path = build(b)
    for bad in ("inf", "nan", "-1"):
        assert main(["whatif", str(path), "--copy-scale", bad]) == 2
        err = capsys.readouterr().err
        assert "--copy-scale must be a finite number >= 0, got" in err and "internal error" not in err


def test_whatif_needs_the_source_link_for_an_unknown_gpu(build):
    b = ExportBuilder()
    b.gpu(0, "Mystery Accelerator 9000")
    prefetch_stall(b)
    path = build(b)
    out = run_cli("whatif", str(path), "--link", "pcie6")
    assert out.returncode == 2
    assert "--from-link" in out.stderr and str(path) in out.stderr
    ok = run_cli("whatif", str(path), "--link", "pcie6", "--from-link", "pcie4", "--json")
    assert ok.returncode == 0, ok.stderr
