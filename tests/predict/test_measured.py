"""Measured per-instruction times (issue 23): from nsys-schema exports with known answers, from the
real JAX-Toolbox Pax archives, and the PGLE round trip through the real GPU compiler (.venv-aot)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from profiler.analysis import instruction_times as it
from profiler.predict.measured import load
from profiler.synthetic.export import ExportBuilder
from profiler.xla import pgle
from profiler.xla.compiled import load_module
from tests.helpers.cli import run_cli
from tests.helpers.measured import TID, TSL, measured_run, pax, thunk_export
from tests.helpers.paths import SMALL_STEP, TRAIN

STEP = [
    ("fusion.1", 100_000, "kernel", 0),
    ("copy-start.1", 400_000, "d2h", 8 << 20),
    ("gemm_fusion_dot.2", 300_000, "kernel", 0),
    ("fusion.1", 50_000, "kernel", 0),  # a second thunk of the same instruction
    ("copy-start.2", 40_000, "h2d", 1 << 20),
]


def test_export_instruction_times_are_the_medians_per_execution(build):
    path = build(thunk_export(STEP, executions=3, slower=10_000))
    m = load(path)
    assert m.module_name == "jit_step" and m.kind == "nsys export" and m.steps.height == 3
    t = {r["hlo_op"]: r for r in m.times.iter_rows(named=True)}
    # fusion.1: two thunks per execution, 150 us + 2 x (0, 10, 20) us: median 170 us
    assert t["fusion.1"]["median_ns"] == 170_000 and t["fusion.1"]["thunks"] == 2
    assert t["fusion.1"]["min_ns"] == 150_000 and t["fusion.1"]["max_ns"] == 190_000
    assert t["gemm_fusion_dot.2"]["median_ns"] == 310_000 and t["gemm_fusion_dot.2"]["executions"] == 3
    assert t["copy-start.1"]["median_ns"] == 400_000 and t["copy-start.1"]["bytes"] == 8 << 20
    assert t["copy-start.2"]["bytes"] == 1 << 20
    assert t["gemm_fusion_dot.2"]["op_class"] == "matmul" and t["copy-start.1"]["op_class"] == "copy"
    assert t["fusion.1"]["op_class"] == "fusion"
    # copies by size: 8 MiB d2h at 8 MiB / 400 us, 1 MiB h2d at 1 MiB / 40 us
    bw = it.copy_bandwidth(m.copies)
    d2h = bw.filter(pl.col("cls") == "d2h").row(0, named=True)
    assert d2h["size_lo"] == 8 << 20 and d2h["copies"] == 3
    assert d2h["gbps"] == pytest.approx((8 << 20) / 400_000)
    h2d = bw.filter(pl.col("cls") == "h2d").row(0, named=True)
    assert h2d["gbps"] == pytest.approx((1 << 20) / 40_000)


def test_link_fit_recovers_latency_and_bandwidth():
    nbytes = np.array([1 << 16, 1 << 20, 1 << 24, 1 << 26])
    ns = 5_000 + nbytes / 25.0  # 5 us + bytes at 25 GB/s
    c = pl.DataFrame({"cls": ["h2d"] * 4, "bytes": nbytes, "start": [0] * 4, "end": ns.astype(np.int64)})
    fit = it.link_fit(c).row(0, named=True)
    assert fit["gbps"] == pytest.approx(25.0, rel=1e-3)
    assert fit["latency_ns"] == pytest.approx(5_000, rel=1e-2)
    pred = it.copy_ns(np.array([1 << 20, 1 << 30]), it.copy_bandwidth(c), "h2d", 10.0)
    assert pred[0] == pytest.approx(ns[1], rel=1e-6)  # the measured class
    assert pred[1] == pytest.approx((1 << 30) / ((1 << 26) / ns[3]), rel=1e-6)  # the largest class's rate
    assert it.copy_ns(np.array([1000]), it.copy_bandwidth(c), "d2h", 10.0)[0] == 100.0  # never measured


def test_pgle_text_round_trip_and_bad_file(build, tmp_path):
    path = build(thunk_export(STEP, executions=2))
    out = tmp_path / "step.pbtxt"
    proc = run_cli("pgle", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "4 instruction costs of jit_step" in proc.stdout
    costs = pgle.read_profile(out)
    assert costs == {"fusion.1": 150.0, "copy-start.1": 400.0, "gemm_fusion_dot.2": 300.0, "copy-start.2": 40.0}
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("not a profile\n")
    proc = run_cli("plan", "--pgle", str(bad), "--target", "h100", "--policy", "none", str(TRAIN))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "holds no PGLE costs" in proc.stderr
    proc = run_cli("pgle", str(tmp_path / "absent.sqlite"), "-o", str(out))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "absent.sqlite" in proc.stderr


def test_pax_archive_instruction_times(shared_traces):
    m = pax()
    assert m.module_name == "pjit__wrapped_step_fn" and m.gpu == "NVIDIA A100-SXM4-40GB"
    assert m.module is not None and m.module.name == "pjit__wrapped_step_fn" and m.steps.height == 5
    entry = {i.name for i in m.module.computations[m.module.entry].instructions}
    sites = set(m.times["site"].to_list())
    assert sites <= entry  # every measured thunk maps to an instruction the schedule holds
    # the thunks run one after another on the compute stream: their medians add up to about the step
    total = float(m.times["median_ns"].sum())
    assert abs(total - m.step_ns) / m.step_ns < 0.03
    classes = set(m.times["op_class"].to_list())
    assert {"matmul", "fusion", "collective"} <= classes


ARGS = ["--layers", "2", "--d-model", "256", "--heads", "4", "--ffn", "512", "--seq", "512"]


@pytest.fixture(scope="module")
def base_step(qkv_plan):
    """The example's offload_qkv step at batch 8 (the ARGS above), compiled for an H100 by the real GPU
    compiler (once for the session: test_plan_numbers reads it too)."""
    assert ARGS == SMALL_STEP
    return qkv_plan[1] / "offload_qkv-b8" / "step.hlo.txt"


def test_pgle_round_trip_moves_the_copies(base_step, tmp_path):
    """The real GPU compiler: a measured profile in which compute is expensive and copies cheap, written
    by `profile-step pgle` from a run of the compiled step's own instructions, changes where XLA
    schedules the copy-starts of a small offloading step."""
    module = load_module(base_step)[0]
    run, work = measured_run(base_step, tmp_path / "run", compute_ns=5_000_000, copy_ns=1_000)
    assert sum(i.opcode == "copy-start" for i in work) >= 4
    profile = tmp_path / "measured.pbtxt"
    proc = run_cli("pgle", str(run), "-o", str(profile))
    assert proc.returncode == 0, proc.stderr
    assert len(pgle.read_profile(profile)) == len(work)
    out = tmp_path / "with"
    # one compilation pair, printed as text; the JSON results are the plan.json it writes (what --json prints
    # under "results"; that printing is the calibration test's)
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8", "--out", str(out),
                   "--pgle", str(profile), str(TRAIN), *ARGS, timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Schedule with the PGLE profile" in proc.stdout and "copies moved" in proc.stdout
    (res,) = json.loads((out / "plan.json").read_text())["results"]
    g = res["pgle"]
    assert g["status"] == "ok" and g["profile_names_found"] == len(work)
    assert g["schedule_changed"] and g["copies_moved"] >= 1
    # the baseline of the --pgle run is the same compilation as the plain plan
    assert [c["before"] for c in g["copies"]] == pgle.schedule_copies(module, pgle.read_profile(profile))
    assert {"before", "after"} <= set(g["predicted"]) and all("exposed_ns_after" in c for c in g["copies"])


def test_calibrate_predicts_the_same_program_from_its_measured_costs(base_step, tmp_path):
    """`plan --calibrate RUN`: at the measured batch every kernel takes its measured time (same name and
    shape); at another batch the roofline times the measured scale; a faster link hides more."""
    run, work = measured_run(base_step, tmp_path / "run", compute_ns=200_000, copy_ns=100_000)
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8,16", "--out",
                   str(tmp_path / "plan"), "--calibrate", str(run), "--json", str(TRAIN), *ARGS,
                   timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    b8, b16 = doc["results"]
    kernels = sum(i.opcode != "copy-start" for i in work)
    (at8,), (at16,) = b8["calibrated"], b16["calibrated"]
    assert at8["costed"]["measured"] == kernels and at8["costed"]["scaled"] == 0
    # kernels of 200 us each, one after another: the step is at least their sum
    assert at8["predicted_step_ns"] >= kernels * 200_000
    assert at16["costed"]["scaled"] > 0 and at16["costed"]["measured"] < kernels
    assert at16["predicted_step_ns"] > at8["predicted_step_ns"]  # twice the batch
    assert set(doc["calibration"]["scale"]) & {"fusion", "matmul"}
    # the plan folder's document, as the dashboard's plan view shows it: the calibrated numbers, not only
    # the roofline's (the terminal printed both)
    from dashboards.plan_view import calibration_line, predicted_datatable
    from profiler.analysis.policies import plan_table

    tab = plan_table(json.loads((tmp_path / "plan" / "plan.json").read_text()))
    assert [c["predicted_step_ns"] for c in tab["calibrated"]] == [at8["predicted_step_ns"], at16["predicted_step_ns"]]
    shown = predicted_datatable(tab, "calibrated")
    assert shown.id == "plan-calibrated-table" and [r["batch"] for r in shown.data] == [8, 16]
    assert str(run) in calibration_line(tab["calibration"])
    # the same calibration on other links: a faster link exposes no more and is no slower
    from profiler.analysis.links import LINKS
    from profiler.predict import calibrate
    from profiler.xla.targets import TARGETS

    m = load(run)
    cal = calibrate.calibrate(m, TARGETS["h100"].spec_text())
    preds = calibrate.predict(cal, load_module(base_step)[0], TARGETS["h100"].spec_text(),
                              [LINKS[k] for k in ("pcie3", "pcie4", "pcie5", "nvlink-c2c")])  # fmt: skip
    exposed = [p["predicted_exposed_ns"] for p in preds]
    steps = [p["predicted_step_ns"] for p in preds]
    assert exposed == sorted(exposed, reverse=True) and steps == sorted(steps, reverse=True)
    assert exposed[0] > exposed[-1]


REPLAY_GOAL = 0.03  # issue 42: the Pax archives (no loops) replay within 3% (benchmarks/README, "Prediction")


@pytest.mark.parametrize("archive", ["proc0", "proc1"])
def test_replay_of_the_pax_schedule_is_within_the_goal(shared_traces, archive):
    """The compiled schedule replayed through its dependencies with the measured per-instruction
    durations predicts the measured step (median XlaModule range) within 5%."""
    from profiler.predict.calibrate import measured_costs, replay

    m = pax(archive)
    p, err = replay(m)
    assert p.costed_by["missing"] == 0 and p.costed_by["given"] == len(measured_costs(m))
    assert abs(err) <= REPLAY_GOAL, f"replay {p.step_ns / 1e6:.2f} ms against {m.step_ns / 1e6:.2f} ms measured"
    # the replay is not the sum of the durations: the collectives run beside the compute stream
    assert p.step_ns < sum(measured_costs(m).values())


def test_calibration_on_a_real_pax_archive(shared_traces):
    """`plan --calibrate` on a real archive: its own program on its own GPU takes every measured
    duration (the prediction is the replay); on another GPU every kernel is the roofline times the
    class's measured scale, none measured."""
    from profiler.analysis.links import LINKS
    from profiler.predict import calibrate, roofline, schedule
    from profiler.xla.targets import TARGETS

    m = pax()
    cal = calibrate.calibrate(m, m.spec_text)
    assert set(cal.scale) == {"matmul", "fusion", "reduction", "collective"}  # "other": 2 us, under MIN_SCALE_NS
    assert all(v > 1 for v in cal.scale.values())  # the roofline is optimistic on this A100
    (own,) = calibrate.predict(cal, m.module, m.spec_text, [LINKS["pcie4"]])
    replayed, _ = calibrate.replay(m)
    assert own["costed"]["scaled"] == 0 and own["predicted_step_ns"] == replayed.step_ns
    h100 = TARGETS["h100"].spec_text()
    (other,) = calibrate.predict(cal, m.module, h100, [LINKS["pcie5"]])
    assert other["costed"]["measured"] == 0 and other["costed"]["scaled"] > 2000
    roof = roofline.costs(schedule.build(m.module), roofline.device_from_spec(h100))
    sched = schedule.build(m.module)
    bare = calibrate.simulate(sched, roof, LINKS["pcie5"]).step_ns
    assert bare < other["predicted_step_ns"] < own["predicted_step_ns"]  # an H100 is faster than the A100


def test_a_loops_range_owns_only_what_runs_outside_its_bodys_thunks(build):
    """XLA's while thunk around its body's thunks on every trip: the loop's range owns the ops launched
    outside them (here a predicate copy before each trip), each its own span, not the span from the
    first to the last (which would count the body twice); the module's step is its GPU span, though
    the host range ended before the GPU did."""
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    b.domain(TSL, "TSL", tid=TID)
    host, gpu = 1_000, 10_000
    b.nvtx(host, host + 500, "Thunk:#name=jit(step)/while,hlo_op=while.3#", tid=TID, domain_id=TSL)
    for trip in range(2):
        h = host + 10 + 200 * trip
        b.runtime(h, h + 5, b.copy(gpu, gpu + 2_000, "d2h", 1, stream=7), name="cuMemcpyAsync", tid=TID)
        b.nvtx(h + 50, h + 150, "Thunk:#name=jit(step)/while/body/k,hlo_op=fusion.4#", tid=TID, domain_id=TSL)
        b.runtime(h + 60, h + 65, b.kernel(gpu + 3_000, gpu + 103_000, "fusion_4", stream=7), tid=TID)
        gpu += 110_000
    b.nvtx(host - 10, host + 600, "XlaModule:#hlo_module=jit_step,program_id=7#", tid=TID, domain_id=TSL)
    m = load(build(b))
    t = {r["hlo_op"]: r for r in m.times.iter_rows(named=True)}
    assert t["fusion.4"]["median_ns"] == 200_000 and t["fusion.4"]["thunks"] == 2
    assert t["while.3"]["median_ns"] == 4_000 and t["while.3"]["thunks"] == 2
    assert m.steps["duration_ns"].to_list() == [223_000 - 10_000]  # the first copy to the last kernel


def test_a_copy_between_two_measured_sizes_is_interpolated_not_priced_at_the_small_ones_rate():
    """A 4-byte class (its rate is its latency: 0.0016 GB/s) and a 64 MiB class at 53 GB/s, as an H200
    run measured them: a 32 MiB copy lies between them and takes about the large copies' time per
    byte, not 94 s at the 4-byte rate; the measured classes keep their own rates."""
    c = pl.DataFrame({"cls": ["d2h"] * 4, "bytes": [4, 4, 1 << 26, 1 << 26],
                      "start": [0] * 4, "end": [2_528, 2_528, 1_264_648, 1_264_648]})  # fmt: skip
    bw = it.copy_bandwidth(c)
    got = it.copy_ns(np.array([4, 6, 1 << 25, 1 << 26, 1 << 27]), bw, "d2h", 10.0)
    assert got[0] == pytest.approx(2_528) and got[1] == pytest.approx(6 * 2_528 / 4)  # the 4-byte class
    assert got[2] == pytest.approx(2_528 + (1_264_648 - 2_528) * ((1 << 25) - 4) / ((1 << 26) - 4))
    assert got[3] == pytest.approx(1_264_648) and got[4] == pytest.approx(2 * 1_264_648)  # the 64 MiB rate
