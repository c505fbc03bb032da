"""The start-up hook in the profiled script's interpreter (``profiler.capture.startup``).

The scripts run with the environment ``profile-step run`` gives them (``run.run_env``), first
without nsys (what the hook writes), then under the real nsys (what the analysis makes of it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from profiler.capture import run, startup, xla_flags
from profiler.conventions import HOOK_ENV, RUNTIME_FACTS, STARTUP_FACTS, XLA_DUMP_DIR
from profiler.xla import dump
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.startup import (
    child,
    facts,
    fake_dump,
    only_run,
)

INIT_HEAVY = ROOT / "tests" / "scripts" / "init_heavy.py"
OWN_FLAGS = ROOT / "tests" / "scripts" / "own_xla_flags.py"


def counts(doc: dict) -> dict[str, int]:
    """The hook's executions per module name (its programs summed)."""
    out: dict[str, int] = {}
    for r in doc["executions"]:
        out[r["module"]] = out.get(r["module"], 0) + r["executions"]
    return out


# --- pure parts --------------------------------------------------------------------------------


def test_merged_flags_add_what_the_script_dropped_and_keep_its_own():
    presets = {"--xla_dump_to": "/r/xla_dump", "--xla_gpu_enable_command_buffer": "", "--xla_lhs": "true"}
    text, added = startup.merged_flags(
        "--xla_cpu_enable_fast_math=false --xla_gpu_enable_command_buffer=FUSION --xla_lhs=false", presets, []
    )
    assert xla_flags.parse(text) == {
        "--xla_cpu_enable_fast_math": "false",
        "--xla_gpu_enable_command_buffer": "FUSION",  # the script's own choice stands
        "--xla_lhs": "false",
        "--xla_dump_to": "/r/xla_dump",
    }
    assert added == ["--xla_dump_to"]
    text, added = startup.merged_flags("--xla_lhs=false", presets, ["--xla_lhs"])  # asked on the command line
    assert xla_flags.parse(text)["--xla_lhs"] == "true" and "--xla_lhs" in added


# --- the hook without nsys ---------------------------------------------------------------------


def test_executions_per_module_versions_and_devices(tmp_path):
    out = child(INIT_HEAVY, tmp_path / "run")
    assert out.returncode == 0, out.stderr
    doc = facts(tmp_path / "run")
    assert counts(doc) == {"jit_update": 5, "jit_init": 1}  # not JAX's own (jax.random, jnp.sum)
    # each program's id is the id of its files in XLA's dump (what XLA's own ranges carry as program_id)
    dumped = {m.id: m.name for m in dump.scan(tmp_path / "run" / XLA_DUMP_DIR)}
    assert len(doc["executions"]) == 2 and all(dumped[r["program_id"]] == r["module"] for r in doc["executions"])
    assert doc["jax"] and doc["jaxlib"] and doc["python"]
    assert doc["devices"] and doc["devices"][0]["platform"] == "cpu"
    assert doc["notes"] == []
    runtime, _ = run.child_facts(tmp_path / "run")  # what the manifest records for an unannotated run
    assert runtime["jax"] == doc["jax"] and runtime["devices"] == doc["devices"]


@pytest.mark.parametrize("where", ["before-import", "after-import"])
def test_a_script_that_sets_xla_flags_keeps_the_dump(tmp_path, where):
    args = ["--after-import"] if where == "after-import" else []
    out = child(OWN_FLAGS, tmp_path / "run", *args)
    assert out.returncode == 0, out.stderr
    flags = facts(tmp_path / "run")["xla_flags"]
    assert flags["at_backend_start"] == "--xla_cpu_enable_fast_math=false"  # the script's, as it set them
    assert {"--xla_dump_to", "--xla_dump_hlo_as_text", "--xla_gpu_enable_command_buffer"} <= set(flags["put_back"])
    in_force = xla_flags.parse(flags["in_force"])
    assert in_force["--xla_cpu_enable_fast_math"] == "false"
    assert in_force["--xla_dump_to"] == str(tmp_path / "run" / XLA_DUMP_DIR)
    assert "jit_step" in {m.name for m in dump.scan(tmp_path / "run" / XLA_DUMP_DIR)}  # XLA did dump


def test_without_the_hook_the_dump_is_lost_and_said_so(tmp_path):
    out = child(OWN_FLAGS, tmp_path / "run", **{HOOK_ENV: "0"})
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "run" / STARTUP_FACTS).exists()
    assert not (tmp_path / "run" / XLA_DUMP_DIR).exists()  # the script's XLA_FLAGS won


def test_other_sitecustomize_runs_first_and_a_broken_one_breaks_nothing(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['MARK'], 'w').write('ran')\n", encoding="utf-8"
    )
    env = {"PYTHONPATH": f"{run.HOOK_DIR}{os.pathsep}{ROOT}{os.pathsep}{theirs}", "MARK": str(tmp_path / "mark")}
    # a NumPy input: the script's jit is the first program the process compiles, program 0
    code = "import numpy as np, jax; print(float(jax.jit(lambda x: (x + 1).sum())(np.ones(2))))"
    out = child(None, tmp_path / "run", code=code, **env)
    assert out.returncode == 0 and out.stdout.strip() == "4.0", out.stderr
    assert (tmp_path / "mark").read_text() == "ran"
    assert facts(tmp_path / "run")["executions"] == [{"module": "jit__lambda", "program_id": 0, "executions": 1}]
    assert "module_0000.jit__lambda" in {m.label for m in dump.scan(tmp_path / "run" / XLA_DUMP_DIR)}
    (theirs / "sitecustomize.py").write_text("raise ValueError('broken on purpose')\n", encoding="utf-8")
    out = child(None, tmp_path / "run2", code=code, **env)
    assert out.returncode == 0 and out.stdout.strip() == "4.0", out.stderr
    assert "Error in sitecustomize" in out.stderr and "broken on purpose" in out.stderr
    assert counts(facts(tmp_path / "run2")) == {"jit__lambda": 1}


def test_unnamed_policy_is_the_scripts_own_default(tmp_path):
    code = "from profiler import annotate; print(annotate.policy_name('none'))"
    out = child(None, tmp_path / "run", code=code, policy=run.UNNAMED_POLICY)
    assert out.returncode == 0 and out.stdout.strip() == "none", out.stderr
    assert json.loads((tmp_path / "run" / RUNTIME_FACTS).read_text())["policy"] == "none"
    out = child(None, tmp_path / "run2", code=code, policy="offload")
    assert out.stdout.strip() == "offload"


# --- under the real nsys -----------------------------------------------------------------------


@pytest.mark.nsys
def test_init_larger_than_its_step_under_nsys(nsys, tmp_path):
    """Init (284 MFLOP) runs once, the step (2 MFLOP) 5 times: the step is the step, FLOPs and all."""
    want = json.loads(
        subprocess.run(
            [sys.executable, str(INIT_HEAVY), "--describe"], capture_output=True, text=True, check=True, timeout=300
        ).stdout
    )
    assert want["jit_init"] > 10 * want["jit_update"]  # the script is what the test needs
    runs = tmp_path / "runs"
    proc = run_cli("run", "--runs-dir", str(runs), "--nsys", str(nsys), str(INIT_HEAVY))
    assert proc.returncode == 0, proc.stderr
    folder = only_run(runs)
    man = json.loads((folder / "manifest.json").read_text())
    assert man["compiled"]["step_module"].endswith(".jit_update")
    assert re.match(r"jit_update \(program \d+\): ran 5 times, ", man["compiled"]["chosen_by"])
    assert man["versions"]["jax"] and man["versions"]["jaxlib"] and man["versions"]["python"]
    assert man["devices"][0]["platform"] == "cpu"
    pid = man["compiled"]["step_program"]["program_id"]
    assert man["compiled"]["step_module"] == f"module_{pid:04d}.jit_update"  # the dump's file of that program
    said = f"5 steps from the executions of jit_update (program {pid}), recorded by profile-step's start-up hook"
    assert said in proc.stdout
    assert f"   step: jit_update (program {pid}): ran 5 times" in proc.stdout
    doc = json.loads(run_cli("analyze", "--json", str(folder)).stdout)
    (row,) = doc["policies"]["rows"]
    assert row["step_module"].endswith(".jit_update")
    assert row["flops_per_step"] == want["jit_update"]
    assert row["step_chosen_by"].startswith(f"jit_update (program {pid}): ran 5 times")
    assert "jit_init ran once" in row["step_chosen_by"]
    text = run_cli("analyze", str(folder)).stdout
    assert f"step: jit_update (program {pid}): ran 5 times" in text


@pytest.mark.nsys
def test_own_xla_flags_under_nsys(nsys, tmp_path):
    runs = tmp_path / "runs"
    proc = run_cli("run", "--policy", "p", "--runs-dir", str(runs), "--nsys", str(nsys), str(OWN_FLAGS))
    assert proc.returncode == 0, proc.stderr
    folder = only_run(runs)
    man = json.loads((folder / "manifest.json").read_text())
    flags = man["startup_hook"]["xla_flags"]
    assert "--xla_dump_to" in flags["put_back"]
    assert xla_flags.parse(flags["in_force"])["--xla_gpu_enable_command_buffer"] == ""
    assert man["compiled"]["step_module"].endswith(".jit_step")
    assert "compiled step: module_" in proc.stdout and "holds no module" not in proc.stdout
    assert "policy p: the script set XLA_FLAGS itself; the start-up hook put --xla_gpu_enable_command_buffer" in (
        proc.stderr
    )


# --- the step chosen at capture time from the hook's executions ---------------------------------


def test_capture_step_is_the_module_that_ran_most(tmp_path):
    from profiler.capture import step_module

    sizes = {"jit_init": 50_000, "jit_a": 40_000, "jit_b": 30_000, "jit_c": 20_000, "jit_update": 100}
    fake_dump(tmp_path / "xla_dump", sizes)
    runs = [("jit_update", 4, 5), ("jit_init", 0, 1), ("jit__reduce_sum", 9, 1)]  # jit__reduce_sum: not dumped
    hook = {"jax": "0.10.2", "executions": [{"module": n, "program_id": p, "executions": c} for n, p, c in runs]}
    short = step_module.record(tmp_path, tmp_path / "xla_dump", True, hook)
    assert short["step_module"] == "module_0004.jit_update"
    assert short["chosen_by"] == (
        "jit_update (program 4): ran 5 times, the only program that ran more than once "
        "(jit__reduce_sum ran once, jit_init ran once)"
    )
    # an older hook's counts (by name): the same program, by name
    old = {"jax": "0.10.2", "executions": {"jit_update": 5, "jit_init": 1}}
    fake_dump(tmp_path / "r0" / "xla_dump", sizes)
    assert step_module.record(tmp_path / "r0", tmp_path / "r0" / "xla_dump", True, old)["step_module"] == (
        "module_0004.jit_update"
    )
    kept = {m.name for m in dump.scan(tmp_path / "xla_dump")}
    assert "jit_update" in kept and "jit_init" in kept  # the step survives the pruning, small as it is
    fake_dump(tmp_path / "r2" / "xla_dump", sizes)
    short = step_module.record(tmp_path / "r2", tmp_path / "r2" / "xla_dump", True, None)
    assert short["step_module"] == "module_0000.jit_init"  # no hook: the largest
    assert short["chosen_by"] == (
        "jit_init (program 0): the largest program in the XLA dump (no execution of any program was recorded)"
    )


def test_no_dump_says_why_in_one_line(tmp_path):
    from profiler.capture import step_module

    def why(hook):
        (note,) = [n for n in step_module.record(tmp_path, tmp_path / "xla_dump", True, hook)["notes"] if "dump" in n]
        assert "\n" not in note and ".partial" not in note
        return note

    assert "the script never imported JAX" in why({"python": "3.11"})
    lost = why({"jax": "0.4.1", "xla_flags_at_exit": "--xla_cpu_enable_fast_math=false"})
    assert "the script replaced XLA_FLAGS ('--xla_cpu_enable_fast_math=false')" in lost
    assert "could not put it back" in lost
    assert "holds no module: the script compiled nothing with XLA, or replaced XLA_FLAGS" in why(None)


def test_a_script_python_without_nvtx_is_said_with_the_install_command():
    from profiler.capture.run import nvtx_line

    hook = {
        "notes": ["no nvtx binding: executions are counted, not recorded in the trace"],
        "executable": "/opt/maxtext venv/bin/python",
        "executions": {"jit__lambda": 1, "jit_train_step": 5},
    }
    line = nvtx_line("minimal", hook)
    assert "jit_train_step 5x, jit__lambda 1x" in line
    assert "'/opt/maxtext venv/bin/python' -m pip install 'nvtx>=0.2.8,<0.2.12'" in line
    assert nvtx_line("minimal", {"notes": [], "executions": {"jit_step": 3}}) is None
    # a GPU: the hook counts nothing and writes nothing there, XLA's own ranges give the steps
    named = [{"module": "jit_step", "program_id": 4, "platform": "cuda"}]
    gpu = {**hook, "executions": [], "programs_uncounted": named}
    assert nvtx_line("minimal", gpu) is None


def test_the_policy_table_says_why_a_run_without_nvtx_has_no_steps():
    """analyze of such runs, later: the table's note says why steps is 0 and how to get them."""
    from profiler.analysis.policies import no_step_ranges
    from profiler.stored.summary import RunSummary

    manifest = {
        "program": ["/opt/maxtext venv/bin/python", "train.py", "steps=5"],
        "startup_hook": {"notes": ["no nvtx binding: executions are counted, not recorded in the trace"]},
    }
    run = RunSummary.from_json({"trace": "/r/trace.sqlite", "policy": "minimal", "steps": [], "manifest": manifest})
    (note,) = no_step_ranges(run)
    assert note.startswith("no steps: the script's Python has no nvtx package")
    assert note.endswith("install it: '/opt/maxtext venv/bin/python' -m pip install 'nvtx>=0.2.8,<0.2.12'")
    with_nvtx = {**manifest, "startup_hook": {"notes": []}}
    assert no_step_ranges(RunSummary.from_json({"trace": "/r/t.sqlite", "steps": [], "manifest": with_nvtx})) == []
