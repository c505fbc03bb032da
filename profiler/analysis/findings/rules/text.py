"""Numbers as the verdicts write them (units stated: binary MiB, decimal GB/s)."""

from __future__ import annotations


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def names(items: list[str], most: int = 3) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")
