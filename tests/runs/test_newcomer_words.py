"""What a newcomer read on 2026-12-07 and found off, each pinned: a link named by its speed once, FLOPs in
TFLOP as analyze prints them, a missing path worded one way, one warm-up step, and the dashboard's
kernel panel of a run without a GPU."""

from __future__ import annotations

from profiler.report.compare_text import change, value
from profiler.report.whatif_text import _link
from tests.helpers.cli import run_cli


def test_a_link_named_by_its_speed_is_said_once():
    assert _link("63 GB/s", 63.0) == "63 GB/s"
    assert _link("PCIe Gen5 x16", 63.0) == "PCIe Gen5 x16 (63 GB/s)"
    assert _link("TPU v5e host link as measured", 14.16) == "TPU v5e host link as measured (14.16 GB/s)"


def test_compare_prints_flops_as_analyze_does():
    assert value("flops_per_step", 99_222_751_000_000) == "99.22 TFLOP"
    assert change("flops_per_step", {"delta": 11_040_549_000_000, "relative": 0.128}) == "+11.04 TFLOP, +12.8%"
    assert value("tflops", 511.3) == "511.3 TFLOP/s"
    assert change("tflops", {"delta": 0.7928, "relative": 0.002}) == "+0.8 TFLOP/s, +0.2%"


def test_a_missing_path_is_worded_one_way(tmp_path):
    for command in ("analyze", "findings", "whatif"):
        for missing in (tmp_path / "nope.sqlite", tmp_path / "nodir"):
            proc = run_cli(command, str(missing))
            assert proc.returncode == 2 and "Traceback" not in proc.stderr
            assert proc.stderr.strip().splitlines()[-1].endswith(f"{missing}: no such file or folder"), proc.stderr


def test_the_kernel_panel_of_a_run_without_a_gpu_says_so():
    from dashboards.kernels_view import layer_panel
    from profiler.stored.summary import RunSummary

    run = RunSummary.of({"trace": "t.sqlite", "devices": {}})
    strong = layer_panel(run, None)[0]
    assert strong.children == "Kernels slowed by copies, no GPU recorded (the whole window, not per layer)"
