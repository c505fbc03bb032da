"""A scanned layer loop's FLOPs and offloads counted its trips times in compiled.json: XLA's cost
analysis counts a ``while`` body once, and a TPU module says no trip count in its backend config
(``profiler.xla.hlo`` reads it from the loop's condition). Checked on the real TPU v5e dumps: the
8-layer scanned step must do the work of the same step unrolled."""

from __future__ import annotations

import json
import shutil

import pytest

from profiler.capture import step_module
from profiler.xla import dump
from profiler.xla.compiled import describe
from tests.helpers.paths import ROOT

TPU = ROOT / "sample_traces" / "tpu-v5e-example"
pytestmark = pytest.mark.skipif(not TPU.is_dir(), reason="no sample_traces/tpu-v5e-example")


def run_of(policy: str):
    return next(p for p in TPU.iterdir() if p.is_dir() and p.name.split("-", 1)[1].rsplit("-", 1)[0] == policy)


def step_entry(run) -> dict:
    compiled = json.loads((run / "compiled.json").read_text())
    return next(m for m in compiled["modules"] if m["label"] == compiled["step_module"])


def counted(run) -> dict:
    """The step module described afresh: XLA's cost analysis (jaxlib's CPU client), then the count."""
    [mod] = dump.scan(run / "xla_dump")
    entry = describe(mod)
    if entry["cost"] is None:
        pytest.skip("no jaxlib here: no XLA cost analysis")
    step_module.counted_flops([entry], [mod])
    return entry


@pytest.mark.parametrize(("scanned", "unrolled"), [("remat-scan", "remat"), ("offload_mlp-scan", "offload_mlp")])
def test_the_scanned_step_does_the_flops_of_the_unrolled_one(scanned, unrolled):
    scan, flat = counted(run_of(scanned)), counted(run_of(unrolled))
    assert "xla_flops" not in flat["cost"]  # no loop that repeats: XLA's own figure stands
    assert flat["cost"]["flops"] > 25e12
    assert scan["cost"]["xla_flops"] < flat["cost"]["flops"] / 4  # the body counted once
    assert scan["cost"]["flops"] == pytest.approx(flat["cost"]["flops"], rel=2e-3)
    assert scan["notes"][-1].startswith("FLOPs counted from the HLO (")
    assert "counts the body of each of its 2 loops once" in scan["notes"][-1]


def test_the_scanned_offload_plan_moves_8_layers_as_the_unrolled_one():
    scan, flat = step_entry(run_of("offload_mlp-scan")), step_entry(run_of("offload_mlp"))
    assert scan["plan"]["d2h_bytes_per_step"] == flat["plan"]["d2h_bytes_per_step"] == 8 * 128 * 2**20
    assert scan["plan"]["movements_with_unknown_repeats"] == 0
    assert {m["executions_per_step"] for m in scan["plan"]["movements"]} == {8}


@pytest.mark.parametrize("policy", ["remat-scan", "offload_all-scan-l4"])
def test_the_stored_compiled_json_is_what_capture_writes_now(policy, tmp_path):
    """The sample's compiled.json, written again by the capture code from its own dump: the same."""
    run = tmp_path / "run"
    shutil.copytree(run_of(policy), run)
    step_module.record(run, run / "xla_dump", own_dump=True, hook=None)
    fresh = json.loads((run / "compiled.json").read_text())
    if step_entry(run)["cost"] is None or "xla_flops" not in step_entry(run)["cost"]:
        pytest.skip("no jaxlib here: no XLA cost analysis")
    assert fresh == json.loads((run_of(policy) / "compiled.json").read_text())
