"""Late copies back (issue 43, item 3): a host-to-device copy with less compute between its start and its
done than its own transfer time (``profiler.analysis.late_copies``); ``plan`` says so from the compiled
schedule, ``findings`` from a trace, each in one line with the time waited and what moves the copies earlier.

The script, tests/scripts/late_scan.py, compiled for an H100 by the real GPU compiler without a GPU: at its
defaults (a 64 MiB activation under one matmul a layer, 8 layers under lax.scan) every copy back is late on
PCIe Gen5; at ``--batch 256 --k 16`` (1 MiB under 16 matmuls) none is.  The findings read a recording of the
compiled program (tests/recordings.py: nsys's tables, with CUDA events, laid out with the roofline's
kernel times and the copies at 63 GB/s), not a GPU run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from profiler.analysis import late_copies
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "tests" / "scripts" / "late_scan.py"
NOT_LATE = ("--k", "16")


def _copies(*rows: tuple[int, int, bool]) -> pl.DataFrame:
    return late_copies.frame(
        [
            {"start": f"copy-start.{i}", "layer": None, "in_loop": loop, "transfer_ns": t, "window_ns": w}
            for i, (t, w, loop) in enumerate(rows)
        ]
    )


def test_a_copy_is_late_by_its_transfer_less_its_window():
    copies = _copies((1000, 300, True), (500, 500, True), (800, 1200, False), (400, 0, False))
    late = late_copies.late(copies)
    assert late["start"].to_list() == ["copy-start.0", "copy-start.3"]  # longest wait first
    assert late["waited_ns"].to_list() == [700, 400]
    s = late_copies.summary(copies)
    assert (s["of"], s["count"], s["waited_ns"], s["transfer_ns"], s["window_ns"], s["in_loop"]) == (4, 2, 1100, 1400,
                                                                                                    300, 1)  # fmt: skip
    assert s["worst"]["start"] == "copy-start.0"
    assert late_copies.fix(s) == late_copies.SCAN_FIX  # half of them in a loop's body: the scan's fix
    assert late_copies.fix(s | {"in_loop": 0}) == late_copies.UNROLLED_FIX
    assert late_copies.fix(s | {"window_ns": 700}) == late_copies.LONGER_FIX  # half their transfer beside them
    assert late_copies.summary(_copies((10, 10, True)))["count"] == 0
    assert late_copies.per_step(s, 2)["waited_ns"] == 550 and late_copies.per_step(s, 2)["of"] == 2
    assert late_copies.sentence(s) == (
        "2 of 4 host-to-device copies have less compute between start and done than their transfer: 1.10 µs "
        "waited per step (1.40 µs of copying, 0.30 µs of compute beside it)"
    )
    assert late_copies.sentence(s | {"window_ns": 0}).endswith("(1.40 µs of copying, no compute beside it)")


def test_the_fixes_name_only_flags_this_jaxlib_has(aot_python):
    """Every XLA flag the advice names is one the GPU compiler of .venv-aot knows (it rejects unknown ones)."""
    import re
    import subprocess

    flags = set(re.findall(r"--(xla_[a-z_]+)", late_copies.SCAN_FIX + late_copies.UNROLLED_FIX))
    assert flags == {"xla_gpu_enable_pipelined_host_offloading", "xla_gpu_memory_limit_slop_factor"}
    code = "import jax; jax.jit(lambda x: x + 1).lower(1.0).compile()"
    env = {"XLA_FLAGS": " ".join(f"--{f}" + ("=95" if "factor" in f else "=false") for f in flags),
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    proc = subprocess.run([aot_python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    env["XLA_FLAGS"] = "--xla_gpu_enable_no_such_flag=true"
    assert subprocess.run([aot_python, "-c", code], capture_output=True, text=True, env=env, timeout=300).returncode


@pytest.fixture(scope="module")
def plans(aot_python, tmp_path_factory) -> dict[str, tuple[dict, str, Path]]:
    """``plan --target h100`` of the late step (policies ``offload`` and ``ahead``) and of the not-late one
    (``offload``): (each policy's prediction on PCIe Gen5, the plan's text, the policy's optimized HLO)."""
    out = {}
    for label, batch, policies, extra in (("late", "16384", "offload,ahead", ()), ("not late", "256", "offload",
                                                                                   NOT_LATE)):  # fmt: skip
        folder = tmp_path_factory.mktemp("late")
        args = ("plan", "--target", "h100", "--policies", policies, "--batch", batch)
        proc = run_cli(*args, "--out", str(folder / "j"), "--json", str(SCRIPT), *extra, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        preds = json.loads(proc.stdout)["plan"]["predictions"]
        text = run_cli(*args, "--out", str(folder / "t"), str(SCRIPT), *extra, timeout=900).stdout
        for p in preds:
            key = label if p["policy"] == "offload" else p["policy"]
            out[key] = (p, text, folder / "j" / f"{p['policy']}-b{batch}" / "step.hlo.txt")
    return out


def _said(text: str) -> str:
    return " ".join(text.split())


def test_plan_says_the_copies_back_of_the_scan_are_late(plans):
    pred, text, _ = plans["late"]
    s = pred["late_copies"]
    assert s["of"] == s["count"] == s["in_loop"] == 8  # one copy back a layer, each in the scan's body
    # a 64 MiB copy takes about 1 ms at 63 GB/s; a layer's backward puts a few tens of us of compute beside it
    assert 8 * 900_000 < s["transfer_ns"] < 8 * 1_200_000 and s["window_ns"] < s["transfer_ns"] / 4
    assert s["waited_ns"] == s["transfer_ns"] - s["window_ns"] <= pred["predicted_exposed_ns"]
    said = _said(text)
    assert "late copies back, offload, batch 16384, PCIe Gen5 x16: 8 of 8 host-to-device copies have less" in said
    assert " ".join(late_copies.SCAN_FIX.split()) in said
    line = said[said.index("late copies back") :]
    assert "waited per step" in line and " ms " in line


def test_fetching_one_iteration_ahead_by_hand_gives_each_copy_an_iteration_of_compute(plans):
    """The script's ``ahead``: the same activations offloaded by hand (a custom_vjp of the layer loop) and each
    fetched back one iteration before its use: no copy in the loop is late any more, the wait is under a
    quarter; what is left is the first copy, issued before the loop, which the line then says."""
    late, _, _ = plans["late"]
    ahead, text, _ = plans["ahead"]
    a, o = ahead["late_copies"], late["late_copies"]
    assert o["count"] == o["in_loop"] == 8 and a["count"] == 1 and a["in_loop"] == 0
    assert a["waited_ns"] < o["waited_ns"] / 4
    assert ahead["predicted_step_ns"] < 0.8 * late["predicted_step_ns"]
    said = _said(text)
    assert "late copies back, ahead, batch 16384, PCIe Gen5 x16: 1 of 9 host-to-device copies" in said
    assert " ".join(late_copies.UNROLLED_FIX.split()) in said  # the copy before the loop: no scan to fetch ahead in


def test_plan_says_nothing_when_the_copies_back_have_room(plans):
    pred, text, _ = plans["not late"]
    assert pred["late_copies"]["of"] == 8 and pred["late_copies"]["count"] == 0
    assert "late copies back" not in text


def test_tune_says_its_choice_has_late_copies_back(aot_python, tmp_path):
    """``--chain 16``: recomputing ``act`` costs 17 matmuls a layer (19.8 ms a step), more than its late copies
    wait (7.8 ms); under 2.8 GiB neither keeping nor recomputing it fits, so tune offloads it and says that
    its copies back are late, and what to do in a scan."""
    args = ("tune", "--target", "h100", "--link", "pcie5", "--memory-limit", "2.8GiB", "--batch", "16384",
            "--no-presets")  # fmt: skip
    proc = run_cli(*args, "--out", str(tmp_path / "j"), "--json", str(SCRIPT), "--chain", "16", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    choice = _walk(doc, "choice")
    assert choice["placements"] == {"act": "offload"}
    s = choice["late_copies"]
    assert s["of"] == s["count"] == s["in_loop"] == 8 and 0 < s["waited_ns"] <= choice["predicted_exposed_ns"]
    text = _said(run_cli(*args, "--out", str(tmp_path / "t"), str(SCRIPT), "--chain", "16", timeout=900).stdout)
    assert "late copies back: 8 of 8 host-to-device copies have less compute between start and done" in text
    assert " ".join(late_copies.SCAN_FIX.split()) in text


def _walk(doc, key: str):
    """The first value of *key* in the nested JSON *doc*."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for v in doc:
            found = _walk(v, key)
            if found is not None:
                return found
    return None


def _recorded(hlo: Path, folder: Path) -> Path:
    from profiler.predict import roofline, schedule
    from profiler.xla.hlo import parse_text
    from profiler.xla.targets import TARGETS
    from tests.helpers.recordings import Timing, record

    text = hlo.read_text()
    sched = schedule.build(parse_text(text))
    base = roofline.costs(sched, roofline.device_from_spec(TARGETS["h100"].spec_text()))
    return record(sched, base, "body", executions=3, timing=Timing(copy_gbps=63.0)).write(folder, text)


def _findings_doc(run: Path) -> dict[str, Any]:
    """``findings --json``'s document of the one run *run*."""
    proc = run_cli("findings", "--json", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_doc] = json.loads(proc.stdout)["runs"]
    return run_doc


def test_findings_say_it_on_a_recording_of_the_late_scan(plans, tmp_path):
    pred, _, hlo = plans["late"]
    run = _recorded(hlo, tmp_path / "run")
    run_doc = _findings_doc(run)
    found = [f for f in run_doc["findings"] if f["id"] == "late-copies-back"]
    assert len(found) == 1
    ev = found[0]["evidence"]
    assert ev["steps"] == 3 and ev["of"] == ev["count"] == ev["in_loop"] == 3 * 8
    # measured on the recording: what the replay of the same schedule predicted, per step, within 5%
    assert abs(ev["waited_ns"] / 3 - pred["late_copies"]["waited_ns"]) < 0.05 * pred["late_copies"]["waited_ns"]
    text = _said(run_cli("findings", str(run)).stdout)
    assert "late-copies-back" in text and "GPU 0: 8 of 8 host-to-device copies have less compute" in text
    assert " ".join(late_copies.SCAN_FIX.split()) in text


def test_findings_say_nothing_on_a_recording_of_the_roomy_scan(plans, tmp_path):
    _, _, hlo = plans["not late"]
    run = _recorded(hlo, tmp_path / "run")
    run_doc = _findings_doc(run)
    ids = {f["id"] for f in run_doc["findings"]}
    skipped = {s["rule"] for s in run_doc["skipped"]}
    assert "late-copies-back" not in ids and "late-copies-back" not in skipped  # decided: none late
