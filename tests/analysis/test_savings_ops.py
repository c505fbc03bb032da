"""How savings.py finds a frame's ops among the replay's ops, and the host-paced chain's ties, on
exports built with known answers, derived by hand: the last survivors of the mutation testing of
savings.py (docs/testing.md, ``savings``).  Host calls at t on one thread, GPU ops [start, end)."""

from __future__ import annotations

import sqlite3

import numpy as np
import polars as pl
import pytest

from profiler.analysis.replay import NO_CHANGE
from profiler.analysis.whatif import OP_KEYS
from profiler.synthetic.export import ExportBuilder
from tests.helpers.findings_runs import MIB, TID, launched
from tests.helpers.savings_exports import replays


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """GPU 0: kernel K launched at 0 runs [100, 200) ns on stream 7; an h2d copy launched at 10 runs
    [300, 400) ns on stream 20.  GPU 1, stream 20: two kernels with the same five keys (pid 100,
    device 1, stream 20, correlation 99, start 5 us), one of zero length, one to 6 us.  Its replays,
    and those of the same export with the zero-length kernel's correlationId NULL (``nulled``)."""
    folder = tmp_path_factory.mktemp("twins")
    b = ExportBuilder()
    launched(b, 0, "kernel", 100, 200, "K")
    launched(b, 10, "copy", 300, 400, "h2d", MIB, stream=20)
    b.kernel(5_000, 5_000, "a", correlation=99, device=1, stream=20)
    b.kernel(5_000, 6_000, "b", correlation=99, device=1, stream=20)
    path = b.write(folder / "trace.sqlite")
    nulled = b.write(folder / "nulled.sqlite")
    con = sqlite3.connect(nulled)
    with con:
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL "
            "WHERE shortName = (SELECT id FROM StringIds WHERE value = 'a')"
        )
    con.close()
    return replays(path), replays(nulled)


def test_two_ops_with_the_same_keys_are_not_keyed_by_position(twins):
    r, _ = twins
    ops = r.deps.ops
    assert sorted(ops.start.tolist()) == [100, 300, 5_000, 5_000]  # both twins are ops
    # by position each twin would get its own row; the join pairs each with both: not the same
    # answer, so there is no keyed-by-position frame (the check of the keys' uniqueness)
    bd = r.breakdown.ops.select("op_id", *OP_KEYS).with_columns(pl.lit(0, pl.Int64).alias("index"))
    assert r._keyed_by_position(bd) is None
    assert r.rows_of_ops(bd).tolist() == [0, 1, 2, 3]
    # an op_id past the last op (4 ops: 0-3, here 1-4) cannot be read by position: the join answers
    assert r.rows_of_ops(bd.with_columns(pl.col("op_id") + 1)).tolist() == [0, 1, 2, 3]
    assert r._keyed_by_position(bd.with_columns(pl.col("op_id") + 1)) is None


def test_op_rows_by_key_keeps_one_op_per_picked_row(twins):
    r, _ = twins
    ops = r.deps.ops
    # the kernels in reverse: positions name other ops (starts differ), so the rows are found by key:
    # row 0 (twin b) matches both twins, and is given one of them (the first), row 2 K
    k = r.trace.kernel_ops.reverse()
    found, rows = r.op_rows(k, np.arange(3), "kernel")
    assert found.dtype == bool and found.tolist() == [True, True, True]
    assert rows.size == 3 and ops.start[rows].tolist() == [5_000, 5_000, 100]
    assert ops.device[rows].tolist() == [1, 1, 0]


def test_op_rows_checks_every_key_and_its_bounds(twins):
    r, _ = twins
    ops = r.deps.ops
    # no row picked: nothing found, no row
    found, rows = r.op_rows(r.trace.kernel_ops, np.zeros(0, dtype=np.int64), "kernel")
    assert found.dtype == bool and found.size == 0 and rows.size == 0
    # each kernel 1 ns later: same device and correlation at each position, but no op starts there:
    # by key none is found
    later = r.trace.kernel_ops.with_columns(pl.col("start") + 1, pl.col("end") + 1)
    found, rows = r.op_rows(later, np.arange(3), "kernel")
    assert found.dtype == bool and found.tolist() == [False, False, False] and rows.size == 0
    # the copy, then one more valid copy row: its position (1 among the copies, 3 + 1 = 4 among the
    # ops after the 3 valid kernels) is past the 4 ops: by key, the copy found and the other not
    copies = r.trace.copies
    more = pl.concat([copies, copies.with_columns(pl.col("start") + 1_000, pl.col("end") + 1_000)])
    found, rows = r.op_rows(more, np.arange(2), "copy")
    assert found.dtype == bool and found.tolist() == [True, False]
    assert ops.start[rows].tolist() == [300]


def test_an_op_without_a_correlation_id_is_found_by_key(twins):
    _, r = twins
    ops = r.deps.ops
    # twin a's correlationId is NULL (read as -1 in the ops and in the keys): the twins no longer
    # share their keys, and each kernel row is found as itself
    k = r.trace.kernel_ops
    assert k["correlation_id"].null_count() == 1
    got = r.rows_of(k)
    assert sorted(ops.start[got].tolist()) == [100, 5_000, 5_000] and sorted(ops.corr[got].tolist()) == [-1, 1, 99]
    found, rows = r.op_rows(k.reverse(), np.arange(3), "kernel")  # by key (positions name other ops)
    assert found.tolist() == [True, True, True]
    assert ops.corr[rows].tolist() == k.reverse()["correlation_id"].fill_null(-1).to_list()
    # by position (the kernels as the trace reads them): the same ops, the NULL key matching the
    # op's -1; the breakdown's ops by the join (the twins still share device, stream and start)
    found, rows = r.op_rows(k, np.arange(3), "kernel")
    assert found.tolist() == [True, True, True]
    assert ops.corr[rows].tolist() == k["correlation_id"].fill_null(-1).to_list()
    bd = r.breakdown.ops.select("op_id", *OP_KEYS).with_columns(pl.lit(0, pl.Int64).alias("index"))
    assert r._keyed_by_position(bd) is None and r.rows_of_ops(bd).tolist() == [0, 1, 2, 3]


def test_the_host_paced_chain_takes_the_latest_input_and_ties_to_the_stream(tmp_path):
    """Each GPU's chain from its last op (stream 7 kernels, a copy on stream 20 that K2 waits for).
    GPU 0: K launched at 0 runs [100, 200): alone, 200 ns before the end, 1 op.
    GPU 1: K1 launched at 0 runs [0.1, 10.1) us; copy C launched at 10 ns runs [1, 5) us; K2,
    launched at 7 us after the wait for C, runs [10.1, 10.2) us behind K1.  K2's latest input is K1
    (10.1 us; C ended at 5 us), later than its launch: K1, launched at 0: 10.2 us, 2 ops.
    GPU 2: the same with C ending at 10.1 us, as K1 does: a tie goes to the op before on the stream
    (K1): 10.2 us, 2 ops (through C, launched at 10 ns: 10.19 us).
    GPU 3: K1 as on GPU 1; K2 launched at 10.1 us, as K1 ends, runs [10.2, 10.3) us: a launch that
    ties with the latest end paces the op: 10.3 - 10.1 = 0.2 us, 1 op."""
    b = ExportBuilder()
    launched(b, 0, "kernel", 100, 200, "K")
    for dev, c_end in ((1, 5_000), (2, 10_100)):
        launched(b, 0, "kernel", 100, 10_100, "K1", device=dev)
        launched(b, 10, "copy", 1_000, c_end, "h2d", MIB, device=dev, stream=20)
        b.event_record(50, dev, device=dev, stream=20, tid=TID)
        b.stream_wait(60, dev, device=dev, stream=7, tid=TID)
        launched(b, 7_000, "kernel", 10_100, 10_200, "K2", device=dev)
    launched(b, 0, "kernel", 100, 10_100, "K1", device=3)
    launched(b, 10_100, "kernel", 10_200, 10_300, "K2", device=3)
    r = replays(b.write(tmp_path / "trace.sqlite"))
    assert r.host_paced(NO_CHANGE, 0) == {"before_end_ns": 200, "ops": 1, "call": -1}
    assert r.host_paced(NO_CHANGE, 1) == {"before_end_ns": 10_200, "ops": 2, "call": -1}
    assert r.host_paced(NO_CHANGE, 2) == {"before_end_ns": 10_200, "ops": 2, "call": -1}
    assert r.host_paced(NO_CHANGE, 3) == {"before_end_ns": 200, "ops": 1, "call": -1}
