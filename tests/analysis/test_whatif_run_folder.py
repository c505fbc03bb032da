"""``whatif`` takes a run folder as analyze, findings and pgle do (issue 29, item 7)."""

from __future__ import annotations

import json

from profiler.synthetic.export import ExportBuilder
from tests.helpers.cli import run_cli
from tests.helpers.costs_runs import prefetch_stall


def test_whatif_on_a_run_folder_is_whatif_on_its_trace(tmp_path):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        b = ExportBuilder()
        b.gpu(0, "NVIDIA H100 80GB HBM3")
        prefetch_stall(b)
        (runs / name).mkdir(parents=True)
        b.write(runs / name / "trace.sqlite")
        (runs / name / "manifest.json").write_text(json.dumps({"policy": name, "status": "ok"}))
    on_file = run_cli("whatif", str(runs / "a" / "trace.sqlite"), "--link", "nvlink-c2c")
    on_folder = run_cli("whatif", str(runs / "a"), "--link", "nvlink-c2c")
    assert on_file.returncode == on_folder.returncode == 0, on_folder.stderr
    assert on_folder.stdout == on_file.stdout and "span" in on_folder.stdout
    both = run_cli("whatif", str(runs))
    assert both.returncode == 2 and "Traceback" not in both.stderr
    assert both.stderr.strip() == (
        f"profile-step: error: {runs}: holds 2 traces ({runs / 'a' / 'trace.sqlite'}, "
        f"{runs / 'b' / 'trace.sqlite'}): give one of them"
    )


def test_the_header_says_what_the_copies_take(tmp_path):
    """The copy-free default reads "no time", not "0x its recorded time"; a scale reads as the factor."""
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    prefetch_stall(b)
    b.write(tmp_path / "trace.sqlite")
    free = run_cli("whatif", str(tmp_path / "trace.sqlite"), "--copy-scale", "0")
    half = run_cli("whatif", str(tmp_path / "trace.sqlite"), "--copy-scale", "0.5")
    assert free.returncode == half.returncode == 0, free.stderr + half.stderr
    assert free.stdout.startswith("What-if: every h2d/d2h copy takes no time (0x its recorded time;")
    assert half.stdout.startswith("What-if: every h2d/d2h copy takes 0.5x its recorded time; host synchronization")
