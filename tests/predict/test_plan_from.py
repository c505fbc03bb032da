"""``plan --from RECORDING`` (issue 42, item 4): a recorded step against its own replay, its roofline
and its predictions on other targets and links, on real recordings."""

from __future__ import annotations

import json

import pytest

from profiler.runs.result import analyzed
from profiler.trace import load_trace
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
