"""record and compare: golden Markdown, thresholds at the boundary, noise, the database, real runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from profiler.analysis.compare import compare, crossed, delta, parse_threshold
from profiler.runs.result import collect
from profiler.trace import open_trace
from profiler.trace.nsys import nsys_version
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.training_traces import training_export

GOLDEN = ROOT / "tests" / "golden" / "compare_layer_regression.md"


@pytest.fixture
def pair(build):
    base = build(training_export(exposed={1: 10_000}), "base.sqlite")  # layer 1: 10 us exposed per step
    head = build(training_export(exposed={1: 40_000}), "head.sqlite")  # ... then 40 us
    return base, head


def test_golden_markdown(pair):
    proc = run_cli("compare", "--format", "markdown", str(pair[0]), str(pair[1]))
    assert proc.returncode == 1, proc.stderr
    if not GOLDEN.exists():  # written once for a person to read and commit; never passes silently
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(proc.stdout)
        pytest.fail(f"wrote {GOLDEN}: read it, then commit it")
    assert proc.stdout == GOLDEN.read_text()


def test_regression_is_found_in_the_right_layer(pair):
    cmp = compare([collect(open_trace(pair[0]))], [collect(open_trace(pair[1]))], [parse_threshold("exposed_ns:+10%")])
    assert not cmp["passed"]
    (pol,) = cmp["policies"]
    assert pol["metrics"]["exposed_ns"]["base"] == 10_000 and pol["metrics"]["exposed_ns"]["head"] == 40_000
    layers = {lay["layer"]: lay for lay in pol["layers"]}
    assert layers["1"]["exposed_ns"]["delta"] == 4 * 30_000  # 4 steps
    assert layers["0"]["exposed_ns"]["delta"] == 0 and layers["2"]["exposed_ns"]["delta"] == 0


def test_stall_regression_gates_and_names_the_layer(build):
    base = build(training_export(exposed={1: 10_000}, waits=True), "sb.sqlite")
    head = build(training_export(exposed={1: 40_000}, waits=True), "sh.sqlite")
    b, h = collect(open_trace(base)), collect(open_trace(head))
    assert [s["stall_ns"] for s in b["steps"]] == [10_000] * 4
    assert b["stall_ns"] == 40_000 and h["stall_ns"] == 160_000
    cmp = compare([b], [h], [parse_threshold("stall_ns:+10%")])
    assert not cmp["passed"]
    (pol,) = cmp["policies"]
    assert (pol["metrics"]["stall_ns"]["base"], pol["metrics"]["stall_ns"]["head"]) == (10_000, 40_000)
    layers = {lay["layer"]: lay for lay in pol["layers"]}
    assert layers["1"]["stall_ns"]["delta"] == 4 * 30_000
    assert layers["0"]["stall_ns"]["delta"] == 0
    proc = run_cli("compare", "--format", "markdown", "--fail-on", "stall_ns:+10%", str(base), str(head))
    assert proc.returncode == 1
    assert "stalled by copies regressed" in proc.stdout


def test_same_run_passes(pair):
    proc = run_cli("compare", str(pair[0]), str(pair[0]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no overlap regression" in proc.stdout


@pytest.mark.parametrize(
    ("spec", "base", "head", "failed"),
    [
        ("exposed_ns:+5%", 100.0, 105.0, False),  # exactly at the limit passes
        ("exposed_ns:+5%", 100.0, 105.0001, True),
        ("step_ns:+5", 100.0, 105.0, False),
        ("step_ns:+5", 100.0, 105.5, True),
        ("hidden_fraction:-0.05", 0.90, 0.85, False),
        ("hidden_fraction:-0.05", 0.90, 0.8499, True),
        ("hidden_fraction:-0.05", 0.90, 0.99, False),  # improving never fails
        ("exposed_ns:+5%", 0.0, 10.0, True),  # all hidden before: any exposure is a regression
        ("exposed_ns:+5%", 0.0, 0.0, False),
    ],
)
def test_threshold_boundaries(spec, base, head, failed):
    assert crossed(parse_threshold(spec), delta(base, head), None)[0] is failed


def test_noise_suppresses_small_changes():
    t = parse_threshold("step_ns:+1%")
    assert crossed(t, delta(1000.0, 1020.0), None) == (True, None)
    assert crossed(t, delta(1000.0, 1020.0), 50.0) == (False, "within step-to-step noise")
    assert crossed(t, delta(1000.0, 1100.0), 50.0) == (True, None)


def test_noisy_steps_do_not_fail(build):
    jitter = (0, 300_000, 0, 300_000, 150_000)
    base = build(training_export(steps=5, step_jitter=jitter), "b.sqlite")
    head = build(training_export(steps=5, step_jitter=(60_000, 360_000, 60_000, 360_000, 210_000)), "h.sqlite")
    proc = run_cli("compare", "--fail-on", "step_ns:+2%", "--format", "json", str(base), str(head))
    doc = json.loads(proc.stdout)
    check = doc["policies"][0]["checks"][0]
    assert check == {"threshold": "step_ns:+2%", "failed": False, "note": "within step-to-step noise"}
    assert proc.returncode == 0


@pytest.mark.parametrize("bad", ["exposed:+5%", "exposed_ns+5%", "exposed_ns:5%", "step_ns:+x"])
def test_bad_threshold_is_input_error(pair, bad):
    proc = run_cli("compare", "--fail-on", bad, str(pair[0]), str(pair[1]))
    assert proc.returncode == 2 and "--fail-on" in proc.stderr


def test_database_round_trip(pair, tmp_path):
    db = tmp_path / "results.db"
    for path, label in ((pair[0], "main"), (pair[1], "pr-1")):
        proc = run_cli("record", "--db", str(db), "--label", label, str(path))
        assert proc.returncode == 0, proc.stderr
    again = run_cli("record", "--db", str(db), "--label", "main", str(pair[0]))
    assert again.returncode == 0
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2, "re-recording replaces, never duplicates"
    assert con.execute("SELECT count(*) FROM layers WHERE direction='offload'").fetchone()[0] == 6
    assert con.execute("SELECT count(*) FROM steps").fetchone()[0] == 8
    con.close()
    by_label = run_cli("compare", "--db", str(db), "--format", "json", "main", "pr-1")
    by_file = run_cli("compare", "--format", "json", str(pair[0]), str(pair[1]))
    assert by_label.returncode == by_file.returncode == 1
    assert json.loads(by_label.stdout)["policies"][0]["metrics"] == json.loads(by_file.stdout)["policies"][0]["metrics"]


def test_bad_sides(pair, tmp_path):
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    proc = run_cli("compare", "--db", str(db), "main", str(pair[1]))
    assert proc.returncode == 2 and "empty" in proc.stderr
    run_cli("record", "--db", str(db), "--label", "main", str(pair[0]))
    proc = run_cli("compare", "--db", str(db), "nope", str(pair[1]))
    assert proc.returncode == 2 and "no runs labelled 'nope'" in proc.stderr and "main" in proc.stderr
    proc = run_cli("compare", str(tmp_path / "missing"), str(pair[1]))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    corrupt = tmp_path / "c.sqlite"
    corrupt.write_bytes(b"junk" * 100)
    proc = run_cli("compare", str(corrupt), str(pair[1]))
    assert proc.returncode == 2 and "not an SQLite database" in proc.stderr


def test_different_policies_and_layers(build, tmp_path):
    base = build(training_export(policy="offload_qkv", layers=3), "b.sqlite")
    head = build(training_export(policy="offload_mlp", layers=2), "h.sqlite")
    # two runs on the base side: matched by policy, nothing in common (one run a side is a pair)
    (tmp_path / "base").mkdir()
    base.rename(tmp_path / "base" / "b.sqlite")
    build(training_export(policy="none", layers=3), "base/n.sqlite")
    proc = run_cli("compare", "--format", "markdown", str(tmp_path / "base"), str(head))
    assert proc.returncode == 2
    assert "Missing in head: `offload_qkv`, `none`" in proc.stdout and "Missing in base: `offload_mlp`" in proc.stdout
    base = tmp_path / "base" / "b.sqlite"
    head2 = build(training_export(policy="offload_qkv", layers=2), "h2.sqlite")
    proc = run_cli("compare", "--format", "markdown", str(base), str(head2))
    assert proc.returncode == 0, proc.stdout
    assert "Layers missing in head: `2`" in proc.stdout


@pytest.mark.nsys
def test_compare_two_real_cpu_runs(nsys, tmp_path):
    runs = {}
    for side in ("base", "head"):
        proc = run_cli(
            "--policies",
            "none,offload_qkv",
            "--runs-dir",
            str(tmp_path / side),
            "--nsys",
            str(nsys),
            "--no-summary",
            str(ROOT / "tests" / "scripts" / "steps.py"),
            "--steps",
            "4",
        )
        assert proc.returncode == 0, proc.stderr
        runs[side] = tmp_path / side
    proc = run_cli(
        "compare",
        "--format",
        "markdown",
        "--fail-on",
        "exposed_ns:+10%",
        str(runs["base"]),
        str(runs["head"]),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "`none`" in proc.stdout and "`offload_qkv`" in proc.stdout
    assert f"nsys {nsys_version(nsys).split('-')[0]}" in proc.stdout and "profile --trace=" in proc.stdout
    assert Path(runs["base"]).is_dir()


def test_multi_rank_sides_compare_the_slowest_rank(build, tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    for r in range(3):
        training_export(exposed={0: 10_000 * r}).write(base / f"report.{r}.sqlite")
        jitter = (300_000,) if r == 1 else (0,)
        training_export(exposed={0: 10_000 * r + (50_000 if r == 1 else 0)}, step_jitter=jitter).write(
            head / f"report.{r}.sqlite"
        )
    by_glob = run_cli("compare", "--format", "json", str(base / "report.*.sqlite"), str(head / "report.*.sqlite"))
    assert by_glob.returncode == 1, by_glob.stderr
    proc = run_cli("compare", "--format", "markdown", str(base), str(head))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "`offload_qkv` ranks: base: 3 ranks" in proc.stdout
    assert "compared rank 1 (slowest)" in proc.stdout
    doc = json.loads(run_cli("compare", "--format", "json", str(base), str(head)).stdout)
    spread = doc["policies"][0]["rank_spread"]
    assert spread["base"]["max"] == 20_000 and spread["head"]["max"] == 60_000


def test_markdown_states_the_noise(build):
    jitter = (0, 300_000, 0, 300_000, 150_000)
    base = build(training_export(steps=5, step_jitter=jitter), "nb.sqlite")
    head = build(training_export(steps=5, step_jitter=tuple(j + 60_000 for j in jitter)), "nh.sqlite")
    proc = run_cli("compare", "--fail-on", "step_ns:+2%", "--format", "markdown", str(base), str(head))
    assert proc.returncode == 0
    assert "step_ns:+2%: within step-to-step noise (change +0.060 ms, +5.2%, noise ±0.300 ms)" in proc.stdout


def test_no_percentage_against_a_near_zero_base():
    """remat's 4 bytes against offload_qkv's 4608 MiB read +40265318400.0%: a base under 1/100 of head
    gets no percentage; the change itself stays, and a plain doubling keeps its +100%."""
    from profiler.analysis.compare import delta

    d = delta(4, 4608 * 2**20)
    assert d["delta"] == 4608 * 2**20 - 4 and d["relative"] is None
    assert delta(10, 20)["relative"] == 1.0


def test_a_metric_row_says_whether_it_is_the_median_steps_or_the_whole_captures():
    """compare's hidden 70.4% (the median step's) beside analyze's 70.5% (the whole capture's) read as
    two answers: each per-step metric's row says which each side's value is (a median where the steps
    hold the metric: the H200 none run's copies lie outside its steps, so its hidden share is the
    whole capture's); bytes say so already, a step is a step."""
    from profiler.analysis.compare import METRICS, compare
    from profiler.report.compare_text import metric_label, render_terminal
    from profiler.stored.folder import manifest_of
    from profiler.trace import load_trace
    from tests.helpers.paths import ROOT

    def summary(policy: str):
        path = next((ROOT / "sample_traces" / "h200-example").glob(f"*-{policy}-??????")) / "trace.json.gz"
        return collect(load_trace(path), manifest_of(path))

    qkv, none = summary("offload_qkv"), summary("none")
    cmp = compare([none], [{**qkv, "policy": "none"}], [])
    (pol,) = cmp["policies"]
    m = pol["metrics"]
    assert m["hidden_fraction"]["of"] == {"base": "whole capture", "head": "median step"}
    assert metric_label("hidden_fraction", m["hidden_fraction"]) == "hidden, base's whole capture, head's median step"
    assert metric_label("exposed_ns", m["exposed_ns"]) == "exposed copy time, median step"
    assert metric_label("step_ns", m["step_ns"]) == "step time" and "of" not in m["d2h_bytes"]
    assert metric_label("d2h_bytes", m["d2h_bytes"]) == METRICS["d2h_bytes"][0] == "d2h bytes, whole capture"
    assert "hidden, base's whole capture, head's median step" in render_terminal(cmp)
    from profiler.report.compare_text import render_markdown

    # the Markdown table has one column per metric for every policy: its note names the exceptions
    md = render_markdown(cmp)
    assert (
        "Columns step time, exposed copy time and hidden: the median over each side's steps, "
        "except `none` base's hidden: the whole capture (no step holds it); bytes and GB/s: the whole capture."
    ) in md
    assert "trace `trace.json.gz`; JAX's profiler; jax 0.11.2" in md and "nsys ?" not in md  # recorded by JAX
    # the none run moves nothing per layer: not "Layers missing in base: layer_0 ... layer_7"
    assert "No layer of base moved anything; head's: `layer_0`, `layer_1`" in md and "Layers missing" not in md


def test_the_help_lists_the_default_thresholds_the_gate_uses():
    # --help said five defaults while the gate ran six (work_rate:-0.05 was missing)
    from profiler.analysis.compare import DEFAULT_THRESHOLDS

    said = " ".join(run_cli("compare", "--help").stdout.split())
    assert "default: " + ", ".join(DEFAULT_THRESHOLDS) in said


def test_a_few_bytes_are_bytes_not_zero_mib():
    # the H200 remat run's 12 bytes against the TPU's none read "0.0 MiB → 0.0 MiB (-0.0 MiB, -100.0%)";
    # a newcomer read "12 B" beside "0.0 MiB" and "4608.0 MiB" beside analyze's 4.50 GiB: each size in its unit
    from profiler.analysis.compare import delta
    from profiler.report.compare_text import change, value

    assert value("d2h_bytes", 12) == "12 B" and value("d2h_bytes", 0) == "0 B"
    assert value("d2h_bytes", 4608 * 2**20) == "4.50 GiB"
    assert change("d2h_bytes", delta(12, 0)) == "-12 B, -100.0%"
    assert change("d2h_bytes", delta(4608 * 2**20, 4608 * 2**20 - 12)) == "-12 B, -0.0%"
    assert change("d2h_bytes", delta(0, 3 * 2**20)) == "+3.00 MiB"


def test_the_terminals_prose_is_wrapped_at_its_width():
    """compare's terminal text on two real runs (the H200 example's none and offload_mlp): every line of
    prose (verdict, notes, new findings) at most 160 columns; only the table's rows may be wider."""
    from profiler.units import COLUMNS
    from tests.helpers.paths import ROOT

    runs = sorted((ROOT / "sample_traces" / "h200-example").glob("*-none-*")) + sorted(
        (ROOT / "sample_traces" / "h200-example").glob("*-offload_mlp-*")
    )
    proc = run_cli("compare", str(runs[0]), str(runs[1]))
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("new in head") for line in lines)
    rows = [line for line in lines if line.startswith(("none → ", "policy ", "-----"))]
    assert [line for line in lines if len(line) > COLUMNS and line not in rows] == []
    # kernel work per GPU time reads 124.0% while TFLOP/s falls 5.2%: a note says why they move apart
    said = " ".join(proc.stdout.split())
    assert "+24.0 pt" in said and "-5.2%" in said
    assert "note (none → offload_mlp): kernel work per GPU time and TFLOP/s per device move apart" in said
