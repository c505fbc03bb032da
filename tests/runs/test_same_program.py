"""Like with like (issue 44, item 4): every table that compares policies compares the same program
(``profiler.xla.same_program``: the step's jit name and its parameter shapes), or says in the row
that the programs differ and prints no percentage between them.

The runs here are real nsys-schema SQLite exports (``synthetic.export``) with the start-up hook's
ranges and a ``compiled.json`` beside, as ``run`` leaves them: one policy's step is ``jit_step``,
another's ``jit_scanned`` (each policy's run took another jitted function as its step: 23.81
GFLOP against 939 MFLOP, once reported as "recompute -96.1%")."""

from __future__ import annotations

import json
from pathlib import Path

from profiler.analysis.compare import compare
from profiler.analysis.policies import plan_table, policy_table
from profiler.report.compare_text import render_terminal
from profiler.report.policies_text import render_plan, render_policy_comparison
from profiler.runs.result import collect
from profiler.trace import open_trace
from profiler.xla.same_program import entry_signature, parameter_count, same_program
from tests.helpers.hook_runs import hook_export

SIG = "(f32[4,256,256], f32[64,256])->f32[]"


def test_the_entry_signature_drops_layouts_and_memory_spaces():
    text = (
        "HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[4,256,256]{2,1,0}, "
        "f32[64,256]{1,0:T(8,128)S(5)}, (f32[2]{0}, s32[]))->(f32[]{:S(5)}, f32[4]{0})}, allow_spmd=true\n\nENTRY m {}"
    )
    assert entry_signature(text) == "(f32[4,256,256], f32[64,256], (f32[2], s32[]))->(f32[], f32[4])"
    offloaded = text.replace("{1,0:T(8,128)S(5)}", "{1,0}")  # a policy that places nothing in host memory
    assert entry_signature(offloaded) == entry_signature(text)
    assert entry_signature("HloModule jit_x\n") is None and entry_signature(None) is None


def test_same_program_by_name_then_shapes():
    a = {"step_name": "jit_step", "step_signature": SIG}
    assert same_program(a, {"step_name": "jit_step", "step_signature": SIG}) is True
    assert same_program(a, {"step_name": "jit_step", "step_signature": None}) is True  # shapes unknown: the name
    assert same_program(a, {"step_name": "jit_scanned", "step_signature": SIG}) is False
    assert same_program(a, {"step_name": "jit_step", "step_signature": SIG.replace("64", "128")}) is False
    assert same_program(a, {"step_name": None}) is None


def hook_run(folder: Path, policy: str, step: str, flops: float, signature: str | None = SIG) -> dict:
    """A CPU run folder of *policy*: the hook's ranges of *step* (3 runs) and jit_init (once); its
    compiled.json names both programs, the step's FLOPs and parameter shapes."""
    modules = [
        {"name": "jit_init", "id": 1, "label": "module_0001.jit_init", "cost": {"flops": 1e3}},
        {"name": step, "id": 4, "label": f"module_0004.{step}", "cost": {"flops": flops}, "signature": signature},
    ]
    trace = hook_export(folder, step, 4, modules)
    manifest = {"policy": policy}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return collect(open_trace(trace), manifest)


def runs(tmp_path: Path, head_step: str = "jit_scanned", signature: str = SIG) -> list:
    return [
        hook_run(tmp_path / "none", "none", "jit_step", 23.81e9),
        hook_run(tmp_path / "recompute", "recompute", head_step, 939e6, signature),
    ]


def test_the_run_table_prints_no_percentage_between_different_programs(tmp_path):
    tab = policy_table(runs(tmp_path))
    none, other = tab["rows"]
    assert (none["policy"], other["policy"]) == ("none", "recompute")
    assert none["program_differs"] is None and none["recompute_overhead"] == 0
    assert other["recompute_overhead"] is None  # was -96.1%
    assert other["program_differs"] == "another program: jit_scanned, not jit_step as the 'none' run"
    text = render_policy_comparison(tab)
    assert "-96.1%" not in text and "other program" in text
    assert "recompute ≠" in text  # the row's mark
    assert "≠: recompute runs another program than none: jit_scanned, not jit_step: no percentage between them" in text
    assert "as the 'none' run" not in text  # the row's whole sentence is in --json (program_differs)


def test_the_runs_of_one_other_program_share_one_mark(tmp_path):
    """Two runs of one other program and one of another: two ``≠`` sentences, not three."""
    rows = [
        *runs(tmp_path),
        hook_run(tmp_path / "r2", "remat", "jit_scanned", 939e6),
        hook_run(tmp_path / "sm", "small", "jit_step", 1e9, "(f32[4,256,256])->f32[]"),
    ]
    marks = [ln for ln in render_policy_comparison(policy_table(rows)).splitlines() if ln.startswith("≠")]
    assert marks == [
        "≠: recompute, remat run another program than none: jit_scanned, not jit_step: no percentage between them",
        "≠: small runs another program than none: jit_step with 1 parameter against 2: no percentage between them",
    ]


def test_the_same_name_with_other_shapes_is_another_program(tmp_path):
    tab = policy_table(runs(tmp_path, "jit_step", SIG.replace("64,256", "128,256")))
    assert tab["rows"][1]["recompute_overhead"] is None
    assert tab["rows"][1]["program_differs"] == (
        "another program: jit_step with parameter 1 f32[128,256], not f32[64,256] as the 'none' run"
    )
    assert (
        "≠: recompute runs another program than none: jit_step with parameter 1 f32[128,256], not f32[64,256]: "
        "no percentage between them"
    ) in render_policy_comparison(tab)
    same = policy_table(runs(tmp_path / "same", "jit_step", SIG))  # the same program: the percentage stands
    assert same["rows"][1]["program_differs"] is None
    assert round(same["rows"][1]["recompute_overhead"], 3) == round(939e6 / 23.81e9 - 1, 3)


def test_compare_prints_no_percentage_between_different_programs(tmp_path):
    base = hook_run(tmp_path / "b", "none", "jit_step", 23.81e9)
    cmp = compare([base], [hook_run(tmp_path / "h", "none", "jit_scanned", 939e6)], [])
    (pol,) = cmp["policies"]
    assert pol["programs_differ"] == "another program: jit_scanned, not jit_step as base"
    assert all(m["relative"] is None for m in pol["metrics"].values())
    assert pol["metrics"]["flops_per_step"]["delta"] is not None  # each side's numbers stand
    line = next(ln for ln in render_terminal(cmp).splitlines() if ln.startswith("step (none)"))
    assert line.endswith("the per-step numbers compare different programs, no percentage between them")
    kept = compare([base], [hook_run(tmp_path / "h2", "none", "jit_step", 939e6)], [])
    assert kept["policies"][0]["programs_differ"] is None
    assert kept["policies"][0]["metrics"]["flops_per_step"]["relative"] is not None


def test_the_plan_table_says_which_policy_compiled_another_program():
    def result(policy: str, module: str, flops: float, signature: str = SIG) -> dict:
        comp = {"module": module, "signature": signature, "cost": {"flops": flops}, "memory": None}
        return {"policy": policy, "batch": None, "status": "ok", "compiled": comp, "notes": [], "dir": "x"}

    doc = {
        "label": "compiled for H100, not measured",
        "target": {"memory_bytes": 80 * 2**30, "label": "H100"},
        "results": [result("none", "jit_step", 23.81e9), result("remat", "jit_scanned", 939e6),
                    result("offload", "jit_step", 25e9)],
    }  # fmt: skip
    tab = plan_table(doc)
    none, remat, offload = tab["rows"]
    assert none["recompute_overhead"] == 0
    assert remat["recompute_overhead"] is None and remat["program_differs"]
    assert round(offload["recompute_overhead"], 3) == round(25e9 / 23.81e9 - 1, 3)
    text = render_plan(tab)
    assert "other program" in text and "-96.1%" not in text
    assert "its step is another program: jit_scanned, not jit_step as the 'none' run" in text


def test_the_verdict_ranks_only_the_runs_of_one_program(tmp_path):
    """Runs of another model or size are named, not ranked: the verdict ranks the runs the table
    compares with percentages (the reference program's) and says which those are."""
    from profiler.report.verdict_text import render_verdict
    from profiler.runs.verdict import verdict

    found = verdict(runs(tmp_path))
    f = found["fastest"]
    assert f["policy"] == "none" and f["next"] is None and f["ranked"] == [found["trace"]]
    assert f["program"] == {
        "policy": "none",
        "name": "jit_step",
        "parameters": 2,
        "others": ["recompute"],
        "others_program": {"name": "jit_scanned", "parameters": 2},
    }
    text = " ".join(render_verdict(found, wide=True).split())
    assert text.startswith(
        "Verdict over 1 of 2 runs, one model (jit_step with 2 parameters): policy none is the fastest"
    )
    assert "not ranked, another model (jit_scanned with 2 parameters): recompute" in text
    three = [*runs(tmp_path / "three"), hook_run(tmp_path / "three" / "remat", "remat", "jit_step", 30e9)]
    f = verdict(three)["fastest"]
    assert f["program"]["others"] == ["recompute"] and f["next"]["policy"] in ("none", "remat")
    assert {f["policy"], f["next"]["policy"]} == {"none", "remat"} and f["next"]["other_program"] is False
    one = verdict(runs(tmp_path / "s", "jit_step"))  # one program: every run ranked, the line as it was
    assert one["fastest"]["program"] is None
    assert render_verdict(one).startswith("Verdict over 2 runs: policy ")


def test_the_dashboards_policy_table_marks_the_row_and_gives_no_percentage(tmp_path):
    from dashboards.trade import policy_datatable

    table, lines = policy_datatable(policy_table(runs(tmp_path)), ["none", "recompute"])
    none, other = table.data
    assert none["run"] == "none" and none["recompute"] == 0
    assert other["run"] == "recompute ≠" and other["recompute"] is None
    assert "another program: recompute runs another program than none: jit_scanned, not jit_step: " \
        "no percentage between them" in lines  # fmt: skip


def test_a_plan_of_another_model_than_the_runs_says_so():
    """The dashboard's plan view beside runs of another model (the quickstart's H100 plan, d_model 1024,
    under the H200 example's runs, d_model 4096): how the programs differ; nothing where a run ran one
    of the plan's programs, or where no program is known."""
    from profiler.xla.same_program import other_model

    plan = [{"step_name": "jit_step", "step_signature": "(f32[64]) -> f32[]"},
            {"step_name": "jit_step", "step_signature": "(f32[64], f32[8]) -> f32[]"}]  # fmt: skip
    runs = [{"step_name": "jit_step", "step_signature": "(f32[256]) -> f32[]"}, {"step_name": None}]
    assert other_model(plan, runs) == "jit_step with parameter 0 f32[64], not f32[256]"
    assert other_model(plan, [*runs, {"step_name": "jit_step", "step_signature": "(f32[64], f32[8]) -> f32[]"}]) is None
    other = [{"step_name": "jit_train_step", "step_signature": None}]
    assert other_model(plan, other) == "jit_step, not jit_train_step"
    assert other_model(plan, [{"step_name": None}]) is None and other_model([], runs) is None


def test_a_run_folder_written_before_signatures_gets_them_from_its_dump(tmp_path):
    """The H200 example's run folders were written before compiled.json kept ``signature``: the
    analysis reads it from the dump's header (``xla.compiled.upgraded``), so their program is known
    beside a plan of another size, and the folder is left as it was."""
    import hashlib
    import lzma
    import shutil

    import pytest

    from profiler.runs.result import build
    from profiler.stored import folder
    from profiler.trace import load_trace
    from profiler.xla.same_program import other_model
    from tests.helpers.paths import ROOT

    runs = sorted((ROOT / "sample_traces" / "h200-example").glob("*-none-*"))
    if not runs:
        pytest.skip("the H200 example's runs are not in sample_traces/")
    run = shutil.copytree(runs[0], tmp_path / runs[0].name)
    doc = json.loads((run / "compiled.json").read_text())
    assert all("signature" not in m for m in doc["modules"])  # as it was recorded
    before = hashlib.sha256((run / "compiled.json").read_bytes()).hexdigest()
    (dump,) = (run / "xla_dump").glob("*after_optimizations.txt.xz")
    want = entry_signature(lzma.decompress(dump.read_bytes()).decode())
    assert want is not None and want.startswith("(bf16[4096], bf16[4096], bf16[4096,16384]")
    trace = run / "trace.json.gz"
    summary = build(load_trace(trace), folder.manifest_of(trace)).brief()
    assert summary.compiled["signature"] == want
    assert hashlib.sha256((run / "compiled.json").read_bytes()).hexdigest() == before
    # the quickstart's plan compiles another size of the same jit_step: another model, said
    row = {"step_name": summary.compiled["step_name"], "step_signature": want}
    plan = [{"step_name": "jit_step", "step_signature": "(bf16[1024], bf16[1024]) -> bf16[]"}]
    assert other_model(plan, [row]) == "jit_step with 2 parameters against 66"
    # a plan of the same parameter count: the first shape that differs, and how many do, not both lists
    wide = "(" + ", ".join(["bf16[1024]"] * 66) + ")->f32[]"
    said = other_model([{"step_name": "jit_step", "step_signature": wide}], [row])
    assert said == "jit_step with parameter 0 bf16[1024], not bf16[4096] (66 of 66 parameters differ)"
    # a dump that is gone leaves the module as it was: nothing known, nothing said
    shutil.rmtree(run / "xla_dump")
    gone = build(load_trace(trace), folder.manifest_of(trace)).brief()
    assert gone.compiled["signature"] is None


def test_the_printers_index_marks_do_not_make_another_program():
    marked = "(f32[4], f32[8], /*index=2*/f32[16])->f32[]"
    assert same_program(
        {"step_name": "s", "step_signature": marked},
        {"step_name": "s", "step_signature": "(f32[4], f32[8], f32[16]) -> f32[]"},
    )
    assert parameter_count(marked) == 3


def test_the_plan_view_says_another_model_beside_the_h200_runs():
    """The quickstart's dashboard: its H100 plan (d_model 1024) beside the H200 example's runs (d_model
    4096), whose run folders carry no signature of their own (read from their dumps)."""
    import pytest

    from dashboards.data import RunStore
    from dashboards.plan_view import model_note
    from tests.helpers.paths import ROOT

    h200 = ROOT / "sample_traces" / "h200-example"
    if not h200.is_dir():
        pytest.skip("the H200 example's runs are not in sample_traces/")
    store = RunStore([h200])
    for rid in store.refs:
        store.get(rid)
    plan = [{"step_name": "jit_step", "step_signature": "(" + ", ".join(["bf16[1024]"] * 66) + ")->f32[]"}]
    assert model_note(store, plan) == (
        "Another model than the runs loaded beside it: jit_step with parameter 0 bf16[1024], not bf16[4096] "
        "(66 of 66 parameters differ). The plan's pick is for the model it compiled, not theirs."
    )
    assert model_note(store, [{"step_name": "jit_step", "step_signature": None}]) is None  # nothing known
