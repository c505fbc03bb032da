"""analyze's predicted-against-measured block (``report.predict_text.render_against``): one line per
target, not one per run (the H200 example's eight runs each named their own dump's target file)."""

from __future__ import annotations

from profiler.report.predict_text import render_against


def _row(policy: str, target: str | None) -> dict:
    predicted = {
        "predicted_step_ns": 150e6,
        "measured_step_ns": 200e6,
        "step_error": -0.25,
        "measured_exposed_ns": 5e6,
        "predicted_exposed_ns": 4e6,
        "link": "PCIe Gen5 x16",
        "layers": [],
        "target": target,
        "cost_model": "roofline",
    }
    return {"policy": policy, "predicted": predicted}


def _targets(rows: list[dict]) -> list[str]:
    return [line for line in render_against({"rows": rows}) if line.startswith("target of ")]


def test_runs_on_their_own_dumps_targets_say_it_once():
    rows = [_row("none", "the dump's module_14589.jit_step.gpu_target_config.pbtxt"),
            _row("offload_qkv", "the dump's module_392496.jit_step.gpu_target_config.pbtxt")]  # fmt: skip
    assert _targets(rows) == ["target of every run: its own dump's gpu_target_config.pbtxt"]


def test_other_targets_are_grouped_by_target():
    built_in = "profile-step's h100 target (NVIDIA H100 80GB HBM3)"
    rows = [_row("none", built_in), _row("remat", built_in),
            _row("offload_qkv", "the dump's module_1.jit_step.gpu_target_config.pbtxt"), _row("x", None)]  # fmt: skip
    assert _targets(rows) == [
        f"target of none, remat: {built_in}",
        "target of offload_qkv: its own dump's gpu_target_config.pbtxt",
    ]
    assert _targets([_row("none", built_in)]) == [f"target of none: {built_in}"]
