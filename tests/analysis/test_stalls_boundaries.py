"""Rule 4 of METRICS.md "Stalls" at its limits, on exports built with known answers.

One timeline, drawn once, with the blocking copy's end and the stalled kernel's start moved
around ``ready``: a stall of exactly 1 ns, none when the copy ends at ``ready``, none when the
kernel (clock skew) starts at ``ready`` although the copy ends later.  Host calls at t (runtime
rows), GPU ops [start, end).  Found by mutation testing (docs/testing.md, ``stalls``).
"""

from __future__ import annotations

import pytest

from profiler.analysis.dependencies import NO_TIME, dependencies
from profiler.analysis.stalls import op_stalls
from profiler.analysis.whatif import trace_whatif
from profiler.runs.result import analyze
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace

MIB = 1 << 20


def waited_copy(copy_end: int, kernel_start: int, kernel: str = "fusion_b") -> ExportBuilder:
    # host:  50 launch A (s7)   100 launch H2D (s20)   150 record e5 on s20
    #        160 wait e5 on s7                          300 launch B (s7)
    # s7     A [60,500)                  B [kernel_start, kernel_start + 100)
    # s20           H2D [200, copy_end) 2 MiB
    # B: ready = max(A.end 500, launch 300) = 500; dep = copy_end;
    # stall = max(0, min(kernel_start, copy_end) - 500) if copy_end > 500, else 0
    b = ExportBuilder()
    b.gpu(0)
    for t, op, args, stream in (
        (50, "kernel", (60, 500, "fusion_a"), 7),
        (100, "copy", (200, copy_end, "h2d", 2 * MIB), 20),
        (300, "kernel", (kernel_start, kernel_start + 100, kernel), 7),
    ):
        if t == 300:
            b.event_record(150, 5, stream=20)
            b.stream_wait(160, 5, stream=7)
        corr = getattr(b, op)(*args, stream=stream)
        b.runtime(t, t + 5, corr)
    return b


@pytest.mark.parametrize(
    ("copy_end", "kernel_start", "stall"),
    [
        (501, 600, 1),  # dep = ready + 1, B starts later: min(600, 501) - 500 = 1 ns
        (500, 600, 0),  # dep = ready: not dep > ready, no stall
        (499, 600, 0),  # the copy ended before A did: no stall
        (900, 500, 0),  # skew: B recorded at ready although dep 900 > 500: min(500, 900) - 500 = 0
        (900, 501, 1),  # one ns later: min(501, 900) - 500 = 1
    ],
)
def test_stall_at_its_limits(build, copy_end, kernel_start, stall):
    path = build(waited_copy(copy_end, kernel_start))
    st = analyze(open_trace(path))["devices"]["0"]["stalls"]
    count = 1 if stall else 0
    assert st["by_blocker"]["h2d"] == {"count": count, "stall_ns": stall}
    assert st["by_blocker"]["offload"] == {"count": count, "stall_ns": stall}
    assert st["compute_stalled_by_offload_ns"] == stall
    assert st["nccl_stalled_by_offload_ns"] == 0
    deps = dependencies(open_trace(path))
    per_op = op_stalls(deps, deps.ops.start, deps.ops.end)
    assert sorted(per_op.stall.tolist()) == [0, 0, stall]
    assert per_op.caused.sum() == stall  # all of it caused by the copy
    # B (the op with waits) was ready at 500, its blocker the copy; A and the copy have no waits:
    # ready NO_TIME, blocker -1.  The ops' rows, by their starts: A 60, the copy 200, B kernel_start
    row = dict(zip(deps.ops.start.tolist(), range(len(deps.ops)), strict=True))
    a, h2d, b = row[60], row[200], row[kernel_start]
    assert [int(per_op.ready[r]) for r in (a, h2d, b)] == [NO_TIME, NO_TIME, 500]
    assert [int(per_op.blocker[r]) for r in (a, h2d, b)] == [-1, -1, h2d]


def test_a_one_ns_stall_of_an_nccl_kernel(build):
    # as above with B an NCCL kernel: the 1 ns goes to nccl_stalled_by_offload_ns, not to compute
    path = build(waited_copy(501, 600, kernel="ncclDevKernel_AllReduce"))
    st = analyze(open_trace(path))["devices"]["0"]["stalls"]
    assert (st["nccl_stalled_by_offload_ns"], st["compute_stalled_by_offload_ns"]) == (1, 0)
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 1}


def test_replayed_stalls_start_at_the_replayed_launch(build):
    # one thread; host calls [start, end), GPU ops [start, end):
    #   cudaMemcpy h2d  call [0,1010)     C1 [10,1000) s20     (blocking: returns 10 ns after C1)
    #   launch H2       call [1012,1014)  H2 [1040,1500) s20   28 ns after max(C1 end 1000, launch 1012)
    #   record e5 on s20 [1015,1065), wait e5 on s7 [1070,1120) (K's blocker: H2, ending at 1500)
    #   launch K        call [1130,1132)  K [1510,1600) s7     10 ns after max(launch 1130, dep 1500)
    # recorded: ready(K) = launch 1130, dep 1500: stall = min(1510, 1500) - 1130 = 370.
    # what-if F = 2, host synchronization modeled: C1 [10,1990), its call returns at 2000 (990 later),
    # so the later launches move by 990: H2's to 2002, K's to 2120.  H2 [max(1990, 2002) + 28, + 920)
    # = [2030,2950); K starts at max(2120, 2950) + 10 = 2960.  Replayed: ready = K's replayed launch
    # 2120, dep 2950: stall = min(2960, 2950) - 2120 = 830 (from the recorded launch 1130: 1820).
    b = ExportBuilder()
    b.gpu(0)
    c1 = b.copy(10, 1000, "h2d", 8 * MIB, stream=20)
    b.runtime(0, 1010, c1, name="cudaMemcpy_v3020")
    h2 = b.copy(1040, 1500, "h2d", MIB, stream=20)
    b.runtime(1012, 1014, h2, name="cuMemcpyAsync")
    b.event_record(1015, 5, stream=20)
    b.stream_wait(1070, 5, stream=7)
    k = b.kernel(1510, 1600, "fusion", stream=7)
    b.runtime(1130, 1132, k, name="cuLaunchKernel")
    trace = open_trace(build(b))
    recorded = analyze(trace)["devices"]["0"]["stalls"]
    assert recorded["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 370}
    doc = trace_whatif(trace, 2.0)
    assert doc["host_sync_modeled"] is True
    replayed = doc["devices"]["0"]["stalls"]
    assert replayed["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 830}
    assert replayed["compute_stalled_by_offload_ns"] == 830


def test_waits_that_resolve_to_nothing_leave_every_op_unblocked(build):
    # a wait on an event never recorded: the export has waits but no op waits for another, so
    # op_stalls returns before rule 4; every op still has its row in each array: stall 0,
    # blocker -1 and ready NO_TIME (the Stalls docstring), which the per-range stalls and the
    # findings read.  Host: 100 launch H2D (s20) [200,1200); 160 wait e99 on s7; 300 launch K [1250,1300)
    b = ExportBuilder()
    b.gpu(0)
    c = b.copy(200, 1200, "h2d", MIB, stream=20)
    b.runtime(100, 105, c, name="cuMemcpyAsync")
    b.stream_wait(160, 99, stream=7)
    k = b.kernel(1250, 1300, "k", stream=7)
    b.runtime(300, 305, k)
    b.nvtx(90, 310, "layer_1")
    trace = open_trace(build(b))
    deps = dependencies(trace)
    assert deps.target.size == 0
    st = op_stalls(deps, deps.ops.start, deps.ops.end)
    assert (st.stall.tolist(), st.blocker.tolist(), st.ready.tolist()) == ([0, 0], [-1, -1], [NO_TIME, NO_TIME])
    assert st.caused.tolist() == [0, 0] and st.caused_by_copies().height == 0
    doc = analyze(trace, by="range")
    assert doc["devices"]["0"]["stalls"]["waits"] == {"total": 1, "resolved": 0, "unresolved": 1}
    (layer,) = doc["ranges"]
    assert layer["copies"]["h2d"]["stall_ns"] == 0


def several_kinds() -> ExportBuilder:
    # one device, one thread; each victim alone on its stream, so ready = its launch.  Host calls
    # 100 apart (t), GPU ops [start, end):
    #   100 launch H1 h2d (s20) [1000,2000)      200 record e1 on s20
    #   300 launch D1 d2h (s21) [1000,2500)      400 record e2 on s21
    #   500 launch P kernel (s22) [1000,3000)    600 record e3 on s22
    #   700 wait e1 on s7,  800 launch K1 compute (s7) [2100,2200): 2000 - 800 = 1200
    #   900 wait e2 on s8, 1000 launch K2 compute (s8) [2600,2700): 2500 - 1000 = 1500
    #  1100 wait e1 on s9, 1200 launch N1 NCCL (s9) [2050,2100): 2000 - 1200 = 800
    #  1300 wait e2 on s10, 1400 launch N2 NCCL (s10) [2550,2600): 2500 - 1400 = 1100
    #  1500 wait e3 on s11, 1600 launch N3 NCCL (s11) [3050,3100): 3000 - 1600 = 1400 (by a kernel)
    # (stall = min(start, dep) - ready; every dep is before the victim's start)
    b = ExportBuilder()
    b.gpu(0)
    nccl = "ncclDevKernel_AllReduce"
    for t, op, args, stream, event in (
        (100, "copy", (1000, 2000, "h2d", MIB), 20, 1),
        (300, "copy", (1000, 2500, "d2h", MIB), 21, 2),
        (500, "kernel", (1000, 3000, "producer"), 22, 3),
    ):
        corr = getattr(b, op)(*args, stream=stream)
        b.runtime(t, t + 5, corr)
        b.event_record(t + 100, event, stream=stream)
    for t, args, stream, event in (
        (700, (2100, 2200, "k1"), 7, 1),
        (900, (2600, 2700, "k2"), 8, 2),
        (1100, (2050, 2100, nccl), 9, 1),
        (1300, (2550, 2600, nccl), 10, 2),
        (1500, (3050, 3100, nccl), 11, 3),
    ):
        b.stream_wait(t, event, stream=stream)
        corr = b.kernel(*args, stream=stream)
        b.runtime(t + 100, t + 105, corr)
    return b


def test_stalls_of_several_kinds_add_up_per_device(build):
    st = analyze(open_trace(build(several_kinds())))["devices"]["0"]["stalls"]
    assert st["waits"] == {"total": 5, "resolved": 5, "unresolved": 0}
    assert st["by_blocker"] == {
        "h2d": {"count": 2, "stall_ns": 1200 + 800},  # K1, N1
        "d2h": {"count": 2, "stall_ns": 1500 + 1100},  # K2, N2
        "offload": {"count": 4, "stall_ns": 1200 + 800 + 1500 + 1100},
        "kernel": {"count": 1, "stall_ns": 1400},  # N3
        "other": {"count": 0, "stall_ns": 0},
    }
    assert st["compute_stalled_by_offload_ns"] == 1200 + 1500  # K1, K2
    assert st["nccl_stalled_by_offload_ns"] == 800 + 1100  # N1, N2 (not N3: a kernel held it)


def test_per_range_stalls_count_copies_only_to_the_nanosecond(build):
    # several_kinds with a range around each blocker's launch, and the 1 ns stall of waited_copy: a
    # range's stall_ns is the stall its copies caused (METRICS.md), a kernel's never counts
    b = several_kinds()
    for t, name in ((100, "h1"), (300, "d1"), (500, "p")):
        b.nvtx(t - 10, t + 10, name)
    ranges = {r["name"]: r["copies"] for r in analyze(open_trace(build(b)), by="range")["ranges"]}
    assert ranges["h1"]["h2d"]["stall_ns"] == 1200 + 800  # K1, N1
    assert ranges["d1"]["d2h"]["stall_ns"] == 1500 + 1100  # K2, N2
    assert {c: v["stall_ns"] for c, v in ranges["p"].items()} == {"h2d": 0, "d2h": 0, "offload": 0}
    one = waited_copy(501, 600)
    one.nvtx(90, 110, "layer_1")  # the copy's launch (100)
    (layer,) = analyze(open_trace(build(one)), by="range")["ranges"]
    assert (layer["name"], layer["copies"]["h2d"]["stall_ns"]) == ("layer_1", 1)
