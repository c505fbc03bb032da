"""Numbers as the verdicts write them, each with its unit: ``profiler.units``' formatters, set once
for the findings (binary MiB, decimal GB/s)."""

from __future__ import annotations

from profiler import units
from profiler.units import share

__all__ = ["dur", "mib", "ms", "names", "pct", "share", "size"]


def ms(ns: float) -> str:
    """``54.900 ms``; a time that would read ``0.000 ms`` in its own unit (``480 ns``)."""
    if 0 < abs(ns) < 500:
        return dur(ns)
    return units.ms(ns, unit=True)


def mib(nbytes: float) -> str:
    """``7.6 MiB``."""
    return units.mib(nbytes, 1, unit=True)


def pct(x: float) -> str:
    """``33%``."""
    return units.pct(x, 0)


def size(nbytes: float) -> str:
    """A size in the unit that fits it: ``136 B``, ``7.6 MiB``, ``1.2 GiB``."""
    return units.human_bytes(nbytes, places=(1, 1, 0))


def dur(ns: float) -> str:
    """A duration in the unit that fits it: ``850 ns``, ``12.4 µs``, ``54.9 ms``, ``4.85 s``."""
    return units.human_time(ns, nanoseconds=True)


def names(items: list[str], most: int = 3) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")
