"""stored/summary.py: a run's stored document read back typed (``RunSummary.from_json``) is the fresh
run's summary, compare and the policy table read both alike, and a document of an older version
(without the keys added since) still reads."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.compare import DEFAULT_THRESHOLDS, compare, parse_threshold
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.policies import policy_table
from profiler.analysis.ranks import cross_rank
from profiler.runs import result, store
from profiler.stored import folder
from profiler.stored.summary import RunSummary, StepRow
from profiler.trace import open_trace
from tests.helpers.training_traces import training_export

THRESHOLDS = [parse_threshold(t) for t in DEFAULT_THRESHOLDS]


def _round_trip(run: result.RunResult) -> tuple[RunSummary, RunSummary]:
    """(the fresh summary, the one read back from the JSON the results database keeps)."""
    return run.summary(), RunSummary.from_json(json.loads(json.dumps(run.to_json(), default=str)))


@pytest.fixture
def built(tmp_path):
    path = tmp_path / "trace.sqlite"
    training_export(exposed={1: 10_000, 2: 30_000}, waits=True).write(path)
    return result.build(open_trace(path), {"policy": "offload_qkv", "rank": 3}, findings=FindingsConfig())


def test_a_stored_run_reads_back_as_the_fresh_summary(built, tmp_path):
    fresh, stored = _round_trip(built)
    assert stored == fresh
    doc = built.to_json()
    assert json.dumps(stored.to_json()) == json.dumps(json.loads(json.dumps(doc)))  # given back unchanged
    # the named parts are the document's, typed
    assert fresh.policy == "offload_qkv" and fresh.rank == 3 and fresh.trace == doc["trace"]
    assert fresh.steps == built.steps.rows and all(isinstance(s, StepRow) for s in fresh.steps)
    assert [s.name for s in fresh.included_steps] == [s["name"] for s in doc["steps"] if not s["excluded"]]
    assert fresh.offload == built.copies()["offload"] and fresh.offload["exposed_ns"] > 0
    assert fresh.device_ids == sorted(built.devices, key=int) and fresh.gpu_ran
    dev = fresh.device_ids[0]
    assert fresh.device_stalls(dev) == built.devices[dev]["stalls"] and fresh.device_stalls(None) == {}
    assert set(fresh.layers) == set(built.layers)
    for name, layer in fresh.layers.items():
        assert layer.copies == built.layers[name].copies and layer.inferred_index == built.layers[name].inferred_index
    assert fresh.finding_list == (built.findings or {}).get("findings")
    assert fresh.kernel_excess_ns == doc["kernel_excess_ns"]
    # through the results database: the same summary, the same comparison
    db = tmp_path / "results.db"
    store.record(db, fresh, "base")
    (loaded,) = store.load_label(db, "base")
    assert RunSummary.from_json(loaded) == fresh
    assert json.dumps(compare([loaded], [fresh], THRESHOLDS)) == json.dumps(compare([fresh], [fresh], THRESHOLDS))


def test_a_shared_trace_round_trips(shared_traces):
    path = shared_traces / "flexgen__nsight_report3.sqlite"
    run = result.build(open_trace(path), folder.manifest_of(path), findings=FindingsConfig())
    fresh, stored = _round_trip(run)
    assert stored == fresh
    assert fresh.steps == run.steps.rows and fresh.copies == run.copies()
    assert fresh.device_ids == sorted(run.devices, key=int)


OPTIONAL = (  # keys run documents gained over time; a stored document may lack any of them
    "rank",
    "findings",
    "manifest",
    "device_names",
    "window",
    "step_source",
    "streams",
    "stalls",
    "stall_ns",
    "kernels_beside_copies",
    "kernel_excess_ns",
    "peak_memory_bytes",
    "compute",
    "work",
    "compiled",
    "copy_ops",
)


def test_a_document_of_an_older_version_still_reads(built, tmp_path):
    doc = built.to_json()
    old = {k: v for k, v in doc.items() if k not in OPTIONAL}
    old["steps"] = [{k: v for k, v in s.items() if k != "busy_ns"} for s in doc["steps"]]
    keep = ("inferred_index", "h2d", "d2h", "offload")  # without the top kernels and per-device numbers
    old["layers"] = {n: {k: v[k] for k in keep} for n, v in doc["layers"].items()}
    run = RunSummary.from_json(old)
    assert run.to_json() == old  # stored again unchanged
    assert run.findings is None and run.finding_list == [] and run.kernel_excess_ns is None
    assert run.compiled is None and run.step_flops is None and run.work is None and run.rank is None
    assert [s.busy_ns for s in run.steps] == [None] * len(doc["steps"])
    assert [s.exposed_ns for s in run.steps] == [s["exposed_ns"] for s in doc["steps"]]
    assert run.device_stalls("0") == {} and run.layers and all(v.top_kernels == [] for v in run.layers.values())
    assert all(v.top_kernels_by_device is None for v in run.layers.values())  # not recorded: not "none"
    fresh = RunSummary.from_json(doc).layers
    assert all(v.top_kernels_by_device == doc["layers"][n]["top_kernels_by_device"] for n, v in fresh.items())
    # the consumers read it as they read a fresh one: recorded-without means not measured, not 0
    cmp = compare([old], [doc], THRESHOLDS)
    (pol,) = cmp["policies"]
    assert pol["metrics"]["exposed_ns"]["delta"] == 0 and pol["findings"]["recorded"] == {"base": False, "head": True}
    assert pol["metrics"]["kernel_excess_ns"]["base"] is None and pol["metrics"]["flops_per_step"]["head"] is None
    (row,) = policy_table([old])["rows"]
    assert row["median_step_ns"] == doc["median_step_ns"] and row["flops_per_step"] is None
    assert row["exposed_ns"] == policy_table([doc])["rows"][0]["exposed_ns"]
    db = tmp_path / "old.db"
    store.record(db, old, "old")
    assert store.load_label(db, "old") == [old]


def test_ranks_read_the_per_rank_task_and_full_documents_alike(built):
    doc = built.to_json()
    small = {  # what the per-rank task returns (runs.result.rank_result)
        "path": "r3.sqlite",
        "rank": 3,
        "policy": doc["policy"],
        "median_step_ns": doc["median_step_ns"],
        "copies": doc["copies"],
        "devices": doc["devices"],
        "layers": {n: {d: v[d] for d in ("h2d", "d2h", "offload")} for n, v in doc["layers"].items()},
    }
    full = {**doc, "path": "r3.sqlite"}
    assert cross_rank([small]) == cross_rank([full])
    assert cross_rank([small])["per_rank"][0]["exposed_ns"] == doc["copies"]["offload"]["exposed_ns"]
