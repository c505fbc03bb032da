"""The step found on real scripts (issue 44, item 3), in ``run`` and ``analyze``: the function that
runs as the training step, chosen by its work, its programs under one jit name counted together.

``tests/scripts/trainer_schedule.py`` compiles its step as two programs (a logging variant every
2nd step: 5 and 4 executions) and jits its learning-rate schedule once per step (9 executions, a
few FLOPs).  Counted per program the schedule ran most often; the step is ``jit_train_step``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from profiler.capture import step_module
from profiler.conventions import XLA_DUMP_DIR
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.startup import child, facts, only_run

TRAINER = ROOT / "tests" / "scripts" / "trainer_schedule.py"


def described() -> dict:
    out = subprocess.run([sys.executable, str(TRAINER), "--describe"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def programs(compiled: dict, name: str) -> list[int]:
    return sorted(p["executions"] for p in compiled["programs"] if p["name"] == name)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The trainer run with the start-up hook and an XLA dump (no nsys), then recorded as ``run`` does."""
    run_dir = tmp_path_factory.mktemp("trainer") / "run"
    proc = child(TRAINER, run_dir)
    assert proc.returncode == 0, proc.stderr
    short = step_module.record(run_dir, run_dir / XLA_DUMP_DIR, True, facts(run_dir))
    return short, json.loads((run_dir / "compiled.json").read_text())


def test_the_step_as_two_programs_beats_a_schedule_jitted_once_per_step(recorded):
    short, compiled = recorded
    want = described()
    assert programs(compiled, "jit_train_step") == want["executions"]["jit_train_step"]  # [4, 5]
    assert programs(compiled, "jit_schedule") == [want["executions"]["jit_schedule"]]  # 9: more than either
    assert compiled["step_program"]["name"] == "jit_train_step"
    assert compiled["step_program"]["executions"] == 5  # of its two programs, the one that ran most often
    assert short["step_module"].endswith(".jit_train_step")
    assert "(9 times with its other program), the most work (" in short["chosen_by"]
    assert "jit_schedule ran 9 times" in short["chosen_by"]
    flops = {(m["name"], m["id"]): (m["cost"] or {}).get("flops") for m in compiled["modules"]}
    step = max(f for (n, _), f in flops.items() if n == "jit_train_step")
    helper = next(f for (n, _), f in flops.items() if n == "jit_schedule")
    assert step > 1000 * helper  # what the choice rests on: XLA's own FLOPs of each program


@pytest.mark.nsys
def test_run_and_analyze_take_the_same_step(nsys, tmp_path):
    """Under the real nsys: the run line and analyze (choosing again from the trace's executions,
    with the run's compiled FLOPs) name the same program, and count its 5 executions as steps."""
    runs = tmp_path / "runs"
    proc = run_cli("run", "--runs-dir", str(runs), "--nsys", str(nsys), "--policies", "nothing", str(TRAINER))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = only_run(runs)
    compiled = json.loads((folder / "compiled.json").read_text())
    assert compiled["step_program"]["name"] == "jit_train_step"
    doc = json.loads(run_cli("analyze", "--json", str(folder)).stdout)
    (row,) = doc["policies"]["rows"]
    assert row["step_module"].endswith(".jit_train_step")
    assert row["step_chosen_by"] == compiled["chosen_by"]
    assert row["flops_per_step"] > 1e6


# --- tune: the step caught in the script's process (profiler.capture.step_catch) -------------------

SEVERAL = ROOT / "tests" / "scripts" / "several_steps.py"


def def_lines(name: str) -> list[int]:
    """The lines of ``def NAME(`` in several_steps.py, in order."""
    lines = SEVERAL.read_text().splitlines()
    return [i + 1 for i, ln in enumerate(lines) if ln.strip().startswith(f"def {name}(")]


def session(aot_python: str, tmp_path, script=SEVERAL, *args: str, step: str | None = None):
    from profiler.capture.plan import find_python
    from profiler.capture.tune_session import CompileSession, script_command
    from profiler.xla import targets

    _, spec, _ = targets.resolve("h100")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "target.txtpb").write_text(spec)
    cmd = script_command(find_python(aot_python), script, list(args), None, None, None, "")
    return CompileSession(cmd, tmp_path / "target.txtpb", tmp_path, step=step)


def test_the_step_selector_is_parsed_and_matched():
    from profiler.capture.step_catch import Seen, Selector, matches, parse_step

    assert parse_step("scanned") == Selector(name="scanned")
    assert parse_step("scanned@81") == Selector(name="scanned", line=81)
    assert parse_step("tests/scripts/x.py:12") == Selector(file="tests/scripts/x.py", line=12)
    for bad in ("", "a b", "@3", "x.py:"):
        with pytest.raises(ValueError, match="expected NAME, NAME@LINE or FILE:LINE"):
            parse_step(bad)
    first = Seen("scanned", "/w/tests/scripts/x.py", 10, 12)
    second = Seen("scanned", "/w/tests/scripts/x.py", 20, 23)
    assert matches(parse_step("scanned"), first) and matches(parse_step("jit_scanned"), second)
    assert matches(parse_step("scanned@21"), second) and not matches(parse_step("scanned@21"), first)
    assert matches(parse_step("x.py:23"), second) and matches(parse_step("scripts/x.py:10"), first)
    assert not matches(parse_step("y.py:10"), first) and not matches(parse_step("scanned@24"), second)


def test_the_work_of_a_traced_program():
    """2 x 4 x 16 x 8 FLOPs for the matmul, one per element for the tanh, a scan's body times its
    length, and the jax.checkpoint inside it counted."""
    import jax
    import jax.numpy as jnp

    from profiler.capture.step_catch import program_work

    def f(a, b):
        return jnp.tanh(a @ b)

    assert program_work(jax.make_jaxpr(f)(jnp.ones((4, 8)), jnp.ones((8, 16)))) == (0, 2 * 4 * 16 * 8 + 4 * 16)

    def scanned(x, ws):
        return jax.lax.scan(lambda c, w: (jax.checkpoint(f)(c, w), None), x, ws)[0]

    cps, flops = program_work(jax.make_jaxpr(scanned)(jnp.ones((4, 8)), jnp.ones((3, 8, 8))))
    assert cps == 1 and flops >= 3 * (2 * 4 * 8 * 8 + 4 * 8)


def test_tune_takes_the_step_with_a_checkpoint_and_compiles_its_device_put(aot_python, tmp_path):
    """Traced-only helpers (make_jaxpr, lower, eval_shape, a vjp lambda) and a function without a
    jax.checkpoint run 3 times come first; the step is hybrid_step, and it compiles for the H100 with
    its own jax.device_put to pinned host memory (a sharding of its arguments' CPU device)."""
    with session(aot_python, tmp_path) as s:
        ready = s.start()
        assert ready["step"] == "hybrid_step"
        assert ready["chosen_by"].startswith("the first jitted function with a jax.checkpoint the script called")
        assert "predict 3x" in ready["chosen_by"] and "loss" not in ready["chosen_by"]
        got = s.request({"op": "compile", "policy": {"script": True}, "out": str(tmp_path / "c")})
        assert got["ok"], got.get("error")
        assert got["module"] == "jit_hybrid_step"
        assert "S(5)" in (tmp_path / "c" / "step.hlo.txt").read_text()  # host memory, as the step asked


@pytest.mark.parametrize("which", ["name@line", "file:line"])
def test_the_later_of_two_functions_of_one_name(aot_python, tmp_path, which):
    second = def_lines("scanned")[1]
    step = f"scanned@{second}" if which == "name@line" else f"tests/scripts/several_steps.py:{second + 1}"
    with session(aot_python, tmp_path, step=step) as s:
        assert s.start()["step"] == "scanned"
        assert s.request({"op": "names"})["checkpoints"] > 0  # the second scanned: its layers remat'd
    with session(aot_python, tmp_path / "first", step="scanned") as s:  # by name: the first one run
        assert s.start()["chosen_by"] == "named by --step scanned"
        assert s.request({"op": "names"})["checkpoints"] == 0


def test_no_step_names_the_candidates_and_the_flag(aot_python, tmp_path):
    from profiler.errors import ProfilerError

    first, second = def_lines("scanned")
    with (
        session(aot_python, tmp_path, SEVERAL, "--steps", "0", "--predict", "1") as s,
        pytest.raises(ProfilerError) as err,
    ):
        s.start()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("the script ended with no training step to compile")
    assert f"scanned (several_steps.py:{second}, ran once, 1 jax.checkpoint, " in msg
    assert f"scanned (several_steps.py:{first}, ran once, no jax.checkpoint, " in msg
    assert "loss (several_steps.py:" in msg and "never ran, lowered" in msg  # traced only: seen, never run
    assert "--step NAME, --step NAME@LINE or --step FILE:LINE selects a jitted function" in msg
    nomatch = "no jitted function of the script matched --step nomatch; "
    with session(aot_python, tmp_path / "nomatch", step="nomatch") as s, pytest.raises(ProfilerError, match=nomatch):
        s.start()


def test_a_script_without_a_checkpointed_step_ends_with_its_busiest_repeated_function(aot_python, tmp_path):
    """No hybrid_step runs: of the functions run twice with the same shapes, predict (3 times), taken
    from its second call's arguments when the script ends."""
    with session(aot_python, tmp_path, SEVERAL, "--steps", "0") as s:
        ready = s.start()
        assert ready["step"] == "predict" and ready["chosen_by"].startswith("the script ended with no function")
        assert s.request({"op": "names"})["checkpoints"] == 0


def test_tune_takes_the_trainers_step_not_its_schedule(aot_python, tmp_path):
    """The schedule runs first and twice before the step's second call; it has no jax.checkpoint."""
    with session(aot_python, tmp_path, TRAINER) as s:
        ready = s.start()
        assert ready["step"] == "train_step" and "schedule 2x" in ready["chosen_by"]


def test_plan_compiles_a_handed_over_step_with_its_device_put(aot_python, tmp_path):
    from profiler.capture.plan import PlanRequest, run_plan

    doc = run_plan(
        PlanRequest(SEVERAL, ["--hand-over"], python=aot_python, out_dir=tmp_path / "p", batch_arg=None),
        echo=lambda s: None,
    )
    (res,) = doc["results"]
    assert res["status"] == "ok", res["notes"]
    assert res["compiled"]["module"] == "jit_hybrid_step"


def test_plan_takes_the_step_of_an_unedited_script_as_tune_does(aot_python, tmp_path):
    """The trainer hands no step over: plan takes it from its jit calls (the step, never its schedule),
    and --step NAME@LINE the later of two same-named functions."""
    doc = json.loads(
        run_cli(
            "plan",
            "--python",
            aot_python,
            "--policies",
            "nothing",
            "--batch-arg",
            "",
            "--json",
            "--out",
            str(tmp_path / "p"),
            str(TRAINER),
            timeout=600,
        ).stdout
    )
    (row,) = doc["plan"]["rows"]
    assert row["status"] == "ok" and row["module"] == "jit_train_step"
    assert any(
        n.startswith("the script handed no step to annotate.compiled_step(): the step is train_step")
        for n in row["notes"]
    )
    assert row["flops_per_step"] and row["step_signature"]
    second = def_lines("scanned")[1]
    proc = run_cli("plan", "--python", aot_python, "--policies", "default", "--batch-arg", "", "--json",
                   "--step", f"scanned@{second}", "--out", str(tmp_path / "q"), str(SEVERAL), timeout=600)  # fmt: skip
    (row,) = json.loads(proc.stdout)["plan"]["rows"]
    assert row["module"] == "jit_scanned" and row["planned_d2h_bytes_per_step"]  # the second: it offloads
    bad = run_cli("plan", "--python", aot_python, "--step", "a b", str(SEVERAL))
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("profile-step: error: --step ")
