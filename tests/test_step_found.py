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
from tests.conftest import ROOT, run_cli
from tests.test_startup_hook import child, facts, only_run

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
