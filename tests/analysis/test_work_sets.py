"""The work split's fast set algebra gives exactly the sets of intervals.py's sweeps."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.intervals import Intervals, difference, join, union
from profiler.analysis.work import minus, union_all


def random_set(rng: np.random.Generator, n: int, groups: int, span: int) -> Intervals:
    g = rng.integers(0, groups, n)
    s = rng.integers(0, span, n)
    return union(g, s, s + rng.integers(0, span // 20 + 2, n))


def same(a: Intervals, b: Intervals) -> bool:
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in ("group", "start", "end"))


@pytest.mark.parametrize("seed", range(40))
def test_minus_andunion_all_match_the_sweeps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_a, n_b = rng.integers(0, 60, 2)
    groups, span = int(rng.integers(1, 4)), int(rng.integers(5, 400))
    a, b, c = (random_set(rng, int(n), groups, span) for n in (n_a, n_b, rng.integers(0, 30)))
    assert same(minus(a, b), difference(a, b))
    assert same(minus(b, a), difference(b, a))
    assert same(union_all(a, b, c), join(join(a, b), c))


def test_edges_touching_covering_and_empty() -> None:
    a = Intervals(np.array([0, 0, 1]), np.array([0, 10, 0]), np.array([5, 20, 9]))
    b = Intervals(np.array([0, 0, 2]), np.array([5, 12, 0]), np.array([10, 14, 3]))  # touches a, inside it
    assert same(minus(a, b), difference(a, b))
    assert same(minus(a, Intervals.empty()), a)
    assert len(minus(Intervals.empty(), b)) == 0
    assert len(minus(a, Intervals(np.array([0, 1]), np.array([-5, -5]), np.array([50, 50])))) == 0
