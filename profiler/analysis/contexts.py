"""Copy bandwidth by context: does a copy run alone, beside kernels, or beside other copies?

METRICS.md, "Copy bandwidth by context": for each h2d and d2h copy of at
least 1,048,576 bytes with ``end > start``, on its device:

- ``alone``: no part of it overlaps any kernel or any other copy;
- ``kernels``: ``2 * |copy ∩ U(all kernels)| >= end - start``;
- ``copies``: otherwise, ``2 * |copy ∩ U(all other copies)| >= end - start``;
- ``mixed``: otherwise.

"All other copies" are the device's other valid copies of any class.  The
part of a copy covered by some other copy is where at least two copies run
(the copy itself is always one of them), so one sweep over all copies gives
it for every copy at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.intervals import covered_at_least, measure_within_each, rows_where

MIN_CONTEXT_BYTES = 1 << 20
CONTEXTS = ("alone", "kernels", "copies", "mixed")
NOT_ELIGIBLE = -1


def copy_contexts(copies: pl.DataFrame, all_kernels: Any) -> np.ndarray:
    """Per row of *copies* (valid copies of every class): the index of its context in
    ``CONTEXTS``, or ``NOT_ELIGIBLE`` (not h2d/d2h, under 1 MiB, or zero-length).

    *all_kernels* is the union of every kernel per device (``KernelSets.any``).
    """
    out = np.full(copies.height, NOT_ELIGIBLE, dtype=np.int8)
    if copies.height == 0:
        return out
    dev, s, e = (copies[c].to_numpy() for c in ("device", "start", "end"))
    rows = rows_where(
        copies,
        pl.col("cls").is_in(["h2d", "d2h"])
        & (pl.col("bytes").fill_null(0) >= MIN_CONTEXT_BYTES)
        & (pl.col("end") > pl.col("start")),
    )
    if rows.size == 0:
        return out
    shared = covered_at_least(dev, s, e, 2)
    ov_k, ov_c = measure_within_each([all_kernels, shared], dev[rows], s[rows], e[rows])
    dur = e[rows] - s[rows]
    ctx = np.where(
        (ov_k == 0) & (ov_c == 0),
        0,
        np.where(2 * ov_k >= dur, 1, np.where(2 * ov_c >= dur, 2, 3)),
    )
    out[rows] = ctx
    return out


def context_metrics(count: np.ndarray, nbytes: np.ndarray, duration: np.ndarray) -> dict[str, Any]:
    """The ``contexts`` object and ``slowdown_with_kernels`` from per-context sums (in
    ``CONTEXTS`` order)."""
    ctx: dict[str, Any] = {}
    for i, name in enumerate(CONTEXTS):
        b, d = int(nbytes[i]), int(duration[i])
        ctx[name] = {"count": int(count[i]), "bytes": b, "duration_sum_ns": d, "gbps": b / d if d else None}
    alone, kern = ctx["alone"]["gbps"], ctx["kernels"]["gbps"]
    slowdown = alone / kern if alone is not None and kern is not None else None
    return {"contexts": ctx, "slowdown_with_kernels": slowdown}
