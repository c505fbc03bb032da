"""The SYNTHETIC demonstration runs: what the model says moves, labelled as synthetic, and the
committed sample files equal to what the generator makes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from profiler.runs.result import analyze, collect
from profiler.synthetic.demo import ALL_NAMES, POLICIES, TRACE_FILE, Program, StepModel, demo_run, write_demo_runs
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

SAMPLES = ROOT / "sample_traces" / "demo-synthetic"
SMALL = replace(StepModel(), layers=2, steps=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("demo")
    made = write_demo_runs(folder, SMALL)
    return {json.loads((r / "manifest.json").read_text())["policy"]: r / TRACE_FILE for r in made}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_copies_are_what_the_model_offloads(runs, policy):
    doc = analyze(open_trace(runs[policy]))
    names = POLICIES[policy] or ()
    per_step = sum(SMALL.activation_bytes(n) for n in names) * SMALL.layers
    assert sorted(doc["devices"]) == ["0", "1"]
    for dev in doc["devices"].values():
        for cls in ("d2h", "h2d"):
            c = dev["copies"][cls]
            assert c["count"] == len(names) * SMALL.layers * SMALL.steps
            assert c["bytes"] == per_step * SMALL.steps
            assert c["pageable_count"] == 0
        assert dev["nccl"]["count"] == SMALL.layers * SMALL.steps  # one all-reduce per layer and step
        if names:
            assert {s["stream"]: s["classes"] for s in dev["streams"]} == {14: ["d2h"], 15: ["h2d"]}


def test_layers_and_steps_come_from_xla_and_profile_step_ranges(runs):
    trace = open_trace(runs["offload_qkv"])
    summary = collect(trace)
    assert summary["policy"] == "offload_qkv"
    assert [s["name"] for s in summary["steps"]] == [f"step={i}" for i in range(SMALL.steps)]
    assert sorted(summary["layers"]) == [f"layer_{i}" for i in range(SMALL.layers)]
    for name, layer in summary["layers"].items():
        assert not layer["inferred_index"]
        assert layer["d2h"]["count"] == 3 * SMALL.steps * SMALL.devices, name
        assert sorted(layer["devices"]) == ["0", "1"]
    assert summary["device_names"] == {"0": SMALL.gpu_name, "1": SMALL.gpu_name}
    assert "synthetic" in SMALL.gpu_name


def test_every_wait_has_an_earlier_record_of_its_event(runs):
    con = sqlite3.connect(runs["offload_all"])
    waits = con.execute(
        "SELECT s.eventId, r.start FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "USING (correlationId) WHERE s.eventId != 4294967295"
    ).fetchall()
    records = dict(
        con.execute(
            "SELECT e.eventId, r.start FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT e JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "USING (correlationId)"
        ).fetchall()
    )
    assert waits and records
    assert all(ev in records and records[ev] < t for ev, t in waits)


def test_the_model_hides_qkv_but_not_everything(runs):
    exposed = {p: collect(open_trace(runs[p]))["copies"]["offload"]["exposed_ns"] for p in POLICIES}
    assert exposed["none"] == exposed["remat"] == 0
    assert exposed["offload_qkv"] == 0
    assert exposed["offload_all"] > 0


def test_device_memory_peaks_follow_the_policies(runs):
    peak = {p: max(collect(open_trace(runs[p]))["peak_memory_bytes"].values()) for p in POLICIES}
    assert peak["none"] == max(peak.values())
    assert peak["remat"] == min(peak.values())


def test_program_checks_its_policy():
    with pytest.raises(ValueError, match="unknown policy"):
        Program(SMALL, "offload_everything")
    assert set(POLICIES["offload_all"] or ()) == set(ALL_NAMES)


def test_never_overwrites(tmp_path):
    demo_run(SMALL, "none", tmp_path / "a.sqlite")
    with pytest.raises(FileExistsError):
        demo_run(SMALL, "none", tmp_path / "a.sqlite")
    write_demo_runs(tmp_path / "runs", SMALL, ("none",))
    with pytest.raises(FileExistsError):
        write_demo_runs(tmp_path / "runs", SMALL, ("none",))


def _tables(path: Path) -> dict[str, list[tuple]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    return {n: con.execute(f'SELECT * FROM "{n}" ORDER BY rowid').fetchall() for n in names}


def test_committed_samples_are_what_the_generator_makes(tmp_path):
    committed = sorted(SAMPLES.glob("synthetic-*"))
    assert [p.name for p in committed] == [f"synthetic-{i}-{p}" for i, p in enumerate(POLICIES)]
    fresh = write_demo_runs(tmp_path)
    for old, new in zip(committed, fresh, strict=True):
        assert old.name == new.name
        assert json.loads((old / "manifest.json").read_text()) == json.loads((new / "manifest.json").read_text())
        assert _tables(old / TRACE_FILE) == _tables(new / TRACE_FILE), old.name


def test_the_script_labels_and_refuses_to_overwrite(tmp_path):
    script = [sys.executable, "scripts/make_demo_traces.py"]

    args = ["--out", str(tmp_path), "--layers", "1", "--steps", "1", "--policies", "none"]
    first = subprocess.run([*script, *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert "synthetic" in first.stdout
    again = subprocess.run([*script, *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1
    proc = run_cli("analyze", str(tmp_path / "synthetic-0-none" / TRACE_FILE))
    assert proc.returncode == 0 and "(synthetic)" in proc.stdout
