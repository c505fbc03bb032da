"""Exports for the savings' tests: generated changes, and replays of one export."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.savings import Replays
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.findings_runs import MIB, TID, launched


@st.composite
def exports(draw) -> ExportBuilder:
    """Two GPUs, a compute and a copy stream each, copies that kernels wait for (events), launches on
    one thread with a stream synchronize now and then: a GPU-bound or host-bound timeline by chance."""
    b = ExportBuilder()
    n = draw(st.integers(2, 14))
    t_host = 0
    gpu_free = {(d, s): 0 for d in (0, 1) for s in (7, 20)}
    event = 0
    for _ in range(n):
        dev = draw(st.sampled_from([0, 1]))
        t_host += draw(st.integers(1, 3_000))
        kind = draw(st.sampled_from(["kernel", "copy", "copy_then_kernel", "sync"]))
        if kind == "sync":
            stream = 7
            end = max(t_host, gpu_free[(dev, stream)]) + draw(st.integers(0, 200))
            b.sync(t_host, "stream_sync", device=dev, stream=stream, tid=TID, duration=max(60, end - t_host))
            t_host = end + 60
            continue
        stream = 7 if kind == "kernel" else 20
        dur = draw(st.integers(0, 20_000))
        start = max(t_host + draw(st.integers(0, 2_000)), gpu_free[(dev, stream)] + draw(st.integers(0, 500)))
        cls = draw(st.sampled_from(["h2d", "d2h"]))
        if kind == "kernel":
            launched(b, t_host, "kernel", start, start + dur, "k", device=dev, stream=stream)
        else:
            launched(b, t_host, "copy", start, start + dur, cls, MIB, device=dev, stream=stream)
        gpu_free[(dev, stream)] = start + dur
        if kind == "copy_then_kernel":
            event += 1
            b.event_record(t_host + 10, event, device=dev, stream=20, tid=TID)
            b.stream_wait(t_host + 20, event, device=dev, stream=7, tid=TID)
            t_host += 30
            k0 = max(t_host + 100, gpu_free[(dev, 7)], start + dur) + draw(st.integers(0, 300))
            k1 = k0 + draw(st.integers(0, 20_000))
            launched(b, t_host, "kernel", k0, k1, "consumer", device=dev, stream=7)
            gpu_free[(dev, 7)] = k1
    b.kernel(0, 1, "first", device=0, stream=9)
    b.kernel(0, 1, "first", device=1, stream=9)
    return b


def subset(draw, rows: np.ndarray) -> np.ndarray:
    keep = draw(st.lists(st.booleans(), min_size=rows.size, max_size=rows.size))
    return rows[np.array(keep, dtype=bool)] if rows.size else rows


def replays(path) -> Replays:
    trace = open_trace(path)
    return Replays(trace, Breakdown(trace))
