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
