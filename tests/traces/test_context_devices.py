"""``Trace.context_devices``: the one device of each CUDA context's ops (METRICS.md, Stalls,
Inputs), taken from the GPU activity tables' reads (their contextId read beside them) or, when
those reads did not take every table whole, by one SQL scan: the same table either way."""

from __future__ import annotations

import polars as pl

from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from profiler.trace.loader import CONTEXT_COLUMN, CONTEXT_TABLES

# (pid, context, device) by hand: context 2 of pid 100 ran ops on GPUs 1 and 2 (left out), context 1
# of pid 200 is another process's context 1
EXPECTED = [(100, 1, 0), (200, 1, 3)]


def _export(tmp_path, omit: tuple[str, ...] = ()):
    b = ExportBuilder(omit=omit)
    b.kernel(1_000, 2_000, device=0, context=1)
    b.copy(2_000, 3_000, "h2d", device=0, context=1)
    b.kernel(1_000, 2_000, device=1, context=2)
    b.memset(3_000, 4_000, device=2, context=2)
    b.kernel(5_000, 6_000, device=3, context=1, pid=200)
    return b.write(tmp_path / "ctx.sqlite")


def _rows(df: pl.DataFrame) -> list[tuple[int, int, int]]:
    return sorted(df.select("pid", "context", "device").iter_rows())


def test_by_sql_when_read_first(tmp_path):
    trace = open_trace(_export(tmp_path))
    assert _rows(trace.context_devices) == EXPECTED
    assert trace._contexts == {}


def test_from_the_reads_of_the_gpu_tables(tmp_path):
    trace = open_trace(_export(tmp_path))
    frames = [trace.kernel_ops, trace.copies, trace.memsets]
    assert all(CONTEXT_COLUMN not in f.columns for f in frames)
    assert set(trace._contexts) == set(CONTEXT_TABLES)  # taken by the reads: no SQL scan left
    got = trace.context_devices
    assert _rows(got) == EXPECTED
    assert got.schema == open_trace(trace.path).context_devices.schema


def test_a_table_without_contexts_leaves_it_out_both_ways(tmp_path):
    # without the memsets' contextId, context 2 of pid 100 names one GPU (its kernel's)
    path = _export(tmp_path, omit=("CUPTI_ACTIVITY_KIND_MEMSET.contextId",))
    by_sql = open_trace(path).context_devices
    trace = open_trace(path)
    _ = trace.kernel_ops, trace.copies, trace.memsets
    assert _rows(trace.context_devices) == _rows(by_sql) == sorted([*EXPECTED, (100, 2, 1)])
