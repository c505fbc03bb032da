"""A child Python with the project's start-up hook, and what its run folder recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from profiler.capture import run, xla_flags
from profiler.conventions import STARTUP_FACTS, XLA_DUMP_DIR


def child(script: Path | None, run_dir: Path, *args: str, code: str | None = None, policy: str = "p", **env: str):
    """Run *script* (or ``python -c code``) as profile-step would, without nsys."""
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = xla_flags.plan(os.environ.get("XLA_FLAGS", ""), dump_to=str(run_dir / XLA_DUMP_DIR))
    req = run.RunRequest(script=script or Path("x.py"))
    full = {**run.run_env(req, policy, run_dir, plan), **env}
    cmd = [sys.executable, *(["-c", code] if code is not None else [str(script)]), *args]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=300, check=False)


def facts(run_dir: Path) -> dict:
    return json.loads((run_dir / STARTUP_FACTS).read_text())


def only_run(runs: Path) -> Path:
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    return folder


def fake_dump(folder: Path, sizes: dict[str, int]) -> None:
    """A dump folder: per module one after-optimization text of *sizes* bytes (the step by size)."""
    folder.mkdir(parents=True)
    for i, (name, size) in enumerate(sizes.items()):
        text = f"HloModule {name}\n" + "x" * size
        (folder / f"module_{i:04d}.{name}.cpu_after_optimizations.txt").write_text(text)
