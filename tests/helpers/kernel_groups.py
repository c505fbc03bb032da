"""Groups of one kernel, alone and beside copies, for the kernels-slowed tests."""

from __future__ import annotations

from profiler.synthetic.export import ExportBuilder

MIB = 1 << 20


def group(name: str, alone: list[int], beside: list[int], b: ExportBuilder, t0: int, **kw) -> int:
    """Kernels of *name*: one per duration in *alone* (no copy near), then one per duration in
    *beside*, each wholly under its own h2d copy; returns the time after them."""
    t = t0
    for d in alone:
        b.kernel(t, t + d, name, **kw)
        t += d + 1000
    for d in beside:
        b.kernel(t, t + d, name, **kw)
        b.copy(t, t + d, "h2d", MIB, device=kw.get("device", 0))
        t += d + 1000
    return t
