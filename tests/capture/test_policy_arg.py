"""--policy-arg: a flag (``--policy NAME``) or a template (``remat_policy={policy}``), and the default
nsys trace set (what the analysis reads, the rest on request)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.capture import nsys_command, policy_arg
from profiler.capture.plan import PlanRequest
from profiler.capture.plan import program as plan_program
from profiler.capture.run import RunRequest, program
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

KV = ROOT / "tests" / "scripts" / "kv_overrides.py"
KNOWN = ROOT / "tests" / "scripts" / "known_args.py"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (None, []),
        ("--policy", ["--policy", "qkv_proj_offloaded"]),  # today's form: two words
        ("remat_policy={policy}", ["remat_policy=qkv_proj_offloaded"]),  # MaxText's override
        ("--remat={policy}", ["--remat=qkv_proj_offloaded"]),
        ("--remat {policy}", ["--remat", "qkv_proj_offloaded"]),
        ("remat_policy={policy} tag=run-{policy}", ["remat_policy=qkv_proj_offloaded", "tag=run-qkv_proj_offloaded"]),
    ],
)
def test_policy_words(spec, words):
    assert policy_arg.words(spec, "qkv_proj_offloaded") == words


def test_run_and_plan_build_the_same_words(tmp_path):
    script = tmp_path / "train.py"
    run = program(RunRequest(script, ["steps=2"], policy_arg="remat_policy={policy}", python="py"), "minimal")
    assert run == ["py", str(script), "steps=2", "remat_policy=minimal"]
    plan = plan_program(
        PlanRequest(script, ["steps=2"], policy_arg="remat_policy={policy}", batch_arg=None), "py", "full", None
    )
    assert plan == ["py", str(script), "steps=2", "remat_policy=full"]


@pytest.mark.parametrize("spec", ["remat_policy={polcy}", "--remat={}", "   ", "'unclosed"])
def test_bad_policy_arg_is_one_line_before_anything_runs(tmp_path, spec):
    with pytest.raises(ValueError):
        policy_arg.check(spec)
    proc = run_cli("--runs-dir", str(tmp_path / "runs"), f"--policy-arg={spec}", str(KV))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("profile-step: error: --policy-arg:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_one_word_as_written_keeps_its_quotes():
    """A JSON value: the shell-like split of --policy-arg drops its quotes; --policy-word keeps them."""
    spec = '--config_overlay={"remat_policy":"{policy}"}'
    assert policy_arg.words(spec, "minimal") == ["--config_overlay={remat_policy:minimal}"]  # the old loss
    assert policy_arg.words(spec, "minimal", one_word=True) == ['--config_overlay={"remat_policy":"minimal"}']
    assert policy_arg.words("a b={policy}", "x", one_word=True) == ["a b=x"]  # one word, spaces and all
    with pytest.raises(ValueError, match=r"has no \{policy\}"):
        policy_arg.check("--config_overlay={}", one_word=True)
    req = RunRequest(Path("t.py"), [], policy_arg=spec, policy_word=True, python="py")
    assert program(req, "full")[-1] == '--config_overlay={"remat_policy":"full"}'


@pytest.mark.parametrize("flag", ["--policy-arg", "--policy-word"])
def test_a_value_starting_with_a_dash_says_to_attach_it(tmp_path, flag):
    """argparse reads '--remat={policy}' after a space as an option and says only "expected one argument"."""
    proc = run_cli("run", "--runs-dir", str(tmp_path / "runs"), flag, "--remat={policy}", str(KV))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"profile-step: error: {flag}: '--remat={{policy}}' starts with '-', so it is read as an option of "
        f"profile-step, not as the value of {flag}: attach it with '=': '{flag}=--remat={{policy}}'\n"
    )
    # the same words given to the script (after its path) are the script's, not profile-step's
    assert "starts with '-'" not in run_cli("run", "--nsys", "/absent", str(KV), flag, "--x").stderr


def test_default_trace_set_is_what_the_analysis_reads(tmp_path):
    cmd = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"])
    assert "--trace=cuda,nvtx" in cmd and not any("osrt" in c for c in cmd)
    assert "--cuda-memory-usage=true" in cmd  # read: the peak device memory
    extra = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"], trace_extra=["osrt", "cublas,cudnn,nvtx"])
    assert "--trace=cuda,nvtx,osrt,cublas,cudnn" in extra
    # the user's own --trace replaces the whole set
    own = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"], ["--trace=cuda"], trace_extra=["osrt"])
    assert "--trace=cuda" in own and not any("osrt" in c for c in own)
    with pytest.raises(ValueError):
        nsys_command.trace_set(["none"])


# --- with the real nsys -----------------------------------------------------------------------


def _runs(folder: Path) -> dict[str, Path]:
    found = {}
    for d in sorted(folder.iterdir()):
        found[json.loads((d / "manifest.json").read_text())["policy"]] = d
    return found


@pytest.mark.nsys
def test_maxtext_style_overrides_reach_the_script(nsys, tmp_path):
    """A script that takes only positional key=value overrides gets its policy from the template."""
    runs = tmp_path / "runs"
    proc = run_cli(
        "--policies", "full,qkv_proj_offloaded", "--policy-arg", "remat_policy={policy}",
        "--runs-dir", str(runs), "--nsys", str(nsys), "--no-summary", str(KV), "steps=2", "layers=1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = _runs(runs)
    for policy, run in found.items():
        man = json.loads((run / "manifest.json").read_text())
        assert man["program"][-3:] == ["steps=2", "layers=1", f"remat_policy={policy}"]
        assert f"kv_overrides.py: remat_policy={policy}\n" in (run / "output.log").read_text()
        assert (run / "trace.sqlite").is_file()
    assert set(found) == {"full", "qkv_proj_offloaded"}


@pytest.mark.nsys
def test_two_words_break_a_key_value_script(nsys, tmp_path):
    """Today's form gives `remat_policy minimal`, which such a script refuses: the reason for templates."""
    proc = run_cli(
        "--policy", "minimal", "--policy-arg", "remat_policy", "--runs-dir", str(tmp_path),
        "--nsys", str(nsys), "--no-summary", str(KV),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "CONFIG ERROR: expected key=value, got 'remat_policy'" in proc.stdout


@pytest.mark.nsys
@pytest.mark.parametrize(
    ("spec", "seen"),
    [
        ("--remat={policy}", "remat=dots ignored=[]"),
        ("--remat", "remat=dots ignored=[]"),
        ("--policy", "remat=none ignored=['--policy', 'dots']"),  # swallowed: the script never sees it
    ],
)
def test_parse_known_args_script_gets_its_flag(nsys, tmp_path, spec, seen):
    """A script that swallows unknown flags (parse_known_args) gets the policy only in its own flag's form."""
    proc = run_cli(
        "--policy", "dots", f"--policy-arg={spec}", "--runs-dir", str(tmp_path), "--nsys", str(nsys),
        "--no-summary", str(KNOWN), "--steps", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"known_args.py: {seen}\n" in proc.stdout
