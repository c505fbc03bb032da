"""Units for people, written once for the terminal, the findings' verdicts and the dashboard: sizes
in binary units (B, KiB, MiB, GiB, TiB: powers of 1024), times in ns, µs, ms and s, each chosen by
the magnitude of what is shown; bandwidth in decimal GB/s (10^9 bytes per second, i.e. bytes per
nanosecond), as nsys and link specifications state it; counts with SI prefixes.

Below ``analysis`` (which writes its verdicts with it) and imports nothing of the project's."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

BYTE_UNITS: tuple[tuple[str, int], ...] = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))
TIME_UNITS: tuple[tuple[str, int], ...] = (("µs", 10**3), ("ms", 10**6), ("s", 10**9))
UNITS_NOTE = "sizes in binary units (1 MiB = 2^20 bytes); bandwidth in decimal GB/s (10^9 bytes per second)"
SI_PREFIXES: tuple[tuple[str, float], ...] = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
# decimals of a number shown with its own unit: below 10, below 100, from 100 on (``1.25 ms``, ``12.4 ms``, ``850 µs``)
PLACES = (2, 1, 0)


def whole_ns(ns: float) -> int:
    """*ns* rounded up to a whole nanosecond, float noise below a femtosecond left out: a time computed as
    a quotient (4,008 bytes at 1e9 B/s, 21 bytes at 0.7 GB/s) that is a whole number of ns is that number,
    not one more (4008.000000000001 and 30.000000000000004 as floats)."""
    return math.ceil(ns - 1e-6)


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


# a value reads well in a unit where it is at least 1 and under 10,000 of it (61 ms, not 0.061 s), and
# can still be read from 0.01 on (0.25 s); below that it shows as <0.01
READABLE = (1, 10_000)
LEGIBLE = 0.01


def _readable(values: Iterable[int | float | None], units: tuple[tuple[str, int], ...]) -> tuple[str, int]:
    """The unit in which most of the nonzero *values* read well (``READABLE``); of equals, the one in
    which most can be read (from ``LEGIBLE``), then the one of the largest value (``_unit``)."""
    nonzero = [abs(v) for v in values if v]
    if not nonzero:
        return units[0]
    lo, hi = READABLE
    of_largest = _unit(nonzero, units)

    def score(u: tuple[str, int]) -> tuple[int, int, bool, int]:
        well = sum(lo <= v / u[1] < hi for v in nonzero)
        legible = sum(LEGIBLE <= v / u[1] < hi for v in nonzero)
        return well, legible, u == of_largest, u[1]

    return max(units, key=score)


def readable_time_unit(values_ns: Iterable[int | float | None]) -> tuple[str, int]:
    """The unit a column of times reads well in when they span orders of magnitude: the one in which
    most of them show between 1 and 10,000 (a 61 ms and a 3.4 s exposed time: 61 and 3,378 ms, not
    0.061 and 3.4 s beside ``<0.01``)."""
    return _readable(values_ns, TIME_UNITS)


def readable_byte_unit(values: Iterable[int | float | None]) -> tuple[str, int]:
    """As ``readable_time_unit``, for sizes."""
    return _readable(values, BYTE_UNITS)


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


def _human(value: float, pick: tuple[str, int], places: tuple[int, int, int]) -> str:
    name, div = pick
    x = value / div
    digits = places[0] if abs(x) < 10 else places[1] if abs(x) < 100 else places[2]
    return f"{x:.{digits}f} {name}"


def human_bytes(value: int | float | None, places: tuple[int, int, int] = PLACES) -> str:
    """One size with its own unit: ``1.50 MiB``, ``512 B`` (*places*: decimals below 10, 100, above)."""
    if value is None:
        return "-"
    if abs(value) < 1024:
        return f"{int(value)} B"
    return _human(value, byte_unit([value]), places)


def human_time(ns: int | float | None, nanoseconds: bool = False) -> str:
    """One duration with its own unit: ``850 µs``, ``1.25 ms``, ``7.56 s``; under 1 µs ``0.85 µs``, or
    with *nanoseconds* ``850 ns`` (and ``0 ns``)."""
    if ns is None:
        return "-"
    if nanoseconds and abs(ns) < 1000:
        return f"{int(ns)} ns"
    if ns == 0:
        return "0"
    return _human(ns, time_unit([ns]), PLACES)


def ms(ns: int | float | None, unit: bool = False) -> str:
    """Milliseconds to the nanosecond: ``1.234`` (a column headed ms), with *unit* ``1.234 ms``."""
    return "-" if ns is None else f"{ns / 1e6:.3f}" + (" ms" if unit else "")


def mib(b: int | float | None, decimals: int = 2, unit: bool = False) -> str:
    """Mebibytes: ``1.50`` (a column headed MiB), with *unit* ``1.50 MiB``."""
    return "-" if b is None else f"{b / 2**20:.{decimals}f}" + (" MiB" if unit else "")


def pct(x: float | None, decimals: int = 1) -> str:
    """A fraction as a percentage: ``12.5%``."""
    return "-" if x is None else f"{100 * x:.{decimals}f}%"


def signed_pct(x: float | None) -> str:
    """A change as a signed percentage: ``+12.5%``, ``-3.0%``."""
    return "-" if x is None else f"{100 * x:+.1f}%"


def share(x: float) -> str:
    """A share as a whole percentage, with two significant digits below 10%: ``33%``, ``4.2%``, ``0.0045%``;
    under a thousandth of a percent ``<0.001%`` (11 ns of a 2.66 s window is not ``0.00000041%``)."""
    if x == 0 or abs(x) >= 0.1:
        return pct(x, 0)
    if abs(x) < 1e-5:
        return "<0.001%" if x > 0 else ">-0.001%"
    digits = max(0, 1 - math.floor(math.log10(abs(100 * x))))
    return f"{100 * x:.{digits}f}%"


def gbps(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def si(x: float | None) -> str:
    """A count (FLOPs) with an SI prefix: ``1.23 T``, ``512``."""
    if x is None:
        return "-"
    for unit, scale in SI_PREFIXES:
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def tflops(x: float | None) -> str:
    """TFLOP/s: three decimals, two significant digits below 0.01 (a CPU: ``0.0092``)."""
    return "-" if x is None else (f"{x:.3f}" if x >= 0.01 else f"{x:.2g}")


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


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_bytes(text: str) -> int:
    """``60GiB``, ``59.5 GiB``, ``64GB``, ``1e9`` -> bytes; ValueError for anything else."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 60GiB, 64GB, 1e9)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


# --- lines for a terminal ------------------------------------------------------------------------
COLUMNS = 160  # no line of prose the tool prints is wider (tables: with shortened names; --wide: whole)


def wrap(text: str, indent: str = "", width: int = COLUMNS) -> str:
    """*text* as lines of at most *width* columns, the first after *indent*, the others indented two
    more (a path or a word longer than the line stays whole)."""
    import textwrap

    return textwrap.fill(
        text, width, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False,
        break_on_hyphens=False,
    )  # fmt: skip


def fit(text: str, wide: bool = False, width: int = COLUMNS) -> str:
    """*text* with each line of prose longer than *width* wrapped (at its own indent, two more for the
    lines that follow); a table's row (cells apart by two spaces, at least twice) is left whole: its
    long names are shortened where it is made.  Unchanged with *wide*."""
    import re

    if wide:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width or len(re.findall(r"\S {2,}(?=\S)", line)) >= 2:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(wrap(line.strip(), indent=indent, width=width))
    return "\n".join(out)


def natural_key(text: str) -> list[int | str]:
    """The sort key that orders names as people read them: ``layer_2`` before ``layer_10``."""
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def count(n: int, noun: str) -> str:
    """``n`` and its noun, plural unless one: ``count(1, "step")`` is "1 step", 2 is "2 steps"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
