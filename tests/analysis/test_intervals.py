"""The interval engine against hand-worked cases and a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.analysis.intervals import (
    Intervals,
    covered_at_least,
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
    with pytest.raises(ValueError, match=r"^union: an interval has end < start$"):
        union([0], [10], [5])
    assert len(union([0, 1], [7, 9], [7, 9])) == 0  # zero-length: valid, adds nothing


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


# Many groups: more than 8 (the union's general path), spread wider than 1024 (no bincount), some huge,
# at epoch times: the paths that a draw of groups 0-2 never reaches.
GROUPS = [*range(12), 5_000, 1 << 40]
EPOCH = 1_700_000_000_000_000_000
many_st = st.tuples(
    st.lists(
        st.tuples(st.sampled_from(GROUPS), st.integers(0, 60), st.integers(0, 15)).map(
            lambda t: (t[0], t[1], t[1] + t[2])
        ),
        max_size=40,
    ),
    st.sampled_from([0, EPOCH]),
).map(lambda x: [(g, x[1] + s, x[1] + e) for g, s, e in x[0]])


@settings(max_examples=200, deadline=None)
@given(many_st, many_st)
def test_many_groups_match_brute_force(a_raw, b_raw):
    a, b = build(a_raw), build(b_raw)
    pa, pb = raw_points(a_raw), raw_points(b_raw)
    assert_canonical(a)
    assert points(a) == pa
    for result, model in ((intersect(a, b), pa & pb), (difference(a, b), pa - pb), (join(a, b), pa | pb)):
        assert_canonical(result)
        assert points(result) == model
    assert length_by_group(a) == {g: n for g in GROUPS if (n := sum(1 for p in pa if p[0] == g))}
    got = measure_within(b, [x[0] for x in a_raw], [x[1] for x in a_raw], [x[2] for x in a_raw])
    assert got.tolist() == [sum(1 for t in range(s, e) if (g, t) in pb) for g, s, e in a_raw]


@settings(max_examples=150, deadline=None)
@given(many_st, st.integers(1, 3))
def test_covered_at_least_matches_brute_force(raw, k):
    """Where at least k intervals overlap (copy contexts use k = 2), zero-length ones included."""
    got = covered_at_least([x[0] for x in raw], [x[1] for x in raw], [x[2] for x in raw], k)
    assert_canonical(got)
    count: dict[tuple[int, int], int] = {}
    for g, s, e in raw:
        for t in range(s, e):
            count[(g, t)] = count.get((g, t), 0) + 1
    assert points(got) == {p for p, n in count.items() if n >= k}


def test_covered_at_least_rejects_invalid():
    with pytest.raises(ValueError, match=r"^covered_at_least: an interval has end < start$"):
        covered_at_least([0, 0], [0, 10], [5, 9], 2)
    assert len(covered_at_least([0, 0], [3, 3], [3, 3], 1)) == 0  # zero-length: valid, adds nothing


def test_union_of_absurd_spans_takes_the_general_sweep():
    """Ten groups each spanning 2^59 ns: laid end to end they pass 2^62, where the per-group shift could
    overflow, so the union takes the general sweep; each group: [0, 2^59 - 1) and [2^59 + 10, 2^59 + 20)."""
    big = 1 << 59
    g = [k for k in range(10) for _ in range(2)]
    s = [t for _ in range(10) for t in (0, big + 10)]
    e = [t for _ in range(10) for t in (big - 1, big + 20)]
    iv = union(g, s, e)
    assert_canonical(iv)
    assert length_by_group(iv) == {k: big - 1 + 10 for k in range(10)}


def test_nine_groups_do_not_leak():
    """Nine groups (one more than the per-group path takes): group 0's long interval [0, 100) must not
    cover the short ones of groups 1..8 ([10 k, 10 k + 1), 1 ns each)."""
    iv = union([0, *range(1, 9)], [0, *(10 * k for k in range(1, 9))], [100, *(10 * k + 1 for k in range(1, 9))])
    assert length_by_group(iv) == {0: 100, **{k: 1 for k in range(1, 9)}}


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
