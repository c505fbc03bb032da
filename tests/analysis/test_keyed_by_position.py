"""The savings' per-step outcome finds each step op's row of the dependency pass by position
(``Replays._keyed_by_position``): it must give the frame the five-key join gives
(``whatif.keyed_step_ops``), and give way to the join where it cannot show that."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.savings import Replays
from profiler.analysis.whatif import OP_KEYS, keyed_step_ops, step_frames
from profiler.trace import open_trace

RUN = Path(__file__).resolve().parents[2] / "sample_traces" / "demo-synthetic" / "synthetic-2-offload_qkv"


def test_by_position_is_the_joins_frame_and_gives_way_to_it():
    trace = open_trace(RUN / "synthetic-trace.sqlite")
    bd = Breakdown(trace)
    r = Replays(trace, bd)
    frames = step_frames(bd)
    assert frames is not None
    _, step_ops = frames
    joined = keyed_step_ops(r.deps.ops, step_ops.select("index", *OP_KEYS))
    got = r._keyed_by_position(step_ops)
    assert got is not None and joined.height > 0
    assert got.sort("row").equals(joined.sort("row"))
    # an op pointed at another op's row: its keys differ, so the join decides
    wrong = step_ops.with_columns(pl.col("op_id").reverse())
    assert r._keyed_by_position(wrong) is None
    # no op rows to go by: the join
    assert r._keyed_by_position(step_ops.drop("op_id")) is None
