"""Late copies back (issue 43, item 3): a host-to-device copy with less compute between its start and its
done than the copy takes holds the compute stream; plan and tune say so in one line, with the time
waited and what issues the copies earlier."""

from __future__ import annotations

import json

from profiler.predict.simulate import late_copies
from profiler.report.predict_text import LATE_FIX, late_lines
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT, SMALL_STEP

TRAIN = ROOT / "examples" / "train.py"


def _wait(start: str, stream: str, ns: int, layer: str | None = None) -> dict:
    return {"done": start.replace("start", "done"), "start": start, "stream": stream, "wait_ns": ns, "layer": layer,
            "iteration": None}  # fmt: skip


def test_late_copies_count_and_sum_the_waits_of_each_direction():
    waits = [_wait("copy-start.1", "h2d", 300, "layer_1"), _wait("copy-start.2", "h2d", 500, "layer_0"),
             _wait("copy-start.3", "d2h", 40), _wait("all-gather-start", "collective", 900)]  # fmt: skip
    late = late_copies(waits)
    assert late["h2d"] == {
        "count": 2,
        "wait_ns": 800,
        "worst": {"start": "copy-start.2", "layer": "layer_0", "wait_ns": 500},
    }
    assert late["d2h"]["count"] == 1 and late["d2h"]["wait_ns"] == 40
    assert late_copies([])["h2d"] == {"count": 0, "wait_ns": 0, "worst": None}


def test_plan_says_when_the_copies_back_of_a_scanned_step_are_late(aot_python, tmp_path):
    """The example's small step under lax.scan, offload_qkv, compiled for an H100: the copies back of the
    scanned backward pass start right before their use (XLA's schedule), and the replay waits for them."""
    args = ("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8")
    proc = run_cli(*args, "--out", str(tmp_path / "p"), "--json", str(TRAIN), *SMALL_STEP, "--scan", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [pred] = json.loads(proc.stdout)["plan"]["predictions"]
    late = pred["late_copies"]["h2d"]
    assert late["count"] > 0 and 0 < late["wait_ns"] <= pred["predicted_exposed_ns"]
    assert late["worst"]["wait_ns"] <= late["wait_ns"] and late["worst"]["start"].startswith(("copy-start", "dynamic"))
    text = run_cli(*args, "--out", str(tmp_path / "q"), str(TRAIN), *SMALL_STEP, "--scan", timeout=600).stdout
    said = " ".join(text.split())
    assert f"late copies back, offload_qkv, batch 8, PCIe Gen5 x16: {late['count']} host-to-device copies have" in said
    assert " ".join(LATE_FIX.split()) in said


def test_a_plan_without_late_copies_says_nothing_of_them():
    pred = {"policy": "offload_qkv", "batch": None, "link": "pcie5", "link_name": "PCIe Gen5 x16",
            "late_copies": late_copies([_wait("copy-start.3", "d2h", 40)])}  # fmt: skip
    assert late_lines([pred]) == []
