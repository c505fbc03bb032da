"""``profile-step`` and nsys run as a user would, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT


def nsys_stats_csv(nsys: Path, report: str, path: Path, cwd: Path | None = None) -> list[dict[str, str]]:
    """The rows of ``nsys stats --report REPORT --format csv`` on *path* (nsys's own numbers)."""
    import csv
    import io

    proc = subprocess.run(
        [str(nsys), "stats", "--report", report, "--format", "csv", "--output", "-", str(path)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith(("Processing", "SKIPPED"))]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``profile-step`` as a user would, in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PROFILE_STEP_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "profiler.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=full_env,
        timeout=timeout,
    )


def analyze_json(path: Path, *extra: str) -> dict:
    """``profile-step analyze PATH --json`` (and *extra*), parsed; the command must succeed."""
    proc = run_cli("analyze", "--json", *extra, str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def runs_in(folder: Path) -> list[Path]:
    """The folders in *folder* (the run folders ``profile-step run`` wrote there), by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir())


def free_port() -> int:
    """A TCP port nothing listens on now (for a dashboard or a dask scheduler)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
