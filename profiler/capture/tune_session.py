"""The script, started once under a Python with JAX's CUDA plugin, compiling its step on request.

``profile-step tune`` runs the training script as ``plan`` does (``JAX_PLATFORMS=cpu``,
``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1``, the target description in
``$PROFILE_STEP_PLAN_TARGET``), and adds two pipes (``$PROFILE_STEP_TUNE_FDS``): when the
script hands its step over (``annotate.compiled_step``) the step stays there, and each
request compiles it under another policy (``profiler.xla.tune_server``).  The script's
output goes to ``output.log`` in the tune folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from profiler.capture import policy_arg
from profiler.capture.plan import ROOT
from profiler.capture.step_catch import STEP_ENV, candidates_text
from profiler.capture.xla_flags import for_target_compile as xla_flags_for_target
from profiler.conventions import BATCH_ENV, PLAN_DIR_ENV, PLAN_TARGET_ENV, POLICY_ENV, TUNE_FDS_ENV
from profiler.errors import ProfilerError

SELECT_HINT = "--step NAME, --step NAME@LINE or --step FILE:LINE selects a jitted function"
START_TIMEOUT_S = 1800.0  # the script's own start-up until it hands its step over
COMPILE_TIMEOUT_S = 3600.0


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(ln.strip()[-200:] for ln in lines[-n:])


class CompileSession:
    """One script process; ``request`` sends a JSON document and waits for the answer."""

    def __init__(
        self,
        command: list[str],
        spec_file: Path,
        folder: Path,
        *,
        policy: str | None = None,
        batch: int | None = None,
        xla_flags: list[str] | None = None,
        step: str | None = None,
    ) -> None:
        self.command = command
        self.folder = folder
        self.log = folder / "output.log"
        env = dict(os.environ)
        env.update(
            {
                PLAN_DIR_ENV: str(folder),
                PLAN_TARGET_ENV: str(spec_file),
                "JAX_PLATFORMS": "cpu",
                "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        env.pop("PROFILE_STEP_RUN_DIR", None)
        if policy:
            env[POLICY_ENV] = policy
        if batch is not None:
            env[BATCH_ENV] = str(batch)
        if step:
            env[STEP_ENV] = step
        env["XLA_FLAGS"] = xla_flags_for_target(env.get("XLA_FLAGS"), xla_flags)
        # the start-up hook (it takes the step of a script that hands none over), then the project
        hook = str(Path(__file__).resolve().parent / "hook")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] | None = None
        self._buf = b""

    def start(self, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Start the script and wait until it hands its step over; ProfilerError when it never does."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the script (``wait_ready`` waits for its step): several start side by side."""
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self.env[TUNE_FDS_ENV] = f"{to_child_r},{from_child_w}"
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as log:
            try:
                self.proc = subprocess.Popen(
                    self.command,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    pass_fds=(to_child_r, from_child_w),
                )
            except OSError as exc:
                raise ProfilerError(f"could not start {self.command[0]}: {exc}") from None
            finally:
                os.close(to_child_r)
                os.close(from_child_w)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the launched script hands its step over; ProfilerError when it never does."""
        answer = self._receive(timeout, "hand its step over")
        if answer.get("op") == "no_step":
            self.close()
            raise ProfilerError(no_step_message(answer, self.log))
        self.ready = answer
        return self.ready

    def _receive(self, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise ProfilerError(f"the script did not {what} within {timeout:.0f} s (log: {self.log})")
            ready, _, _ = select.select([self._from_child], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 16)
            if chunk:
                self._buf += chunk
                continue
            raise ProfilerError(self._ended(what))  # the other end closed: the script is gone
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def _ended(self, what: str) -> str:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
        tail = _tail(self.log)
        never = (
            ": it never ran a jitted function twice with the same shapes, nor handed its step to "
            f"annotate.compiled_step() ({SELECT_HINT})"
            if what == "hand its step over"
            else ""
        )
        return (
            f"the script ended (exit {code}) before it would {what}{never}"
            + (f"; last output: {tail}" if tail else "")
            + f" (log: {self.log})"
        )

    def request(self, doc: dict[str, Any], timeout: float = COMPILE_TIMEOUT_S) -> dict[str, Any]:
        os.write(self._to_child, (json.dumps(doc) + "\n").encode())
        return self._receive(timeout, f"answer {doc.get('op')}")

    def close(self) -> None:
        """Ask the script to stop; end it if it does not within 30 s."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and self.ready is None:
                self.proc.kill()  # still running the script up to its step (a helper of --jobs): nothing to finish
            elif self.proc.poll() is None:
                os.write(self._to_child, b'{"op": "quit"}\n')
        except OSError:
            pass
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> CompileSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def no_step_message(answer: dict[str, Any], log: Path) -> str:
    """The one-line error of a script that ended with no step: the functions it ran and the flag."""
    cands = answer.get("candidates") or []
    wanted = answer.get("step")
    if wanted:
        head = f"no jitted function of the script matched --step {wanted}"
    else:
        head = (
            "the script ended with no training step to compile: no jitted function ran twice with the same shapes, "
            "and it handed none to annotate.compiled_step()"
        )
    seen = f"; the jitted functions it called: {candidates_text(cands)}" if cands else "; it called no jitted function"
    return f"{head}{seen}; {SELECT_HINT} (log: {log})"


def script_command(
    python: str, script: Path, args: list[str], batch: int | None, batch_arg: str | None, spec: str | None, policy: str
) -> list[str]:
    """The script's command line: as ``plan`` builds it (batch flag, policy words)."""
    cmd = [python, str(script)] if script.suffix == ".py" else [str(script)]
    cmd += args
    if batch is not None and batch_arg:
        cmd += [batch_arg, str(batch)]
    return cmd + policy_arg.words(spec, policy)
