"""``plan --from RECORDING`` (issue 42, item 4): a recorded step against its own replay, its roofline
and its predictions on other targets and links, on real recordings."""

from __future__ import annotations

import json

import pytest

from profiler.runs.result import analyzed
from profiler.trace import load_trace
from profiler.units import human_time
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT, SHARED_TRACES

H200 = ROOT / "sample_traces" / "h200-example"
PAX = SHARED_TRACES / "jax-toolbox" / "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip"


@pytest.mark.skipif(not H200.is_dir(), reason="no sample_traces/h200-example")
def test_a_jax_profiler_run_folder(tmp_path):
    run = next(H200.glob("*-offload_qkv-scan-??????"))
    proc = run_cli("plan", "--from", str(run), "--json", env={"PROFILE_STEP_CACHE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["gpu"], doc["module"]) == ("JAX profiler trace", "NVIDIA H200", "jit_step")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFILE_STEP_CACHE", str(tmp_path))
        steps = analyzed(load_trace(run / "trace.json.gz"), findings=None).steps
    assert doc["measured_step_ns"] == steps.median_ns  # the same step as analyze's
    replay = doc["replay"]
    assert replay["error"] == pytest.approx(replay["step_ns"] / doc["measured_step_ns"] - 1)
    assert abs(replay["error"]) < 0.02  # the scanned step, its loops and command buffers placed (goal: 5%)
    assert replay["unplaced_ns"] == sum(u["ns"] for u in replay["unplaced"]) < 0.01 * doc["measured_step_ns"]
    [own] = doc["predicted"]
    assert (own["target"], own["link"]) == ("NVIDIA H200", "PCIe Gen5 x16")
    assert doc["roofline"]["expected_error"] == "20-33% short"
    text = run_cli("plan", "--from", str(run), env={"PROFILE_STEP_CACHE": str(tmp_path)}).stdout
    said = " ".join(text.split())
    assert "replayed with its own measured durations:" in said and "the roofline was 20-33% short on real steps" in said


@pytest.mark.skipif(not PAX.is_file(), reason="../shared/traces/jax-toolbox is absent")
def test_an_nsys_jax_archive_on_other_targets():
    proc = run_cli("plan", "--from", str(PAX), "--target", "a100,h100", "--link", "pcie4", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "nsys-jax archive" and abs(doc["replay"]["error"]) < 0.03 and not doc["replay"]["unplaced"]
    a100, h100 = doc["predicted"]
    assert a100["target"].startswith("NVIDIA A100") and h100["target"].startswith("NVIDIA H100")
    assert h100["step_ns"] < a100["step_ns"]  # the same program on the faster GPU
    assert a100["costed"]["scaled"] > 0 and a100["expected_error"] == "calibrated: 6-17% short"
    assert {c for c in doc["classes"]} >= {"matmul", "fusion", "collective"}
    assert len(doc["largest"]) == 10


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from", "{tmp}"], "holds no trace"),
        (["--from", "{tmp}", "examples/train.py"], "plan --from reads a recording, not a script"),
        ([], "plan: give a training script (or --from RECORDING)"),
    ],
)
def test_plan_from_says_what_is_wrong_in_one_line(tmp_path, args, said):
    proc = run_cli("plan", *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr


@pytest.mark.skipif(not H200.is_dir(), reason="no sample_traces/h200-example")
def test_on_its_own_gpu_over_another_link_the_prediction_is_unchecked(tmp_path):
    """offload_mlp's H200 run on its own link and on NVLink-C2C: every kernel keeps its measured time
    on both, its copies are priced for each link.  The own link's row is the recorded step itself:
    its error is its own step against the measured one (not the replay's, which prices the copies at
    their recorded times); the other link's has no recorded step and no real-step figure: neither an
    error nor an expected one, and the text says ``unchecked`` (it printed the replay's -0.5% there)."""
    from profiler.analysis.links import parse_link
    from profiler.predict.from_recording import from_recording
    from profiler.report.measured_text import render_from_recording
    from profiler.units import human_time

    run = next(H200.glob("*-offload_mlp-??????"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFILE_STEP_CACHE", str(tmp_path))
        doc = from_recording(run, None, [parse_link("pcie-gen5"), parse_link("nvlink-c2c")])
    own, other = doc["predicted"]
    assert (own["link"], other["link"]) == ("PCIe Gen5 x16", "NVLink-C2C")
    assert own["costed"]["scaled"] == own["costed"]["roofline"] == 0 and own["costed"]["copy"] > 0
    assert own["error"] == own["step_ns"] / doc["measured_step_ns"] - 1 != doc["replay"]["error"]
    assert own["expected_error"] is None and other["error"] is None and other["expected_error"] is None
    assert other["step_ns"] < own["step_ns"]  # the faster link hides the copies
    text = render_from_recording(doc)
    (row,) = [ln for ln in text.splitlines() if ln.startswith("NVIDIA H200") and "NVLink-C2C" in ln]
    assert "unchecked" in row and "%" not in row
    assert "unchecked: its own device's measured kernels with the copies priced for another link" in text
    # the own link's row and the replay line print two errors for one step: one line says how they differ
    said = " ".join(text.split())
    assert (
        "NVIDIA H200 on PCIe Gen5 x16: the replay above, but each copy priced for the link instead of taking its "
        f"measured time ({human_time(own['step_ns'])}, {100 * own['error']:+.1f}%, against the replay's "
        f"{human_time(doc['replay']['step_ns'])}, {100 * doc['replay']['error']:+.1f}%)"
    ) in said


def test_the_unplaced_costs_say_each_reason_once(tmp_path):
    """The H200 run's command buffers left unmatched: one reason, its names after it, largest first."""
    from profiler.predict.from_recording import from_recording
    from profiler.report.measured_text import render_from_recording

    run = next(H200.glob("*-offload_mlp-??????"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFILE_STEP_CACHE", str(tmp_path))
        doc = from_recording(run)
    unplaced = doc["replay"]["unplaced"]
    assert len(unplaced) > 2 and len({u["why"] for u in unplaced}) == 1
    text = " ".join(render_from_recording(doc).split())  # as one line, however it is wrapped
    assert text.count(unplaced[0]["why"]) == 1
    first, second = (f"{u['name']} {human_time(u['ns'], True)}" for u in unplaced[:2])
    assert f"(time per step): {unplaced[0]['why']}: {first}, {second}, " in text
    # a class of one op, 1.47 µs of a 200 ms step, read "other 1 1.47 µs 4 ns 368.00": no ratio under 0.1%
    tiny = [c for c, v in doc["classes"].items() if v["measured"] < 0.001 * doc["measured_step_ns"]]
    assert tiny and f"no ratio for {', '.join(sorted(tiny))}: under 0.1% of the step" in text
    row = next(line for line in render_from_recording(doc).splitlines() if line.startswith(tiny[0] + " "))
    assert row.split()[-1] == "-"


def test_fusions_that_reduce_are_a_class_of_their_own_and_said(tmp_path):
    """The H200 step's attention softmax fusions ran about 3.8 times their roofline, its other fusions
    1.4: one ``fusion`` class mixed them (2.44). They are two rows, and a line says what each holds."""
    from profiler.predict.from_recording import from_recording
    from profiler.report.measured_text import render_from_recording

    run = next(H200.glob("*-offload_qkv-b50f27"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFILE_STEP_CACHE", str(tmp_path))
        doc = from_recording(run)
    red, fus = doc["classes"]["reduction"], doc["classes"]["fusion"]
    assert red["measured"] / red["roofline"] > 2.5 > 1.6 > fus["measured"] / fus["roofline"] > 1.2
    assert "reduction: fusions that reduce (softmax, norms, sums); fusion: the other fusions" in render_from_recording(
        doc
    )
