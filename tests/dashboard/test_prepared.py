"""What the dashboard prepares once per run: the what-if's replay graph (``dashboards.replay_graph``: kept
beside the run's cached analysis, every what-if from it the same document as ``whatif.trace_whatif``) and
the copies of each layer (``Analysis.layer_copies``)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dashboards import replay_graph
from dashboards.data import RunStore
from profiler.analysis.whatif import trace_whatif
from profiler.trace import load_trace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRACES = [
    SAMPLES / "public" / "nsysai__h100_2gpu_1s.sqlite",  # two GPUs, event waits
    SAMPLES / "demo-synthetic" / "synthetic-2-offload_qkv" / "synthetic-trace.sqlite",  # steps and layers
    SAMPLES / "public" / "flexgen__profile_name.sqlite",  # synchronous copies, no steps
]


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_a_kept_graph_gives_trace_whatifs_document(tmp_path, trace):
    ops = tmp_path / "run.ops.parquet"
    ops.write_bytes(b"the cached analysis")
    replay_graph.save(replay_graph.ReplayGraph.of(load_trace(trace)), ops)
    kept = replay_graph.load(ops)
    assert kept is not None
    for factor in (0.0, 0.5, 1.0, 3.0):
        for host in (True, False):
            assert kept.whatif(factor, host) == trace_whatif(load_trace(trace), factor, model_host=host)


def test_steps_are_replayed_from_the_graph(tmp_path):
    """The demo run has steps: the graph keeps them, and copies three times slower make every step longer."""
    graph = replay_graph.ReplayGraph.of(load_trace(TRACES[1]))
    assert graph.steps is not None and graph.steps.height == 3
    steps = graph.whatif(3.0)["devices"]["0"]["steps"]
    assert len(steps) == 3 and all(s["predicted_ns"] > s["measured_ns"] for s in steps)


def test_a_stale_or_damaged_graph_is_made_again(tmp_path):
    ops = tmp_path / "run.ops.parquet"
    ops.write_bytes(b"one analysis")
    trace = load_trace(TRACES[1])
    replay_graph.save(replay_graph.ReplayGraph.of(trace), ops)
    assert replay_graph.load(ops) is not None
    ops.write_bytes(b"another analysis, longer")  # the run analyzed again: the graph belongs to the old one
    assert replay_graph.load(ops) is None
    replay_graph.path_for(ops).write_bytes(b"not an npz")
    assert replay_graph.load(ops) is None
    made = replay_graph.prepared(trace, ops)  # made again and kept
    assert replay_graph.load(ops) is not None
    assert made.whatif(0.5) == trace_whatif(trace, 0.5)


def test_a_kept_graph_serves_without_opening_the_trace(tmp_path):
    """The what-if process hands ``prepared`` a function that opens the trace: a current kept graph
    serves without calling it; a missing one calls it once."""
    ops = tmp_path / "run.ops.parquet"
    ops.write_bytes(b"one analysis")
    trace = load_trace(TRACES[1])
    opened: list[int] = []

    def opening():
        opened.append(1)
        return trace

    made = replay_graph.prepared(opening, ops)
    assert opened == [1] and replay_graph.load(ops) is not None
    again = replay_graph.prepared(opening, ops)
    assert opened == [1] and again.whatif(0.5) == made.whatif(0.5)


def test_only_profilers_own_classes_are_rebuilt(tmp_path):
    arrays: dict[str, np.ndarray] = {}
    doc = replay_graph.encode(replay_graph.ReplayGraph.of(load_trace(TRACES[1])), "g", arrays)
    doc["class"] = "os:_wrap_close"  # a class of another module: refused, not called
    with pytest.raises(ValueError, match="not one of profiler's dataclasses"):
        replay_graph.decode(doc, arrays)


def wait_for(rs: RunStore, rid: str, factor: float) -> tuple[str, object]:
    """The what-if of *rid* at *factor*, once the dashboard's what-if process has it (at most 60 s)."""
    for _ in range(600):
        state, doc = rs.whatifs.get(rid, factor)
        if state != "computing":
            return state, doc
        time.sleep(0.1)
    return state, doc


def test_the_dashboards_what_if_process_keeps_the_graph(tmp_path):
    """The dashboard's analysis of a run keeps its replay graph (made from that analysis); the what-if
    process (a real one) replays from it, on this start and the next, and never makes it again."""
    trace = tmp_path / "run.sqlite"
    shutil.copy(TRACES[1], trace)
    rs = RunStore([trace])
    (rid,) = rs.refs
    kept = replay_graph.path_for(rs.get(rid).ops_path)
    assert kept.is_file()  # made with the analysis
    made = kept.stat().st_mtime_ns
    try:
        state, doc = wait_for(rs, rid, 0.5)
        assert state == "done" and doc == trace_whatif(load_trace(trace), 0.5)
    finally:
        rs.close()
    again = RunStore([trace])
    try:
        state, doc = wait_for(again, rid, 2.0)  # a factor not computed yet: a replay, from the kept graph
        assert state == "done" and doc == trace_whatif(load_trace(trace), 2.0)
        assert kept.stat().st_mtime_ns == made
    finally:
        again.close()


def test_a_layers_copies_come_from_the_runs_split_once(tmp_path):
    """The Per layer tab's details: each layer's copies from the run's copies split by layer once, the same
    rows as a pass over every op of the run (layer, GPU and copy direction filtered, by start)."""
    trace = tmp_path / "run.sqlite"
    shutil.copy(TRACES[1], trace)
    rs = RunStore([trace])
    (rid,) = rs.refs
    run = rs.get(rid)
    ops = run.ops
    layers = ops.filter(pl.col("cls").is_in(["h2d", "d2h"]))["layer"].drop_nulls().unique().to_list()
    assert len(layers) > 3
    cols = ["cls", "stream", "start", "end", "bytes"]
    for layer in [*layers, "no such layer"]:
        for device in (None, *ops["device"].unique().to_list()):
            sel = ops.filter((pl.col("layer") == layer) & pl.col("cls").is_in(["h2d", "d2h"]))
            if device is not None:
                sel = sel.filter(pl.col("device") == device)
            want = sel.sort("start", maintain_order=True).select(cols)
            assert run.layer_copies(layer, device).select(cols).equals(want)
    assert run.t0 == ops["start"].min()
    rs.close()
