"""``plan``'s bad inputs fail on one line before anything is compiled, and a failed compile is not
reported as a policy that does not fit or that offloads nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.analysis.policies import plan_table
from profiler.predict.step import COSTED
from profiler.report.policies_text import render_plan
from tests.helpers.cli import run_cli
from tests.helpers.paths import TRAIN


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    not_proto = tmp / "my_gpu.txtpb"
    not_proto.write_text("device_memory_size: 10\n")
    not_trace = tmp / "notes.txt"
    not_trace.write_text("hello\n")
    return [
        (["--pgle", str(tmp / "absent.pbtxt")], f"{tmp / 'absent.pbtxt'}: no such file"),
        (["--pgle", str(tmp)], f"{tmp}: is a folder, not a PGLE text profile"),
        (["--target", str(not_proto)], f"{not_proto}: not a GpuTargetConfigProto text file"),
        (["--link", ",,"], "--link: no link named in ',,'"),
        (["--calibrate", str(not_trace)], f"{not_trace}: is not an SQLite database"),
    ]


@pytest.mark.parametrize("case", range(5))
def test_bad_plan_input_is_one_line_before_compiling(tmp_path, case):
    args, expected = _bad_inputs(tmp_path)[case]
    plans = tmp_path / "plans"
    proc = run_cli("plan", "--plans-dir", str(plans), "--policy", "none", *args, str(TRAIN))
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert not plans.exists() or not any(plans.iterdir())  # nothing compiled


def test_failed_compile_is_not_a_claim_about_memory():
    result = {"policy": "none", "batch": 2, "dir": None, "notes": ["compiling the step for the target failed: X"],
              "exit_code": 3, "compiled": {"module": None, "notes": []}, "status": "failed",
              "prediction": None}  # fmt: skip
    doc = {"target": {"key": "h100", "label": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30},
           "label": "compiled for NVIDIA H100 80GB HBM3, not measured", "links": [], "results": [result]}  # fmt: skip
    text = render_plan(plan_table(doc))
    assert "at batch 2: no policy compiled (none): nothing known about memory" in text
    assert "no policy fits" not in text and "placed nothing in host memory" not in text


def test_copies_without_a_plan_are_not_called_unplanned():
    """A run with no compiled module (no compiled.json): its copies are summed, not listed one by one
    as ``moved, not planned``."""
    from profiler.analysis.policies import planned_vs_moved
    from profiler.report.policies_text import render_planned_vs_moved

    run = {"policy": "offload", "steps": [{}, {}], "devices": {"0": {}},
           "copy_ops": [{"op": "copy-start.1", "d2h_bytes": 2 * 2**20}, {"op": "copy-start.2", "h2d_bytes": 2**20}],
           "copies": {"d2h": {"bytes": 2 * 2**20}, "h2d": {"bytes": 2**20}}}  # fmt: skip
    pvm = planned_vs_moved(run)
    assert {r["flag"] for r in pvm["rows"]} == {"d2h moved (no plan to compare)", "h2d moved (no plan to compare)"}
    text = render_planned_vs_moved(pvm)
    assert "no step program): no compiled plan to compare with" in text
    assert "moved 1.00 MiB D2H and 512.00 KiB H2D per step and GPU (2 ops)" in text and "not planned" not in text


def test_traces_without_a_manifest_are_told_apart():
    """``analyze A.sqlite B.sqlite`` of traces without steps: one row per trace, named by it, and a
    note on why the per-step columns are empty."""
    root = Path(__file__).resolve().parents[2] / "sample_traces" / "public"
    a, b = root / "flexgen__nsight_report3.sqlite", root / "flexgen__profile_name.sqlite"
    proc = run_cli("analyze", "--no-findings", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "default (flexgen__nsight_report3)" in proc.stdout and "default (flexgen__profile_name)" in proc.stdout
    assert "note (all runs): no steps found" in proc.stdout
    assert "1 step ranges" not in proc.stdout and "(1 op)" in proc.stdout


def test_dashboard_plan_sentences_and_decimals():
    """The Policy trade view's plan: the same fit sentences as the text, and the predicted table in the
    decimals of the verdict lines beside it."""
    from dashboards.plan_view import fit_sentences, predicted_datatable

    rows = [{"policy": "none", "batch": 2, "status": "failed", "fits": None},
            {"policy": "remat", "batch": 8, "status": "ok", "fits": False},
            {"policy": "none", "batch": 8, "status": "failed", "fits": None},
            {"policy": "remat", "batch": 4, "status": "ok", "fits": True}]  # fmt: skip
    assert fit_sentences(rows) == [
        "at batch 2: no policy compiled (none): nothing known about memory",
        "at batch 8: no policy fits (none not compiled)",
        "at batch 4: remat fits",
    ]
    pred = {"policy": "remat", "batch": 4, "link": "pcie5", "link_name": "PCIe Gen5 x16", "fits": True,
            "predicted_step_ns": 107_250, "predicted_exposed_ns": 357, "predicted_compute_ns": 107_250,
            "predicted_copy_ns": {"d2h": 0, "h2d": 0}}  # fmt: skip
    table = predicted_datatable({"predictions": [pred]})
    assert table.data[0]["step"] == pytest.approx(107.25) and table.data[0]["link"] == "PCIe Gen5 x16"
    assert {c["format"]["specifier"] for c in table.columns if c["type"] == "numeric"} == {".2f"}


def test_steps_on_other_devices_are_not_within_each_others_noise():
    """A CPU run's step, or another GPU's, is no measure of a GPU run's noise: no within-the-spread
    pair across them; two runs on one kind of GPU still make one."""
    from profiler.analysis.policies import within_spread

    def row(policy: str, kind: str | None, platform: str | None) -> dict:
        return {"policy": policy, "median_step_ns": 1_000_000, "step_spread_ns": 500_000, "within_spread_of": [],
                "device_kind": kind, "platform": platform}  # fmt: skip

    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
    rows = [row("none", None, "cpu"), row("offload", h100, "gpu"), row("remat", a100, "gpu"),
            row("offload_mlp", h100, "gpu")]  # fmt: skip
    assert [p["policies"] for p in within_spread(rows)] == [["offload", "offload_mlp"]]


def test_pgle_summary_says_what_it_shows():
    """``pgle``'s summary: 'counts twice' only when the instructions add up to more than the step,
    and classes without an HLO are said to be guessed, not absent."""
    from profiler.report.measured_text import render_pgle_written

    s = {"file": "p.pbtxt", "instructions": 2, "module": "jit_step", "executions": 2, "step_ms": 0.9, "cost_ms": 0.8,
         "by_class": {"copy": {"instructions": 2, "ms": 0.8}}, "hlo": False, "notes": []}  # fmt: skip
    text = render_pgle_written(s)
    assert "counts twice" not in text and "classes guessed from the names" in text and "no op classes" not in text
    assert "counts twice" in render_pgle_written({**s, "cost_ms": 1.2})


def test_every_option_of_every_subcommand_is_explained_once():
    """``profile-step COMMAND --help``: each option once, each with a help text."""
    import argparse

    from profiler.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, cmd in sub.choices.items():
        flags = [f for a in cmd._actions for f in a.option_strings]
        assert len(flags) == len(set(flags)), name
        silent = [a.option_strings for a in cmd._actions if a.option_strings and not a.help]
        assert silent == [], (name, silent)
        assert cmd.format_help()


def test_verdict_without_remat_in_the_plan():
    """A plan of offload policies only: the verdict says remat was not predicted, not that it does not fit."""
    from profiler.analysis.offload_vs_remat import offload_vs_remat
    from profiler.report.predict_text import verdict_lines

    def pred(policy: str, fits: bool) -> dict:
        return {"policy": policy, "batch": 2, "link": "pcie5", "link_name": "PCIe Gen5 x16", "fits": fits,
                "predicted_step_ns": 100_000, "predicted_exposed_ns": 0}  # fmt: skip

    only = verdict_lines(offload_vs_remat([pred("offload_mlp", True)]))
    assert only == ["batch 2, PCIe Gen5 x16: no remat predicted in this plan to compare with (--policies)"]
    big = verdict_lines(offload_vs_remat([pred("offload_mlp", True), pred("remat", False)]))
    assert big == ["batch 2, PCIe Gen5 x16: remat has no fitting prediction to compare (remat does not fit)"]


def test_analyze_of_several_runs_checks_the_link():
    root = Path(__file__).resolve().parents[2] / "sample_traces" / "demo-synthetic"
    proc = run_cli("analyze", "--link", "pcie9", str(root))
    assert proc.returncode == 2 and "--link: unknown link 'pcie9'" in proc.stderr and "Traceback" not in proc.stderr


def test_dashboard_policy_table_says_where_its_prediction_is_for():
    """Policy trade's per-policy table: a row with a prediction gets a note naming its target and link."""
    pytest.importorskip("dash")
    from dashboards.trade import policy_datatable
    from profiler.analysis.policies import policy_table
    from tests.helpers.policy_noise import run

    tab = policy_table([run("offload", [3.4, 3.55, 3.6], "aaa", "gpu")])
    tab["rows"][0]["predicted"] = {"predicted_step_ns": 3_000_000, "predicted_exposed_ns": 0, "step_error": -0.15,
                                   "target": "profile-step's h100 target (NVIDIA H100 80GB HBM3)",
                                   "link": "PCIe Gen5 x16"}  # fmt: skip
    table, lines = policy_datatable(tab, ["offload (run 1)"])
    assert table.data[0]["pred_step"] == pytest.approx(3.0)
    assert (
        f"predicted columns: {COSTED}, not measured, on profile-step's h100 target "
        "(NVIDIA H100 80GB HBM3), PCIe Gen5 x16 (offload (run 1))" in lines
    )


def test_predicted_layers_without_measured_layers_say_why():
    """Per layer, predicted against measured: a trace without layer ranges says why its side is '-'."""
    from profiler.report.predict_text import render_against

    pred = {"predicted_step_ns": 2_000_000, "measured_step_ns": 2_100_000, "step_error": -0.048,
            "predicted_exposed_ns": 10_000, "measured_exposed_ns": 12_000, "link": "PCIe Gen5 x16", "target": None,
            "layers": [{"layer": "layer_0", "predicted_exposed_ns": 10_000, "measured_exposed_ns": None}]}  # fmt: skip
    text = "\n".join(render_against({"rows": [{"policy": "offload_mlp", "predicted": pred}]}))
    assert "exposed copy time per layer and step (µs), predicted / measured:" in text
    assert text.splitlines()[-2].split() == ["offload_mlp", "10.00", "/", "-"]  # the table's row, then the note
    assert "(measured -: the traces of offload_mlp have no layer ranges to measure layers by)" in text
    assert "outside every layer" not in text  # not measured: nothing said of where the rest ran
    pred["layers"][0]["measured_exposed_ns"] = 9_000
    assert "have no layer ranges" not in "\n".join(render_against({"rows": [{"policy": "x", "predicted": pred}]}))


def test_a_name_declared_for_offloading_that_the_step_never_moves_is_said():
    """The example's offload_mlp names mlpwi and mlpwo; its compiled step moves mlpwi alone (mlpwo's
    value is not saved for the backward pass): planned vs moved says so in one line. Without activation
    names in the plan, or without declared names, nothing is said."""
    from profiler.analysis.policies import planned_vs_moved
    from profiler.report.policies_text import render_planned_vs_moved

    moves = [{"layer": f"layer_{i}", "activation": "mlpwi", "direction": d, "instruction": f"cs.{i}{d}",
              "bytes": 2**20, "bytes_per_step": 2**20} for i in range(2) for d in ("d2h", "h2d")]  # fmt: skip
    run = {"policy": "offload_mlp", "steps": [{}, {}], "devices": {"0": {}}, "copy_ops": [],
           "copies": {"d2h": {"bytes": 0}, "h2d": {"bytes": 0}},
           "compiled": {"module": "module_0001.jit_step", "plan": {"movements": moves}},
           "manifest": {"runtime": {"offload_names": ["mlpwi", "mlpwo"]}}}  # fmt: skip
    pvm = planned_vs_moved(run)
    assert pvm["not_offloaded"] == ["mlpwo"] and pvm["declared_by"].startswith("the script")
    assert render_planned_vs_moved(pvm).splitlines()[-1] == (
        "named for offloading by the script (annotate.capture(offload_names=...)), moved by no copy of the "
        "compiled step: mlpwo (XLA offloads a named value only where the backward pass saves it: a name the "
        "model never tags, or a value the backward pass recomputes or does not need, is never sent)"
    )
    from dashboards.trade import pvm_figure

    assert pvm_figure(pvm, run, "offload_mlp")[1][-1] == render_planned_vs_moved(pvm).splitlines()[-1]  # the same
    unnamed = [{**m, "activation": None} for m in moves]
    assert planned_vs_moved({**run, "compiled": {"plan": {"movements": unnamed}}})["not_offloaded"] == []
    # one movement without a name (the H200 offload_all's decoder_layer_input): it may carry mlpwo
    some = [*moves, {**moves[0], "activation": None, "instruction": "cs.9"}]
    assert planned_vs_moved({**run, "compiled": {"plan": {"movements": some}}})["not_offloaded"] == []
    assert planned_vs_moved({**run, "manifest": {}})["not_offloaded"] == []
    both = {**run, "manifest": {"runtime": {"offload_names": ["mlpwi"]}}}
    assert planned_vs_moved(both)["not_offloaded"] == [] and "named for offloading" not in render_planned_vs_moved(
        planned_vs_moved(both)
    )
