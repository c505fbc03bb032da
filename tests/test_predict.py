"""The predicted step: the compiled schedule replayed with roofline costs (profiler.predict).

- On XLA's real output for an H100 (../shared/hlo's two-layer offload step, compiled without a GPU):
  the schedule pairs every copy-start with its copy-done, and the prediction is monotone in the link.
- With the real GPU compiler (.venv-aot; skips without it, as test_compiled_step): a step whose
  offloaded activation has independent matmuls to hide behind is predicted hidden, one with nothing
  between the copies exposed; predictions grow with the batch and shrink with the link's bandwidth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.analysis.links import parse_link
from profiler.predict import roofline, schedule
from profiler.predict.simulate import link_ns, simulate
from profiler.predict.step import predict_file
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.conftest import ROOT, run_cli
from tests.test_compiled_step import aot_python  # noqa: F401 (the fixture)

SHARED_HLO = ROOT.parent / "shared" / "hlo"
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


def test_copies_with_independent_compute_are_hidden(aot_python, tmp_path):  # noqa: F811
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


def test_prediction_grows_with_the_batch(aot_python, tmp_path):  # noqa: F811
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
