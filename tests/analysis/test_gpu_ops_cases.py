"""``dependencies.gpu_ops`` (every valid kernel, copy and memset in stream order) on exports built with
known answers, derived by hand: cases found by mutation testing of dependencies.py (docs/testing.md).
GPU ops [start, end) in ns; a launch is the start of the runtime row of the same process and
correlation id."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.dependencies import COMPUTE, D2H, H2D, MEMSET, NCCL, NO_TIME, OTHER_COPY, gpu_ops
from profiler.synthetic.export import ExportBuilder, global_tid
from profiler.trace import open_trace


def _export(launched: bool) -> ExportBuilder:
    """Processes 100 and 200, in input order (correlation id in brackets):
    kernels  K0 [1] dev0 s7  [100,200)  launched at 50 by thread 100
             K1 [2] dev0 s7  [300,300)  launched at 250 by thread 101 (zero length: valid)
             K2 [3] dev0 s7  [150,140)  ends before it starts: not an op
             K3 [4] dev1 s20 [400,500)  ncclAllReduce, launched at 350 by thread 100
             K4 [1] dev1 s20 [100,120)  process 200 (the same id as K0), launched at 70 by its thread 200
             K5 [2] dev1 s20 [130,150)  process 200 (the same id as K1), launched at 80 by thread 200
    copies   Ca [11] d2h   dev0 s20 [210,230)  launched at 206
             Cb [10] h2d   dev0 s20 [210,260)  launched at 205 (the same start as Ca, a lower id)
             Cc [12] d2d   dev0 s20 [600,700)  no runtime row
    memsets  M0 [13]       dev0 s7  [90,95)    launched at 80
    Without *launched*, no runtime row at all (the export then has no runtime table)."""
    b = ExportBuilder()
    b.gpu(0)
    b.gpu(1)
    ops = [
        (b.kernel(100, 200, "fusion", stream=7, correlation=1), 50, 100, 100),
        (b.kernel(300, 300, "fusion", stream=7, correlation=2), 250, 100, 101),
        (b.kernel(150, 140, "fusion", stream=7, correlation=3), None, 100, 100),
        (b.kernel(400, 500, "ncclAllReduce", device=1, stream=20, correlation=4), 350, 100, 100),
        (b.kernel(100, 120, "fusion", device=1, stream=20, correlation=1, pid=200), 70, 200, 200),
        (b.kernel(130, 150, "fusion", device=1, stream=20, correlation=2, pid=200), 80, 200, 200),
        (b.copy(210, 230, "d2h", stream=20, correlation=11), 206, 100, 100),
        (b.copy(210, 260, "h2d", stream=20, correlation=10), 205, 100, 100),
        (b.copy(600, 700, "d2d", stream=20, correlation=12), None, 100, 100),
        (b.memset(90, 95, stream=7, correlation=13), 80, 100, 100),
    ]
    for corr, t, pid, tid in ops:
        if launched and t is not None:
            b.runtime(t, t + 3, corr, pid=pid, tid=tid)
    return b


# Stream order: by process, device, stream, then start, then correlation id:
#   process 100 dev0 s7: M0 (90), K0 (100), K1 (300);  dev0 s20: Cb (210, id 10), Ca (210, id 11),
#   Cc (600);  dev1 s20: K3;  process 200 dev1 s20: K4, K5.  From one stream to the next only one
#   of process, device and stream changes (s7 to s20, dev0 to dev1, 100 to 200).
# row: each op's place among the valid kernels, copies and memsets in input order
#   (K0 0, K1 1, K3 2, K4 3, K5 4, Ca 5, Cb 6, Cc 7, M0 8).
EXPECTED = {
    "pid": [100, 100, 100, 100, 100, 100, 100, 200, 200],
    "device": [0, 0, 0, 0, 0, 0, 1, 1, 1],
    "stream": [7, 7, 7, 20, 20, 20, 20, 20, 20],
    "start": [90, 100, 300, 210, 210, 600, 400, 100, 130],
    "end": [95, 200, 300, 260, 230, 700, 500, 120, 150],
    "corr": [13, 1, 2, 10, 11, 12, 4, 1, 2],
    "kind": [MEMSET, COMPUTE, COMPUTE, H2D, D2H, OTHER_COPY, NCCL, COMPUTE, COMPUTE],
    "skey": [0, 0, 0, 1, 1, 1, 2, 3, 3],
    "row": [8, 0, 1, 6, 5, 7, 2, 3, 4],
}
# launch: the runtime row's start (of the op's own process), NO_TIME for Cc (no row); gtid: that
# row's thread, -1 for Cc
G100, G101, G200 = global_tid(100, 100), global_tid(100, 101), global_tid(200, 200)
LAUNCH = [80, 50, 250, 205, 206, NO_TIME, 350, 70, 80]
GTID = [G100, G100, G101, G100, G100, -1, G100, G200, G200]
# pid, device, stream, correlation id, skey and row fit in int32, kind in int8; times and threads int64
DTYPES = {"pid": np.int32, "device": np.int32, "stream": np.int32, "corr": np.int32, "kind": np.int8}
DTYPES |= {"start": np.int64, "end": np.int64, "launch": np.int64, "gtid": np.int64}
DTYPES |= {"skey": np.int32, "row": np.int32}


@pytest.mark.parametrize("launched", [True, False])
def test_gpu_ops_by_hand(build, launched):
    ops = gpu_ops(open_trace(build(_export(launched))))
    assert len(ops) == 9
    for name, values in EXPECTED.items():
        assert getattr(ops, name).tolist() == values, name
    assert ops.launch.tolist() == (LAUNCH if launched else [NO_TIME] * 9)
    assert ops.gtid.tolist() == (GTID if launched else [-1] * 9)
    assert {k: getattr(ops, k).dtype for k in DTYPES} == DTYPES
    # one row a stream, numbered in stream order
    assert ops.streams.to_dict(as_series=False) == {
        "skey": [0, 1, 2, 3],
        "pid": [100, 100, 100, 200],
        "device": [0, 0, 1, 1],
        "stream": [7, 20, 20, 20],
    }


def test_gpu_ops_reads_the_runtime_rows_it_is_given(build):
    # the runtime rows at hand are used as they are, not read again from the trace: without K0's
    # row (process 100, id 1), K0 (stream-order row 1) has no launch; K4 (process 200, id 1) keeps its own
    trace = open_trace(build(_export(True)))
    rt = trace.runtime
    ops = gpu_ops(trace, rt.filter(~((rt["pid"] == 100) & (rt["correlation_id"] == 1))))
    assert ops.launch.tolist() == [80, NO_TIME, 250, 205, 206, NO_TIME, 350, 70, 80]
    assert ops.gtid.tolist() == [G100, -1, G101, G100, G100, -1, G100, G200, G200]
