"""Units for people: sizes in binary units (B, KiB, MiB, GiB, TiB: powers of 1024), times in
µs, ms and s, each chosen by the magnitude of what is shown; bandwidth in decimal GB/s (10^9 bytes
per second, i.e. bytes per nanosecond), as nsys and link specifications state it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BYTE_UNITS: tuple[tuple[str, int], ...] = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))
TIME_UNITS: tuple[tuple[str, int], ...] = (("µs", 10**3), ("ms", 10**6), ("s", 10**9))
UNITS_NOTE = "sizes in binary units (1 MiB = 2^20 bytes); bandwidth in decimal GB/s (10^9 bytes per second)"


def _largest(values: Iterable[float | int | None]) -> float:
    return max((abs(v) for v in values if v is not None), default=0)


def _unit(values: Iterable[float | int | None], units: tuple[tuple[str, int], ...]) -> tuple[str, int]:
    """The largest of *units* in which the largest of *values* is at least 1 (the first below that)."""
    top = _largest(values)
    name, div = units[0]
    for n, d in units:
        if top >= d:
            name, div = n, d
    return name, div


def byte_unit(values: Iterable[int | float | None]) -> tuple[str, int]:
    """The largest binary unit in which the largest of *values* is at least 1 (B when all are 0)."""
    return _unit(values, BYTE_UNITS)


def time_unit(values_ns: Iterable[int | float | None]) -> tuple[str, int]:
    """µs, ms or s: the largest in which the largest of *values_ns* is at least 1 (µs below 1 µs)."""
    return _unit(values_ns, TIME_UNITS)


def scaled(value: int | float | None, div: int, decimals: int = 2) -> str:
    """*value* / *div* with *decimals* places; exactly 0 is ``0``, and a value that would show as 0
    but is not says so (``<0.01``)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    x = value / div
    if x and abs(x) < 0.5 * 10**-decimals:
        return f"<{10**-decimals:.{decimals}f}"
    return f"{x:.{decimals}f}"


def _human(value: float, units: tuple[tuple[str, int], ...], pick: tuple[str, int]) -> str:
    name, div = pick
    x = value / div
    digits = 2 if abs(x) < 10 else 1 if abs(x) < 100 else 0
    return f"{x:.{digits}f} {name}"


def human_bytes(value: int | float | None) -> str:
    """One size with its own unit: ``1.50 MiB``, ``512 B``."""
    if value is None:
        return "-"
    if abs(value) < 1024:
        return f"{int(value)} B"
    return _human(value, BYTE_UNITS, byte_unit([value]))


def human_time(ns: int | float | None) -> str:
    """One duration with its own unit: ``850 µs``, ``1.25 ms``, ``7.56 s``."""
    if ns is None:
        return "-"
    if ns == 0:
        return "0"
    return _human(ns, TIME_UNITS, time_unit([ns]))


def ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def gbps(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


@dataclass(frozen=True)
class Units:
    """One size unit and one time unit for a table, chosen by the largest value it shows."""

    size: str
    size_div: int
    time: str
    time_div: int

    @staticmethod
    def of(sizes: Iterable[int | float | None], times: Iterable[int | float | None]) -> Units:
        return Units(*byte_unit(sizes), *time_unit(times))

    def b(self, value: int | None) -> str:
        return scaled(value, self.size_div)

    def t(self, ns: int | None) -> str:
        return scaled(ns, self.time_div, 3)
