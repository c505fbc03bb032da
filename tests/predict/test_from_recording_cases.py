"""``plan --from``'s document (``profiler.predict.from_recording``) on a recording built with known
durations (``tests/helpers/recordings.py``, no jitter): every field against the parts it is made of
(the measured replay, the roofline on the recording's own GPU and link, the calibration), which
rows it lists and in what order, which error each prediction carries, and its one-line refusals.
Written for the mutation run of ``from_recording.py`` (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.analysis.accuracy import CALIBRATED, GPU_TO_TPU, ROOFLINE, TPU_CALIBRATED, TPU_ROOFLINE
from profiler.analysis.links import host_link, parse_link
from profiler.errors import InputError, ProfilerError
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.from_recording import LARGEST, from_recording
from profiler.predict.measured import load
from profiler.predict.simulate import simulate
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.helpers.hlo_programs import chain_lines
from tests.helpers.recordings import Timing, record

H100 = "NVIDIA H100 80GB HBM3"
T = "f32[512,512]{1,0}"  # 1 MiB: the roofline moves 2 MiB per elementwise op
HOST = "f32[512,512]{1,0:S(5)}"
BIG = "f32[4096,4096]{1,0}"
MID = "f32[2048,2048]{1,0}"


def program(matmuls: bool = True) -> str:
    """Twelve elementwise kernels, a copy of the fourth's result to the host (done after the tenth);
    with *matmuls*, a 4096^3 matmul that the recording times far under its roofline and a 2048^3 one
    timed at its roofline (the largest time, the smallest gap)."""
    lines = [f"  %x = {T} parameter(0)"]
    if matmuls:
        lines += [f"  %a = {BIG} parameter(1)", f"  %b = {MID} parameter(2)",
                  f"  %dot = {BIG} dot(%a, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                  f"  %dot2 = {MID} dot(%b, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"]  # fmt: skip
    lines += chain_lines(12, T, HOST, copy_of=3, done_after=9)[1:]
    lines[-1] = "  ROOT" + lines[-1][1:]
    params = "x: f32[512,512], a: f32[4096,4096], b: f32[2048,2048]" if matmuls else "x: f32[512,512]"
    head = f"HloModule jit_step, is_scheduled=true\n\nENTRY %main ({params}) -> f32[512,512] {{\n"
    return head + "\n".join(lines) + "\n}\n"


TEXT = program()


def recorded(folder: Path, gpu: str = H100, text: str = TEXT) -> Path:
    """*text* recorded on *gpu* (three executions, no jitter): each kernel's base time known, the
    2048^3 matmul's its roofline on an H100."""
    sched = schedule.build(parse_text(text))
    dot2 = roofline.costs(sched, roofline.device_from_spec(TARGETS["h100"].spec_text())).get("dot2", 0)
    base = {"dot": 5_000, "dot2": dot2, **{f"k{i}": 20_000 + 1_000 * i for i in range(12)}}
    rec = record(sched, base, executions=3, timing=Timing(jitter=0.0, gap_ns=(500, 501)), gpu=gpu)
    return rec.write(folder / "run", text)


def test_every_field_on_its_own_gpu_and_link(tmp_path):
    run = recorded(tmp_path)
    doc = from_recording(run)
    m = load(run)
    own = host_link([H100]).link
    assert own.name == "PCIe Gen5 x16" and m.gpu == H100
    assert {k: doc[k] for k in ("source", "kind", "gpu", "module", "chosen_by", "notes")} == {
        "source": str(run), "kind": m.kind, "gpu": H100, "module": "jit_step", "chosen_by": m.chosen_by,
        "notes": m.notes}  # fmt: skip
    assert doc["measured_step_ns"] == m.step_ns > 0
    replay, replay_error = calibrate.replay(m)
    assert doc["replay"] == {"step_ns": replay.step_ns, "error": replay_error, "unplaced_ns": 0, "unplaced": [],
                             "regions": []}  # fmt: skip
    roof = roofline.costs(m.sched, roofline.device_from_spec(TARGETS["h100"].spec_text()))
    roof_step = simulate(m.sched, roof, own).step_ns
    assert doc["roofline"] == {"link": own.name, "step_ns": roof_step, "error": roof_step / m.step_ns - 1,
                               "expected_error": ROOFLINE.error_text()}  # fmt: skip
    measured = calibrate.measured_costs(m)
    assert "cs" in measured and "cs" not in roof  # a copy is measured but has no roofline: not listed
    # furthest from the roofline first, either way: the matmul measured 5 us against its roofline's
    # ~140 us, then the elementwise kernels by their measured time; ten of the fourteen, not the
    # matmul timed at its roofline (the longest measured time but for the first)
    diffs = sorted(((abs(measured[n] - roof[n]), n) for n in measured if n in roof), reverse=True)
    assert diffs[0][1] == "dot" and measured["dot"] < roof["dot"] and len(diffs) == 14 and diffs[-1][1] == "dot2"
    assert measured["dot2"] > max(measured[f"k{i}"] for i in range(12)) and abs(measured["dot2"] - roof["dot2"]) < 9
    assert [r["instruction"] for r in doc["largest"]] == [n for _, n in diffs[:LARGEST]] and LARGEST == 10
    assert doc["largest"][0] == {"instruction": "dot", "measured_ns": measured["dot"], "roofline_ns": roof["dot"]}
    assert doc["classes"] == calibrate.class_table(m.sched, measured, roof, per_step=True)
    (p,) = doc["predicted"]
    assert (p["target"], p["link"]) == (H100, own.name)
    assert sorted(p) == ["costed", "error", "expected_error", "exposed_ns", "link", "step_ns", "target"]
    assert p["costed"] == {"measured": 14, "scaled": 0, "roofline": 0, "copy": 1}
    again = simulate(*calibrate.calibrated_costs(calibrate.calibrate(m, TARGETS["h100"].spec_text()), m.module,
                                                 TARGETS["h100"].spec_text(), own)[:2], own)  # fmt: skip
    assert (p["step_ns"], p["exposed_ns"]) == (again.step_ns, again.exposed_ns)
    assert p["error"] == p["step_ns"] / m.step_ns - 1 and p["expected_error"] is None
    assert doc["accuracy"] == {"roofline": ROOFLINE.line(), "calibrated": CALIBRATED.line()}


def test_other_targets_and_links(tmp_path):
    """Its own GPU named as a target (in any case) is its own: on its own link in-sample, on another
    unchecked; another GPU over its own host link, with the calibrated kind's error on real steps."""
    run = recorded(tmp_path)
    doc = from_recording(run, ["H100", "a100"])
    h100, a100 = doc["predicted"]
    assert (h100["target"], h100["link"]) == (H100, "PCIe Gen5 x16") and h100["error"] is not None
    assert a100["target"] == "NVIDIA A100-SXM4-80GB" and a100["link"] == host_link([a100["target"]]).link.name
    assert a100["error"] is None and a100["costed"]["measured"] == 0 < a100["costed"]["scaled"]  # the matmuls
    assert a100["expected_error"] == f"calibrated: {CALIBRATED.error_text()}"
    links = [parse_link("pcie-gen5"), parse_link("nvlink-c2c")]
    own, other = from_recording(run, None, links)["predicted"]
    assert own["error"] == h100["error"] and own["step_ns"] == h100["step_ns"]
    assert other["link"] == "NVLink-C2C" and other["error"] is None and other["expected_error"] is None
    (far,) = from_recording(run, ["a100"], [parse_link("nvlink-c2c")])["predicted"]
    assert far["link"] == "NVLink-C2C" and far["error"] is None and far["expected_error"] == a100["expected_error"]


def test_a_tpu_target_the_roofline_alone_and_the_refusals(tmp_path):
    """A TPU priced from a GPU's recording (its host link, the error of fits carried from a GPU to a
    TPU); a program with no matmul on another GPU: no class the calibration scales, so the roofline
    alone and its error; an unknown target, an unknown or unnamed GPU, no HLO: one line each, naming
    the recording."""
    run = recorded(tmp_path)
    (tpu,) = from_recording(run, ["tpu-v5e"])["predicted"]
    assert (tpu["target"], tpu["link"]) == ("TPU v5 lite", "TPU v5e host link as measured") and tpu["error"] is None
    assert tpu["expected_error"] == f"calibrated on a GPU: {GPU_TO_TPU.error_text()}"
    plain = recorded(tmp_path / "plain", text=program(matmuls=False))
    (a100,) = from_recording(plain, ["a100"])["predicted"]
    assert a100["costed"] == {"measured": 0, "scaled": 0, "roofline": 12, "copy": 1}
    assert a100["expected_error"] == f"roofline: {ROOFLINE.error_text()}" and a100["error"] is None
    (tpu_roof,) = from_recording(plain, ["tpu-v5e"])["predicted"]  # the TPU's own roofline figures
    assert tpu_roof["costed"]["scaled"] == 0 and tpu_roof["expected_error"] == f"roofline: {TPU_ROOFLINE.error_text()}"
    # a recording of a TPU (its device kind): its own figures in the accuracy lines and the roofline's error
    on_tpu = from_recording(recorded(tmp_path / "tpu", gpu="TPU v5 lite"))
    assert on_tpu["accuracy"] == {"roofline": TPU_ROOFLINE.line(), "calibrated": TPU_CALIBRATED.line()}
    assert on_tpu["roofline"]["expected_error"] == TPU_ROOFLINE.error_text()
    with pytest.raises(ProfilerError, match=r"^--target: unknown target 'no-such-gpu'"):
        from_recording(run, ["no-such-gpu"])
    for gpu, said in (("Some Future GPU", "Some Future GPU"), ("", "not named")):
        unknown = recorded(tmp_path / f"unknown{len(gpu)}", gpu=gpu)
        with pytest.raises(InputError) as e:
            from_recording(unknown)
        assert str(e.value) == f"{unknown}: the recording's GPU ({said}) has no known description"
    bare = recorded(tmp_path / "bare")
    for f in (bare / "xla_dump").iterdir():
        f.unlink()
    with pytest.raises(InputError) as e:
        from_recording(bare)
    assert str(e.value) == f"{bare}: no optimized HLO of jit_step beside the recording: nothing to replay"
