"""The predicted step: the compiled schedule replayed with roofline costs (profiler.predict).

- On XLA's real output for an H100 (../shared/hlo's two-layer offload step, compiled without a GPU):
  the schedule pairs every copy-start with its copy-done, and the prediction is monotone in the link.
- With the real GPU compiler (.venv-aot; skips without it, as test_compiled_step): a step whose
  offloaded activation has independent matmuls to hide behind is predicted hidden, one with nothing
  between the copies exposed; predictions grow with the batch and shrink with the link's bandwidth.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from profiler.analysis.accuracy import XLA, of_costs
from profiler.analysis.links import parse_link
from profiler.predict import roofline, schedule
from profiler.predict.simulate import link_ns, simulate
from profiler.predict.step import label_of, predict_file
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.helpers import reference_predict
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT, SHARED_HLO

TRAIN = ROOT / "examples" / "train.py"
OVERLAP = ROOT / "tests" / "scripts" / "offload_overlap.py"
H100 = TARGETS["h100"]
LINKS = [parse_link(k) for k in ("pcie4", "pcie5", "pcie-gen5", "nvlink-c2c")]


@pytest.fixture(scope="module")
def two_layer():
    path = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"
    if not path.exists():
        pytest.skip("../shared/hlo is absent")
    return parse_text(path.read_text(), str(path))


def test_schedule_of_the_real_two_layer_step(two_layer):
    sched = schedule.build(two_layer)
    starts = [o for o in sched.ops if o.kind == "start"]
    dones = [o for o in sched.ops if o.kind == "done"]
    assert [o.stream for o in starts].count("d2h") == 2 and [o.stream for o in starts].count("h2d") == 2
    assert {sched.ops[d.pair].name for d in dones} == {s.name for s in starts}
    assert all(s.bytes == 256 * 4096 * 4 for s in starts)  # f32[256,4096]
    assert all(sched.ops[d.pair].index < d.index for d in dones)
    assert sched.layers == {
        "copy-start.1.0": "layer_1",
        "copy-start.4": "layer_0",
        "copy-start.2.0": "layer_1",
        "copy-start.3.0": "layer_0",
    }
    names = [o.name for o in sched.ops]
    assert names == [i.name for i in two_layer.computations[two_layer.entry].instructions]  # no loop: as printed


def test_roofline_of_a_dot():
    """2 x M x N x K FLOPs at the f32 (TF32) rate, or the bytes at HBM bandwidth, whichever is longer."""
    text = """HloModule m, is_scheduled=true
ENTRY %e (a: f32[256,1024], b: f32[1024,4096]) -> f32[256,4096] {
  %a = f32[256,1024]{1,0} parameter(0)
  %b = f32[1024,4096]{1,0} parameter(1)
  ROOT %d = f32[256,4096]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    module = parse_text(text)
    dev = roofline.device_from_spec(H100.spec_text())
    assert dev.matmul_flops == pytest.approx(989.4e12) and dev.hbm_bytes_s == pytest.approx(3.35e12)
    assert dev.vector_flops == pytest.approx(132 * 128 * 2 * 1.98e9)
    costs = roofline.costs(schedule.build(module), dev)
    flops_ns = 2 * 256 * 4096 * 1024 * 2 / 989.4e12 * 1e9  # f32: twice the bf16 time
    bytes_ns = (256 * 1024 + 1024 * 4096 + 256 * 4096) * 4 / 3.35e12 * 1e9
    assert costs == {"d": pytest.approx(max(flops_ns, bytes_ns), abs=1)}


def test_prediction_is_monotone_in_the_link(two_layer):
    sched = schedule.build(two_layer)
    costs = roofline.costs(sched, roofline.device_from_spec(H100.spec_text()))
    preds = [simulate(sched, costs, parse_link(f"{g}")) for g in (1, 8, 31.5, 63, 450, 10_000)]
    steps = [p.step_ns for p in preds]
    exposed = [p.exposed_ns for p in preds]
    assert steps == sorted(steps, reverse=True) and exposed == sorted(exposed, reverse=True)
    assert steps[0] > steps[-1] and exposed[0] > 0
    assert all(p.compute_ns == preds[0].compute_ns for p in preds)  # the link moves copies only
    slow = preds[0]
    assert slow.copy_ns == {"d2h": 2 * link_ns(256 * 4096 * 4, parse_link("1"))} | {"h2d": slow.copy_ns["h2d"]}
    assert slow.step_ns == slow.compute_ns + slow.exposed_ns  # no collectives: compute + waits
    assert sum(x["exposed_ns"] for x in slow.layers) == slow.exposed_ns
    # a measured cost replaces the roofline's, the copies included
    given = simulate(sched, {**costs, **{o.name: 0 for o in sched.ops if o.kind == "start"}}, parse_link("1"))
    assert given.exposed_ns == 0 and given.costed_by["link"] == 0


def _compile(out: Path, *args: str) -> Path:
    proc = run_cli("plan", "--target", "h100", "--policy", "x", "--batch-arg", "", "--out", str(out), str(OVERLAP),
                   *args, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out / "x" / "step.hlo.txt"


def test_copies_with_independent_compute_are_hidden(aot_python, tmp_path):
    hidden = predict_file(_compile(tmp_path / "c8", "--compute", "8"), H100.spec_text(), LINKS)
    bare = predict_file(_compile(tmp_path / "c0", "--compute", "0"), H100.spec_text(), LINKS)
    for doc in (hidden, bare):
        assert not doc["notes"]
        for p in doc["predictions"]:
            assert p["copy_bytes"] == {"d2h": 4096 * 4096 * 2, "h2d": 4096 * 4096 * 2}  # bf16[4096,4096]
            assert p["costed_by"]["missing"] == 0
    # eight D x D matmul layers forward and backward: enough to hide 32 MiB each way even over PCIe Gen4
    assert all(p["predicted_exposed_ns"] == 0 for p in hidden["predictions"])
    assert all(p["predicted_step_ns"] == p["predicted_compute_ns"] for p in hidden["predictions"])
    # nothing between the copy to host and the copy back: exposed on every PCIe link
    pcie = [p for p in bare["predictions"] if p["link"].startswith("pcie")]
    assert all(p["predicted_exposed_ns"] > 0.5 * p["predicted_copy_ns"]["h2d"] for p in pcie)
    assert [p["layer"] for p in bare["predictions"][0]["layers"]] == ["layer_0"]
    exposed = [p["predicted_exposed_ns"] for p in bare["predictions"]]
    assert exposed[0] > exposed[1] == exposed[2] >= exposed[3]  # pcie4 > pcie5 (= pcie-gen5) >= C2C


def test_prediction_grows_with_the_batch(aot_python, tmp_path):
    steps, exposed = [], []
    for b in (1024, 2048, 4096):
        doc = predict_file(_compile(tmp_path / f"b{b}", "--compute", "0", "--batch", str(b)), H100.spec_text(),
                           [parse_link("pcie5")])  # fmt: skip
        (p,) = doc["predictions"]
        steps.append(p["predicted_step_ns"])
        exposed.append(p["predicted_exposed_ns"])
        assert p["copy_bytes"]["d2h"] == b * 4096 * 2
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert exposed == sorted(exposed) and exposed[0] < exposed[-1]
    json.dumps(doc)  # the document is JSON


def test_plan_predicts_per_policy_batch_and_link(aot_python, tmp_path):
    """``plan --link A,B --json``: predicted_step_ns and predicted_exposed_ns per result and link, the
    verdict of offloading against rematerialization, and the same numbers in the text."""
    args = ("plan", "--target", "h100", "--policies", "remat,offload_qkv", "--batch", "2,8",
            "--link", "pcie-gen5,nvlink-c2c")  # fmt: skip
    proc = run_cli(*args, "--json", "--out", str(tmp_path / "j"), str(TRAIN), "--layers", "2", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tab = json.loads(proc.stdout)["plan"]
    preds = tab["predictions"]
    assert [(p["policy"], p["batch"], p["link"]) for p in preds] == [
        (pol, b, link) for pol in ("remat", "offload_qkv") for b in (2, 8) for link in ("pcie5", "nvlink-c2c")
    ]
    assert all(p["predicted_step_ns"] > 0 and p["predicted_exposed_ns"] >= 0 for p in preds)
    by = {(p["policy"], p["batch"], p["link"]): p for p in preds}
    for b in (2, 8):
        slow, fast = by[("offload_qkv", b, "pcie5")], by[("offload_qkv", b, "nvlink-c2c")]
        assert slow["predicted_step_ns"] >= fast["predicted_step_ns"]
        assert slow["predicted_exposed_ns"] >= fast["predicted_exposed_ns"]
        assert slow["copy_bytes"]["d2h"] == 2 * 3 * b * 32 * 64 * 4  # 2 layers x q, k, v of batch x 32 x 64 f32
        assert by[("remat", b, "pcie5")]["predicted_step_ns"] == by[("remat", b, "nvlink-c2c")]["predicted_step_ns"]
    for pol in ("remat", "offload_qkv"):
        assert by[(pol, 2, "pcie5")]["predicted_compute_ns"] < by[(pol, 8, "pcie5")]["predicted_compute_ns"]
    acc = of_costs([p["cost_model"] for p in preds])
    assert acc is XLA  # plan's compile carries XLA's own estimates: the predictions took them, and say so
    verdicts = {(v["batch"], v["link"]): v for v in tab["offload_vs_remat"]}
    assert set(verdicts) == {(b, k) for b in (2, 8) for k in ("pcie5", "nvlink-c2c")}
    for (b, k), v in verdicts.items():
        rem, off = by[("remat", b, k)]["predicted_step_ns"], by[("offload_qkv", b, k)]["predicted_step_ns"]
        # a difference inside the predictions' error on real steps is a tie, said as one
        won = "tie" if abs(rem - off) < acc.tie * max(rem, off) else ("offload" if rem > off else "remat")
        # ... and steps of µs, far below the real steps that error was measured on, are not called at all
        won = "unchecked" if acc.out_of_range(rem, off) else won
        assert v["saving_ns"] == rem - off and v["winner"] == won
    assert [lk["key"] for lk in tab["links"]] == ["pcie5", "nvlink-c2c"]
    # the text the command prints for the same plan (render_plan of its plan.json, without compiling the
    # four steps again; the command's own printing of a plan is test_compiled_step's)
    from profiler.analysis.policies import plan_table
    from profiler.report.policies_text import render_plan

    text = render_plan(plan_table(json.loads((tmp_path / "j" / "plan.json").read_text())))
    # the head names the cost model these predictions took, as the error line under it does
    assert f"{label_of(acc.costed)}, NVIDIA H100 80GB HBM3:" in text and "costed by XLA's own kernel estimates" in text
    assert "link NVLink-C2C: 450 GB/s per direction, as chosen (--link)" in text
    assert "batch 8, PCIe Gen5 x16: " in text
    said = " ".join(text.split())  # the line names the cost model the plan used (the roofline or XLA's)
    assert re.search(
        r"error of these predictions \((the roofline alone|XLA's own kernel estimates)\) on the example's 8", said
    )
    bad = run_cli("plan", "--link", "pcie9", str(TRAIN))
    assert bad.returncode == 2 and "--link: unknown link 'pcie9'" in bad.stderr and "Traceback" not in bad.stderr


def _run_folder(tmp: Path, hlo: Path) -> dict:
    """A run folder holding a GPU step's compiled module (XLA's real output) and a run summary of it."""
    from profiler.analysis.policies import step_compiled

    folder = tmp / "run"
    (folder / "xla_dump").mkdir(parents=True)
    name = "module_0007.jit_train_step.sm_9.0_gpu_after_optimizations.txt"
    (folder / "xla_dump" / name).write_text(hlo.read_text())
    compiled = {
        "dump_dir": "xla_dump",
        "step_module": "module_0007.jit_train_step",
        "chosen_by": "handed over",
        "modules": [
            {
                "name": "jit_train_step",
                "id": 7,
                "label": "module_0007.jit_train_step",
                "files": {"after": name},
                "platform": "gpu",
                "plan": None,
                "notes": [],
            }
        ],
        "notes": [],
    }
    (folder / "compiled.json").write_text(json.dumps(compiled))
    steps = [{"name": f"step {i}", "duration_ns": 1_000_000 + i, "excluded": False, "exposed_ns": 40_000,
              "stall_ns": 0} for i in range(3)]  # fmt: skip
    return {
        "policy": "offload",
        "trace": str(folder / "trace.sqlite"),
        "gpus": ["NVIDIA H100 80GB HBM3"],
        "steps": steps,
        "median_step_ns": 1_000_001,
        "devices": {"0": {}},
        "layers": {"layer_0": {"offload": {"exposed_ns": 3 * 30_000}}, "layer_1": {"offload": {"exposed_ns": 0}}},
        "compiled": step_compiled(compiled),
    }


def test_predicted_against_measured_in_the_policy_table(two_layer, tmp_path):
    """After a run: the run's own compiled step predicted on its GPU (H100) and host link (PCIe Gen5),
    against the measured median step and exposed time, per layer too; a CPU run says why it has none."""
    from profiler.analysis.policies import policy_table
    from profiler.predict.recorded import predicted
    from profiler.report.policies_text import render_policy_comparison

    hlo = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"
    run = _run_folder(tmp_path, hlo)
    expect = reference_predict.predicted(parse_text(hlo.read_text()), H100.spec_text(), 63.0)  # PCIe Gen5
    cpu = {**run, "policy": "cpu", "compiled": {**run["compiled"], "platform": "cpu"}}
    tab = policy_table([run, cpu], predict=predicted)
    p = tab["rows"][0]["predicted"]
    assert p["link"] == "PCIe Gen5 x16" and p["target"] == "profile-step's h100 target (NVIDIA H100 80GB HBM3)"
    assert p["predicted_step_ns"] == expect["predicted_step_ns"] > 0
    assert p["predicted_exposed_ns"] == expect["predicted_exposed_ns"]
    assert p["step_error"] == pytest.approx(expect["predicted_step_ns"] / 1_000_001 - 1)
    assert p["exposed_error_ns"] == expect["predicted_exposed_ns"] - 40_000
    layers = {x["layer"]: x for x in p["layers"]}
    assert layers["layer_0"]["measured_exposed_ns"] == 30_000  # 3 steps, 1 device
    assert layers["layer_1"]["measured_exposed_ns"] == 0
    assert tab["rows"][1]["predicted"]["predicted_step_ns"] is None
    text = render_policy_comparison(tab)
    assert "predicted (the compiled schedule replayed, costed by the roofline alone; not measured) against measured" \
        in text  # fmt: skip
    assert f"{100 * p['step_error']:+.1f}%" in text
    assert "cpu: no prediction: a CPU run's compiled step is XLA:CPU's, with no GPU schedule" in text


def test_a_tune_verify_run_shows_what_tune_predicted(tmp_path):
    """A run folder that ``tune --verify`` captured keeps tune's prediction (tune_prediction.json):
    the policy table has it beside the measured step, with the error on a GPU (0.9 ms predicted
    against the 1_000_001 ns median: 900_000 / 1_000_001 - 1 = -10.0%), and the text says so; a CPU
    run's line says it is not comparable."""
    from profiler.analysis.policies import policy_table
    from profiler.predict.recorded import predicted
    from profiler.report.policies_text import render_policy_comparison
    from profiler.stored.folder import TUNE_PREDICTION

    hlo = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"
    if not hlo.is_file():
        pytest.skip("../shared/hlo is absent")
    run = _run_folder(tmp_path, hlo)
    candidate = {"label": "offload small", "predicted_step_ns": 900_000, "predicted_exposed_ns": 10_000}
    told = {"tune": "plans/t", "link": {"name": "NVLink-C2C"}, "target": {"label": "H100"}, "candidate": candidate}
    (Path(run["trace"]).parent / TUNE_PREDICTION).write_text(json.dumps(told))
    cpu = {**run, "policy": "cpu", "compiled": {**run["compiled"], "platform": "cpu"}}
    tab = policy_table([run, cpu], predict=predicted)
    t = tab["rows"][0]["predicted"]["tune"]
    assert t["label"] == "offload small" and t["predicted_step_ns"] == 900_000
    assert t["step_error"] == pytest.approx(900_000 / 1_000_001 - 1)
    assert t["exposed_error_ns"] == 10_000 - 40_000  # the row's measured exposed time
    assert tab["rows"][1]["predicted"]["tune"]["step_error"] is None
    text = render_policy_comparison(tab)
    head = "(offload small) on H100, NVLink-C2C: step 900 µs, exposed 10.0 µs"
    assert f"tune predicted offload {head}; measured " in text
    assert "step error -10.0%" in text
    assert (
        "tune predicted cpu (offload small) on H100, NVLink-C2C: step 900 µs, exposed 10.0 µs (not comparable" in text
    )


def test_pax_step_on_its_own_a100_target(shared_traces, tmp_path):
    """The real Pax FSDP step (an A100 archive, HLO proto): dots keep their contracted dimensions from
    the proto, its 23 async collectives run on the collective stream, and the device is the dump's
    own target description."""
    import zipfile

    from profiler.xla.compiled import load_module
    from profiler.xla.proto import read_bytes

    archive = shared_traces / "jax-toolbox" / "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip"
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            if name.startswith("dump/module_0040.") and ("after_optimizations" in name or "target_config" in name):
                z.extract(name, tmp_path)
    dump = tmp_path / "dump"
    hlo = dump / "module_0040.pjit__wrapped_step_fn.sm_8.0_gpu_after_optimizations.hlo.pb.xz"
    spec = read_bytes(dump / "module_0040.pjit__wrapped_step_fn.gpu_target_config.pbtxt.xz").decode()
    module, _, _ = load_module(hlo)
    dots = [i for i in module.instructions() if i.opcode == "dot"]
    assert dots and all("lhs_contracting_dims" in d.attrs for d in dots)
    sched = schedule.build(module)
    starts = [o for o in sched.ops if o.kind == "start"]
    assert len(starts) == 23 and {o.stream for o in starts} == {"collective"}
    dev = roofline.device_from_spec(spec)
    assert dev.name == "NVIDIA A100-SXM4-40GB" and dev.matmul_flops == pytest.approx(312e12)
    assert dev.hbm_bytes_s == pytest.approx(1555.2e9)
    pred = simulate(sched, roofline.costs(sched, dev), parse_link("pcie4"))
    assert pred.costed_by["missing"] == 0 and pred.exposed_ns == 0  # no host copies in this step
    assert pred.step_ns >= pred.compute_ns > 0 and pred.collective_ns > 0


def test_analyze_shows_predicted_against_measured(plan_run):
    """analyze on a run folder with a real-schema export of an H100 run and the GPU compiler's step in
    its dump: the predicted step of that module on the H100 and PCIe Gen5, against the measured."""
    hlo = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"
    expect = reference_predict.predicted(parse_text(hlo.read_text()), H100.spec_text(), 63.0)  # PCIe Gen5
    doc = json.loads(run_cli("analyze", "--json", str(plan_run)).stdout)
    (row,) = doc["policies"]["rows"]
    p = row["predicted"]
    assert p["predicted_step_ns"] == expect["predicted_step_ns"]
    assert p["measured_step_ns"] == row["median_step_ns"] > 0
    assert p["step_error"] == pytest.approx(expect["predicted_step_ns"] / row["median_step_ns"] - 1)
    assert p["link"] == "PCIe Gen5 x16"
    text = run_cli("analyze", str(plan_run))
    assert text.returncode == 0, text.stderr
    assert "against measured, per step and device:" in text.stdout
    err = re.escape(f"{100 * p['step_error']:+.1f}%")
    assert re.search(rf"^offload_x\s+\S+\s+\S+\s+{err}", text.stdout, re.M)


def test_op_classes_of_the_real_two_layer_step(two_layer):
    classes = roofline.op_classes(schedule.build(two_layer))
    assert classes["copy-start.4"] == "copy" and classes["gemm_fusion_dot.4"] == "matmul"
    assert classes["loop_reduce_fusion"] == "reduction" and classes["loop_add_fusion"] == "fusion"
    assert "copy-done.4" not in classes and "bitcast.13" not in classes


def test_async_collective_hides_behind_independent_work():
    """An all-reduce over 4 devices: payload x 2(n-1)/n over NVLink; hidden behind a dot that does not
    need it, exposed when the next kernel does."""
    text = """HloModule m, is_scheduled=true
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e (g: f32[1048576], a: bf16[8192,8192], b: bf16[8192,8192]) -> (f32[1048576], bf16[8192,8192]) {
  %g = f32[1048576]{0} parameter(0)
  %a = bf16[8192,8192]{1,0} parameter(1)
  %b = bf16[8192,8192]{1,0} parameter(2)
  %ars = f32[1048576]{0} all-reduce-start(%g), replica_groups={{0,1,2,3}}, to_apply=%add
  %d = bf16[8192,8192]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %ard = f32[1048576]{0} all-reduce-done(%ars)
  %n = f32[1048576]{0} negate(%ard)
  ROOT %t = (f32[1048576]{0}, bf16[8192,8192]{1,0}) tuple(%n, %d)
}
"""
    module = parse_text(text)
    sched = schedule.build(module)
    dev = roofline.device_from_spec(H100.spec_text())
    costs = roofline.costs(sched, dev)
    assert costs["ars"] == pytest.approx(4 * 2**20 * 2 * 3 / 4 / 450e9 * 1e9, abs=1)
    assert costs["d"] == pytest.approx(2 * 8192**3 / 989.4e12 * 1e9, abs=1)  # bf16: compute-bound
    hidden = simulate(sched, costs)
    assert hidden.exposed_collective_ns == 0 and hidden.step_ns == costs["d"] + costs["n"]
    no_dot = simulate(sched, {**costs, "d": 0})
    assert no_dot.exposed_collective_ns == costs["ars"]
    assert no_dot.step_ns == costs["ars"] + costs["n"]


def test_roofline_counts_what_xla_cost_analysis_counts(two_layer):
    """FLOPs and HBM bytes of the real two-layer H100 step, added over the schedule's kernels, against
    XLA's own HloCostAnalysis of the same text (jaxlib): within 2%.  XLA also charges each host copy
    pair 4 x the copied bytes (its operand and result at the start and at the done, shown on a module
    of one copy); the roofline prices copies over the link instead, so those are added back."""
    from profiler.xla.compiled import cost_analysis

    one_copy = """HloModule m, is_scheduled=true
ENTRY %e (a: f32[1024,1024]) -> f32[1024,1024] {
  %a = f32[1024,1024]{1,0} parameter(0)
  %cs = (f32[1024,1024]{1,0:S(5)}, f32[1024,1024]{1,0}, u32[]) copy-start(%a)
  ROOT %cd = f32[1024,1024]{1,0:S(5)} copy-done(%cs)
}
"""
    xla_copy, why = cost_analysis(one_copy)
    if xla_copy is None:
        pytest.skip(why)
    assert xla_copy["bytes accessed"] == pytest.approx(4 * 2**22, abs=64)
    path = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"
    xla, _ = cost_analysis(path.read_text())
    sched = schedule.build(two_layer)
    got = roofline.totals(sched, roofline.device_from_spec(H100.spec_text()))
    copies = sum(4 * o.bytes for o in sched.ops if o.kind == "start")
    assert got["matmul_flops"] + got["other_flops"] == pytest.approx(xla["flops"], rel=0.02)
    assert got["hbm_bytes"] + copies == pytest.approx(xla["bytes accessed"], rel=0.02)


def test_scanned_layers_replay_every_trip(aot_python, tmp_path):
    """Layers under lax.scan: the offloads are async fusions (fusion-start / fusion-done) inside the
    while loops; the replay runs each body known_trip_count times, so the predicted copy bytes are
    the plan's bytes per step, all on the copy streams."""
    out = tmp_path / "scan"
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8", "--link", "pcie5", "--json",
                   "--out", str(out), str(TRAIN), "--scan", "--layers", "3", timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tab = json.loads(proc.stdout)["plan"]
    (row,) = tab["rows"]
    (p,) = tab["predictions"]
    assert p["copy_bytes"] == {"d2h": row["planned_d2h_bytes_per_step"], "h2d": row["planned_h2d_bytes_per_step"]}
    assert row["planned_d2h_bytes_per_step"] == 3 * 3 * 8 * 32 * 64 * 4  # 3 layers x q, k, v
    from profiler.xla.compiled import load_module

    module, _, _ = load_module(out / "offload_qkv-b8" / "step.hlo.txt")
    sched = schedule.build(module)
    starts = [o for o in sched.ops if o.kind == "start" and o.stream in ("d2h", "h2d")]
    assert len(starts) == 3 * 6 and {o.opcode for o in starts} == {"fusion-start"}
    assert sorted({o.iteration for o in starts}) == [0, 1, 2]
