"""The step is one compiled program (issue 29), on real captures.

``tests/scripts/step_programs.py`` under the real nsys, captured once and read by every test here:
a JSON-valued policy flag (``--policy-word``), a blocking collective before the loop (``jit__psum``,
once), first steps that compile (step 0 and step 1 are two programs of ``jit_train_step``) and a
logging variant through a static argument (a third program, twice).  Expected, by the rule of
``profiler.xla.step_program``: the step is the ``jit_train_step`` program that ran 5 times; the
run line, ``analyze`` and its policy table say the same sentence and count the same steps.

``tests/scripts/host_offload_tutorial.py`` (JAX's host-offloading tutorial's pattern) runs without
nsys, with the start-up hook: its step's host placements are its own program's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.capture import step_module
from profiler.conventions import XLA_DUMP_DIR
from profiler.trace import open_trace
from profiler.units import human_time
from profiler.xla import dump
from tests.helpers.cli import run_cli
from tests.helpers.hook_runs import hook_export
from tests.helpers.paths import ROOT
from tests.helpers.startup import child, facts, only_run

SCRIPT = ROOT / "tests" / "scripts" / "step_programs.py"
TUTORIAL = ROOT / "tests" / "scripts" / "host_offload_tutorial.py"
OVERLAY = '--policy-word=--config_overlay={"remat_policy": "{policy}"}'


@pytest.fixture(scope="module")
def captured(nsys, tmp_path_factory) -> tuple[str, Path, dict]:
    runs = tmp_path_factory.mktemp("step-programs") / "runs"
    proc = run_cli("run", "--runs-dir", str(runs), "--nsys", str(nsys), "--policies", "minimal", OVERLAY, str(SCRIPT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = only_run(runs)
    return proc.stdout, folder, json.loads((folder / "compiled.json").read_text())


def programs(compiled: dict, name: str) -> dict[int, int]:
    """program id -> executions the start-up hook counted, for the programs of *name*."""
    return {p["program_id"]: p["executions"] for p in compiled["programs"] if p["name"] == name}


@pytest.mark.nsys
def test_the_json_policy_flag_reaches_the_script_as_one_word(captured):
    _, folder, _ = captured
    assert "policy from --config_overlay: minimal" in (folder / "output.log").read_text()
    man = json.loads((folder / "manifest.json").read_text())
    assert man["program"][-1] == '--config_overlay={"remat_policy": "minimal"}'


@pytest.mark.nsys
def test_one_jit_name_three_programs_the_step_is_the_one_that_repeats(captured):
    stdout, folder, compiled = captured
    runs = programs(compiled, "jit_train_step")
    assert sorted(runs.values()) == [1, 2, 5]  # step 0; the logging variant (steps 2, 5); steps 1, 3, 4, 6, 7
    step = next(p for p, n in runs.items() if n == 5)
    assert programs(compiled, "jit__psum") and max(programs(compiled, "jit__psum").values()) == 1
    # its three programs counted together (8 times), the only name that repeats.  Said once, by the run line:
    said = (
        f"jit_train_step (program {step}): ran 5 times (8 times with its other programs), the only jit name that "
        "ran more than once (jit__psum ran once); "
        "jit_train_step also ran as 2 other programs, twice and once: not the step"
    )
    lines = stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("   step: "))  # one sentence, wrapped at 160 columns
    assert " ".join(ln.strip() for ln in lines[at : at + 2]).startswith(f"step: {said}")
    assert compiled["step_program"]["program_id"] == step and compiled["step_module"].startswith(f"module_{step:04d}.")
    # ... by analyze's policy table, from the trace's executions by the same rule
    text = run_cli("analyze", str(folder)).stdout
    assert f"note (minimal): step: {said}" in " ".join(text.split())  # a prose line wrapped at 160 columns
    doc = json.loads(run_cli("analyze", "--json", str(folder)).stdout)
    (row,) = doc["policies"]["rows"]
    assert row["step_module"] == f"module_{step:04d}.jit_train_step" and row["step_chosen_by"] == said


@pytest.mark.nsys
def test_the_steps_numbers_come_from_its_program_only(captured):
    """The logging variant computes a gradient norm more: more FLOPs than the step; the policy table
    takes the step program's, read from its module in compiled.json."""
    _, folder, compiled = captured
    doc = json.loads(run_cli("analyze", "--json", str(folder)).stdout)
    (row,) = doc["policies"]["rows"]
    runs = programs(compiled, "jit_train_step")
    flops = {m["id"]: m["cost"]["flops"] for m in compiled["modules"] if m["name"] == "jit_train_step"}
    step, logging = (next(p for p, n in runs.items() if n == k) for k in (5, 2))
    assert flops[logging] > flops[step] > 0
    assert row["flops_per_step"] == flops[step]


@pytest.mark.nsys
def test_the_run_line_and_analyze_count_the_same_steps(captured):
    """Step 1 is the step program's first execution, right after its compilation (the start-up hook's
    XlaCompile range on XLA:CPU): warm-up, in both."""
    stdout, folder, _ = captured
    doc = json.loads(run_cli("analyze", "--by", "step", "--json", str(folder)).stdout)
    by_step = doc["steps"]
    rows = by_step["steps"]
    assert len(rows) == 5 and rows[0]["excluded"] == "warm-up: first execution after its compilation"
    included = sum(1 for s in rows if not s["excluded"])
    warm = sum(1 for s in rows if (s["excluded"] or "").startswith("warm-up"))
    line = next(s for s in stdout.splitlines() if s.startswith("   5 steps from the executions of jit_train_step"))
    median = human_time(by_step["median_included_step_ns"])
    over = f" over {included} included" if included != 5 else ""
    assert f", median {median}{over} ({warm} warm-up" in line
    r = Breakdown(open_trace(folder / "trace.sqlite")).ranges.ranges
    compiles = r.filter((r["xla_kind"] == "compile") & (r["hlo_module"] == "jit_train_step"))
    assert compiles.height == 3  # one range per compilation


def test_the_tutorials_step_has_its_own_host_placements(tmp_path):
    """jit_step is three programs: the plain step (3 runs, momentum on the device), the offloaded step
    compiled for its first call (1 run) and again for the loop (5 runs: its input's placement changed);
    jit_scanned two (once each).  The step's host placements (the momentum in and out) are its own."""
    run_dir = tmp_path / "run"
    out = child(TUTORIAL, run_dir, "--steps", "6")
    assert out.returncode == 0, out.stderr
    hook = facts(run_dir)
    short = step_module.record(run_dir, run_dir / XLA_DUMP_DIR, True, hook)
    doc = json.loads((run_dir / "compiled.json").read_text())
    runs = programs(doc, "jit_step")
    assert sorted(runs.values()) == [1, 3, 5] and sorted(programs(doc, "jit_scanned").values()) == [1, 1]
    step = next(p for p, n in runs.items() if n == 5)
    plain = next(p for p, n in runs.items() if n == 3)
    assert short["step_program"]["program_id"] == step
    assert short["chosen_by"].endswith("jit_step also ran as 2 other programs, 3 times and once: not the step")
    placements = {m["id"]: m["plan"]["host_placements"] for m in doc["modules"] if m["name"] == "jit_step"}
    assert placements[step]["entry_parameters"] == 1 and placements[step]["entry_outputs"] == 1
    assert placements[plain]["entry_parameters"] == placements[plain]["entry_outputs"] == 0


def _hook_run(folder: Path, step: str, pid: int) -> Path:
    """A CPU run folder (policy ``default``): the start-up hook's ranges of *step* (program *pid*, 3 runs
    of 2 us) and ``jit_init`` (program 1, once), and the compiled.json naming both programs."""
    modules = [
        {"name": n, "id": i, "label": f"module_{i:04d}.{n}", "cost": {"flops": 1e6}}
        for n, i in (("jit_init", 1), (step, pid))
    ]
    return hook_export(folder, step, pid, modules)


def test_compare_says_when_the_sides_steps_are_different_programs(tmp_path):
    """Base's step is jit_step, head's jit_update: the per-step numbers compare two programs, said in
    one line (each side's sentence, as its run line says it); the same name on both sides: no line."""
    from profiler.analysis.compare import compare
    from profiler.report.compare_text import render_markdown, render_terminal
    from profiler.runs.result import collect

    base = collect(open_trace(_hook_run(tmp_path / "base", "jit_step", 6)))
    head = collect(open_trace(_hook_run(tmp_path / "head", "jit_update", 4)))
    same = collect(open_trace(_hook_run(tmp_path / "same", "jit_step", 9)))
    cmp = compare([base], [head], [])
    said = [line for line in render_terminal(cmp).splitlines() if line.startswith("step (")]
    assert said == [line for line in render_markdown(cmp).splitlines() if line.startswith("step (")]  # the PR comment
    assert said == [
        "step (default): base jit_step (program 6): ran 3 times, the only program that ran more than once "
        "(jit_init ran once); head jit_update (program 4): ran 3 times, the only program that ran more than once "
        "(jit_init ran once): head's step is another program: jit_update, not jit_step as base; the per-step "
        "numbers compare different programs, no percentage between them"
    ]
    assert "step (" not in render_terminal(compare([base], [same], []))  # program ids differ per process


@pytest.mark.shared
def test_a_real_export_without_xla_ranges_has_no_step_program(shared_traces, tmp_path):
    """nsys-ai's H100 export (PyTorch, nsys 2026.2.1): no XlaModule range, so no step program; analyze
    says why, pgle refuses in one line (it used to take "the module that ran longest")."""
    path = shared_traces / "nsysai__h100_2gpu_1s.sqlite"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    bd = Breakdown(open_trace(path))
    assert bd.module_steps.step is None and bd.module_steps.module is None
    assert "no XLA module ranges" in bd.by_step(copies=False)["source_note"]
    proc = run_cli("pgle", str(path), "-o", str(tmp_path / "p.pbtxt"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"profile-step: error: {path}: no XlaModule range with a program_id: not a trace of XLA executions"
    )


def test_the_sweep_table_counts_the_included_steps_as_the_run_line_does():
    from profiler.report.text import render_sweep_summary

    row = {"policy": "p", "status": "ok", "exit_code": 0, "steps": 5, "included_steps": 3, "median_step_ns": 2_000_000}
    line = render_sweep_summary([{**row, "run_dir": "runs/p"}]).splitlines()[2]
    assert line.split()[:5] == ["p", "ok", "0", "3", "of"] and line.split()[5:7] == ["5", "2.000"]


def test_on_a_gpu_the_capture_keeps_the_script_s_programs_and_leaves_the_choice_to_the_trace(tmp_path):
    """The hook counts nothing where XLA writes its own ranges (the fast path stays): it names the
    script's programs, the dump keeps them all, and the capture's fallback looks only among them."""
    from tests.helpers.startup import fake_dump

    sizes = {"jit_convert_element_type": 90_000, "jit_init": 50_000, "jit_step": 20_000, "jit_a": 10, "jit_b": 10}
    fake_dump(tmp_path / "xla_dump", sizes)  # ids 0..4 in this order; jit_convert_element_type is JAX's own
    named = [{"module": n, "program_id": i, "platform": "cuda"} for i, n in ((1, "jit_init"), (2, "jit_step"))]
    hook = {"jax": "0.10.2", "executions": [], "programs_uncounted": named}
    short = step_module.record(tmp_path, tmp_path / "xla_dump", True, hook)
    assert short["step_program"]["name"] == "jit_init"  # the largest of the script's: a guess, said as one
    assert any("the analysis chooses the step from them" in n for n in short["notes"])
    kept = {m.name for m in dump.scan(tmp_path / "xla_dump")}
    assert {"jit_init", "jit_step"} <= kept


def test_pgle_on_a_run_folder_takes_the_step_the_script_handed_over(tmp_path):
    """The script handed jit_step to annotate.compiled_step; jit_eval ran more often with more GPU time.
    analyze's steps are jit_step's (the rule, narrowed to the name the script gave): so are pgle's
    and plan --calibrate's (predict.measured.load), from the run folder and from its trace alike."""
    from profiler.predict.measured import load
    from tests.helpers.xla_steps import execution, new

    b = new()
    for i in range(4):  # jit_eval (program 3): 4 runs of 800 ns on the GPU
        t = 10_000 + i * 2_000
        execution(b, t, "jit_eval", 3, (t + 100, t + 900))
    for i in range(3):  # jit_step (program 5): 3 runs of 500 ns
        t = 30_000 + i * 2_000
        execution(b, t, "jit_step", 5, (t + 100, t + 600))
    (tmp_path / "run").mkdir()
    trace = b.write(tmp_path / "run" / "trace.sqlite")
    handed = {"module": "jit_step", "memory": None, "cost": None}
    (tmp_path / "run" / "compiled.json").write_text(json.dumps({"modules": [], "handed_over": handed}))
    step = Breakdown(open_trace(trace)).module_steps.step
    assert (step.name, step.program_id) == ("jit_step", 5)
    for source in (tmp_path / "run", trace):
        m = load(source)
        assert (m.module_name, m.steps.height, m.chosen_by) == ("jit_step", 3, step.sentence)
    assert load(trace, module="jit_eval").module_name == "jit_eval"  # --module still narrows to its name
