"""Savings (METRICS.md "Savings") on exports built with known answers, derived by hand: cases found by
mutation testing of savings.py (docs/testing.md, ``savings``).  Host calls at t on one thread, GPU ops
[start, end); the replay's rule: an op starts its recorded slack after the latest of its inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from profiler.analysis.replay import NO_CHANGE, Change
from profiler.analysis.savings import CAPTURE, DEVICE, STEPS, WINDOWS, Replays, Saving, Window
from profiler.analysis.whatif import OP_KEYS
from profiler.synthetic.export import ExportBuilder
from tests.helpers.findings_runs import MIB, TID, launched
from tests.helpers.savings_exports import replays


def _waited_copy(b: ExportBuilder, t0: int, copy: int, event: int, device: int = 0) -> None:
    """At t0 + 10 a copy launched on stream 20, running [t0 + 1 us, t0 + 1 us + copy); recorded at
    t0 + 50, waited for by stream 7 at t0 + 60; a 10 us kernel launched at t0 + 2 us runs as the copy
    ends (slack 0 after it).  With the copy at zero time the kernel starts at its launch, t0 + 2 us: it
    ends copy - 1 us earlier (copy > 1 us)."""
    launched(b, t0 + 10, "copy", t0 + 1_000, t0 + 1_000 + copy, "h2d", MIB, device=device, stream=20)
    b.event_record(t0 + 50, event, device=device, stream=20, tid=TID)
    b.stream_wait(t0 + 60, event, device=device, stream=7, tid=TID)
    launched(b, t0 + 2_000, "kernel", t0 + 1_000 + copy, t0 + 11_000 + copy, "k", device=device, stream=7)


def stepped_export(folder: Path) -> Path:
    """Five steps (NVTX ``step=i`` at i * 100 us); step 0 runs 95 us, the others 40 us: step 0 is
    slower than twice the median (40 us) and first, so it is left out as warm-up (4 steps included).
    GPU 0: one waited copy a step, of 50, 4, 9.001, 3 and 21 us.  GPU 1: one waited copy of 30 us in
    step 2.  GPU 2: one kernel at 600 us, in no step."""
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i, copy in enumerate([50_000, 4_000, 9_001, 3_000, 21_000]):
        b.nvtx(i * 100_000, i * 100_000 + (95_000 if i == 0 else 40_000), f"step={i}", tid=TID, domain_id=1)
        _waited_copy(b, i * 100_000, copy, event=i + 1)
    _waited_copy(b, 200_000 + 90, 30_000, event=10, device=1)
    launched(b, 600_000, "kernel", 601_000, 602_000, "late", device=2, stream=7)
    return b.write(folder / "trace.sqlite")


@pytest.fixture(scope="module")
def stepped(tmp_path_factory) -> Replays:
    return replays(stepped_export(tmp_path_factory.mktemp("stepped")))


def test_copy_free_saving_per_window_step_and_capture(stepped):
    s = stepped.copy_free_saving
    # GPU 0: each step's kernel ends copy - 1 us earlier: 49, 3, 8.001, 2 and 20 us (step 0's saving
    # not counted).  Steps 1-4 by index: [3000, 8001, 2000, 20000], median (3000 + 8001) / 2 = 5500.5,
    # rounded down: 5500.  Its window ends at step 4's kernel, 400 + 1 + 21 + 10 = 432 us; copy-free
    # at 412 us: 20 us.
    # GPU 1: its only copy (step 2) 30 us: its kernel, the window's last op, 29 us earlier; one step.
    # GPU 2: no copy, no step: nothing given back, no step saving.
    assert s.window_ns == {"0": 20_000, "1": 29_000, "2": 0}
    assert s.per_step == {"0": [3_000, 8_001, 2_000, 20_000], "1": [29_000]}
    assert s.step_ns == {"0": 5_500, "1": 29_000, "2": None}
    assert s.steps == 4 and stepped.included == {1, 2, 3, 4}
    # the capture: the last end over all GPUs, GPU 2's 602 us, unchanged: nothing given back
    assert s.capture_ns == 0
    assert s.on(Window(DEVICE, "1")) == 29_000 and s.on(Window(WINDOWS)) == 49_000
    assert s.on(Window(CAPTURE)) == 0 and s.on(Window(STEPS)) == 29_000
    assert s.device_on_steps() == "1"


def test_copy_free_document_with_steps(stepped):
    # windows: GPU 0 from its first op (step 0's copy, 1 us) to 432 us; GPU 1 from 201.09 to 241.09 us;
    # GPU 2 one kernel, 1 us.  Copy-free spans: 431 - 20, 40 - 29, 1 - 0 us.  A GPU without a step
    # saving has no included step (0), however many the run has.
    assert stepped.copy_free_doc() == {
        "host_sync_modeled": True,
        "devices": {
            "0": {
                "window_ns": 431_000,
                "replayed_span_ns": 431_000,
                "copy_free_span_ns": 411_000,
                "saving_ns": 20_000,
                "steps": 4,
                "step_saving_ns": 5_500,
            },
            "1": {
                "window_ns": 40_000,
                "replayed_span_ns": 40_000,
                "copy_free_span_ns": 11_000,
                "saving_ns": 29_000,
                "steps": 4,
                "step_saving_ns": 29_000,
            },
            "2": {
                "window_ns": 1_000,
                "replayed_span_ns": 1_000,
                "copy_free_span_ns": 1_000,
                "saving_ns": 0,
                "steps": 0,
                "step_saving_ns": None,
            },
        },
    }


def test_the_waves_replay_reads_the_ends_of_the_ops_it_moved(stepped):
    """The waves replay (used from 50,000 ops on; here from 0) says which ops it moved: a GPU whose
    last op did not move keeps its recorded end, the others' ends are read from the moved ops."""
    r = Replays(stepped.trace, stepped.breakdown)
    r.wave_min_ops = 0
    assert r._graph is not None
    s = r.copy_free_saving  # every copy removed: the same answers as the scalar replay
    assert (s.window_ns, s.step_ns, s.capture_ns) == (
        {"0": 20_000, "1": 29_000, "2": 0},
        {"0": 5_500, "1": 29_000, "2": None},
        0,
    )
    assert r.replay(r.copy_free()).touched is not None
    # only step 1's copy (GPU 0, 101.01 us) removed: step 1's kernel starts at its launch, 102 us, and
    # ends 3 us earlier; step 2's kernel still waits for its own copy (210.001 us, later than 112 us
    # and than its launch): nothing else moves.  GPU 0's last op (step 4's kernel) keeps its end.
    # Per step [3000, 0, 0, 0] (steps 1-4), median 0.
    (row,) = [int(x) for x in r.copy_rows(0) if r.deps.ops.start[x] == 101_000]
    one = r.saving(Change("step 1's copy", removed=np.array([row])))
    assert (one.window_ns, one.per_step, one.step_ns) == (
        {"0": 0, "1": 0, "2": 0},
        {"0": [3_000, 0, 0, 0], "1": [0]},
        {"0": 0, "1": 0, "2": None},
    )
    # and GPU 1's copy only: GPU 1's last op moves, 29 us earlier
    (row,) = [int(x) for x in r.copy_rows(1)]
    assert r.saving(Change("GPU 1's copy", removed=np.array([row]))).window_ns == {"0": 0, "1": 29_000, "2": 0}


def test_a_trace_without_gpu_ops_saves_nothing(tmp_path):
    # one runtime call, no kernel, copy or memset: no device, no window, nothing given back anywhere
    b = ExportBuilder()
    b.gpu(0)
    b.runtime(0, 10, 1, name="cudaFree")
    r = replays(b.write(tmp_path / "trace.sqlite"))
    assert r.devices == [] and r.copy_rows().size == 0
    s = r.copy_free_saving
    assert (s.window_ns, s.step_ns, s.capture_ns, s.steps, s.per_step) == ({}, {}, 0, 0, {})
    assert s.on(Window(WINDOWS)) == 0 and s.on(Window(CAPTURE)) == 0 and s.on(Window(STEPS)) is None
    assert s.on(Window(DEVICE, "0")) == 0 and s.device_on_steps() is None
    assert r.copy_free_doc() == {"host_sync_modeled": True, "devices": {}}


def test_a_saving_on_each_window_and_its_document():
    s = Saving(
        window_ns={"9": 5, "10": 7, "2": -1},
        step_ns={"9": 4, "10": 4, "2": None},
        steps=3,
        host_sync_modeled=False,
        change="x",
        capture_ns=6,
    )
    assert s.on(Window(DEVICE, "10")) == 7 and s.on(Window(DEVICE, "3")) == 0  # a GPU without ops: 0
    assert s.on(Window(WINDOWS)) == 5 + 7 - 1 and s.on(Window(CAPTURE)) == 6
    assert s.on(Window(STEPS)) == 4  # the largest median; GPU 2 has none
    # a tie between GPUs 9 and 10: the smaller id as a number (9), not as a string ("10" < "9")
    assert s.device_on_steps() == "9"
    assert Saving({"0": 1}, {"0": None, "1": 3}, 2, True).device_on_steps() == "1"
    assert Saving({"0": 1}, {"0": None}, 0, True).on(Window(STEPS)) is None
    assert s.to_json() == {
        "change": "x",
        "host_sync_modeled": False,
        "devices": {
            "9": {"window_saving_ns": 5, "step_saving_ns": 4},
            "10": {"window_saving_ns": 7, "step_saving_ns": 4},
            "2": {"window_saving_ns": -1, "step_saving_ns": None},
        },
        "steps": 3,
    }
    # a GPU with a window saving and no entry per step: its step saving is null
    assert Saving({"0": 1}, {}, 0, True).to_json()["devices"] == {"0": {"window_saving_ns": 1, "step_saving_ns": None}}


def test_how_long_before_the_end_the_host_launched_the_chain_that_ends_a_window(stepped):
    r = Replays(stepped.trace, stepped.breakdown)
    # recorded (no change): GPU 0's window ends at step 4's kernel (432 us), whose latest input is its
    # copy (ends 422 us, after the kernel's launch at 402 us); the copy's latest input is its launch at
    # 400.01 us (the copy before it on stream 20 ended at 304 us): 432 - 400.01 = 31.99 us, 2 ops
    assert r.host_paced(NO_CHANGE, 0) == {"before_end_ns": 31_990, "ops": 2, "call": -1}
    assert r.host_paced(NO_CHANGE, "0", most=2) == {"before_end_ns": 31_990, "ops": 2, "call": -1}
    assert r.host_paced(NO_CHANGE, 0, most=1) is None  # the chain does not reach a launch in 1 op
    # copy-free: the kernel runs at its launch, 402 us (the kernel before it ended at 313.001 us, its
    # copy no longer holds it), to 412 us: 10 us, 1 op
    assert r.host_paced(r.copy_free(), 0) == {"before_end_ns": 10_000, "ops": 1, "call": -1}
    # GPU 2: one kernel, launched at 600 us, nothing before it: 602 - 600 = 2 us; GPU 5 has no op
    assert r.host_paced(NO_CHANGE, 2) == {"before_end_ns": 2_000, "ops": 1, "call": -1}
    assert r.host_paced(NO_CHANGE, 5) is None


def test_rows_of_ops_found_by_key(stepped):
    r = Replays(stepped.trace, stepped.breakdown)
    ops = r.deps.ops
    copies = stepped.trace.copies.select(*OP_KEYS)
    got = r.rows_of(copies)
    assert got.dtype == np.int64 and got.tolist() == sorted(r.copy_rows().tolist())
    assert sorted(ops.start[got].tolist()) == [1_000, 101_000, 201_000, 201_090, 301_000, 401_000]
    # a row twice, and one whose start matches no op: each op once, the unknown left out
    odd = pl.concat([copies[:2], copies[:1], copies[2:3].with_columns(pl.col("start") + 1)])
    assert ops.start[r.rows_of(odd)].tolist() == sorted(ops.start[r.rows_of(copies[:2])].tolist())
    assert r.rows_of(odd).size == 2
    assert ops.start[r.rows_of(copies.filter(pl.col("device") == 1))].tolist() == [201_090]  # one row
    none = r.rows_of(copies.clear())
    assert none.dtype == np.int64 and none.size == 0
    # the breakdown's ops by their op_id (by position); pointed at other ops' rows, by key instead
    bd_ops = stepped.breakdown.ops.select("op_id", *OP_KEYS)
    by_pos = r.rows_of_ops(bd_ops)
    assert by_pos.tolist() == list(range(len(ops)))
    wrong = bd_ops.with_columns(pl.col("op_id").reverse())
    assert r.rows_of_ops(wrong).tolist() == list(range(len(ops)))
    assert r.rows_of_ops(bd_ops[:0]).size == 0


def test_the_host_paced_chain_through_the_op_before_on_its_stream(tmp_path):
    # GPU 0, stream 7: K1 launched at 0 runs [0.1, 10.1) us; K2 launched at 10 ns runs [10.1, 10.2) us,
    # queued behind K1 (its latest input: K1's end, after its launch).  K1 is the first op (row 0).
    # GPU 1: K3 [0.5, 0.6) us without a launch (no runtime row) and nothing before it.
    b = ExportBuilder()
    launched(b, 0, "kernel", 100, 10_100, "K1")
    launched(b, 10, "kernel", 10_100, 10_200, "K2")
    b.kernel(500, 600, "K3", device=1)
    r = replays(b.write(tmp_path / "trace.sqlite"))
    # K2 follows K1 (10.1 us, later than K2's launch); K1's latest input is its launch at 0: the chain
    # holds 2 ops, launched 10.2 us before the window's end
    assert r.host_paced(NO_CHANGE, 0) == {"before_end_ns": 10_200, "ops": 2, "call": -1}
    # K3's chain reaches no launch: GPU work, not the host, paces it
    assert r.host_paced(NO_CHANGE, 1) is None


def test_the_host_paced_chain_reads_the_replayed_launches(tmp_path):
    # GPU 0: a copy launched at 0 runs [1, 101) us on stream 20; a cudaStreamSynchronize on stream 20
    # from 10 ns returns at 101.01 us; kernel K launched after it at 101.1 us runs [110, 120) us.
    # Copy-free: the copy ends at 1 us, the call returns at 1.01 us, K's launch moves 100 us earlier,
    # to 1.1 us, and K keeps its 8.9 us after it: [10, 20) us.  The chain is K alone (nothing before it
    # on its stream, no wait), launched 20 - 1.1 = 18.9 us before the window's end, as replayed (not
    # at its recorded launch); its launch moved with the synchronize (call 0).
    b = ExportBuilder()
    launched(b, 0, "copy", 1_000, 101_000, "h2d", MIB, stream=20)
    b.sync(10, "stream_sync", stream=20, tid=TID, duration=101_000)
    launched(b, 101_100, "kernel", 110_000, 120_000, "K")
    r = replays(b.write(tmp_path / "trace.sqlite"))
    assert r.host_paced(r.copy_free(), 0) == {"before_end_ns": 18_900, "ops": 1, "call": 0}
    assert r.host_paced(NO_CHANGE, 0) == {"before_end_ns": 18_900, "ops": 1, "call": 0}  # 120 - 101.1 us


def test_a_trace_the_waves_cannot_replay_goes_to_the_scalar_replay(tmp_path):
    # the kernel waits for a copy that starts after it (clock skew between the streams): the waves
    # need every input to start before the op that waits, so there is no waves graph; from any number
    # of ops on, the replay is then the scalar one, and gives the same savings as below the limit
    b = ExportBuilder()
    launched(b, 0, "copy", 5_000, 6_000, "h2d", MIB, stream=20)
    b.event_record(50, 1, stream=20, tid=TID)
    b.stream_wait(60, 1, stream=7, tid=TID)
    launched(b, 100, "kernel", 4_000, 4_500, "K")
    path = b.write(tmp_path / "trace.sqlite")
    scalar = replays(path)
    r = replays(path)
    r.wave_min_ops = 0
    assert r._graph is None
    assert r.copy_free_saving == scalar.copy_free_saving
    assert r.replay(r.copy_free()).touched is None  # the scalar replay does not say which ops moved
