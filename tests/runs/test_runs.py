"""profiler/runs/: one reader of run folders (CLI and dashboard find the same trace under the same
id) and one analysis per run (every document of a run comes from one Breakdown)."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.recipes import mapper
from profiler.runs import result, store
from profiler.runs.discover import NoTrace, discover, trace_paths
from profiler.stored import folder
from profiler.trace import open_trace
from tests.helpers.training_traces import training_export


@pytest.fixture
def run_dir(tmp_path):
    """A finished run folder whose manifest names its export (not trace.sqlite)."""
    run = tmp_path / "runs" / "20260101T000000-offload_qkv-abc123"
    run.mkdir(parents=True)
    training_export(exposed={1: 10_000}).write(run / "mine.sqlite")
    folder.write_json(run / folder.MANIFEST, {"policy": "offload_qkv", "files": {"sqlite": "mine.sqlite"}})
    return run


def test_cli_and_dashboard_find_the_same_trace_under_the_same_id(run_dir, tmp_path):
    trace = run_dir / "mine.sqlite"
    skipped: list[NoTrace] = []
    assert trace_paths(str(run_dir.parent), skipped) == [trace] and not skipped
    (ref,) = discover([run_dir.parent])
    assert ref.trace == trace and ref.source == "run" and ref.no_trace is None
    doc = result.collect(open_trace(trace), folder.manifest_of(trace))
    assert doc["policy"] == "offload_qkv"
    assert store.record(tmp_path / "results.db", doc, "x") == ref.id == folder.run_id(trace)
    assert len(ref.id) == folder.RUN_ID_CHARS == 16


def test_a_run_folder_without_its_export_is_skipped_once(run_dir):
    (run_dir / "mine.sqlite").unlink()
    skipped: list[NoTrace] = []
    assert trace_paths(str(run_dir.parent), skipped) == [] and [s.run_dir for s in skipped] == [run_dir]
    (ref,) = discover([run_dir.parent])
    assert ref.no_trace and ref.trace.name == "trace.sqlite"


@pytest.fixture
def breakdowns(monkeypatch):
    """How many Breakdowns (attributions of a trace) are made."""
    made = []

    class Counted(Breakdown):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(result, "Breakdown", Counted)
    return made


def test_the_recipe_analyses_a_report_once(run_dir, breakdowns):
    plain, layers, steps = mapper.analyze_documents(str(run_dir / "mine.sqlite"))
    assert len(breakdowns) == 1
    assert "findings" in plain and "layers" in layers and "steps" in steps
    assert plain["devices"] == layers["devices"] == steps["devices"]


def test_every_document_of_a_run_is_a_view_of_one_analysis(run_dir, breakdowns):
    trace = open_trace(run_dir / "mine.sqlite")
    run = result.build(trace, folder.manifest_of(trace.path))
    doc, summary, ops_ranges = run.to_json(), run.summary_json(), run.timeline()
    assert len(breakdowns) == 1 and ops_ranges[0].height > 0
    assert json.dumps(summary["analysis"]) == json.dumps(run.analysis_json())
    assert doc["median_step_ns"] == summary["median_step_ns"] == run.steps.median_ns
    assert doc["copies"]["offload"] == summary["offload"]
    assert [s["name"] for s in doc["steps"]] == [r.name for r in run.steps.rows]
