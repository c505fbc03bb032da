"""Numbers that agree on one page: moved bytes per step and GPU as the policy table shows them, never
two GPUs added under "per step", and "over the whole capture" where a trace has no steps."""

from __future__ import annotations

from dashboards.trade import pvm_figure
from profiler.analysis.policies import per_step_and_gpu, planned_vs_moved, policy_row

MiB = 1 << 20


def _run(steps: int, plan: bool = True) -> dict:
    """Two GPUs, each moving 6 MiB D2H through instruction copy.1 over the window (12 MiB in all)."""
    movement = {"instruction": "copy.1", "layer": "layer_0", "activation": "qkv", "direction": "d2h"}
    return {
        "policy": "offload_qkv",
        "trace": "/x/t.sqlite",
        "steps": [{"name": f"step={i}", "duration_ns": 10, "excluded": None} for i in range(steps)],
        "median_step_ns": 10 if steps else None,
        "devices": {d: {"d2h": {"bytes": 6 * MiB}, "h2d": {"bytes": 0}} for d in ("0", "1")},
        "copies": {"d2h": {"bytes": 12 * MiB}, "h2d": {"bytes": 0}, "offload": {"bytes": 12 * MiB}},
        "copy_ops": [{"op": "copy.1", "d2h_bytes": 12 * MiB, "h2d_bytes": 0}],
        "compiled": {
            "module": "jit_step",
            "plan": {
                "movements": [{**movement, "bytes_per_step": 2 * MiB, "bytes": 2 * MiB}],
                "d2h_bytes_per_step": 2 * MiB,
                "h2d_bytes_per_step": 0,
            }
            if plan
            else None,
            "notes": [] if plan else ["no compiled step in the run folder"],
        },
    }


def test_moved_per_step_and_gpu_matches_the_policy_table():
    run = _run(steps=3)
    pvm = planned_vs_moved(run)
    (row,) = pvm["rows"]
    assert row["moved_d2h_bytes"] == 12 * MiB / 3 / 2 == 2 * MiB  # not 4 MiB: two GPUs added
    assert row["moved_d2h_bytes"] == policy_row(run)["moved_d2h_bytes_per_step"]
    assert row["flag"] == "ok" and pvm["per"] == "per step and GPU" and pvm["devices"] == 2


def test_without_steps_moved_is_over_the_whole_capture_and_says_so():
    run = _run(steps=0)
    assert per_step_and_gpu(run) == (1, 2, "per GPU, over the whole capture (no steps)")
    pvm = planned_vs_moved(run)
    assert pvm["rows"][0]["moved_d2h_bytes"] == 6 * MiB
    fig, _ = pvm_figure(pvm, run, "offload_qkv · t")
    assert "moved per GPU, over the whole capture (no steps)" in fig["layout"]["title"]["text"]
    assert policy_row(run)["moved_d2h_bytes_per_step"] is None  # the table shows no per-step number


def test_the_note_without_a_plan_gives_each_gpu_its_own_bytes():
    for steps, words, each in ((2, "per step and GPU", "3.00 MiB"), (0, "per GPU, over the whole capture", "6.00 MiB")):
        run = _run(steps=steps, plan=False)
        fig, _ = pvm_figure(planned_vs_moved(run), run, "offload_qkv · t")
        text = fig["layout"]["meta"]["note"]
        assert f"moved device-to-host {words}" in text, text
        assert f"GPU 0 {each}, GPU 1 {each}" in text, text
        assert "12.0 MiB" not in text


def test_point_labels_never_touch():
    from dashboards.trade import place_labels

    def touch(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    # five runs on nearly one spot (same-HLO policies): labels move around it, the rest are left out
    pts = [(10.0 + 0.01 * i, 5.0, f"offload_{i} · abc12{i}", 12) for i in range(5)]
    placed = place_labels(pts, (0, 20), (0, 10))
    boxes = [b for _, b in placed if b is not None]
    assert [pos for pos, _ in placed][:2] == ["top center", "bottom center"]
    assert all(not touch(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert any(pos is None for pos, _ in placed)  # not all five fit: said under the chart, never overlapped
    apart = place_labels([(1.0, 1.0, "none · a", 12), (19.0, 9.0, "remat · b", 12)], (0, 20), (0, 10))
    assert [pos for pos, _ in apart] == ["top center", "top center"]


def test_runs_table_shows_tiny_values_as_under_0_01():
    from dashboards.rows import table

    base = {"_full": "x", "_steps": "", "step": None, "exposed": None}
    rows = [{**base, "id": "a", "bytes": 136}, {**base, "id": "b", "bytes": 180 * 2**30}]  # 136 B beside 180 GiB
    cols, data, _ = table(rows)
    assert next(c for c in cols if c["id"] == "bytes")["name"] == "copied, D2H + H2D, whole capture (GiB)"
    assert [r["bytes"] for r in data] == ["<0.01", 180.0]


def test_a_layers_kernels_are_per_gpu_and_each_name_once():
    from profiler.runs.result import collect
    from profiler.trace import open_trace
    from tests.helpers.paths import ROOT

    demo = ROOT / "sample_traces/demo-synthetic/synthetic-4-offload_all/synthetic-trace.sqlite"
    layer = collect(open_trace(demo))["layers"]["layer_0"]
    names = [t["name"] for t in layer["top_kernels"]]
    assert len(names) == len(set(names))  # two GPUs' rows of one name added, not listed twice
    per_gpu = layer["top_kernels_by_device"]
    assert set(per_gpu) == {"0", "1"}
    for top in per_gpu.values():
        assert len({t["name"] for t in top}) == len(top)
    first = names[0]
    both = [next(t for t in per_gpu[d] if t["name"] == first) for d in ("0", "1")]
    whole = layer["top_kernels"][0]
    assert whole["overlap_ns"] == sum(t["overlap_ns"] for t in both) and whole["kernels"] == sum(
        t["kernels"] for t in both
    )
