"""Numbers as the verdicts write them (units stated: binary MiB, decimal GB/s)."""

from __future__ import annotations

import numpy as np


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def share(x: float) -> str:
    """A share as a percentage with two significant digits below 10%: ``33%``, ``4.2%``, ``0.0045%``."""
    if x == 0 or abs(x) >= 0.1:
        return pct(x)
    digits = max(0, 1 - int(np.floor(np.log10(abs(100 * x)))))
    return f"{100 * x:.{digits}f}%"


def names(items: list[str], most: int = 3) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def size(nbytes: float) -> str:
    """A size in the unit that fits it: ``136 B``, ``7.6 MiB``, ``1.25 GiB``."""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= div:
            return f"{nbytes / div:.{1 if abs(nbytes) / div < 100 else 0}f} {unit}"
    return f"{int(nbytes)} B"


def dur(ns: float) -> str:
    """A duration in the unit that fits it: ``850 ns``, ``12.4 µs``, ``54.9 ms``, ``4.85 s``."""
    for unit, div in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if abs(ns) >= div:
            x = ns / div
            return f"{x:.{2 if abs(x) < 10 else 1 if abs(x) < 100 else 0}f} {unit}"
    return f"{int(ns)} ns"
