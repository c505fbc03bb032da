"""``segmented_cummax``: the running maximum restarting at each segment, against a plain loop.

Both of its ways are checked: one running maximum over segments lifted above each other (when the
lifted values fit in int64) and the sort by (segment, value rank) otherwise (a span of times too
wide to lift).  ``NO_TIME`` (no launch) stays ``NO_TIME`` until a real value comes in its segment.
"""

from __future__ import annotations

import numpy as np

from profiler.analysis.dependencies import NO_TIME, segmented_cummax


def _loop(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """The definition, one element at a time: the largest value so far in the element's segment."""
    out = np.empty_like(values)
    for i in range(values.size):
        new = i == 0 or seg[i] != seg[i - 1]
        out[i] = values[i] if new else max(out[i - 1], values[i])
    return out


def test_a_hand_worked_case():
    values = np.array([5, 3, 9, NO_TIME, 2, NO_TIME, 7, 1], dtype=np.int64)
    seg = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    # segment 0: 5, max(5,3)=5, 9; segment 1: NO_TIME, then 2; segment 2: NO_TIME, 7, max(7,1)=7
    want = np.array([5, 5, 9, NO_TIME, 2, NO_TIME, 7, 7], dtype=np.int64)
    assert np.array_equal(segmented_cummax(values, seg), want)


def test_both_ways_against_the_loop():
    rng = np.random.default_rng(7)
    for case in range(60):
        n = int(rng.integers(1, 300))
        seg = np.sort(rng.integers(0, max(1, n // 4), n))
        # times of a trace (ns, around 1.7e18 like nsys's) or, every third case, spread over
        # 2**61 so that the segments cannot be lifted within int64 (the sorting way)
        span = 1 << 61 if case % 3 == 2 else 10**9
        values = rng.integers(0, span, n, dtype=np.int64) + (0 if case % 3 == 2 else 1_700_000_000_000_000_000)
        values[rng.random(n) < 0.2] = NO_TIME
        assert np.array_equal(segmented_cummax(values, seg), _loop(values, seg)), case


def test_only_no_time_and_empty():
    seg = np.array([0, 0, 1])
    only = np.full(3, NO_TIME, dtype=np.int64)
    assert np.array_equal(segmented_cummax(only, seg), only)
    assert segmented_cummax(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).size == 0


def test_negative_values_and_a_span_past_two_to_the_62():
    # negative values (a replay's launch minus the work before it can be): segment 0 is -5;
    # segment 1 is -9, then max(-9, 3) = 3
    values = np.array([-5, -9, 3], dtype=np.int64)
    assert segmented_cummax(values, np.array([0, 1, 1])).tolist() == [-5, -9, 3]
    # two segments whose values span 3 * 2**61 (more than 2**62): lifting segment 1 above
    # segment 0 would pass 2**63, so this goes the sorting way: each value is its segment's only one
    values = np.array([0, 3 << 61], dtype=np.int64)
    assert segmented_cummax(values, np.array([0, 1])).tolist() == [0, 3 << 61]
