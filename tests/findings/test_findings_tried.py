"""Flag advice held against the H200 runs: the flags a finding suggests, already tried by a run of the
same script, arguments and policy (``profiler.analysis.findings.tried``), come with what that run
measured; a flag that cannot apply to the run's program is not suggested."""

from __future__ import annotations

import json

from profiler.analysis.findings.tried import experiment, try_notes
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

H200 = ROOT / "sample_traces" / "h200-example"


def _run(suffix: str):
    (run,) = H200.glob(f"*-{suffix}")
    return run


def test_the_h200_offload_qkv_run_is_told_what_its_flagged_sibling_measured():
    # offload_qkv was told to try --lhs and --pipelined-offload; offload_qkv-lhs-pipelined ran them: 16.8 ms
    # exposed per step against 16.6, steps 212.5 against 212.8 ms, 5.92 ms of spread
    plain, flagged, scan = (
        _run("offload_qkv-b50f27"),
        _run("offload_qkv-lhs-pipelined-f90d55"),
        _run("offload_qkv-scan-986b04"),
    )
    out = run_cli("findings", "--json", str(plain), str(flagged), str(scan))
    assert out.returncode == 0, out.stderr
    by_run = {d["trace"].split("/")[-2]: d["tried"] for d in json.loads(out.stdout)["runs"]}
    assert by_run[plain.name] == [
        f"already tried (exposed-copies, lhs-off): {flagged.name} ran the same script, arguments and policy with the "
        "latency hiding scheduler and pipelined host offloading on: exposed copies 16.8 ms per step against 16.6 ms "
        "here, step 212 ms against 213 ms (less apart than the steps' spread, 5.92 ms: no measured gain)"
    ]
    # the flagged run lacks nothing it is told; the scanned run's sibling (--scan) is another experiment
    assert by_run[flagged.name] == [] and by_run[scan.name] == []
    said = " ".join(run_cli("findings", str(plain), str(flagged)).stdout.split())
    assert "already tried (exposed-copies, lhs-off): " + flagged.name in said
    # and each finding's own advice says so where it is given, not only below the block
    tail = f"(already tried in {flagged.name}: no measured gain; see below)"
    assert "(profile-step --lhs); it schedules async copies to overlap compute " + tail in said
    assert "host offloading (--pipelined-offload) " + tail in said


def test_try_notes_name_every_sibling_of_a_rule():
    items = [
        {"rules": ["exposed-copies", "lhs-off"], "sibling": "a", "outcome": "no measured gain", "line": "..."},
        {"rules": ["lhs-off"], "sibling": "b", "outcome": None, "line": "..."},
    ]
    assert try_notes(items) == {
        "exposed-copies": "already tried in a: no measured gain",
        "lhs-off": "already tried in a: no measured gain; already tried in b",
    }
    assert try_notes([]) == {}


def test_an_experiment_is_the_script_its_arguments_and_the_policy_it_ran():
    base = {"script": "train.py", "script_args": ["--layers", "8"], "policy": "offload_qkv"}
    assert experiment(base) == ("train.py", ("--layers", "8"), "offload_qkv")
    # a device capture's labelled run: the program's own --policy, not the label
    labelled = {**base, "policy": "offload_qkv-lhs", "program": ["python3", "train.py", "--policy", "offload_qkv"]}
    assert experiment(labelled) == experiment(base)
    assert experiment({**base, "script_args": ["--layers", "8", "--scan"]}) != experiment(base)
    assert experiment({"policy": "none"}) is None and experiment(None) is None


def test_the_dashboards_findings_panel_says_it_too(tmp_path):
    # one definition: the findings tab shows the same line under the run's findings, its sibling loaded
    import shutil

    from dashboards.data import RunStore
    from dashboards.findings_view import panel
    from dashboards.rows import View

    plain, flagged = _run("offload_qkv-b50f27"), _run("offload_qkv-lhs-pipelined-f90d55")
    for run in (plain, flagged):
        shutil.copytree(run, tmp_path / run.name)
    store = RunStore([tmp_path])
    for rid in store.refs:
        store.get(rid)
    (rid,) = [r for r in store.refs if plain.name in str(store.refs[r].trace)]
    shown = str(panel(store, [View(rid, "0")]))
    assert "Already tried (exposed-copies, lhs-off):" in shown and f" {flagged.name} ran the same script" in shown
    assert shown.count(f"(already tried in {flagged.name}: no measured gain; see below)") == 2  # each try


def test_pipelining_is_not_advised_where_no_offload_is_inside_a_loop():
    # the H200 offload_mlp run (unrolled layers) was told "let XLA pipeline them across iterations": its
    # compiled plan moves every offload once a step, outside any loop, where the flag does nothing
    out = run_cli("findings", "--json", str(_run("offload_mlp-8cc877")))
    (run,) = json.loads(out.stdout)["runs"]
    (edges,) = [f for f in run["findings"] if f["id"] == "exposed-at-boundaries"]
    assert (
        "this step's program moves every offload outside any loop (its layers are unrolled), so the flag does "
        "not apply" in edges["try"]
    )
    assert "let XLA pipeline them" not in edges["try"]


def test_analyze_of_one_run_says_what_the_sibling_folder_that_tried_its_advice_measured(tmp_path):
    """The quickstart's per-layer look at the H200 offload_qkv run (analyze, one trace): its --lhs advice
    names the run folder beside it that had the flags on (found by its manifest) with what it measured
    (its analysis, as findings on both runs says it); with no such folder beside it, nothing is said."""
    import shutil

    from profiler.analysis.findings.config import FindingsConfig
    from profiler.analysis.findings.tried import tried_beside
    from profiler.runs.result import build
    from profiler.stored.folder import manifest_of
    from profiler.trace import load_trace

    plain, flagged, none = (
        _run("offload_qkv-b50f27"),
        _run("offload_qkv-lhs-pipelined-f90d55"),
        _run("none-8c28dc"),
    )
    out = run_cli("analyze", "--no-verdict", str(plain / "trace.json.gz"))
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stdout.split())
    assert f"(profile-step --lhs); it schedules async copies to overlap compute (already tried in {flagged.name}: " \
        "no measured gain; see below)" in said  # fmt: skip
    line = (
        f"already tried (exposed-copies, lhs-off): {flagged.name} ran the same script, arguments and policy with the "
        "latency hiding scheduler and pipelined host offloading on: exposed copies 16.8 ms per step against 16.6 ms "
        "here, step 212 ms against 213 ms (less apart than the steps' spread, 5.92 ms: no measured gain)"
    )
    assert line in said  # the line findings prints with both runs given
    doc = json.loads(run_cli("analyze", "--json", str(plain / "trace.json.gz")).stdout)
    assert doc["findings"]["tried"] == [line]
    # without the sibling's analysis (none to read): its manifest alone names it, with the command
    trace = plain / "trace.json.gz"
    run = build(load_trace(trace), manifest_of(trace), findings=FindingsConfig()).brief()
    (item,) = tried_beside(run, trace, lambda _folder: None)
    assert item["outcome"] is None and item["line"].endswith(
        "pipelined host offloading on; profile-step findings on both runs compares them"
    )
    for r in (plain, none):  # a sibling of another policy is another experiment
        shutil.copytree(r, tmp_path / r.name)
    alone = run_cli("analyze", "--no-verdict", str(tmp_path / plain.name / "trace.json.gz"))
    assert alone.returncode == 0 and "already tried" not in alone.stdout
    assert "try: turn it on: XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true" in alone.stdout
