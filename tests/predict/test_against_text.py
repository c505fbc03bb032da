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


def _layers(row: dict, layers: dict) -> dict:
    row["predicted"]["layers"] = [
        {"layer": n, "predicted_exposed_ns": p, "measured_exposed_ns": m} for n, (p, m) in layers.items()
    ] + [{"layer": None, "predicted_exposed_ns": 1, "measured_exposed_ns": 1}]  # outside any layer: no column
    return row


def test_exposed_per_layer_is_one_table_of_predicted_and_measured():
    rows = [
        _layers(_row("offload_qkv", None), {"layer_0": (0, 110_000), "layer_1": (2_660_000, 2_840_000)}),
        _layers(_row("offload_qkv-scan", None), {"layers": (25_570_000, 59_600_000)}),
        _row("none", None),  # no layer: no row
    ]
    lines = render_against({"rows": rows})
    i = lines.index("exposed copy time per layer and step (ms), predicted / measured:")
    head, _, qkv, scan = lines[i + 1].splitlines()
    assert head.split() == ["policy", "layer_0", "layer_1", "layers"]
    assert qkv.split() == ["offload_qkv", "0", "/", "0.11", "2.66", "/", "2.84"]
    assert scan.split() == ["offload_qkv-scan", "25.57", "/", "59.60"] and scan.endswith("25.57 / 59.60")


def test_a_table_too_wide_for_the_terminal_is_said_per_policy():
    many = {f"layer_{i}": (1_000_000, None) for i in range(30)}  # and no layer ranges in the trace
    lines = render_against({"rows": [_layers(_row("offload_all", None), many)]})
    (said,) = [line for line in lines if line.startswith("exposed per layer and step, offload_all: ")]
    assert said.count("predicted 1.00 ms, measured -") == 30
    assert "  (measured -: the traces of offload_all have no layer ranges to measure layers by)" in lines


def test_layers_that_hold_much_less_than_the_run_say_where_the_rest_ran():
    """The H200 offload_qkv-scan-lhs-pipelined run: 29.1 ms exposed inside the loop's range, 54.6 ms in the
    run (the pipelined copies peeled out of the loop): the table says why its two figures differ."""
    short = _layers(_row("scan-pipelined", None), {"layers": (45_280_000, 29_140_000)})
    short["predicted"]["measured_exposed_ns"] = 54_580_000
    whole = _layers(_row("unrolled", None), {"layer_0": (1, 3_000_000), "layer_1": (1, 3_000_000)})
    whole["predicted"]["measured_exposed_ns"] = 5_000_000  # the layers' own unions overlap: more, not less
    said = " ".join(" ".join(render_against({"rows": [short, whole]})).split())
    assert (
        "(measured per layer: the copies launched inside the layers' own ranges; the rest of a run's exposed time "
        "ran outside every layer: scan-pipelined 29.1 ms of 54.6 ms)"
    ) in said
    assert "unrolled 6.00 ms" not in said
