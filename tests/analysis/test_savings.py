"""Savings (METRICS.md "Savings"): what fixing a finding gives back, by the replay.

Known answers per kind of change on exports built with launches and waits (each derivation is
written beside it, by the replay's rule: an op starts its recorded slack after the latest of its
inputs); the properties, on generated exports; the waves engine against the scalar replay; and the
real traces of issue 30."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.replay import Change, replay
from profiler.analysis.replay_waves import Waves
from profiler.analysis.savings import Replays
from profiler.synthetic.export import PAGEABLE, ExportBuilder
from profiler.trace import open_trace
from tests.helpers.findings_runs import MIB, TID, fired, launched, waited_copy, write_run
from tests.helpers.savings_exports import exports, subset

H100 = "NVIDIA H100 80GB HBM3"  # PCIe Gen5 x16: 63 GB/s per direction


def findings(tmp_path, b: ExportBuilder, name: str = "run", **thresholds) -> dict:
    trace = open_trace(write_run(tmp_path, b, name=name))
    cfg = FindingsConfig({**FindingsConfig().thresholds, **thresholds})
    return run_findings(trace, None, cfg, Breakdown(trace))


# --- known answers ------------------------------------------------------------------------------


def test_exposed_copies_saving_is_the_kernel_freed_from_its_copy(tmp_path):
    b = ExportBuilder()
    waited_copy(b, (1_000, 101_000), (101_000, 111_000), launch=2_000)
    doc = findings(tmp_path, b)
    (f,) = fired(doc, "exposed-copies")
    # removed: the copy ends at its start (1 us); the kernel no longer waits: launch 2 us + slack 0,
    # ends at 12 us; the window ended at 111 us: 99 us given back, of the 110 us window (90%)
    assert (f["saving_ns"], f["saving_basis_ns"], f["saving_basis"]) == (99_000, 110_000, "GPU 0's window")
    assert f["attributed_ns"] == 100_000 and f["severity"] == "problem"
    assert f["replay"]["devices"] == {"0": {"window_saving_ns": 99_000, "step_saving_ns": None}}
    assert f["replay"]["host_sync_modeled"] is True
    cf = doc["copy_free"]["devices"]["0"]
    assert cf == {
        "window_ns": 110_000,
        "replayed_span_ns": 110_000,
        "copy_free_span_ns": 11_000,
        "saving_ns": 99_000,
        "steps": 0,
        "step_saving_ns": None,
    }


def test_pageable_copy_at_the_links_rate(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    waited_copy(b, (1_000, 1_001_000), (1_001_000, 1_011_000), launch=2_000, host=PAGEABLE)
    (f,) = fired(findings(tmp_path, b), "pageable-copies")
    # no pinned copy in the trace: 1 MiB at 63 GB/s = 1048576 / 63 = 16644.06 -> 16644 ns; the copy
    # ends at 17644, the kernel after it (slack 0) at 27644; the window ended at 1011000
    assert f["saving_ns"] == 1_011_000 - 27_644
    assert (
        "(0 at the trace's own pinned rate, 1 at the link's: PCIe Gen5 x16 at 63 GB/s, by the GPU's model)"
        in (f["replay"]["change"])
    )


def test_pageable_copy_at_the_traces_own_pinned_rate(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    b.copy(0, 50_000, "h2d", MIB, stream=21)  # pinned, 1 MiB in 50 us: the size class's own rate
    launched(b, 100_000, "copy", 101_000, 1_101_000, "h2d", MIB, stream=20, host=PAGEABLE)
    b.event_record(100_050, 1, stream=20, tid=TID)
    b.stream_wait(100_060, 1, stream=7, tid=TID)
    launched(b, 102_000, "kernel", 1_101_000, 1_111_000, "consumer")
    (f,) = fired(findings(tmp_path, b), "pageable-copies")
    # the pageable copy takes 50 us as the pinned one did: it ends at 151 us, the kernel at 161 us
    assert f["saving_ns"] == 1_111_000 - 161_000
    assert "1 at the trace's own pinned rate" in f["replay"]["change"]


def test_sync_copy_call_detached_from_its_thread(tmp_path):
    b = ExportBuilder()
    corr = b.copy(50_000, 150_000, "d2h", MIB, stream=20)
    b.runtime(0, 200_000, corr, name="cudaMemcpy_v3020", tid=TID)  # blocked until 150 us, returned 50 us later
    launched(b, 210_000, "kernel", 220_000, 230_000, "k")  # launched after the call: slack 10 us
    (f,) = fired(findings(tmp_path, b), "sync-copies")
    # the call returns as it begins (0): the thread's later launch moves 200 us earlier, to 10 us; the
    # kernel runs [20, 30) us; the copy still ends at 150 us, now the last: 230 - 150 = 80 us given back
    # on the capture's GPU time (no steps)
    assert (f["saving_ns"], f["saving_basis"]) == (80_000, "the capture's GPU time")


def test_copy_moved_off_the_compute_stream(tmp_path):
    b = ExportBuilder()
    b.kernel(0, 500, "k", stream=9)
    launched(b, 0, "kernel", 1_000, 11_000, "k")  # stream 7 runs 2 of the 3 compute kernels
    launched(b, 10, "copy", 11_000, 111_000, "h2d", MIB, stream=7)
    launched(b, 20, "kernel", 111_000, 121_000, "k")
    doc = findings(tmp_path, b)
    (f,) = fired(doc, "copy-on-compute-stream")
    # on a stream of its own the copy still follows the kernel before it, [11, 111) us; the kernel after it
    # follows that kernel (11 us, slack 0): [11, 21) us; the window ends at the copy, 111 us, not 121 us
    assert f["saving_ns"] == 10_000
    # the copy-free replay keeps the copy in place at zero length: the kernel ends at 21 us
    assert doc["copy_free"]["devices"]["0"]["saving_ns"] == 100_000


def test_kernels_at_their_alone_duration(tmp_path):
    b = ExportBuilder()
    for i in range(3):
        b.kernel(i * 2_000, i * 2_000 + 1_000, "k")  # alone: 1 us
        u = 10_000 + i * 10_000
        b.kernel(u, u + 1_500, "k")  # beside a copy: 1.5 us
        b.copy(u, u + 1_000, "d2h", MIB)
    (f,) = fired(findings(tmp_path, b), "kernels-slowed-by-copies")
    # no launches: each kernel keeps its gap after the one before it on stream 7.  At 1 us each the
    # beside kernels end at 11, 20.5 (gap 8.5 us after 11) and 30 us (gap 8.5 us after 20.5); the last
    # copy still ends at 31 us: the window ends at 31 us instead of 31.5 us
    assert (f["saving_ns"], f["attributed_ns"]) == (500, 3 * 500)


def test_slow_link_copies_at_the_links_rate(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    for i in range(3):
        b.copy(i * 1_000_000, i * 1_000_000 + 100_000, "d2h", MIB)  # 10.5 GB/s alone
    (f,) = fired(findings(tmp_path, b), "slow-link")
    # 1 MiB at 63 GB/s: 16644 ns.  The first copy keeps its start; each later one keeps its 900 us gap
    # after the one before: [916644, 933288), [1833288, 1849932): 2100000 - 1849932 given back
    assert f["saving_ns"] == 2_100_000 - 1_849_932


def test_stall_hotspot_drops_the_waits_on_its_copies(tmp_path):
    from tests.helpers.findings_runs import stall_layers

    (f,) = fired(run_findings_of(stall_layers(tmp_path, [70_000, 10_000], "hot")), "stall-hotspot")
    # layer 0's kernel no longer waits for its copy: it runs at its launch, [130, 140) us; layer 1's
    # kernel still waits for its own copy and ends the window at 1210 us as recorded: nothing given back
    assert (f["saving_ns"], f["attributed_ns"], f["severity"]) == (0, 70_000, "info")
    (g,) = fired(run_findings_of(stall_layers(tmp_path, [10_000, 70_000], "last")), "stall-hotspot")
    # layer 1 is the hot one and the last: its kernel runs at its launch 1130 us, to 1140 us; the
    # window ends at layer 1's copy, 1200 us: 10 us given back
    assert g["where"] == {"layer": "1"} and g["saving_ns"] == 10_000


def replays_of(path: Path) -> Replays:
    """The replays of the export at *path*."""
    trace = open_trace(path)
    return Replays(trace, Breakdown(trace))


def run_findings_of(path):
    trace = open_trace(path)
    return run_findings(trace, None, FindingsConfig(), Breakdown(trace))


def test_causes_the_replay_cannot_change_say_why_and_come_after(tmp_path):
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i, (s, e) in enumerate([(0, 1000), (2000, 3000), (4000, 5000), (6000, 9001)]):
        b.nvtx(s, e, f"step={i}", tid=TID, domain_id=1)
    waited_copy(b, (1_000, 101_000), (101_000, 111_000), launch=2_000)
    doc = findings(tmp_path, b, severity_min_cost_ns=0)
    ids = [f["id"] for f in doc["findings"]]
    (out,) = fired(doc, "step-outliers")
    assert out["saving_ns"] is None and out["replay"] is None and "not modelled" in out["saving_basis"]
    assert ids.index("step-outliers") > max(ids.index(f["id"]) for f in doc["findings"] if f["saving_ns"] is not None)


def test_findings_are_ordered_by_saving_not_by_attributed_time(tmp_path):
    b = ExportBuilder()
    waited_copy(b, (1_000, 101_000), (101_000, 111_000), launch=2_000)
    for i in range(3):  # kernels slowed beside a late copy nothing waits for: much attributed, little saved
        u = 200_000 + i * 10_000
        b.kernel(u, u + 1_500, "consumer", stream=7)
        b.copy(u, u + 1_000, "d2h", MIB, stream=21)
    doc = findings(tmp_path, b)
    savings = [f["saving_ns"] for f in doc["findings"] if f["saving_ns"] is not None]
    assert savings == sorted(savings, reverse=True) and doc["findings"][0]["id"] == "exposed-copies"


# --- the bound, and a property that does not hold ------------------------------------------------


def test_disjoint_savings_can_add_up_to_more_than_the_copy_free_replay(tmp_path):
    """Copies A and B in a row (5 us each) before a kernel K that waits for B; the kernel before K on
    its stream ends 2 us before B does.  Removing A moves B to [0.1, 5.1) us, removing B (no wait
    on it) frees K: either way K follows the kernel before it and starts at 8.1 us instead of 10.1 us:
    2 us given back; both removed (the copy-free replay): 2 us as well.  Savings of findings about
    disjoint copies do not add up (2 + 2 > 2), and METRICS.md says so."""
    b = ExportBuilder()
    for t, args in ((0, (100, 5_100)), (1, (5_100, 10_100))):
        launched(b, t, "copy", *args, "h2d", MIB, stream=20)
    launched(b, 2, "kernel", 100, 8_100, "before")
    b.event_record(50, 1, stream=20, tid=TID)  # completes B, the copy launched last before it
    b.stream_wait(60, 1, stream=7, tid=TID)
    launched(b, 70, "kernel", 10_100, 20_100, "K")
    r = replays_of(write_run(tmp_path, b))
    first, second = r.copy_rows()
    one = r.saving(Change("A", removed=np.array([first]))).window_ns["0"]
    two = r.saving(Change("B", removed=np.array([second]))).window_ns["0"]
    both = r.copy_free_saving.window_ns["0"]
    assert (one, two, both) == (2_000, 2_000, 2_000)


# --- properties, on generated exports ------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=exports(), data=st.data())
def test_saving_properties_on_generated_exports(tmp_path_factory, b, data):
    r = replays_of(b.write(tmp_path_factory.mktemp("gen") / "trace.sqlite"))
    assert r.saving(Change()).window_ns == {d: 0 for d in r.devices}  # no change: no saving
    for dev in r.devices:
        bound = r.copy_free_saving.window_ns
        mine = r.copy_rows(dev)
        ops = r.deps.ops
        changes = [
            Change("removed", removed=subset(data.draw, mine)),
            Change("unwaited", unwaited=subset(data.draw, mine)),
        ]
        rows = subset(data.draw, mine)
        frac = data.draw(st.floats(0, 1))
        changes.append(Change("shorter", durations=(rows, ((ops.end - ops.start)[rows] * frac).astype(np.int64))))
        for ch in changes:
            got = r.saving(ch).window_ns
            assert all(v >= 0 for v in got.values()), ch.what  # never negative
            for e in r.devices:  # at most the copy-free replay on every window, this GPU's or another's
                assert got[e] <= bound[e], ch.what
        # other changes are never negative either
        kernels = np.flatnonzero((ops.device == int(dev)) & (ops.kind <= 1))
        ch = Change("kernels", durations=(kernels, (ops.end - ops.start)[kernels] // 2))
        assert min(r.saving(ch).window_ns.values()) >= 0
        moved = Change("own stream", own_stream=mine)
        assert min(r.saving(moved).window_ns.values()) >= 0
    if r.host is not None and len(r.host):
        ch = Change("detached", detached=np.arange(len(r.host)))
        assert min(r.saving(ch).window_ns.values()) >= 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=exports(), data=st.data())
def test_waves_give_the_scalar_replays_answer(tmp_path_factory, b, data):
    r = replays_of(b.write(tmp_path_factory.mktemp("gen") / "trace.sqlite"))
    g = Waves.of(r.deps, r.host)
    if g is None:
        return
    copies = r.copy_rows()
    calls = np.arange(len(r.host)) if r.host is not None else np.zeros(0, dtype=np.int64)
    for ch in (
        Change("removed", removed=subset(data.draw, copies)),
        Change("unwaited", unwaited=subset(data.draw, copies)),
        Change("detached", detached=subset(data.draw, calls)),
        Change("own stream", own_stream=subset(data.draw, copies)),
    ):
        w = g.replay(ch)
        if w is None:
            continue
        s = replay(r.deps, 1.0, r.host, ch)
        assert np.array_equal(w.end, s.end) and np.array_equal(w.start, s.start), ch.what
        # the savings read from the waves (only the ops they moved) = from the scalar replay (every op)
        assert r.saving_of(ch.what, r.outcome_of(w)).window_ns == r.saving_of(ch.what, r.outcome_of(s)).window_ns


# --- the real traces of issue 30 ---------------------------------------------------------------------


def _real(shared_traces, name):
    trace = open_trace(shared_traces / name)
    return run_findings(trace, None, FindingsConfig(), Breakdown(trace))


@pytest.mark.shared
def test_gpu4_streams_exposed_copies_save_almost_nothing(shared_traces):
    doc = _real(shared_traces, "gpu4__nsys_vectorAdd_streams_10000000__7498cc2.sqlite")
    (f,) = fired(doc, "exposed-copies")
    # 54_942_550: the offload copies' time with no kernel beside them, by tests/reference_devices.py
    # (checked against the reference in test_findings_cost.py)
    assert f["severity"] == "info" and 0 <= f["saving_ns"] < 10_000 and f["attributed_ns"] == 54_942_550
    assert "host-bound" in f["verdict"]
    assert f["saving_ns"] <= doc["copy_free"]["devices"]["0"]["saving_ns"]


# --- the stall findings against the measured step difference (SYNTHETIC demo runs) ------------------


def test_stall_savings_against_the_step_difference_of_two_policies():
    """offload_all and none are the same demo model but for what offload_all sends to host memory (and
    what it recomputes because the model's offload policies recompute what they do not offload).  Per
    step, what the copies cost (the copy-free replay, on GPU 0 whose host thread ends each step) and
    what the stall finding gives back are at most the measured step difference; the rest of that
    difference is the extra compute offload_all runs."""
    from profiler.runs.result import build
    from profiler.trace import load_trace

    demo = Path(__file__).resolve().parents[2] / "sample_traces" / "demo-synthetic"
    runs = {}
    for policy in ("none", "offload_all"):
        (folder,) = demo.glob(f"synthetic-*-{policy}")
        runs[policy] = build(load_trace(folder / "synthetic-trace.sqlite"), findings=FindingsConfig())
    diff = runs["offload_all"].steps.median_ns - runs["none"].steps.median_ns  # 118.434 - 95.726 ms
    found = runs["offload_all"].findings
    copy_free = found["copy_free"]["devices"]["0"]["step_saving_ns"]
    stall = [f for f in found["findings"] if f["id"] == "stall-hotspot" and f["saving_ns"]]
    assert stall and copy_free
    for f in stall:
        assert 0 < f["replay"]["devices"]["0"]["step_saving_ns"] <= copy_free <= diff
    steps = len(runs["none"].steps.rows)
    extra = (
        runs["offload_all"].devices["0"]["compute"]["busy_ns"] - runs["none"].devices["0"]["compute"]["busy_ns"]
    ) / steps  # the recomputed attention forward passes: 2.7 ms a step
    assert 0 < diff - copy_free <= extra


# --- whatif explains itself ------------------------------------------------------------------------------


def test_whatif_says_where_a_saving_beyond_the_gpus_own_copies_comes_from(tmp_path):
    """GPU 1 runs a kernel the host launches after a cudaStreamSynchronize on GPU 0's copy stream: GPU
    1 has no copy of its own, yet its window ends 100 us earlier when copies take no time."""
    from tests.helpers.cli import run_cli

    b = ExportBuilder()
    launched(b, 0, "copy", 1_000, 101_000, "h2d", MIB, stream=20)  # GPU 0, 100 us
    b.sync(10, "stream_sync", stream=20, tid=TID, duration=101_000)  # returns at 101.01 us
    launched(b, 101_100, "kernel", 110_000, 120_000, "k", device=1, stream=7)
    path = write_run(tmp_path, b)
    doc = json.loads(run_cli("whatif", "--json", str(path)).stdout)
    one = doc["devices"]["1"]
    # at zero time the copy ends at 1 us; the call, blocked until the copy ended (lag 10 ns), returns at
    # 1.01 us instead of 101.01 us, and the thread's later launch moves 100 us earlier with it: the kernel
    # keeps its 8.9 us after its launch and ends 100 us earlier than recorded
    assert one["copy_busy_ns"] == 0 and one["saving_by_copies_of"] == {"0": 100_000}
    assert one["host_waits_on"] == {"0": {"calls": 1, "blocked_ns": 101_000}}
    text = run_cli("whatif", str(path)).stdout
    assert "through host threads that wait for GPU 0's work (1 blocking calls" in " ".join(text.split())


def test_synthetic_demo_runs_order_by_saving_within_the_bounds():
    from profiler.trace import load_trace

    demo = Path(__file__).resolve().parents[2] / "sample_traces" / "demo-synthetic"
    for folder in sorted(demo.glob("synthetic-*")):
        trace = load_trace(folder / "synthetic-trace.sqlite")
        doc = run_findings(trace, None, FindingsConfig(), Breakdown(trace))
        saved = [f["saving_ns"] for f in doc["findings"] if f["saving_ns"] is not None]
        assert saved == sorted(saved, reverse=True), folder.name
        every = {d: v["saving_ns"] for d, v in doc["copy_free"]["devices"].items()}
        for f in doc["findings"]:
            if f["id"] in ("exposed-at-boundaries", "stall-hotspot") and f["saving_ns"] is not None:
                # their copies are on both GPUs: per GPU, at most what removing every copy gives back
                for dev, v in f["replay"]["devices"].items():
                    assert 0 <= v["window_saving_ns"] <= every[dev], (folder.name, f["id"], dev)


def test_a_document_recorded_before_savings_reads_as_attributed_time():
    from profiler.report.findings_text import by_saving, saving_text

    old = {
        "id": "x",
        "cost_ns": 2_000_000,
        "cost_share": 0.5,
        "cost_basis_ns": 4_000_000,
        "cost_basis": "GPU 0's window",
    }
    assert saving_text(old) == "attributed 2.00 ms, 50% of GPU 0's window (4.00 ms); no saving modelled"
    assert by_saving([{"id": "y", "cost_ns": 1}, old]) == [old, {"id": "y", "cost_ns": 1}]


def test_op_rows_by_position_and_by_key_agree(tmp_path):
    """The ops of a frame's rows are found by position among its valid rows (checked against the op
    keys) or, where the positions do not match the dependency pass's order, by key."""
    b = ExportBuilder()
    launched(b, 0, "kernel", 100, 200, "k")
    launched(b, 10, "copy", 300, 400, "h2d", MIB, stream=20)
    b.copy(500, 450, "d2h", MIB, stream=20)  # invalid: end before start, no op
    launched(b, 20, "copy", 600, 700, "d2h", MIB, stream=20)
    trace = open_trace(write_run(tmp_path, b))
    r = Replays(trace, Breakdown(trace))
    copies = trace.copies
    found, rows = r.op_rows(copies, np.arange(copies.height), "copy")
    assert found.tolist() == [True, False, True]
    assert r.deps.ops.start[rows].tolist() == [300, 600]
    flipped = copies.reverse()  # not the order the dependency pass read: found by key
    found2, rows2 = r.op_rows(flipped, np.arange(flipped.height), "copy")
    assert found2.tolist() == [True, False, True] and r.deps.ops.start[rows2].tolist() == [600, 300]
