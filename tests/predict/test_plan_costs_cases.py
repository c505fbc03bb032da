"""What a run's measured costs say about a plan (``profiler.predict.plan_costs``): the PGLE profile
written from a recording (``profile-step pgle``), each plan result's compiled module, the links a
plan is predicted on, the copies' exposed time before and after a PGLE schedule (``plan --pgle``),
and the calibrated predictions (``plan --calibrate``), on recordings built with known durations and
plan documents built by hand.  Written for the mutation run of ``plan_costs.py`` (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from profiler.analysis.links import LINKS, parse_link
from profiler.errors import InputError
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.measured import load
from profiler.predict.plan_costs import (
    calibrated_predictions,
    module_of,
    pgle_predictions,
    prediction_links,
    write_profile,
)
from profiler.predict.simulate import simulate
from profiler.xla import pgle
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.helpers.hlo_programs import chain_lines
from tests.helpers.recordings import Timing, record

T = "f32[512,512]{1,0}"
HOST = "f32[512,512]{1,0:S(5)}"


def program(done_after: int = 3, dot: bool = False) -> str:
    """Four kernels and their sum (with *dot*, of k3's product with itself); k0's result copied to the
    host, its copy-done after kernel *done_after*."""
    lines = chain_lines(4, T, HOST, copy_of=0, done_after=done_after)
    if dot:
        lines.append(f"  %d = {T} dot(%k3, %k3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    last = "d" if dot else "k3"
    body = "\n".join([*lines, f"  ROOT %out = {T} add(%{last}, %{last})"])
    return f"HloModule jit_step, is_scheduled=true\n\nENTRY %main (x: f32[512,512]) -> f32[512,512] {{\n{body}\n}}\n"


BASE = {"k0": 40_000, "k1": 30_000, "k2": 20_000, "k3": 10_000}


def recorded(folder: Path, text: str | None = None, gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    text = text or program()
    rec = record(schedule.build(parse_text(text)), BASE, executions=2, timing=Timing(jitter=0.0, gap_ns=(500, 501)),
                 gpu=gpu)  # fmt: skip
    return rec.write(folder / "run", text)


def plan_doc(tmp_path: Path, results: list[dict]) -> dict:
    spec = tmp_path / "h100.txtpb"
    spec.write_text(TARGETS["h100"].spec_text())
    return {"target": {"label": "NVIDIA H100 80GB HBM3", "spec_file": str(spec)}, "results": results}


def result_dir(tmp_path: Path, name: str, text: str | None, hlo_file: str | None = None) -> dict:
    d = tmp_path / name
    d.mkdir()
    if text is not None:
        (d / (hlo_file or "step.hlo.txt")).write_text(text)
    return {"dir": str(d), "status": "ok", **({"compiled": {"hlo_file": hlo_file}} if hlo_file else {})}


def test_the_profile_a_recording_writes(tmp_path):
    """Each instruction's measured µs per execution (the copy's too), the header naming the module and
    the executions, and the summary of what was written."""
    run = recorded(tmp_path)
    out = tmp_path / "step.pbtxt"
    said = write_profile(run, out)
    m = load(run)
    costs = pgle.site_costs(m.times)
    assert pgle.read_profile(out) == {n: round(c, 3) for n, c in costs.select("site", "cost_us").iter_rows()}
    assert set(pgle.read_profile(out)) == {"k0", "k1", "k2", "k3", "out", "cs"}
    head = out.read_text().splitlines()[:2]
    assert head == [
        "# XLA profile-guided latency estimator profile (ProfiledInstructionsProto, text), by profile-step pgle",
        "# from run: module jit_step, median of 2 executions, cost_us per execution",
    ]
    by = costs.group_by("op_class").agg(n=pl.len(), us=pl.col("cost_us").sum())
    by_class = {r["op_class"]: {"instructions": r["n"], "ms": r["us"] / 1e3} for r in by.iter_rows(named=True)}
    assert said == {
        "source": str(run), "file": str(out), "module": "jit_step", "step": m.chosen_by, "executions": 2,
        "step_ms": m.step_ns / 1e6, "instructions": 6, "cost_ms": float(costs["cost_us"].sum()) / 1e3,
        "by_class": by_class,
        "hlo": True, "notes": m.notes,
    }  # fmt: skip


def test_the_profile_overwrites_takes_a_module_and_an_hlo_and_one_instruction(tmp_path):
    """-o an existing file: written again; ``--module`` picks the step module (an unknown one is
    refused); ``--hlo`` gives the HLO a recording lacks; a program of one instruction is one cost."""
    run = recorded(tmp_path)
    out = tmp_path / "step.pbtxt"
    out.write_text("an older profile\n")
    assert write_profile(run, out, module="jit_step")["instructions"] == 6 and "older" not in out.read_text()
    with pytest.raises(InputError):
        write_profile(run, out, module="jit_nope")
    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(program())
    for f in (run / "xla_dump").iterdir():
        f.unlink()
    assert write_profile(run, out)["hlo"] is False
    assert write_profile(run, out, hlo=hlo)["hlo"] is True
    one = (
        "HloModule jit_step, is_scheduled=true\n\nENTRY %main (x: f32[8]) -> f32[8] {\n"
        "  %x = f32[8]{0} parameter(0)\n  ROOT %k0 = f32[8]{0} negate(%x)\n}\n"
    )
    said = write_profile(recorded(tmp_path / "one", one), tmp_path / "one.pbtxt")
    assert said["instructions"] == 1 and list(pgle.read_profile(tmp_path / "one.pbtxt")) == ["k0"]


def test_the_profile_refuses_a_folder_and_a_path_it_cannot_write(tmp_path):
    run = recorded(tmp_path)
    with pytest.raises(InputError) as e:
        write_profile(run, tmp_path)
    assert str(e.value) == f"{tmp_path}: is a folder: -o takes the profile's file name (e.g. step.pbtxt)"
    with pytest.raises(InputError) as e:
        write_profile(run, tmp_path / "no" / "such" / "folder" / "x.pbtxt")
    assert "cannot be written" in str(e.value) and str(e.value).startswith(str(tmp_path / "no"))


def test_a_results_module_and_the_links_a_plan_is_predicted_on(tmp_path):
    text = program()
    plain = result_dir(tmp_path, "plain", text)
    named = result_dir(tmp_path, "named", text, "other.hlo.txt")
    assert module_of(plain).name == module_of(named).name == "jit_step"
    assert module_of(result_dir(tmp_path, "none", None)) is None  # no file
    assert module_of({**plain, "compiled": {"hlo_file": None}}).name == "jit_step"  # the default name
    bad = result_dir(tmp_path, "bad", "this is no HLO module")
    assert module_of(bad) is None
    given = [parse_link("nvlink-c2c")]
    assert prediction_links({"links": [LINKS["pcie6"].doc()], "target": {}}, given) == given
    assert prediction_links({"target": {"label": None}}, None) == [LINKS["pcie4"]]  # assumed: no name


def test_the_copies_exposed_before_and_after_a_pgle_schedule(tmp_path):
    """Before: the copy's done right after k3 (45 us of kernels hide its 32.8 us over 32 GB/s); after:
    right after k0, so the copy waits.  Both replayed with the profile's costs where it names an instruction (k0 to k3:
    µs to ns, rounded), the roofline elsewhere, the copy over the link; a result whose PGLE compile
    failed, or without its module, or without the module after, is left alone."""
    before, after = program(3, dot=True), program(0, dot=True)
    costs_us = {"k0": 40.0, "k1": 20.0, "k2": 15.0, "k3": 10.0004, "not_here": 99.0}
    link = parse_link("32")
    ok = {**result_dir(tmp_path, "ok", before), "pgle": {"status": "ok", "copies": [{"name": "cs"}]},
          "pgle_module": parse_text(after)}  # fmt: skip
    failed = {**result_dir(tmp_path, "failed", before), "pgle": {"status": "failed", "copies": []},
              "pgle_module": parse_text(after)}  # fmt: skip
    no_after = {**result_dir(tmp_path, "noafter", before), "pgle": {"status": "ok", "copies": []}, "pgle_module": None}
    no_before = {**result_dir(tmp_path, "nobefore", None), "pgle": {"status": "ok", "copies": []},
                 "pgle_module": parse_text(after)}  # fmt: skip
    doc = plan_doc(tmp_path, [failed, no_after, ok, no_before])
    doc["target"]["peak_bf16_tflops"] = 1.0  # the plan's peak: the matmul priced at 1 TFLOP/s
    pgle_predictions(doc, costs_us, link)
    device = roofline.device_from_spec(TARGETS["h100"].spec_text(), 1.0)
    preds = []
    for text in (before, after):
        sched = schedule.build(parse_text(text))
        c = roofline.costs(sched, device) | {"k0": 40_000, "k1": 20_000, "k2": 15_000, "k3": 10_000}
        preds.append(simulate(sched, c, link))
    assert preds[0].exposed_ns == 0 < preds[1].exposed_ns  # the schedule moved the copy's wait
    assert roofline.costs(schedule.build(parse_text(after)), device)["d"] > 200_000  # 268 MFLOP at 1 TFLOP/s
    assert ok["pgle"]["predicted"] == {
        "link": link.name,
        "before": {"predicted_step_ns": preds[0].step_ns, "predicted_exposed_ns": 0},
        "after": {"predicted_step_ns": preds[1].step_ns, "predicted_exposed_ns": preds[1].exposed_ns},
    }
    assert ok["pgle"]["copies"] == [{"name": "cs", "exposed_ns_before": 0, "exposed_ns_after": preds[1].exposed_ns}]
    for r in (failed, no_after, no_before):
        assert "predicted" not in r["pgle"]


def test_calibrated_predictions_of_each_compiled_result(tmp_path):
    """Each ok result with its module gets ``calibrate.predict``'s predictions per link, from the run's
    calibration on its own GPU's description; the calibration's summary goes in the document and is
    returned; a failed result or one without its module gets none.  A run of a GPU without a known
    description is calibrated on the plan's target, which a note says."""
    run = recorded(tmp_path)
    text = program()
    ok = result_dir(tmp_path, "ok", text)
    failed = {**result_dir(tmp_path, "failed", text), "status": "failed"}
    missing = result_dir(tmp_path, "missing", None)
    doc = plan_doc(tmp_path, [failed, missing, ok])
    links = [parse_link("pcie-gen5"), parse_link("nvlink-c2c")]
    m = load(run)
    summary = calibrated_predictions(doc, run, links)
    cal = calibrate.calibrate(m, TARGETS["h100"].spec_text())
    assert summary == doc["calibration"] == cal.doc()
    assert ok["calibrated"] == calibrate.predict(cal, parse_text(text), TARGETS["h100"].spec_text(), links)
    assert "calibrated" not in failed and "calibrated" not in missing
    again = tmp_path / "again"
    again.mkdir()
    assert calibrated_predictions(plan_doc(again, []), run, links, m) == summary  # the run already read
    odd = recorded(tmp_path / "odd", gpu="Some Future GPU")
    said = calibrated_predictions(plan_doc(tmp_path / "odd", []), odd, links)
    assert said["notes"][-1] == (
        "the run's GPU (Some Future GPU) has no known description: the plan's target is assumed"
    )
    bare = recorded(tmp_path / "bare")
    for f in (bare / "xla_dump").iterdir():
        f.unlink()
    with pytest.raises(InputError) as e:
        calibrated_predictions(plan_doc(tmp_path / "bare", []), bare, links)
    assert str(e.value).startswith(f"{bare}: ") and "calibration needs it" in str(e.value)
