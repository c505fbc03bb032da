"""The GPU capture pipeline tried where it can be, on this CPU: scripts/device_capture.sh --tiny (what a
lent GPU machine runs, jax.profiler by default), then scripts/import_device_capture.py (what brings the
runs home as run folders), then profile-step on them.  A device call is rare and costly: this is what
makes its first try work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT


def test_the_device_capture_runs_here_and_comes_home_as_run_folders(tmp_path):
    out, into = tmp_path / "out", tmp_path / "runs"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "CAPTURE_WORK": str(tmp_path / "work")}
    proc = subprocess.run(["bash", str(ROOT / "scripts/device_capture.sh"), "--tiny", "--budget", "240"],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["capture.log", "run0-offload_qkv-jax.tar.xz", "run1-none-jax.tar.xz"]
    assert len(files) <= 8 and all(p.stat().st_size < 16 << 20 for p in out.iterdir())  # what the device returns
    with tarfile.open(out / "run0-offload_qkv-jax.tar.xz") as tar:
        names = tar.getnames()
    assert any(n.endswith(".trace.json.gz") for n in names)
    assert any(n.startswith("offload_qkv/xla_dump/") and n.endswith("after_optimizations.txt") for n in names)
    assert not any(n.endswith(".nsys-rep") for n in names)

    script = ROOT / "scripts" / "import_device_capture.py"
    home = subprocess.run([sys.executable, str(script), str(out), "--into", str(into)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert home.returncode == 0, home.stderr[-2000:]
    runs = sorted(p for p in into.iterdir() if p.is_dir())
    assert [r.name.split("-", 1)[1].rsplit("-", 1)[0] for r in runs] == ["offload_qkv", "none"]
    for run in runs:
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["capture"]["tool"] == "jax.profiler" and manifest["status"] == "ok"
        assert "--xla_gpu_enable_command_buffer=" in manifest["xla_flags"]["final"]  # the script's own flags
        assert (run / "trace.json.gz").is_file() and (run / "compiled.json").is_file()
    table = run_cli("analyze", str(into), env={"PROFILE_STEP_CACHE": str(tmp_path / "cache")})
    assert table.returncode == 0, table.stderr
    assert "offload_qkv" in table.stdout and "cpu: all runs ran on a CPU" in table.stdout
