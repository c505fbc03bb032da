"""A finding's saving and its basis (``findings/saving.py``; METRICS.md "Savings"), derived by hand:
the window each kind of finding is a share of, the sentence added when the replay gives back under a
tenth of the attributed time (at its limits), and the copy-free replay without copies to remove.
Written from the mutation run of ``findings_savings`` (docs/testing.md)."""

from __future__ import annotations

import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings.evidence import Evidence
from profiler.analysis.findings.saving import NO_TIME_COST, copy_free
from profiler.synthetic.export import PAGEABLE, ExportBuilder
from profiler.trace import open_trace
from tests.helpers.findings_runs import (
    H100,
    MIB,
    TID,
    edges_case,
    findings_of,
    fired,
    launched,
    median_group,
    steps,
    waited_copy,
    warmup_in_capture,
    write_run,
)

HOST_PACED = (
    "; the replay with the 1 h2d/d2h copies of GPU 0 with exposed time removed gives back only 10.00 µs: the GPU "
    "work that ends GPU 0's window there (1 op) follows an op its host launched 10.0 µs before the end; the host "
    "paces the GPU: the program is host-bound"
)


def _exposed(tmp_path, launch: int, name: str, **thresholds) -> dict:
    """An h2d copy over [1, 101) us, exposed (100 us attributed), and the kernel that waits for it over
    [101, 111) us, launched at *launch*: without the copy the kernel starts at its launch."""
    b = ExportBuilder()
    waited_copy(b, (1_000, 101_000), (101_000, 111_000), launch=launch)
    (f,) = fired(findings_of(write_run(tmp_path, b, name=name), **thresholds), "exposed-copies")
    assert f["attributed_ns"] == 100_000 and f["saving_basis"] == "GPU 0's window"
    return f


EXPOSED = (
    "GPU 0: 100% of the h2d/d2h copy time ran with no kernel beside it: 100 µs of 100 µs, 91% of the 110 µs "
    "window. Copies: 1 h2d of 1.0 MiB, 1.0 MiB in all, 100 µs exposed; spread over the window: 1.00 µs to 11.0 µs "
    "of it in each tenth; most exposed: h2d 1.0 MiB at 0.0 µs (100 µs)"
)  # the rule's own verdict on these copies (exposed.py)


def _added(f: dict) -> str:
    """What the saving added to the rule's verdict."""
    assert f["verdict"].startswith(EXPOSED)
    return f["verdict"][len(EXPOSED) :]


def test_a_saving_of_a_tenth_of_the_attributed_time_at_its_limits(tmp_path):
    # launched at 91 us: the kernel runs [91, 101) us, the window ends at 101 us instead of 111 us:
    # 10 us given back, exactly a tenth of the 100 us attributed: nothing is added to the verdict
    f = _exposed(tmp_path, 91_000, "tenth")
    assert (f["saving_ns"], f["saving_basis_ns"], _added(f)) == (10_000, 110_000, "")
    # launched 1 ns later: 9999 ns, under a tenth.  The kernel that ends the window follows its launch,
    # 10 us before the end (101001 - 91001): the host paces it
    f = _exposed(tmp_path, 91_001, "under")
    assert (f["saving_ns"], _added(f)) == (9_999, HOST_PACED)
    # the sentence is for findings of at least severity_min_cost_ns: 100 us is, 100 us + 1 ns is not
    assert _added(_exposed(tmp_path, 91_001, "at", severity_min_cost_ns=100_000)) == HOST_PACED
    assert _added(_exposed(tmp_path, 91_001, "over", severity_min_cost_ns=100_001)) == ""


def test_a_small_saving_on_a_gpu_no_host_paces(tmp_path):
    b = ExportBuilder()
    b.copy(1_000, 101_000, "h2d", MIB, stream=20)
    b.kernel(101_000, 111_000, "consumer")  # no launch, no wait: it keeps its recorded start
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-copies")
    # without the copy the kernel still ends the window at 111 us: nothing given back, and no launch
    # to follow back from it
    assert (f["saving_ns"], f["saving_basis_ns"]) == (0, 110_000)
    assert _added(f) == (
        "; the replay with the 1 h2d/d2h copies of GPU 0 with exposed time removed gives back only 0 ns: "
        "other work on GPU 0's critical path takes their place"
    )


def test_a_saving_on_the_captures_gpu_time(tmp_path):
    b = ExportBuilder()
    corr = b.copy(50_000, 150_000, "d2h", MIB, stream=20)
    b.runtime(0, 200_000, corr, name="cudaMemcpy_v3020", tid=TID)
    launched(b, 210_000, "kernel", 220_000, 230_000, "k")
    (f,) = fired(findings_of(write_run(tmp_path, b)), "sync-copies")
    # test_savings.py's case: 80 us given back (230 - 150 us) of the capture's GPU time, from the
    # first GPU op (the copy, 50 us) to the last (the kernel, 230 us): 180 us
    assert (f["saving_ns"], f["saving_basis_ns"], f["saving_basis"]) == (80_000, 180_000, "the capture's GPU time")


def _edges(b: ExportBuilder, device: int, compute: int, stream: int, tail: int) -> None:
    """tests/findings/test_findings.py's copies at the edges of the step on *device*: h2d over [0, 5) us, a
    kernel over [5, 95) us that waits for nothing, a d2h over [95 us, *tail*)."""
    launched(b, 10, "copy", 0, 5_000, "h2d", MIB, stream=stream, device=device)
    launched(b, 20, "kernel", 5_000, 95_000, "k", stream=compute, device=device)
    launched(b, 30, "copy", 95_000, tail, "d2h", MIB, stream=stream, device=device)


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_saving_per_step(tmp_path, gpus):
    b = ExportBuilder()
    steps(b, [(0, 200_000)])
    _edges(b, 0, 7, 20, 100_000)
    if gpus == 2:
        _edges(b, 1, 17, 30, 103_000)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")
    # both copies removed: the kernel keeps its start (it waited for no copy), the d2h ends at 95 us:
    # the step's GPU work ends 5 us earlier on GPU 0 (8 us on GPU 1, its d2h ends at 103 us); the
    # saving per step is the largest median over the GPUs, named when there are several; the basis
    # is the median step, the 200 us step range
    if gpus == 1:
        assert (f["saving_ns"], f["saving_basis_ns"], f["saving_basis"]) == (5_000, 200_000, "the median step (of 1)")
    else:
        assert (f["saving_ns"], f["saving_basis"]) == (8_000, "the median step (of 1, GPU 1)")
        assert f["replay"]["devices"]["0"] == {"window_saving_ns": 5_000, "step_saving_ns": 5_000}


def test_a_saving_on_the_summed_windows_of_two_gpus(tmp_path):
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i, stall in enumerate([10_000, 70_000]):  # tests/findings/test_findings.py's stall_layers on GPU 0
        t = i * 1_000_000
        b.nvtx(t, t + 500, f"layer={i}", tid=TID, domain_id=1)
        launched(b, t + 100, "copy", t + 1000, t + 200_000, "h2d", MIB, stream=20)
        b.event_record(t + 150, 10 + i, stream=20, tid=TID)
        b.stream_wait(t + 160, 10 + i, stream=7, tid=TID)
        launched(b, t + 200_000 - stall, "kernel", t + 200_000, t + 210_000, "consumer")
    b.kernel(0, 50_000, "other", device=1)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "stall-hotspot")
    # test_savings.py's "last" case on GPU 0: 10 us given back; GPU 1 has no copy: 0.  The basis is the
    # windows summed: GPU 0 [1 us, 1210 us) and GPU 1 [0, 50 us): 1209 + 50 us
    assert (f["saving_ns"], f["saving_basis_ns"], f["saving_basis"]) == (
        10_000,
        1_259_000,
        "the summed windows of 2 GPUs",
    )


def test_the_copy_free_replay_without_copies_is_the_recorded_spans(tmp_path):
    b = ExportBuilder()
    steps(b, [(0, 30_000)])
    launched(b, 10, "kernel", 1_000, 10_000, "k")
    b.kernel(20_000, 25_000, "k", device=1)
    t = open_trace(write_run(tmp_path, b))
    ev = Evidence(t, None, Breakdown(t))
    # no h2d/d2h copy: nothing removed; each GPU's span as recorded (9 us and 5 us), its saving 0.  The
    # step holds GPU 0's kernel (launched in it), not GPU 1's (never launched): per step on GPU 0 only
    doc = copy_free(ev)
    assert "replays" not in ev.__dict__  # no replay made for it
    for dev, span, step, per_step in (("0", 9_000, 1, 0), ("1", 5_000, 0, None)):
        got = doc["devices"][dev]
        assert got == {
            "window_ns": span,
            "replayed_span_ns": span,
            "copy_free_span_ns": span,
            "saving_ns": 0,
            "steps": step,
            "step_saving_ns": per_step,
        }
    # the replay, once made, gives the same document
    ev.replays  # noqa: B018
    assert copy_free(ev) == doc


def test_the_copy_free_replay_runs_when_no_finding_made_one(tmp_path):
    b = ExportBuilder()
    b.kernel(0, 10_000, "k")
    b.copy(9_000, 12_000, "d2h", MIB)
    t = open_trace(write_run(tmp_path, b))
    ev = Evidence(t, None, Breakdown(t))
    # the copy ends the window at 12 us; without it the kernel does, at 10 us: 2 us
    got = copy_free(ev)["devices"]["0"]
    assert (got["window_ns"], got["copy_free_span_ns"], got["saving_ns"]) == (12_000, 10_000, 2_000)


def test_findings_the_replay_cannot_change_say_why(tmp_path):
    _, doc = warmup_in_capture(tmp_path)
    # a note on the capture, without time of its own and without a change
    (f,) = fired(doc, "warmup-in-capture")
    assert (f["attributed_ns"], f["saving_ns"], f["saving_basis"]) == (None, None, NO_TIME_COST)
    b = ExportBuilder()
    b.runtime(0, 200_000, 5, name="cudaMemcpy_v3020", tid=TID)  # synchronous copy calls, no GPU op recorded
    b.runtime(300_000, 500_000, 6, name="cudaMemcpy_v3020", tid=TID)
    (f,) = fired(findings_of(write_run(tmp_path, b, name="no-gpu")), "sync-copies")
    # 200 us + 200 us of calls; a change, but no GPU op to replay
    assert (f["attributed_ns"], f["saving_ns"], f["replay"]) == (400_000, None, None)
    assert f["saving_basis"] == "no GPU activity: nothing to replay"


# --- the changes (findings/changes.py) -----------------------------------------------------------


def test_pageable_copies_of_both_directions_on_their_own_gpu(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    b.gpu(1, H100)
    b.copy(0, 1_000_000, "h2d", MIB, host=PAGEABLE)
    b.copy(1_000_000, 2_000_000, "d2h", MIB, host=PAGEABLE)
    b.copy(0, 1_000_000, "h2d", MIB, host=PAGEABLE, device=1, stream=30)
    doc = findings_of(write_run(tmp_path, b))
    (f,) = [g for g in fired(doc, "pageable-copies") if g["where"].get("device") in ("0", 0)]
    # GPU 0's two pageable copies (not GPU 1's), both directions, at the link's 63 GB/s (no pinned copy
    # in the trace): 1048576 / 63 = 16644.06 -> 16644 ns each; no launches: the first keeps its start,
    # the second its gap (0) after it: the window ends at 33288 ns instead of 2 ms
    assert f["replay"]["change"].startswith("the 2 pageable copies of GPU 0 at pinned speed (0 at the trace's")
    assert f["saving_ns"] == 2_000_000 - 2 * 16_644


def test_slow_link_changes_only_its_own_direction(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    for i in range(3):
        b.copy(i * 1_000_000, i * 1_000_000 + 100_000, "d2h", MIB)  # 10.5 GB/s alone
    b.copy(3_000_000, 3_020_000, "h2d", MIB, stream=21)  # one h2d copy, on its own stream: ends the window
    (f,) = fired(findings_of(write_run(tmp_path, b)), "slow-link")
    # the three d2h copies at 63 GB/s end by 1849932 ns (test_savings.py's case); the h2d copy is not
    # changed and still ends the window at 3020 us: nothing given back
    assert f["replay"]["change"].startswith("the 3 d2h copies of GPU 0 at PCIe Gen5 x16")
    assert f["saving_ns"] == 0


def test_copies_at_the_steps_edges_by_their_stalls(tmp_path):
    b = ExportBuilder()
    edges_case(b)  # the h2d copy queued behind k0
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")
    # the step's GPU span is [0, 1000) us, its edges [0, 100) and [900, 1000) us.  The h2d copy runs
    # outside them, [150, 190) us, but K stands stalled by it over [5, 190) us, from inside the first
    # edge: 95 of the 185 + 4 us of cost at the edges.  Removed: the h2d copy (by its stall) and the
    # 1 ns copy (inside the edge), not the one in the middle (its stall is in the middle too); K starts
    # at its launch, 5 us, and ends at 815 us instead of 1000 us: 185 us given back
    assert (f["evidence"]["at_boundaries_ns"], f["evidence"]["exposed_or_stalled_ns"]) == (95_000, 189_000)
    assert f["replay"]["change"] == "the 2 h2d/d2h copies at the steps' edges removed"
    assert (f["saving_ns"], f["saving_basis_ns"]) == (185_000, 1_000_000)


def test_contended_copies_of_their_own_gpu_and_direction(tmp_path):
    b = ExportBuilder()
    for i in range(3):  # tests/findings/test_findings.py's copy-contention case that fires (slowdown 1.5)
        t = i * 1_000_000
        b.copy(t, t + 100_000, "h2d", 4 * MIB)
        s = t + 500_000
        b.copy(s, s + 150_001, "h2d", 4 * MIB)
        b.kernel(s, s + 150_001, "gemm_fusion_dot.3", stream=7)
        b.kernel(s, s + 1000, "loop_add_fusion.1", stream=8)
    b.copy(3_000_000, 3_100_000, "h2d", 4 * MIB)  # a fourth alone
    b.kernel(3_200_000, 3_300_000, "k", stream=7)  # beside it: a d2h copy, and an h2d copy on GPU 1
    b.copy(3_200_000, 3_210_000, "d2h", 4 * MIB, stream=21)
    b.kernel(3_200_000, 3_300_000, "k", device=1, stream=7)
    b.copy(3_200_000, 3_210_000, "h2d", 4 * MIB, device=1, stream=20)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "copy-contention")
    # GPU 0's three h2d copies beside kernels removed (not its alone ones, its d2h copy, nor GPU 1's):
    # the kernels beside them keep their places, the last kernel still ends the window: nothing given back
    assert f["replay"]["change"] == "the 3 h2d copies of GPU 0 that ran beside kernels removed"
    assert f["saving_ns"] == 0


def test_pageable_copies_at_their_size_classs_pinned_rate(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    b.copy(10_000, 60_000, "h2d", MIB, stream=21)  # pinned: 1 MiB in 50 us, size class 2^20
    b.copy(100_000, 1_100_000, "h2d", MIB, host=PAGEABLE)  # class 2^20: the pinned copy's rate
    b.copy(1_100_000, 2_100_000, "h2d", 629_146, host=PAGEABLE)  # class 2^19 (0.6 MiB): the link's
    (f,) = fired(findings_of(write_run(tmp_path, b)), "pageable-copies")
    assert f["replay"]["change"] == (
        "the 2 pageable copies of GPU 0 at pinned speed (1 at the trace's own pinned rate, 1 at the link's: "
        "PCIe Gen5 x16 at 63 GB/s, by the GPU's model)"
    )
    # the first at 1048576 B / 50000 ns: 50 us, [100, 150) us; the second at 63 GB/s: 629146 / 63 =
    # 9986.4 -> 9986 ns, right after it (gap 0): it ends the window at 159986 ns instead of 2.1 ms
    assert f["saving_ns"] == 2_100_000 - 159_986


def test_synchronous_copy_calls_inside_the_steps_only(tmp_path):
    b = ExportBuilder()
    steps(b, [(400_000, 500_000), (100_000, 200_000)])  # out of order
    calls = [(0, 50_000), (150_000, 160_000), (300_000, 310_000), (400_000, 410_000), (500_000, 510_000)]
    for s, e in calls:
        corr = b.copy(s + 1_000, e - 1_000, "d2h", MIB)
        b.runtime(s, e, corr, name="cudaMemcpy_v3020", tid=TID)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "sync-copies")
    # inside a step [start, end): the call at 150 us (step [100, 200) us) and the one at 400 us (its
    # step's first ns); not the one before the steps, the one between them, nor the one at 500 us
    # (the end of the last step)
    assert f["evidence"]["calls"] == 2
    assert f["replay"]["change"] == "the 2 synchronous copy calls returning at once"


def test_a_links_rate_assumed_for_an_unknown_gpu(tmp_path):
    b = ExportBuilder()  # no GPU model in the trace
    waited_copy(b, (1_000, 1_001_000), (1_001_000, 1_011_000), launch=2_000, host=PAGEABLE)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "pageable-copies")
    assert f["replay"]["change"].endswith(
        "(0 at the trace's own pinned rate, 1 at the link's: PCIe Gen4 x16 at 31.5 GB/s, assumed)"
    )
    # 1048576 / 31.5 = 33288.1 -> 33288 ns: the copy ends at 34288 ns, the kernel after it (slack 0) at
    # 44288 ns; the window ended at 1011 us
    assert f["saving_ns"] == 1_011_000 - 44_288


def test_only_the_kernels_beside_copies_at_their_median_alone(tmp_path):
    b = ExportBuilder()
    median_group(b)  # alone: 0.8, 1.0 and 1.2 us, median 1 us; beside a copy: 1.5 us
    (f,) = fired(findings_of(write_run(tmp_path, b)), "kernels-slowed-by-copies")
    # the three beside (not the alone ones) at 1 us: test_savings.py's case, 500 ns given back
    assert f["replay"]["change"] == "the 3 kernels of 1 group(s) on GPU 0 at their median alone"
    assert f["saving_ns"] == 500


def test_copies_off_the_compute_stream_of_their_own_gpu(tmp_path):
    b = ExportBuilder()
    for dev in (0, 1):  # test_savings.py's case on each GPU, the same stream numbers
        b.kernel(0, 500, "k", stream=9, device=dev)
        launched(b, 0, "kernel", 1_000, 11_000, "k", device=dev)
        launched(b, 10, "copy", 11_000, 111_000, "h2d", MIB, stream=7, device=dev)
        launched(b, 20, "kernel", 111_000, 121_000, "k", device=dev)
    found = fired(findings_of(write_run(tmp_path, b)), "copy-on-compute-stream")
    (f,) = [g for g in found if str(g["where"].get("device")) == "0"]
    # GPU 0's one copy (not GPU 1's on its stream 7) on a stream of its own: 10 us given back on GPU 0
    assert f["replay"]["change"] == "the 1 h2d/d2h copies of stream 7 on a stream of their own"
    assert f["saving_ns"] == 10_000
