"""Launched ops and a prefetch that stalls, for the costs' tests (runtime rows with their process and thread)."""

from __future__ import annotations

from profiler.synthetic.export import ExportBuilder

MIB = 1 << 20


def launched(b: ExportBuilder, t: int, op: str, *args, tid: int = 100, pid: int = 100, **kw) -> int:
    """An op (``kernel``/``copy``/``memset``) with its runtime row at host time *t*."""
    corr = getattr(b, op)(*args, pid=pid, **kw)
    name = {"kernel": "cuLaunchKernel", "copy": "cuMemcpyAsync", "memset": "cuMemsetD8Async"}[op]
    b.runtime(t, t + 5, corr, name=name, pid=pid, tid=tid)
    return corr


def prefetch_stall(b: ExportBuilder, b_start: int = 1210) -> None:
    """The picture below, B recorded starting at *b_start*."""
    # host:   50 launch A (s7)   100 launch H2D (s20)   150 record e5 on s20
    #         160 wait e5 on s7 (t_w 170)                300 launch B (s7)
    # s7      A [60,500)                          B [1210,1500)
    # s20              H2D [200,1200) 8 MiB
    # B: ready = max(A.end 500, launch 300) = 500; dep = 1200 -> stall = min(1210,1200) - 500 = 700
    b.gpu(0)
    launched(b, 50, "kernel", 60, 500, "fusion_a", stream=7)
    launched(b, 100, "copy", 200, 1200, "h2d", 8 * MIB, stream=20)
    b.event_record(150, 5, stream=20)
    b.stream_wait(160, 5, stream=7)
    launched(b, 300, "kernel", b_start, 1500, "fusion_b", stream=7)
