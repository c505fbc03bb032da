"""Vectorized set algebra on half-open integer intervals ``[start, end)``.

Intervals carry an integer *group* (a device, a (device, stream) pair, ...);
operations never mix groups.  Every operation is one sweep over the sorted
boundaries with NumPy (lexsort + cumulative sums): no Python loop per event.

An ``Intervals`` value is canonical: sorted by (group, start), disjoint, no
empty intervals, touching intervals merged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import polars as pl

_I64 = np.int64


@dataclass(frozen=True)
class Intervals:
    """Canonical interval set: sorted, disjoint, non-empty, per group."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    @cached_property
    def covered(self) -> np.ndarray:
        """Running total of covered length before each interval (one more entry at the end);
        it restarts nowhere: a group's share is a difference of two entries."""
        return np.r_[0, np.cumsum(self.end - self.start)]

    @staticmethod
    def empty() -> Intervals:
        z = np.zeros(0, dtype=_I64)
        return Intervals(z, z, z)


def rows_where(frame: pl.DataFrame, condition: pl.Expr) -> np.ndarray:
    """The indices of *frame*'s rows where *condition* holds (null: it does not), to pick their spans."""
    return np.flatnonzero(frame.select(condition).to_series().fill_null(False).to_numpy())


def _arr(x: object) -> np.ndarray:
    return np.asarray(x, dtype=_I64).reshape(-1)


def _merge(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> Intervals:
    """Merge sorted, disjoint-or-touching segments into a canonical set."""
    if start.size == 0:
        return Intervals.empty()
    new = np.ones(start.size, dtype=bool)
    new[1:] = (group[1:] != group[:-1]) | (start[1:] != end[:-1])
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, start.size - 1]
    return Intervals(group[first], start[first], end[last])


def _sweep(
    sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    keep: Callable[[list[np.ndarray]], np.ndarray],
) -> Intervals:
    """Sweep the boundaries of several interval lists at once.

    For each elementary segment between consecutive boundaries of one group,
    ``keep`` receives, per input list, how many of its intervals cover the
    segment, and says which segments to keep.  Counts are running sums of
    +1/-1 over all groups: each group's boundaries sum to zero, so a group
    always starts at zero.
    """
    n_total = sum(s.size for _, s, _ in sets)
    if n_total == 0:
        return Intervals.empty()
    times = np.concatenate([np.concatenate([s, e]) for _, s, e in sets])
    groups = np.concatenate([np.concatenate([g, g]) for g, _, _ in sets])
    deltas = []
    for i, (_, s, _) in enumerate(sets):
        d = np.zeros((len(sets), 2 * s.size), dtype=np.int32)
        d[i, : s.size] = 1
        d[i, s.size :] = -1
        deltas.append(d)
    delta = np.concatenate(deltas, axis=1)
    order = np.lexsort((times, groups))
    t = times[order]
    g = groups[order]
    counts = [np.cumsum(delta[i, order])[:-1] for i in range(len(sets))]
    seg_start, seg_end = t[:-1], t[1:]
    mask = (g[:-1] == g[1:]) & (seg_end > seg_start) & keep(counts)
    return _merge(g[:-1][mask], seg_start[mask], seg_end[mask])


def union(group: object, start: object, end: object) -> Intervals:
    """The union of possibly overlapping intervals, per group.

    Zero-length intervals add nothing; intervals with ``end < start`` must be
    removed by the caller (they are invalid, not empty).  Sort by (group,
    start), then a running maximum of ``end``: a new piece begins where a
    start lies beyond everything before it.  Times are shifted per group so
    that one running maximum never leaks from one group into the next.
    """
    g, s, e = _arr(group), _arr(start), _arr(end)
    if np.any(e < s):
        raise ValueError("union: an interval has end < start")
    keep = e > s
    if not keep.all():
        g, s, e = g[keep], s[keep], e[keep]
    if s.size == 0:
        return Intervals.empty()
    few = _few_groups(g)
    if few is not None:  # a few devices: one pass per group, no sort when starts are in order already
        rows = [np.flatnonzero(g == v) for v in few] if few.size > 1 else None
        pieces = [_union_one(s, e)] if rows is None else [_union_one(s[r], e[r]) for r in rows]
        return Intervals(
            np.repeat(few, [p[0].size for p in pieces]),
            np.concatenate([p[0] for p in pieces]),
            np.concatenate([p[1] for p in pieces]),
        )
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[first, s.size])
    lo = np.repeat(s[first], sizes)
    width = np.maximum.reduceat(e, first) - s[first] + 1
    offsets = np.r_[0, np.cumsum(width)[:-1]]
    if offsets[-1] > np.iinfo(_I64).max // 2:  # absurd spans: the general sweep is safe
        return _sweep([(g, s, e)], lambda c: c[0] > 0)
    shift = np.repeat(offsets, sizes) - lo
    run = np.maximum.accumulate(e + shift) - shift
    new = np.ones(s.size, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > run[:-1])
    heads = np.flatnonzero(new)
    tails = np.r_[heads[1:] - 1, s.size - 1]
    return Intervals(g[heads], s[heads], run[tails])


def _few_groups(g: np.ndarray, most: int = 8) -> np.ndarray | None:
    """The distinct values of *g*, sorted, when there are at most *most* of them in a small range."""
    lo, hi = int(g.min()), int(g.max())
    if hi - lo >= 1024:
        return None
    present = np.flatnonzero(np.bincount(g - lo)) + lo
    return present.astype(_I64) if present.size <= most else None


def _union_one(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the union of one group's non-empty intervals."""
    if s.size > 1 and not np.all(s[1:] >= s[:-1]):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run = np.maximum.accumulate(e)
    heads = np.flatnonzero(np.r_[True, s[1:] > run[:-1]])
    tails = np.r_[heads[1:] - 1, s.size - 1]
    return s[heads], run[tails]


def covered_at_least(group: object, start: object, end: object, k: int) -> Intervals:
    """Where at least *k* of the intervals overlap, per group (``k = 1`` is the union)."""
    g, s, e = _arr(group), _arr(start), _arr(end)
    if np.any(e < s):
        raise ValueError("covered_at_least: an interval has end < start")
    return _sweep([(g, s, e)], lambda c: c[0] >= k)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a ∩ b`` per group."""
    return _sweep([(a.group, a.start, a.end), (b.group, b.start, b.end)], lambda c: (c[0] > 0) & (c[1] > 0))


def difference(a: Intervals, b: Intervals) -> Intervals:
    """``a \\ b`` per group.

    Both sets are canonical, so no sweep is needed: per group, the intervals of
    *b* that meet an interval of *a* are one run of rows (two binary searches),
    and what is left of it is the gaps between them, clipped to it.
    """
    if len(a) == 0 or len(b) == 0:
        return a
    pieces = []
    for value, (alo, ahi) in _group_rows(a.group).items():
        blo, bhi = np.searchsorted(b.group, [value, value + 1])
        s, e = a.start[alo:ahi], a.end[alo:ahi]
        ps, pe = _difference_one(s, e, b.start[blo:bhi], b.end[blo:bhi])
        pieces.append((np.full(ps.size, value, dtype=_I64), ps, pe))
    return Intervals(*(np.concatenate([p[i] for p in pieces]) for i in range(3)))


def _group_rows(group: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per value of a sorted *group*: its rows ``[lo, hi)``."""
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    last = np.r_[first[1:], group.size]
    return {int(group[f]): (int(f), int(t)) for f, t in zip(first, last, strict=True)}


def _difference_one(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of ``A \\ B`` for canonical one-group sets A (*s*, *e*) and B (*bs*, *be*)."""
    if bs.size == 0:
        return s, e
    lo = np.searchsorted(be, s, side="right")  # first b ending after a's start
    hi = np.searchsorted(bs, e, side="left")  # first b starting at or after a's end
    m = np.maximum(hi - lo, 0)  # the b's inside or across each a
    n = m + 1  # candidate pieces per a: before the first b, between b's, after the last
    owner = np.repeat(np.arange(s.size), n)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # piece index within its a
    j = lo[owner] + k  # the b after the piece (k < m) and the b before it (k > 0) is j - 1
    last = bs.size - 1
    ps = np.where(k == 0, s[owner], be[np.clip(j - 1, 0, last)])
    pe = np.where(k == m[owner], e[owner], bs[np.clip(j, 0, last)])
    ps, pe = np.maximum(ps, s[owner]), np.minimum(pe, e[owner])
    keep = pe > ps
    return ps[keep], pe[keep]


def join(a: Intervals, b: Intervals) -> Intervals:
    """``a ∪ b`` per group."""
    return _sweep([(a.group, a.start, a.end), (b.group, b.start, b.end)], lambda c: (c[0] > 0) | (c[1] > 0))


def length_by_group(iv: Intervals) -> dict[int, int]:
    """Total length of *iv* per group, exact in int64."""
    return sum_by_group(iv, iv.end - iv.start)


def sum_by_group(iv: Intervals, values: np.ndarray) -> dict[int, int]:
    """Sum of *values* (one per interval of *iv*) per group, exact in int64."""
    if len(iv) == 0:
        return {}
    first = np.flatnonzero(np.r_[True, iv.group[1:] != iv.group[:-1]])
    sums = np.add.reduceat(_arr(values), first)
    return {int(k): int(v) for k, v in zip(iv.group[first], sums, strict=True)}


def measure_within(b: Intervals, group: object, start: object, end: object) -> np.ndarray:
    """For each interval ``[start, end)`` of *group*, the length of its intersection with *b*.

    Uses prefix sums of *b* and binary search (O(n log m)); one pass per
    group present, never per interval.
    """
    return measure_within_each([b], group, start, end)[0]


def measure_within_each(sets: Sequence[Intervals], group: object, start: object, end: object) -> list[np.ndarray]:
    """``measure_within`` against each of *sets*, splitting the intervals by group once."""
    g, s, e = _arr(group), _arr(start), _arr(end)
    outs = [np.zeros(s.size, dtype=_I64) for _ in sets]
    if s.size == 0:
        return outs
    few = _few_groups(g, most=1 << 20)  # a few devices: no sort to find them
    values = few if few is not None else np.unique(g)
    for value in values:
        rows = slice(None) if values.size == 1 else np.flatnonzero(g == value)
        gs, ge = s[rows], e[rows]
        for out, b in zip(outs, sets, strict=True):
            if len(b) == 0:
                continue
            lo, hi = np.searchsorted(b.group, [value, value + 1])
            if lo == hi:
                continue
            bs, be, cum = b.start[lo:hi], b.end[lo:hi], b.covered[lo : hi + 1]
            out[rows] = _covered_below(bs, be, cum, ge) - _covered_below(bs, be, cum, gs)
    return [np.maximum(o, 0) for o in outs]


def _covered_below(bs: np.ndarray, be: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of ``[-inf, x) ∩ B`` for a canonical one-group set B, plus ``cum[0]``
    (a constant per group, cancelled by the caller's difference)."""
    j = np.searchsorted(bs, x, side="right") - 1
    jj = np.maximum(j, 0)
    part = cum[jj] + np.minimum(x, be[jj]) - bs[jj]
    return np.where(j >= 0, part, cum[0])
