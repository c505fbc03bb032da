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
