"""profiler/units.py at its edges: 1023/1024 B and each unit's first value, the rounding limit of
``scaled`` (half of the last shown place), the switch of decimals at 10 and 100, and every
formatter's None.  Each expected string is derived by hand in the comment beside it."""

from __future__ import annotations

import pytest

from profiler.units import (
    Units,
    byte_unit,
    count,
    fit,
    gbps,
    human_bytes,
    human_time,
    mib,
    ms,
    natural_key,
    parse_bytes,
    pct,
    readable_byte_unit,
    readable_time_unit,
    scaled,
    share,
    si,
    signed_pct,
    tflops,
    time_unit,
    whole_ns,
    wrap,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),  # the last value under 1024: bytes, no decimals
        (1024, "1.00 KiB"),  # 1024 / 1024 = 1, below 10: two places
        (-1023, "-1023 B"),  # by magnitude
        (-1024, "-1.00 KiB"),
        (1023.5, "1023 B"),  # a float under 1024 still shows whole bytes (int() truncates)
        (10 * 1024 - 1, "10.00 KiB"),  # 9.999 KiB is under 10: two places, rounded up to 10.00
        (10 * 1024, "10.0 KiB"),  # 10 KiB: from 10 on, one place
        (100 * 1024 - 1, "100.0 KiB"),  # 99.999 is under 100: one place, rounded up
        (100 * 1024, "100 KiB"),  # from 100 on, none
        (2**20 - 1, "1024 KiB"),  # 1023.999 KiB: under 1 MiB, shown with no places
        (2**20, "1.00 MiB"),
        (2**30, "1.00 GiB"),
        (2**40, "1.00 TiB"),
        (2**50, "1024 TiB"),  # TiB is the largest unit
    ],
)
def test_human_bytes(value, text):
    assert human_bytes(value) == text


def test_human_bytes_places_and_none():
    assert human_bytes(1536, places=(0, 0, 0)) == "2 KiB"  # 1.5 rounds to even: 2
    assert human_bytes(1536, places=(3, 1, 0)) == "1.500 KiB"
    assert human_bytes(None) == "-"


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        ([], ("B", 1)),
        ([None], ("B", 1)),
        ([1023], ("B", 1)),
        ([1024], ("KiB", 1024)),
        ([-1024, 5], ("KiB", 1024)),  # the largest magnitude chooses
        ([2**20 - 1], ("KiB", 1024)),
        ([2**20], ("MiB", 2**20)),
        ([2**30 - 1, 2**30], ("GiB", 2**30)),
    ],
)
def test_byte_unit_edges(values, unit):
    assert byte_unit(values) == unit


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        ([0], ("µs", 1000)),  # below 1 µs: still µs (there is no ns unit in tables)
        ([999], ("µs", 1000)),
        ([1000], ("µs", 1000)),
        ([999_999], ("µs", 1000)),
        ([1_000_000], ("ms", 10**6)),
        ([-1_000_000], ("ms", 10**6)),
        ([10**9 - 1], ("ms", 10**6)),
        ([10**9], ("s", 10**9)),
    ],
)
def test_time_unit_edges(values, unit):
    assert time_unit(values) == unit


@pytest.mark.parametrize(
    ("value", "div", "decimals", "text"),
    [
        (None, 1, 2, "-"),
        (0, 1, 2, "0"),
        (0.0, 7, 3, "0"),
        (4, 1000, 2, "<0.01"),  # 0.004 is under half of 0.01: it would print 0.00
        (5, 1000, 2, "0.01"),  # 0.005 is half of 0.01: printed, rounds to 0.01
        (-4, 1000, 2, "<0.01"),  # by magnitude
        (-5, 1000, 2, "-0.01"),
        (4, 10_000, 3, "<0.001"),  # 0.0004 under 0.0005
        (5, 10_000, 3, "0.001"),  # 0.0005: printed (the float just above 0.0005 rounds up)
        (1, 1, 0, "1"),  # 0 places: the limit is 0.5
        (0.4, 1, 0, "<1"),
        (1234, 1000, 2, "1.23"),
        (1235, 1000, 2, "1.24"),  # 1.235 is just above in binary: rounds up
    ],
)
def test_scaled_at_its_rounding_limit(value, div, decimals, text):
    assert scaled(value, div, decimals) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, "-"),
        (0, "0"),
        (500, "0.50 µs"),  # below 1 µs: still µs
        (999, "1.00 µs"),  # 0.999 rounds to 1.00
        (1000, "1.00 µs"),
        (9_994, "9.99 µs"),  # under 10: two places
        (10_000, "10.0 µs"),  # 10: one place
        (99_940, "99.9 µs"),
        (100_000, "100 µs"),  # 100: none
        (999_999, "1000 µs"),  # under 1 ms: µs, no places
        (1_000_000, "1.00 ms"),
        (1_250_000, "1.25 ms"),
        (10**9, "1.00 s"),
        (-1_500_000, "-1.50 ms"),
    ],
)
def test_human_time(ns, text):
    assert human_time(ns) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0 ns"), (999, "999 ns"), (-999, "-999 ns"), (1000, "1.00 µs"), (-1000, "-1.00 µs"), (None, "-")],
)
def test_human_time_in_nanoseconds_below_one_microsecond(ns, text):
    assert human_time(ns, nanoseconds=True) == text


def test_fixed_unit_formatters():
    assert (ms(1_234_567), ms(1_234_567, unit=True), ms(None)) == ("1.235", "1.235 ms", "-")  # 1.234567 -> 3 places
    assert (mib(3 * 2**19), mib(2**20, 1, unit=True), mib(None)) == ("1.50", "1.0 MiB", "-")
    assert (pct(0.125), pct(0.125, 0), pct(None)) == ("12.5%", "12%", "-")  # 12.5 rounds to even: 12
    assert (signed_pct(0.125), signed_pct(-0.03), signed_pct(0.0), signed_pct(None)) == (
        "+12.5%",
        "-3.0%",
        "+0.0%",
        "-",
    )
    assert (gbps(12.345), gbps(None)) == ("12.35", "-")  # 12.345 is just above in binary: rounds up


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (0, "0%"),
        (0.1, "10%"),  # from 10% on: whole percent
        (0.5, "50%"),
        (-0.1, "-10%"),
        (0.099, "9.9%"),  # under 10%: two significant digits, 1 - floor(log10(9.9)) = 1 place
        (0.05, "5.0%"),
        (0.01, "1.0%"),  # log10(1) = 0: one place
        (0.00999, "1.00%"),  # log10(0.999) = -0.0004, floor -1: two places
        (0.001, "0.10%"),
        (0.000045, "0.0045%"),  # log10(0.0045) = -2.3, floor -3: four places
        (0.00001, "0.0010%"),  # a thousandth of a percent: still said
        (0.0000099, "<0.001%"),  # under it: no ten decimals (11 ns of 2.66 s read 0.00000041%)
        (-0.0000099, ">-0.001%"),
    ],
)
def test_share(x, text):
    assert share(x) == text


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (None, "-"),
        (0, "0"),
        (999, "999"),
        (999.4, "999"),
        (1000, "1.00 k"),  # 1e3: k
        (-1000, "-1.00 k"),
        (999_999, "1000.00 k"),  # under 1e6: still k
        (1e6, "1.00 M"),
        (1e9, "1.00 G"),
        (1e12, "1.00 T"),
        (1e15, "1.00 P"),
        (1e18, "1000.00 P"),
    ],
)
def test_si(x, text):
    assert si(x) == text


@pytest.mark.parametrize(
    ("x", "text"), [(None, "-"), (0.01, "0.010"), (0.0099, "0.0099"), (0.00123, "0.0012"), (312.5, "312.500")]
)
def test_tflops(x, text):
    assert tflops(x) == text


def test_units_of_a_table():
    u = Units.of([1023, None, 512], [999_999, 3])
    assert (u.size, u.size_div, u.time, u.time_div) == ("B", 1, "µs", 1000)
    assert (u.b(512), u.t(3), u.t(None)) == ("512.00", "0.003", "-")
    u = Units.of([1024], [10**6])
    assert (u.b(1536), u.t(1_234_567)) == ("1.50", "1.235")  # KiB and ms


# --- the unit a column reads well in: most values in [1, 10_000) of it, then most in [0.01, 10_000), then
# the unit of the largest value (time_unit), then the larger unit ------------------------------------------

MS, S = 10**6, 10**9


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        # 61 ms and 3.378 s: µs 61_000 and 3_378_000 (none under 10_000), ms 61 and 3_378 (both), s 0.061
        # and 3.378 (one): ms
        ([61 * MS, 3_378 * MS], "ms"),
        ([-61 * MS, -3_378 * MS], "ms"),  # by magnitude
        ([], "µs"),  # nothing to show: the first unit
        ([0, None], "µs"),  # zeros and gaps are not counted
        ([0, None, 61 * MS, 3_378 * MS], "ms"),
        # 5 ms: µs 5_000 and ms 5 both read well and can be read; ms is the unit of the largest value
        ([5 * MS], "ms"),
        # 5 ns: 0.005 µs, under 0.01 in every unit: the unit of the largest value (µs below 1 µs), not s
        ([5], "µs"),
        # 10 s is 10_000 ms (not under 10_000: read well in s only), 5 ms only in ms (µs 5_000 too):
        # µs 1, ms 1, s 1 read well; can be read: µs 1 (5_000), ms 1 (5), s 1 (10; 0.005 is under 0.01);
        # the largest value's unit: s
        ([10 * S, 5 * MS], "s"),
        # 1 ms twice and 50 s: read well µs 2 (1_000 each), ms 2 (1 each: from 1 on), s 1 (50); can be
        # read µs 2, ms 2; the largest's unit is s, in neither: the larger of µs and ms
        ([MS, MS, 50 * S], "ms"),
        # 10 ns (0.01 µs), 5 and 6 µs, 50 and 500 ms: read well µs 2 (5, 6), ms 2 (50, 500), s 0; can be
        # read µs 3 (0.01 from 0.01 on, 5, 6), ms 2 (0.005 and 0.006 are under 0.01): µs
        ([10, 5_000, 6_000, 50 * MS, 500 * MS], "µs"),
        ([5_000, 6_000, 50 * MS, 500 * MS], "ms"),  # without the 10 ns: 2 and 2, the largest's unit: ms
    ],
)
def test_readable_time_unit(values, unit):
    assert readable_time_unit(values) == (unit, {"µs": 1000, "ms": MS, "s": S}[unit])


def test_readable_byte_unit():
    # 3 MiB and 5000 MiB: KiB 3_072 (5_120_000 is too many), MiB 3 and 5_000, GiB 4.88 (0.003 is too few)
    assert readable_byte_unit([3 * 2**20, 5000 * 2**20]) == ("MiB", 2**20)
    assert readable_byte_unit([]) == ("B", 1) and readable_byte_unit([0]) == ("B", 1)


# --- lines for a terminal: wrap and fit ------------------------------------------------------------------


def test_wrap():
    # "  aaa bbb" is 9 columns; " ccc" more is 13: the next line, indented two more (4 spaces)
    assert wrap("aaa bbb ccc", indent="  ", width=9) == "  aaa bbb\n    ccc"
    # a word longer than the line stays whole (no break inside it, none at its hyphens)
    assert wrap("x " + "a" * 20, width=10) == "x\n  " + "a" * 20
    assert wrap("ab-cd-ef-gh ij", width=6) == "ab-cd-ef-gh\n  ij"
    # 160 columns by default: 80 one-letter words take 80 + 79 spaces = 159, the 81st goes on
    assert wrap(" ".join(["w"] * 81)) == " ".join(["w"] * 80) + "\n  w"


def test_fit():
    # up to the width a line stays as it is; one column more is wrapped (the first line: 4 words and 3
    # spaces, 19 columns; with the fifth 24)
    line = "aaaa bbbb cccc dddd"
    assert fit(line, width=19) == line and fit(line, width=18) == "aaaa bbbb cccc\n  dddd"
    assert fit(line + " ", width=20) == line + " "  # a line that fits is left as it is, to its last space
    # at its own indent, the lines after two more: 4 + 13 = 17 > 14 columns with "cccc"
    assert fit("    aaaa bbbb cccc dddd", width=14) == "    aaaa bbbb\n      cccc\n      dddd"
    # a table row (two gaps of two spaces or more between cells) stays whole; one such gap is prose
    row = "name  12  " + "x" * 15  # 25 columns
    assert fit(row, width=20) == row
    assert fit("name  word word word word word", width=20) == "name  word word word\n  word word"
    # each line on its own; with wide, nothing changes; 160 columns by default
    assert fit("short\n" + line, width=18) == "short\naaaa bbbb cccc\n  dddd"
    assert fit(line, wide=True, width=5) == line
    long = " ".join(["w"] * 81)  # 161 columns
    assert fit(long) == wrap(long) and fit(long[:-2]) == long[:-2]


# --- sizes the user types, names in reading order ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("60GiB", 60 * 2**30),
        (" 59.5 GiB ", int(59.5 * 2**30)),  # spaces around and between; 59.5 * 2^30 is a whole number
        ("64GB", 64 * 10**9),  # decimal units: powers of 1000
        ("1e9", 10**9),  # no unit: bytes
        ("512", 512),
        ("2b", 2),
        ("1.5kb", 1500),
        ("3MiB", 3 * 2**20),
        ("3mb", 3 * 10**6),
        ("2TiB", 2 * 2**40),
        ("2tb", 2 * 10**12),
        ("1kib", 1024),
        (".5 kib", 512),  # no digit before the point
        ("1.9", 1),  # whole bytes, truncated
    ],
)
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "60 GiBs", "60 XB", "-1GiB", "1.2.3", "60 GiB 2", "1e"])
def test_parse_bytes_refuses(text):
    with pytest.raises(ValueError) as err:
        parse_bytes(text)
    assert str(err.value) == f"{text!r} is not a size (e.g. 60GiB, 64GB, 1e9)"


def test_natural_key():
    # digits compare as numbers, the rest as text: layer_2 before layer_10, and "a" before "b" at equal numbers
    names = ["layer_10", "layer_2", "layer_1b", "layer_1a", "x", "10", "9"]
    assert sorted(names, key=natural_key) == ["9", "10", "layer_1a", "layer_1b", "layer_2", "layer_10", "x"]
    assert natural_key("layer_10.w2") == ["layer_", 10, ".w", 2, ""]


@pytest.mark.parametrize(("n", "text"), [(0, "0 steps"), (1, "1 step"), (2, "2 steps"), (1200, "1,200 steps")])
def test_count_says_one_in_the_singular(n, text):
    assert count(n, "step") == text


@pytest.mark.parametrize(
    ("ns", "whole"),
    [
        (4008 / 1e9 * 1e9, 4008),  # 4,008 bytes at 1e9 B/s: 4008.000000000001 as a float
        (21 / 0.7, 30),  # 21 bytes at 0.7 GB/s: 30.000000000000004
        (30.0, 30),
        (30.5, 31),
        (30.000002, 31),  # two millionths of a ns over is over
        (0.0, 0),
        (0.4, 1),
    ],
)
def test_whole_ns_rounds_up_but_not_float_noise(ns, whole):
    assert whole_ns(ns) == whole
