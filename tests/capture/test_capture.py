"""profile-step run: the real nsys on the CPU, real exports, real run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.analysis.steps import annotated_ranges, step_summary
from profiler.capture import nsys_command, xla_flags
from profiler.capture.run import cuda_driver_problem
from profiler.runs.result import run_summary
from profiler.trace import open_trace
from profiler.trace.nsys import nsys_version
from tests.helpers.cli import run_cli, runs_in
from tests.helpers.paths import ROOT

STEPS = ROOT / "tests" / "scripts" / "steps.py"
PLAIN = ROOT / "tests" / "scripts" / "plain_jax.py"
PROFILER_API = ROOT / "tests" / "scripts" / "cuda_profiler_api.py"
TRAIN = ROOT / "examples" / "train.py"


def steps_command(nsys: Path, runs: Path, *options: str) -> list[str]:
    """``profile-step [OPTIONS] --runs-dir RUNS --nsys NSYS steps.py``, as a command line; the script's
    own arguments go after it."""
    return [sys.executable, "-m", "profiler.cli", *options, "--runs-dir", str(runs), "--nsys", str(nsys), str(STEPS)]


# --- pure parts -------------------------------------------------------------------------------


def test_xla_flags_merge_keeps_users_flags():
    plan = xla_flags.plan(
        "--xla_dump_to=/tmp/d --xla_gpu_enable_latency_hiding_scheduler=false",
        lhs=True,
        pipelined_offload=True,
        async_limit=8,
    )
    flags = xla_flags.parse(plan.after)
    assert flags["--xla_dump_to"] == "/tmp/d"
    assert flags["--xla_gpu_enable_latency_hiding_scheduler"] == "true"  # asked for explicitly: wins
    assert flags["--xla_gpu_enable_pipelined_host_offloading"] == "true"
    assert flags["--xla_gpu_experimental_parallel_async_compute_limit"] == "8"
    assert flags["--xla_gpu_enable_command_buffer"] == ""
    assert plan.kept_from_user == {"--xla_dump_to": "/tmp/d"}


def test_xla_flags_users_command_buffer_setting_wins():
    plan = xla_flags.plan("--xla_gpu_enable_command_buffer=FUSION")
    assert xla_flags.parse(plan.after) == {"--xla_gpu_enable_command_buffer": "FUSION"}
    assert plan.set_by_preset == {}


def test_nsys_command_user_options_override_defaults(tmp_path):
    cmd = nsys_command.build(
        Path("/x/nsys"),
        tmp_path / "trace",
        ["python", "t.py"],
        ["--trace=cuda,nvtx", "-s cpu", "--gpu-metrics-device=0"],
    )
    assert cmd[:2] == ["/x/nsys", "profile"]
    assert "--trace=cuda,nvtx" in cmd and "--trace=cuda,nvtx,osrt,cublas,cudnn" not in cmd
    assert "--sample=cpu" in cmd and "--sample=none" not in cmd
    assert "--gpu-metrics-device=0" in cmd
    assert not any(a.startswith("--capture-range") for a in cmd)  # auto: the whole run is recorded
    assert cmd[-2:] == ["python", "t.py"]
    keep = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"], capture="all")
    assert not any(a.startswith("--capture-range") for a in keep)


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("auto", []),
        ("all", []),
        (
            "nvtx:profile-step:capture",
            ["--capture-range=nvtx", "--nvtx-capture=profile-step:capture@profile-step", "--capture-range-end=stop"],
        ),
        ("nvtx:train@*", ["--capture-range=nvtx", "--nvtx-capture=train@*", "--capture-range-end=stop"]),
        ("cuda-profiler-api", ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]),
    ],
)
def test_capture_range_modes(tmp_path, mode, options):
    cmd = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"], capture=mode)
    assert [a for a in cmd if a.startswith(("--capture-range", "--nvtx-capture"))] == options
    # the user's own nsys options still win
    cmd = nsys_command.build(Path("nsys"), tmp_path / "t", ["p"], ["--capture-range=none"], capture=mode)
    assert "--capture-range=none" in cmd


def test_bad_capture_range_is_one_line(tmp_path):
    proc = run_cli("--capture-range", "sometimes", "--runs-dir", str(tmp_path / "runs"), str(STEPS))
    assert proc.returncode == 2
    assert "--capture-range: 'sometimes'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


# --- with the real nsys -----------------------------------------------------------------------


@pytest.mark.nsys
def test_example_two_policies_end_to_end(nsys, tmp_path):
    """The example, tiny, 2 policies, 3 steps: ranges, warm-up left out, manifest complete."""
    runs = tmp_path / "runs"
    proc = run_cli(
        "--policies",
        "none,offload_qkv",
        "--runs-dir",
        str(runs),
        "--nsys",
        str(nsys),
        str(TRAIN),
        "--layers",
        "2",
        "--steps",
        "3",
        "--dispatch",
        "per-layer",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folders = runs_in(runs)
    assert [f.name.split("-")[1] for f in folders] == ["none", "offload_qkv"]
    assert not any(f.name.endswith(".partial") for f in folders)
    for folder, policy in zip(folders, ["none", "offload_qkv"], strict=True):
        man = json.loads((folder / "manifest.json").read_text())
        assert man["status"] == "ok" and man["exit_code"] == 0 and man["policy"] == policy
        for key in (
            "nsys_command",
            "xla_flags",
            "environment",
            "versions",
            "host",
            "started",
            "finished",
            "script",
            "script_args",
            "files",
        ):
            assert man[key], key
        assert man["versions"]["jax"] and man["versions"]["nsys"] == nsys_version(nsys)
        assert man["environment"]["PROFILE_STEP_POLICY"] == policy
        assert man["capture"] == {"mode": "auto", "records": "the whole run", "analysis_window": "auto"}
        assert "--xla_gpu_enable_command_buffer=" in man["xla_flags"]["final"]
        assert (folder / "output.log").read_text().count("step ") >= 3
        trace = open_trace(folder / "trace.sqlite")
        summary = step_summary(trace.nvtx)
        assert summary["policy"] == policy
        assert summary["steps"] == 3
        assert summary["warmup_steps"] == 0, "warm-up must stay out of the analysis"
        assert step_summary(open_trace(folder / "trace.sqlite", "all").nvtx)["warmup_steps"] > 0  # recorded
        layers = annotated_ranges(trace.nvtx, "layer=")
        assert sorted(set(layers["value"])) == ["0", "1"]
        assert layers.height == 3 * 2 * 2  # 3 steps x 2 layers x (forward + backward)
    # the fused step the script handed over never runs as one program: its numbers are still the step's
    comp = run_summary(open_trace(folders[0] / "trace.sqlite"))["compiled_step"]
    assert comp["module"].endswith(".jit_step") and "never ran as one program" in comp["chosen_by"]
    assert "policy" in proc.stdout and "median step ms" in proc.stdout  # the table across policies
    assert proc.stdout.count("3 steps from profile-step step=N ranges") == 2
    assert proc.stdout.count("analysis window: profile-step:capture range") == 2


@pytest.mark.nsys
def test_keep_warmup_captures_warmup(nsys, tmp_path):
    proc = run_cli("--keep-warmup", "--runs-dir", str(tmp_path), "--nsys", str(nsys), str(STEPS), "--warmup", "2")
    assert proc.returncode == 0, proc.stderr
    (folder,) = runs_in(tmp_path)
    assert step_summary(open_trace(folder / "trace.sqlite").nvtx)["warmup_steps"] == 2


@pytest.mark.nsys
def test_failing_script_exit_code_comes_through(nsys, tmp_path):
    proc = run_cli("--policy", "p1", "--runs-dir", str(tmp_path), "--nsys", str(nsys), str(STEPS), "--fail-at", "2")
    assert proc.returncode == 1
    (folder,) = runs_in(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    assert man["status"] == "failed" and man["exit_code"] == 1
    assert "failing at step 2" in (folder / "output.log").read_text()
    assert "failed (exit 1)" in proc.stdout
    # what nsys captured before the crash is kept and readable
    assert step_summary(open_trace(folder / "trace.sqlite").nvtx)["steps"] == 2


@pytest.mark.nsys
def test_two_concurrent_runs_both_land(nsys, tmp_path):
    procs = [
        subprocess.Popen(
            steps_command(nsys, tmp_path, "--policy", "same"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    folders = runs_in(tmp_path)
    assert len(folders) == 2
    for folder in folders:
        assert json.loads((folder / "manifest.json").read_text())["status"] == "ok"
        assert step_summary(open_trace(folder / "trace.sqlite").nvtx)["steps"] == 3


@pytest.mark.nsys
def test_ctrl_c_keeps_what_was_captured(nsys, tmp_path):
    proc = subprocess.Popen(
        [*steps_command(nsys, tmp_path), "--forever", "--sleep", "0.02"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 120
    for line in proc.stdout:
        if "READY" in line or time.time() > deadline:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    (folder,) = runs_in(tmp_path)
    assert folder.name.endswith(".partial"), "an interrupted run is clearly marked"
    man = json.loads((folder / "manifest.json").read_text())
    assert man["status"] == "interrupted"
    assert "profile-step: interrupted" in err
    if (folder / "trace.sqlite").exists():
        assert step_summary(open_trace(folder / "trace.sqlite").nvtx)["steps"] >= 3


def test_missing_script_fails_before_nsys(tmp_path):
    proc = run_cli("--runs-dir", str(tmp_path / "runs"), str(tmp_path / "nope.py"))
    assert proc.returncode == 2
    assert "nope.py: no such training script" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_no_nsys_is_one_clear_line(tmp_path):
    proc = run_cli("--runs-dir", str(tmp_path / "runs"), "--nsys", str(tmp_path / "missing-nsys"), str(STEPS))
    assert proc.returncode == 2
    assert "install-nsys.sh" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.nsys
def test_rank_from_the_launcher_names_the_run(nsys, tmp_path):
    """Under a multi-process launcher each rank's run folder carries its rank."""
    proc = run_cli("--runs-dir", str(tmp_path), "--nsys", str(nsys), str(STEPS), env={"OMPI_COMM_WORLD_RANK": "3"})
    assert proc.returncode == 0, proc.stderr
    (folder,) = runs_in(tmp_path)
    assert "-rank3-" in folder.name
    assert json.loads((folder / "manifest.json").read_text())["rank"] == 3


@pytest.mark.nsys
def test_capture_works_without_the_analysis_packages(nsys, tmp_path):
    """A bare GPU node may lack polars: capture still runs and says the analysis is skipped."""
    blocker = tmp_path / "block"
    (blocker / "polars").mkdir(parents=True)
    (blocker / "polars" / "__init__.py").write_text("raise ImportError('polars is not installed here')\n")
    runs = tmp_path / "runs"
    proc = run_cli("--runs-dir", str(runs), "--nsys", str(nsys), str(STEPS), env={"PYTHONPATH": f"{blocker}:{ROOT}"})
    assert proc.returncode == 0, proc.stderr
    assert "runs will not be analyzed here" in proc.stderr
    (folder,) = runs_in(runs)
    assert (folder / "trace.sqlite").is_file()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "ok"


@pytest.mark.nsys
def test_nsys_capture_range_records_only_the_range(nsys, tmp_path):
    """For long jobs: nsys itself records only inside annotate.capture()."""
    proc = run_cli(
        "--capture-range", "nvtx:profile-step:capture", "--runs-dir", str(tmp_path), "--nsys", str(nsys), str(STEPS)
    )
    assert proc.returncode == 0, proc.stderr
    (folder,) = runs_in(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    assert man["capture"]["mode"] == "nvtx:profile-step:capture"
    assert "--capture-range=nvtx" in man["nsys_command"]
    assert "nsys records only inside the NVTX range profile-step:capture@profile-step" in proc.stdout
    everything = open_trace(folder / "trace.sqlite", "all")
    assert step_summary(everything.nvtx)["warmup_steps"] == 0  # never recorded
    assert step_summary(everything.nvtx)["steps"] == 3


@pytest.mark.nsys
def test_plain_jax_script_under_two_policies(nsys, tmp_path):
    """A script with no profile-step code: recorded whole under each policy; its steps are the
    executions of its jitted step, from XLA's ranges on a GPU, from the start-up hook's on a CPU."""
    runs = tmp_path / "runs"
    proc = run_cli("--policy", "a", "--policy", "b", "--runs-dir", str(runs), "--nsys", str(nsys), str(PLAIN))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folders = runs_in(runs)
    assert [f.name.split("-")[1] for f in folders] == ["a", "b"]
    for folder in folders:
        man = json.loads((folder / "manifest.json").read_text())
        assert man["status"] == "ok" and man["capture"]["mode"] == "auto"
        trace = open_trace(folder / "trace.sqlite")
        assert not trace.window.active
        own = trace.nvtx.filter(trace.nvtx["text"].str.starts_with("train_step "))
        assert own.height == 5  # the warm-up step and the four others: the whole run
        summary = run_summary(trace)
        assert summary["step_source"].startswith("the executions of jit_train_step (program ") and summary["steps"] == 5
        # the compilation is in the recording (XLA's XlaCompile range, or the hook's): the first step is warm-up
        # (a slow second step on a loaded machine may join it as "first steps")
        first = summary["excluded_steps"][0]
        assert first == {"name": "jit_train_step#0", "reason": "warm-up: first execution after its compilation"}
        if trace.has_cuda_calls:  # a GPU: XLA's own ranges
            assert "start-up hook" not in summary["step_source"]
        else:  # XLA:CPU writes no NVTX: the hook's ranges, host time only
            assert summary["step_source"].endswith(", recorded by profile-step's start-up hook")
    assert proc.stdout.count("nsys records the whole run (--capture-range auto)") == 2
    assert proc.stdout.count("5 steps from the executions of jit_train_step (program ") == 2


@pytest.mark.nsys
def test_cuda_profiler_api_script(nsys, tmp_path):
    """cudaProfilerStart/Stop through ctypes: the window where a CUDA runtime exists, else why not."""
    proc = run_cli("--policy", "p", "--runs-dir", str(tmp_path), "--nsys", str(nsys), str(PROFILER_API))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (folder,) = runs_in(tmp_path)
    trace = open_trace(folder / "trace.sqlite")
    window = trace.window
    if "no CUDA runtime" not in (folder / "output.log").read_text():  # the calls took effect
        assert window.source == "cudaProfilerStart/Stop span"
        names = trace.nvtx["text"].to_list()
        assert "train_step 0" in names and not any(n.startswith("warmup") for n in names if n)
        assert "after the profiler stopped" not in names
    else:  # the script said why; the analysis reads the whole run and says why too
        assert not window.active
        if not trace.has_cuda_calls:
            assert "no CUDA runtime: the recording holds no CUDA API calls" in window.note
            assert "analysis window: the whole recording (no profile-step:capture range; no CUDA runtime" in proc.stdout


@pytest.mark.nsys
def test_cuda_profiler_api_mode_without_cuda_says_why(nsys, tmp_path):
    if cuda_driver_problem() is None:
        pytest.skip("a CUDA driver is here: nsys's cudaProfilerApi capture range can open")
    proc = run_cli(
        "--capture-range", "cuda-profiler-api", "--runs-dir", str(tmp_path), "--nsys", str(nsys), str(PROFILER_API)
    )
    assert proc.returncode == 4, proc.stderr  # the script exited 0, and the policy still has no trace
    assert "profile-step: 1 of 1 policies ended without a trace (default): exit 4" in proc.stderr
    assert "--capture-range cuda-profiler-api: no CUDA runtime: the CUDA driver (libcuda.so.1)" in proc.stderr
    assert "no-trace" in proc.stdout
    assert "nsys waited for cudaProfilerStart() and it never took effect: no CUDA runtime" in proc.stdout
    (folder,) = runs_in(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    assert man["status"] == "no-trace" and man["capture"]["problem"].startswith("no CUDA runtime")
