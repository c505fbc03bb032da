"""Profile a training script under nsys, once per offload policy."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.capture import nsys_command, nsys_lock, policy_arg, startup, step_module, xla_flags
from profiler.capture.shell import output_of
from profiler.conventions import (
    CAPTURE_MANIFEST_KEY,
    NO_NVTX_NOTE,
    NVTX_REQUIREMENT,
    POLICY_ENV,
    RUN_DIR_ENV,
    RUNTIME_FACTS,
    XLA_DUMP_DIR,
    XLA_DUMP_ENV,
)
from profiler.errors import InputError, ProfilerError
from profiler.stored import folder, no_trace
from profiler.stored.console import ConsoleFilter
from profiler.trace.nsys import find_nsys, nsys_version
from profiler.trace.window import check_spec
from profiler.units import wrap

# Environment variables worth recording in a manifest (by prefix).
ENV_PREFIXES = (
    "XLA_",
    "JAX_",
    "TF_XLA",
    "TF_CPP",
    "TF_GPU",
    "NCCL_",
    "CUDA_",
    "NVIDIA_",
    "PROFILE_STEP_",
    "NSYS_",
    "OMPI_COMM_WORLD_",
    "SLURM_PROCID",
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
)
INTERRUPT_GRACE_S = 120
# the policy of a run asked for none (`profile-step run script.py`): the script's own default stands
UNNAMED_POLICY = "default"
HOOK_DIR = Path(__file__).resolve().parent / "hook"  # sitecustomize.py: profiler.capture.startup
# Where launchers put a process's rank (torchrun, Open MPI, Slurm, MPICH/PMIx).
RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK")


def launcher_rank() -> int | None:
    """This process's rank, when a multi-process launcher started it."""
    for var in RANK_ENV:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


@dataclass
class RunRequest:
    """Everything ``profile-step run`` was asked to do."""

    script: Path
    script_args: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=lambda: ["default"])
    runs_dir: Path = Path("runs")
    nsys: str | None = None
    nsys_args: list[str] = field(default_factory=list)
    capture_range: str = "auto"  # auto, all, nvtx:NAME[@DOMAIN], cuda-profiler-api
    lhs: bool = False
    pipelined_offload: bool = False
    async_limit: int | None = None
    python: str | None = None
    policy_arg: str | None = None  # a flag (--policy: "--policy NAME") or a template ("remat_policy={policy}")
    policy_word: bool = False  # policy_arg is one word, passed as written (--policy-word)
    trace_extra: list[str] = field(default_factory=list)  # nsys traces beyond cuda,nvtx (osrt, cublas, ...)
    xla_dump: bool = True  # ask XLA for a dump of the step's module (pruned after the run)
    env: dict[str, str] = field(default_factory=dict)  # more environment for the script (tune --verify)


@dataclass
class RunResult:
    policy: str
    run_dir: Path
    exit_code: int
    status: str  # ok | failed | interrupted | no-trace
    sqlite: Path | None
    manifest: dict[str, Any]


COMMAND_CHARS = 150  # the command line said when a run starts: the manifest has it whole


def command_line(cmd: list[str]) -> str:
    """nsys's command line in at most ``COMMAND_CHARS`` characters: nsys by its name, its options
    elided when the whole does not fit (``manifest.json`` has it whole, ``nsys_command_line``)."""
    words = ["nsys", *cmd[1:]]
    whole = shlex.join(words)
    if len(whole) <= COMMAND_CHARS:
        return whole
    first = next((i for i, w in enumerate(words) if i > 1 and not w.startswith("-")), len(words))
    short = shlex.join([*words[:2], "...", *words[first:]])
    return short if len(short) <= COMMAND_CHARS else short[: COMMAND_CHARS - 3] + "..."


def program(req: RunRequest, policy: str) -> list[str]:
    """The command nsys launches: the script (with Python for .py files) and its arguments."""
    script = str(req.script)
    cmd = [req.python or sys.executable, script] if req.script.suffix == ".py" else [script]
    cmd += req.script_args
    return cmd + policy_arg.words(req.policy_arg, policy, req.policy_word)


def cuda_driver_problem() -> str | None:
    """Why cudaProfilerStart() cannot take effect here (no CUDA driver to load), else None."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no CUDA runtime: the CUDA driver (libcuda.so.1) cannot be loaded here ({exc})"
    return None


def capture_facts(req: RunRequest) -> dict[str, Any]:
    """The manifest's ``capture`` entry: the mode, what nsys records under it, the analysis window
    the trace is read through (``trace/window.py``), and what stands in its way here."""
    mode = req.capture_range
    facts: dict[str, Any] = {"mode": mode, "records": nsys_command.describe(mode), "analysis_window": mode}
    if mode == "cuda-profiler-api":
        facts["problem"] = cuda_driver_problem()
    return facts


def run_env(req: RunRequest, policy: str, run_dir: Path, plan: xla_flags.FlagPlan) -> dict[str, str]:
    env = dict(os.environ)
    if req.capture_range.startswith("nvtx:"):
        env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")  # match ranges whose names are not registered
    env["XLA_FLAGS"] = plan.after
    env.setdefault("JAX_TRACEBACK_IN_LOCATIONS_LIMIT", "-1")
    if policy == UNNAMED_POLICY:
        env.pop(POLICY_ENV, None)  # annotate.policy_name(default) gives the script's own default
    else:
        env[POLICY_ENV] = policy
    env[RUN_DIR_ENV] = str(run_dir)
    if plan.set_by_preset.get(xla_flags.DUMP_TO):
        env[XLA_DUMP_ENV] = plan.set_by_preset[xla_flags.DUMP_TO]
    # the start-up hook puts these back if the script replaces XLA_FLAGS before JAX's backend starts
    env[startup.PRESETS_ENV] = json.dumps({"flags": plan.set_by_preset, "force": xla_flags.forced(plan)})
    env["PYTHONUNBUFFERED"] = "1"
    env.update(req.env)
    # the start-up hook first, then the project (for scripts that `from profiler import annotate`)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), root, env.get("PYTHONPATH", "")) if p)
    return env


def _read_facts(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def child_facts(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(runtime, startup): what ``annotate`` wrote (``runtime.json``) over what the start-up hook
    wrote (``startup.json``: versions, devices, XLA flags, executions), and the hook's own facts."""
    hook = _read_facts(run_dir / startup.STARTUP_FACTS)
    runtime = {k: hook[k] for k in ("python", "jax", "jaxlib", "nvtx_binding", "devices") if hook.get(k) is not None}
    runtime.update({k: v for k, v in _read_facts(run_dir / RUNTIME_FACTS).items() if v is not None})
    return runtime, hook


def flags_line(policy: str, hook: dict[str, Any]) -> str | None:
    """One line when the script replaced XLA_FLAGS and the start-up hook put profile-step's back."""
    put_back = ((hook or {}).get("xla_flags") or {}).get("put_back") or []
    if not put_back:
        return None
    return (
        f"profile-step: policy {policy}: the script set XLA_FLAGS itself; the start-up hook put "
        f"{', '.join(put_back)} back before JAX started its backend (startup.json has the flags in force)"
    )


def nvtx_line(policy: str, hook: dict[str, Any]) -> str | None:
    """One line when the script's interpreter has no nvtx package: the hook counted executions but wrote
    no ranges, so a run without XLA's own ranges (any CPU run) has no steps."""
    if not any(str(n).startswith(NO_NVTX_NOTE) for n in (hook or {}).get("notes") or []):
        return None
    if hook.get("programs_uncounted") and not hook.get("executions"):
        return None  # a GPU: XLA writes its own ranges, the hook neither counts nor writes there
    exe = hook.get("executable") or "python"
    runs = step_module.executions_text(hook)
    return (
        f"profile-step: policy {policy}: the script's Python has no nvtx package, so the start-up hook counted "
        f"the executions ({runs or 'none'}) but wrote no ranges: without XLA's own (any CPU run) there are no "
        f"steps; install it there: {shlex.quote(exe)} -m pip install '{NVTX_REQUIREMENT}'"
    )


def git_facts(script: Path) -> dict[str, Any] | None:
    """Commit and dirtiness of the repository holding *script*, if any."""

    def git(*args: str) -> str | None:
        return output_of(["git", "-C", str(script.parent), *args], timeout=10)

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--", str(script.resolve()))
    return {"commit": commit, "script_modified": bool(status), "root": git("rev-parse", "--show-toplevel")}


def _tee(stream, log_path: Path, echo: Callable[[str], None]) -> threading.Thread:
    """Copy the child's output into the log, and to the console without nsys's progress bars and
    report-writing chatter (``console.ConsoleFilter``)."""
    shown = ConsoleFilter()

    def pump() -> None:
        with log_path.open("w", encoding="utf-8", errors="replace") as log:
            for line in iter(stream.readline, ""):
                log.write(line)
                log.flush()
                if shown.keep(line):
                    echo(line)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def _wait(proc: subprocess.Popen[str]) -> tuple[int, bool]:
    """Wait for nsys; on Ctrl-C pass SIGINT on once and wait for it to save what it has."""
    interrupted = False
    while True:
        try:
            return proc.wait(), interrupted
        except KeyboardInterrupt:
            if interrupted:  # a second Ctrl-C: stop waiting politely
                proc.kill()
                return proc.wait(), True
            interrupted = True
            print(
                "profile-step: interrupted; letting nsys save what it captured (Ctrl-C again to kill)",
                file=sys.stderr,
            )
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                return proc.wait(timeout=INTERRUPT_GRACE_S), True
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait(), True
            except KeyboardInterrupt:
                proc.kill()
                return proc.wait(), True


def _capture(cmd: list[str], env: dict[str, str], run_dir: Path, echo: Callable[[str], None]) -> tuple[int, bool]:
    """nsys with the script, its output teed into the run's log: (exit code, interrupted); with
    ``PROFILE_STEP_NSYS_LOCK`` set, after the host's other profile-step captures (``nsys_lock``)."""
    with nsys_lock.held():
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
        )
        pump = _tee(proc.stdout, run_dir / folder.LOG, echo)
        code, interrupted = _wait(proc)
        pump.join(timeout=10)
    return code, interrupted


def check_request(req: RunRequest) -> Path:
    """Fail before anything starts: the script must exist, nsys must be there."""
    if not req.script.exists():
        raise InputError(req.script, "no such training script")
    if req.script.is_dir():
        raise InputError(req.script, "is a directory, not a training script")
    if req.script.suffix != ".py" and not os.access(req.script, os.X_OK):
        raise InputError(req.script, "is neither a .py file nor executable")
    try:
        nsys_command.parse_user_options(req.nsys_args)
    except ValueError as exc:
        raise ProfilerError(f"--nsys-arg: {exc}") from None
    policy_arg.require(req.policy_arg, req.policy_word)
    try:
        nsys_command.trace_set(req.trace_extra)
    except ValueError as exc:
        raise ProfilerError(f"--trace-extra: {exc}") from None
    try:
        check_spec(req.capture_range)
    except ValueError as exc:
        raise ProfilerError(f"--capture-range: {exc}") from None
    return find_nsys(req.nsys)


def run_policy(
    req: RunRequest,
    policy: str,
    nsys: Path,
    nsys_ver: str,
    echo: Callable[[str], None] = lambda s: print(s, end="", flush=True),
) -> RunResult:
    """One profiled run of the script for *policy*."""
    rank = launcher_rank()
    run_dir = folder.create(req.runs_dir, policy, rank)
    plan = xla_flags.plan(
        os.environ.get("XLA_FLAGS", ""),
        req.lhs,
        req.pipelined_offload,
        req.async_limit,
        dump_to=str(run_dir / XLA_DUMP_DIR) if req.xla_dump else None,
    )
    prog = program(req, policy)
    cmd = nsys_command.build(nsys, run_dir / folder.TRACE_STEM, prog, req.nsys_args, req.capture_range, req.trace_extra)
    env = run_env(req, policy, run_dir, plan)
    # nsys keeps its sessions' sockets and files in $TMPDIR/nvidia, shared by every nsys run at the same
    # time: beside other sessions (seen with 2023.4.4 ones), 2024.2.3 at times records nothing of the
    # script (no NVTX, no OS runtime calls) while exiting 0.  A folder of this run's own keeps it apart.
    nsys_tmp = Path(tempfile.mkdtemp(prefix="profile-step-nsys-"))
    env["TMPDIR"] = str(nsys_tmp)
    manifest: dict[str, Any] = {
        "tool": "profile-step",
        "status": "running",
        "policy": policy,
        "rank": rank,
        "script": str(req.script.resolve()),
        "script_args": req.script_args,
        "program": prog,
        "nsys_command": cmd,
        "nsys_command_line": shlex.join(cmd),
        "cwd": os.getcwd(),
        CAPTURE_MANIFEST_KEY: capture_facts(req),
        "xla_flags": {
            "before": plan.before,
            "final": plan.after,
            "set_by_profile_step": plan.set_by_preset,
            "kept_from_user": plan.kept_from_user,
        },
        "environment": {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)},
        "versions": {"nsys": nsys_ver, "profile_step_python": platform.python_version()},
        "host": {
            "name": socket.gethostname(),
            "platform": platform.platform(),
            "machine": platform.machine(),
        },
        "git": git_facts(req.script),
        "started": folder.now(),
    }
    folder.write_json(run_dir / folder.MANIFEST, manifest)
    print(f"profile-step: policy {policy}: {command_line(cmd)}", file=sys.stderr, flush=True)
    code, interrupted = _capture(cmd, env, run_dir, echo)
    lost = None if interrupted else no_trace.nsys_failure(run_dir, code)
    if lost:  # nsys's own failure under load, not the script's: once more
        said = f"profile-step: policy {policy}: {lost}; retrying once (nsys's output: {no_trace.FIRST_ATTEMPT_LOG})"
        print(wrap(said), file=sys.stderr, flush=True)
        no_trace.set_aside(run_dir)
        manifest["retried"] = {"reason": lost, "first_log": no_trace.FIRST_ATTEMPT_LOG}
        code, interrupted = _capture(cmd, env, run_dir, echo)
    no_trace.keep_raw_capture(run_dir, nsys_tmp)
    shutil.rmtree(nsys_tmp, ignore_errors=True)

    sqlite = run_dir / f"{folder.TRACE_STEM}.sqlite"
    report = run_dir / f"{folder.TRACE_STEM}.nsys-rep"
    if interrupted:
        status = "interrupted"
    elif code != 0:
        status = "failed"
    elif not sqlite.exists():
        status = "no-trace"
    else:
        status = "ok"
    runtime, hook = child_facts(run_dir)
    if policy == UNNAMED_POLICY and runtime.get("policy"):
        manifest["policy"] = runtime["policy"]  # what the script ran (annotate.policy_name's default)
    manifest["startup_hook"] = {k: hook.get(k) for k in ("hook", "xla_flags", "executions", "notes")} if hook else None
    for said in (flags_line(policy, hook), nvtx_line(policy, hook)):
        if said:
            print(wrap(said), file=sys.stderr, flush=True)
    manifest.update(
        {
            "status": status,
            "exit_code": code,
            "finished": folder.now(),
            "files": {
                "report": report.name if report.exists() else None,
                "sqlite": sqlite.name if sqlite.exists() else None,
                "log": folder.LOG,
            },
            "runtime": runtime,
        }
    )
    if not sqlite.exists():
        manifest[no_trace.NO_TRACE_KEY] = no_trace.describe(run_dir, status, code, lost)
    manifest["versions"].update({k: runtime.get(k) for k in ("python", "jax", "jaxlib", "nvtx_binding")})
    manifest["devices"] = runtime.get("devices")
    manifest["device_memory"] = runtime.get("device_memory")
    user_dump = xla_flags.parse(plan.before).get(xla_flags.DUMP_TO)
    own = xla_flags.DUMP_TO in plan.set_by_preset
    dump_dir = run_dir / XLA_DUMP_DIR if own else (Path(user_dump) if user_dump else None)
    try:
        manifest["compiled"] = step_module.record(run_dir, dump_dir, own, hook)
    except Exception as exc:  # the compiled module is a bonus: never lose the run over it
        manifest["compiled"] = {"notes": [f"reading the compiled step failed: {type(exc).__name__}: {exc}"]}
    folder.write_json(run_dir / folder.MANIFEST, manifest)
    if not interrupted:
        run_dir = folder.finish(run_dir)
    return RunResult(
        manifest["policy"],
        run_dir,
        code,
        status,
        run_dir / sqlite.name if (run_dir / sqlite.name).exists() else None,
        manifest,
    )


def run_all(req: RunRequest, on_result: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Every policy in turn; stops after an interrupted run."""
    nsys = check_request(req)
    ver = nsys_version(nsys)
    problem = capture_facts(req).get("problem")
    if problem:
        print(
            wrap(
                f"profile-step: --capture-range cuda-profiler-api: {problem}; nsys will wait for a cudaProfilerStart() "
                "that cannot take effect and record nothing (the default, --capture-range auto, records the whole run)"
            ),
            file=sys.stderr,
            flush=True,
        )
    results = []
    for policy in req.policies:
        res = run_policy(req, policy, nsys, ver)
        results.append(res)
        if on_result:
            on_result(res)
        if res.status == "interrupted":
            break
    return results
