"""benchmarks/make_shaped.py run as its docstring says (a script, from any folder), at a toy size: the export it
writes is one the tool reads, with the program it describes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from tests.helpers.cli import analyze_json
from tests.helpers.paths import ROOT


def test_make_shaped_runs_as_a_script_and_writes_a_readable_export(tmp_path):
    out = tmp_path / "shaped.sqlite"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "make_shaped.py"), str(out), "--steps", "2", "--layers", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(out) as db:
        ranges = {r[0] for r in db.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'step=%'")}
        copies = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    assert ranges == {"step=0", "step=1"}
    # per step and GPU, per layer: 15 copies to the host, 14 back (the docstring's program), 2 GPUs
    assert copies == 2 * 2 * 2 * (15 + 14)
    doc = analyze_json(out)
    assert doc["verdict"]["steps"] == 2
