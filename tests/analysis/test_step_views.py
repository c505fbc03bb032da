"""Step views as a user reads them: the asked view of a run folder, a long step list summarized
(every step on request), one median step that says what it includes, no zeros for a run where no
GPU ran, and a long window in seconds."""

from __future__ import annotations

import json

from profiler.report.text import window_line
from profiler.synthetic.export import ExportBuilder
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

CPU_RUNS = ROOT / "sample_traces" / "cpu-example"
A = 100


def many_steps(n: int) -> ExportBuilder:
    """*n* steps of 1 ms (+1 us per step), one d2h copy each; step 7 takes 5 ms (an outlier)."""
    b = ExportBuilder()
    b.gpu(0)
    b.domain(1, "profile-step", tid=A)
    for s in range(n):
        t0 = s * 10_000_000
        dur = 5_000_000 if s == 7 else 1_000_000 + 1_000 * s
        b.nvtx(t0, t0 + dur, f"step={s}", tid=A, domain_id=1)
        corr = b.copy(t0 + 100, t0 + 200, "d2h", 1024)
        b.runtime(t0 + 10, t0 + 20, corr, name="cudaMemcpyAsync", tid=A)
    return b


def test_a_long_step_list_is_summarized(build):
    path = build(many_steps(100))
    out = run_cli("analyze", "--by", "step", "--no-findings", str(path)).stdout
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("step=")]
    assert listed == [f"step={i}" for i in (0, 1, 2, 3, 4, 95, 96, 97, 98, 99)]
    assert "... 90 steps not shown (the first and last 5; --all-steps lists every one)" in out
    # one median: over the 99 included steps (1 ms + 0..99 us less step 7), said where it is printed
    (line,) = [x for x in out.splitlines() if x.startswith("median step")]
    assert line.startswith("median step 1.050 ms over the included steps (99 of 100 steps; 1 outlier(s) left out)")
    assert "p10 1.011" in line and "max 1.099 ms" in line  # nearest rank: the 11th of 0..99 us less 7
    every = run_cli("analyze", "--by", "step", "--all-steps", "--no-findings", str(path)).stdout
    assert sum(1 for x in every.splitlines() if x.startswith("step=")) == 100 and "not shown" not in every
    doc = json.loads(run_cli("analyze", "--by", "step", "--json", "--no-findings", str(path)).stdout)
    assert len(doc["steps"]["steps"]) == 100  # the JSON keeps every step
    assert doc["steps"]["median_step_ns"] == doc["steps"]["median_included_step_ns"] == 1_050_000


def test_a_run_folder_prints_the_asked_view():
    one = CPU_RUNS / "20261130T012257-none-42aa66"
    out = run_cli("analyze", "--by", "step", str(one)).stdout
    assert "Steps (policy none):" in out and "median step 1.943 ms over the included steps (3 of 3 steps)" in out
    both = run_cli("analyze", "--by", "step", str(CPU_RUNS))
    assert both.returncode == 0, both.stderr
    assert both.stdout.count("Steps (policy ") == 2 and "recompute" in both.stdout  # the policy table first
    layers = run_cli("analyze", "--by", "layer", str(CPU_RUNS)).stdout
    assert layers.count("== 2026") == 2
    doc = json.loads(run_cli("analyze", "--by", "step", "--json", str(CPU_RUNS)).stdout)
    assert [len(r["steps"]["steps"]) for r in doc["runs"]] == [3, 3]


def test_no_zeros_where_no_gpu_ran():
    out = run_cli("analyze", str(CPU_RUNS)).stdout
    rows = [x.split() for x in out.splitlines() if x.startswith(("none ", "offload_qkv "))]
    assert rows and not any("0.000" in r for r in rows)  # no exposed or stalled time printed as a zero
    left_out = next(x for x in out.splitlines() if x.startswith("left out, no value in any run: "))
    assert "exposed ms" in left_out and "stalled ms" in left_out  # '-' in every row: named, not shown
    assert "no GPU activity: exposed and stalled time are not measured (-)" in out


def test_a_long_window_in_seconds():
    line = window_line({"start_ns": 0, "duration_ns": 30_528_622_000, "source": "nvtx:capture"})
    assert line == "analysis window: nvtx:capture, 30.5 s"
