"""The plan view's memory chart: bars stay readable when the usable memory is far above them."""

from __future__ import annotations

from profiler.analysis.policies import plan_table

MiB = 2**20


def plan(temp_bytes: int, memory_bytes: int = 80 * 10**9) -> dict:
    """A plan.json document of two compiled policies (as capture/plan.py writes it)."""
    results = []
    for policy, host in (("none", 0), ("offload_x", 3 * MiB)):
        memory = {
            "argument_size_in_bytes": 2 * MiB,
            "output_size_in_bytes": MiB,
            "alias_size_in_bytes": MiB,
            "temp_size_in_bytes": temp_bytes,
            "host_argument_size_in_bytes": 0,
            "host_output_size_in_bytes": 0,
            "host_alias_size_in_bytes": 0,
            "host_temp_size_in_bytes": host,
        }
        results.append(
            {
                "policy": policy,
                "batch": 4,
                "dir": f"/x/{policy}-b4",
                "notes": [],
                "status": "ok",
                "compiled": {"module": "jit_train_step", "memory": memory, "cost": {"flops": 1e9}},
                "plan": None,
            }
        )
    target = {"key": "h100", "label": "NVIDIA H100 80GB HBM3", "memory_bytes": memory_bytes}
    return {"target": target, "label": "compiled for H100, not measured", "results": results}


def test_small_plan_on_a_big_gpu_draws_its_bars_in_mib_and_writes_the_limit():
    from dashboards.plan_view import plan_figure

    tab = plan_table(plan(temp_bytes=10 * MiB))
    fig = plan_figure(tab)
    layout = fig["layout"]
    assert layout["yaxis"]["title"]["text"] == "bytes (MiB)"
    device = fig["data"][0]["y"]
    assert device == [r["device_bytes"] / MiB for r in tab["rows"]]
    assert layout["yaxis"]["range"][1] < 20  # the axis is the bars', not 60 GB's
    assert not layout.get("shapes")
    (note,) = layout["annotations"]
    assert "usable device memory" in note["text"] and "far above the chart" in note["text"]
    biggest = max(r["device_bytes"] for r in tab["rows"])
    assert f"{100 * biggest / tab['limit_bytes']:.2g}%" in note["text"]


def test_plan_near_the_limit_draws_the_limit_line():
    from dashboards.plan_view import plan_figure

    tab = plan_table(plan(temp_bytes=50 * 10**9))
    layout = plan_figure(tab)["layout"]
    (line,) = layout["shapes"]
    assert line["y0"] * 10**9 == tab["limit_bytes"] or line["y0"] * 2**30 == tab["limit_bytes"]
    assert "far above" not in layout["annotations"][0]["text"]


def test_a_tune_folder_shows_its_table_and_its_limit(tmp_path):
    """A tune folder's plan.json: the table of the candidates that fit, the choice marked, its limit
    (3 GiB of an H100's 81,559 MiB) the plan table's too."""
    from dashboards.plan_view import tune_datatable, tune_fraction, tune_lines

    doc = plan(temp_bytes=10 * MiB, memory_bytes=81_559 * MiB)
    row = {"label": "offload small", "stage": "alone", "predicted_step_ns": 61_680_000,
           "predicted_exposed_ns": 1_580_000, "device_bytes": 2 * 2**30, "host_bytes": 2**30, "compile_no": 6,
           "same_program_as": None}  # fmt: skip
    rest = {**row, "label": "recompute all", "stage": "bounds", "predicted_step_ns": 72_470_000,
            "predicted_exposed_ns": 0, "host_bytes": 0, "compile_no": 1}  # fmt: skip
    choice = {**row, "maxtext_form": None, "maxtext_form_missing": "no tensor named small", "jax_form": "jax.x"}
    doc["tune"] = {"fitting": [row, rest], "choice": choice, "why": ["choice: offload small: ..."],
                   "search": {"compiles": 6, "stop": "a local optimum"}, "limit_bytes": 3 * 2**30,
                   "link": {"name": "NVLink-C2C"}}  # fmt: skip
    assert plan_table(doc, tune_fraction(doc))["limit_bytes"] == 3 * 2**30
    table = tune_datatable(doc["tune"])
    assert [r["candidate"] for r in table.data] == ["* offload small", "recompute all"]
    assert [r["step"] for r in table.data] == [61.68, 72.47] and table.data[0]["host"] == 1.0  # ms, GiB
    assert tune_lines(doc["tune"])[-2:] == ["MaxText: none (no tensor named small)", "JAX: policy=jax.x"]
    assert tune_fraction(plan(temp_bytes=1)) == 0.75


def test_the_plan_says_how_far_its_kind_of_prediction_was_off():
    """The error line of the plan's predictions is made once (plan_table's ``accuracy``) for the terminal and
    the dashboard's plan view, by how they were costed: XLA's estimates (plan's compiles) or the roofline."""
    from profiler.analysis.accuracy import ROOFLINE, XLA
    from profiler.report.predict_text import render_predictions

    def with_predictions(model: str) -> dict:
        doc = plan(MiB)
        for r in doc["results"]:
            r["prediction"] = {"predictions": [{
                "link": "pcie5", "link_name": "PCIe Gen5 x16", "link_gbps": 63.0, "predicted_step_ns": 100_000_000,
                "predicted_exposed_ns": 0, "predicted_compute_ns": 100_000_000, "cost_model": model}]}  # fmt: skip
        return plan_table(doc)

    assert plan_table(plan(MiB))["accuracy"] is None  # nothing predicted, nothing said
    for model, acc in (("xla", XLA), ("roofline", ROOFLINE)):
        tab = with_predictions(model)
        assert tab["accuracy"] == acc.line()
        said = " ".join(" ".join(render_predictions(tab)).split())
        assert " ".join(acc.line().split()) in said
