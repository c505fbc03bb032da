"""The interval engine against hand-worked cases and a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.analysis.intervals import (
    Intervals,
    difference,
    intersect,
    join,
    length_by_group,
    measure_within,
    union,
)


def points(iv: Intervals) -> set[tuple[int, int]]:
    """The integer points (group, t) an interval set covers: the brute-force model."""
    return {(int(g), t) for g, s, e in zip(iv.group, iv.start, iv.end, strict=True) for t in range(s, e)}


def raw_points(ivs: list[tuple[int, int, int]]) -> set[tuple[int, int]]:
    return {(g, t) for g, s, e in ivs for t in range(s, e)}


def build(ivs: list[tuple[int, int, int]]) -> Intervals:
    g = [x[0] for x in ivs]
    s = [x[1] for x in ivs]
    e = [x[2] for x in ivs]
    return union(g, s, e)


def assert_canonical(iv: Intervals) -> None:
    assert np.all(iv.end > iv.start)
    for i in range(1, len(iv)):
        assert (iv.group[i], iv.start[i]) > (iv.group[i - 1], iv.start[i - 1])
        if iv.group[i] == iv.group[i - 1]:
            assert iv.start[i] > iv.end[i - 1], "touching or overlapping pieces must be merged"


intervals_st = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 15)).map(lambda t: (t[0], t[1], t[1] + t[2])),
    max_size=25,
)


@pytest.mark.parametrize(
    ("ivs", "expected"),
    [
        ([], []),
        ([(0, 5, 5)], []),  # zero-length adds nothing
        ([(0, 0, 10), (0, 10, 20)], [(0, 0, 20)]),  # touching merge
        ([(0, 0, 10), (0, 0, 10)], [(0, 0, 10)]),  # identical
        ([(0, 0, 10), (0, 2, 3)], [(0, 0, 10)]),  # nested
        ([(0, 0, 10), (1, 5, 15)], [(0, 0, 10), (1, 5, 15)]),  # groups never mix
        ([(1, 30, 40), (0, 0, 10), (0, 5, 12)], [(0, 0, 12), (1, 30, 40)]),
    ],
)
def test_union_cases(ivs, expected):
    iv = build(ivs)
    assert list(zip(iv.group.tolist(), iv.start.tolist(), iv.end.tolist(), strict=True)) == expected


def test_union_rejects_invalid():
    with pytest.raises(ValueError):
        union([0], [10], [5])


def test_groups_do_not_leak_with_huge_times():
    """A long interval of group 0 must not cover group 1 (running max reset)."""
    t = 1_700_000_000_000_000_000  # absolute epoch ns, as some exports hold
    iv = union([0, 1, 1], [t, t + 5, t + 20], [t + 100, t + 10, t + 30])
    assert length_by_group(iv) == {0: 100, 1: 15}


@settings(max_examples=300, deadline=None)
@given(intervals_st)
def test_union_matches_brute_force(ivs):
    iv = build(ivs)
    assert_canonical(iv)
    assert points(iv) == raw_points(ivs)


@settings(max_examples=300, deadline=None)
@given(intervals_st, intervals_st)
def test_set_operations_match_brute_force(a_raw, b_raw):
    a, b = build(a_raw), build(b_raw)
    pa, pb = raw_points(a_raw), raw_points(b_raw)
    for result, model in (
        (intersect(a, b), pa & pb),
        (difference(a, b), pa - pb),
        (join(a, b), pa | pb),
    ):
        assert_canonical(result)
        assert points(result) == model
    lengths = length_by_group(intersect(a, b))
    for g in range(3):
        assert lengths.get(g, 0) == sum(1 for p in pa & pb if p[0] == g)


@settings(max_examples=300, deadline=None)
@given(intervals_st, intervals_st)
def test_measure_within_matches_brute_force(a_raw, b_raw):
    b = build(b_raw)
    pb = raw_points(b_raw)
    got = measure_within(b, [x[0] for x in a_raw], [x[1] for x in a_raw], [x[2] for x in a_raw])
    want = [sum(1 for t in range(s, e) if (g, t) in pb) for g, s, e in a_raw]
    assert got.tolist() == want


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(-(1 << 41), 1 << 41)), max_size=40),
    st.lists(st.tuples(st.integers(-1, 5), st.integers(-(1 << 42), 1 << 42)), min_size=1, max_size=20),
    st.sampled_from(["left", "right"]),
)
def test_search_in_groups_is_searchsorted_within_each_group(items, queries, side):
    """Both ways of searching inside groups (packed keys, bisection) against a plain searchsorted
    per query, with spans too wide to pack as well as narrow ones."""
    from profiler.analysis.dependencies import search_in_groups

    items = sorted(items)
    g = np.array([i[0] for i in items], dtype=np.int64)
    t = np.array([i[1] for i in items], dtype=np.int64)
    for scale in (1, 1 << 20):  # wide times: bisection; narrow: packed
        tt = t // scale
        qg = np.array([q[0] for q in queries], dtype=np.int64)
        qt = np.array([q[1] for q in queries], dtype=np.int64) // scale
        got = search_in_groups(g, tt, qg, qt, side)
        lo, hi = np.searchsorted(g, qg, "left"), np.searchsorted(g, qg, "right")
        want = [lo[i] + np.searchsorted(tt[lo[i] : hi[i]], qt[i], side) for i in range(qg.size)]
        assert got.tolist() == want
