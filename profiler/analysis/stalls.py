"""What the copies cost: GPU work stalled waiting, through CUDA events, for a copy.

METRICS.md, "Stalls", rule 4: for an op K with waits,
``ready = max(end of the op before K on its stream, launch time of K)``
(the op before: by start, then correlationId; none: the launch time alone);
``dep`` = the latest end among K's blockers, and that blocker (ties: the
larger correlationId) is K's blocker.  If ``dep > ready``,
``stall(K) = max(0, min(K.start, dep) - ready)``, else 0 (a recorded start
before ``ready`` is clock skew: no stall).

The per-op stalls are a pure function of the ops' start and end times and of
the dependencies, so the what-if replay measures its replayed timeline with
the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import (
    COMPUTE,
    D2H,
    H2D,
    MEMSET,
    NCCL,
    NO_TIME,
    OTHER_COPY,
    Dependencies,
    dependencies,
    index_dtype,
)
from profiler.trace.loader import SYNC_TABLE, Trace

# Why "stalled by copies" can exceed the copies' own time (and the exposed time), by rule 4: said
# wherever the two stand side by side and the stall is the larger.
STALL_OVER_COPY_TIME = (
    "time stalled can exceed the copies' own time: each op that waited for a copy counts its own wait "
    "(several ops, on several streams or GPUs, can wait for one copy, and an op can wait for a copy that "
    "itself waited), from when the op was ready, which can be before the copy started (queued behind "
    "other copies)"
)
BLOCKER_CLASSES = ("h2d", "d2h", "offload", "kernel", "other")
_BLOCKER_OF_KIND = {H2D: ("h2d", "offload"), D2H: ("d2h", "offload"), COMPUTE: ("kernel",), NCCL: ("kernel",)}
_BLOCKER_OF_KIND |= {OTHER_COPY: ("other",), MEMSET: ("other",)}


@dataclass(frozen=True)
class Stalls:
    """Per op (rows of ``deps.ops``): its stall in ns, its blocker's row (-1: none), and when it
    was ready to start (``ready`` of rule 4; the stall is ``[ready, ready + stall)``)."""

    deps: Dependencies
    stall: np.ndarray
    blocker: np.ndarray
    ready: np.ndarray

    @cached_property
    def caused(self) -> np.ndarray:
        """Per op, the stall time of the ops it was the blocker of."""
        out = np.zeros(self.stall.size, dtype=np.int64)
        hit = np.flatnonzero(self.stall > 0)
        np.add.at(out, self.blocker[hit], self.stall[hit])
        return out

    def by_device(self) -> dict[int, dict[str, Any]]:
        """The METRICS.md ``stalls`` object per device (of the stalled op; of the wait row for
        ``waits``): every device with ops or waits, zeros where nothing stalled."""
        ops = self.deps.ops
        devices = set(np.unique(ops.device).tolist()) | set(self.deps.waits)
        out = {int(d): empty_stalls() for d in devices}
        for d, counts in self.deps.waits.items():
            out[d]["waits"] = dict(counts)
        hit = np.flatnonzero(self.stall > 0)
        if hit.size == 0:
            return out
        frame = pl.DataFrame(
            {
                "device": ops.device[hit],
                "kind": ops.kind[hit],
                "blocker_kind": ops.kind[self.blocker[hit]],
                "stall": self.stall[hit],
            }
        )
        agg = frame.group_by("device", "kind", "blocker_kind").agg(pl.len().alias("n"), pl.col("stall").sum())
        for dev, kind, bkind, n, total in agg.iter_rows():
            entry = out[int(dev)]
            for cls in _BLOCKER_OF_KIND[bkind]:
                entry["by_blocker"][cls]["count"] += int(n)
                entry["by_blocker"][cls]["stall_ns"] += int(total)
            if bkind in (H2D, D2H) and kind == COMPUTE:
                entry["compute_stalled_by_offload_ns"] += int(total)
            elif bkind in (H2D, D2H) and kind == NCCL:
                entry["nccl_stalled_by_offload_ns"] += int(total)
        return out

    def caused_by_copies(self) -> pl.DataFrame:
        """The copies that caused stalls, keyed as the loader's rows are: pid, device, stream,
        correlation_id, start, stall_caused_ns."""
        ops = self.deps.ops
        caused = self.caused
        rows = np.flatnonzero((caused > 0) & ((ops.kind == H2D) | (ops.kind == D2H)))
        return pl.DataFrame(
            {
                "pid": ops.pid[rows],
                "device": ops.device[rows],
                "stream": ops.stream[rows],
                "correlation_id": ops.corr[rows],
                "start": ops.start[rows],
                "stall_caused_ns": caused[rows],
            },
            schema={k: pl.Int64 for k in ("pid", "device", "stream", "correlation_id", "start", "stall_caused_ns")},
        )


def empty_stalls() -> dict[str, Any]:
    """A ``stalls`` object with zeros (no waits, nothing stalled)."""
    return {
        "waits": {"total": 0, "resolved": 0, "unresolved": 0},
        "by_blocker": {c: {"count": 0, "stall_ns": 0} for c in BLOCKER_CLASSES},
        "compute_stalled_by_offload_ns": 0,
        "nccl_stalled_by_offload_ns": 0,
    }


def op_stalls(deps: Dependencies, start: np.ndarray, end: np.ndarray, launch: np.ndarray | None = None) -> Stalls:
    """Rule 4 over the ops' *start* and *end* (recorded, or replayed by the what-if, with the
    replayed *launch* times when host synchronization moved them)."""
    ops = deps.ops
    launch = ops.launch if launch is None else launch
    n = len(ops)
    stall = np.zeros(n, dtype=np.int64)
    chosen = np.full(n, -1, dtype=index_dtype(n))
    since = np.full(n, NO_TIME, dtype=np.int64)
    if deps.target.size == 0:
        return Stalls(deps, stall, chosen, since)
    tgt, blk = deps.target, deps.blocker
    # per target, the blocker with the latest end (ties: the larger correlationId) comes last
    order = np.lexsort((ops.corr[blk], end[blk], tgt))
    tgt, blk = tgt[order], blk[order]
    last = np.r_[tgt[1:] != tgt[:-1], True]
    k, b = tgt[last], blk[last]
    dep = end[b]
    prev = ops.prev[k]
    ready = np.where(prev >= 0, np.maximum(end[np.maximum(prev, 0)], launch[k]), launch[k])
    value = np.where(dep > ready, np.maximum(0, np.minimum(start[k], dep) - ready), 0)
    stall[k] = value
    chosen[k] = b
    since[k] = ready
    return Stalls(deps, stall, chosen, since)


def add_stalls(devices: dict[str, dict[str, Any]], stalls: Stalls | None, recorded: bool = True) -> None:
    """Put the METRICS.md ``stalls`` object into each device entry of ``devices`` (zeros without waits);
    with ``"recorded": false`` when the trace cannot hold stream waits (``Trace.waits_recorded``):
    then its zeros say nothing."""
    per_device = stalls.by_device() if stalls is not None else {}
    for dev, entry in devices.items():
        entry["stalls"] = per_device.get(int(dev), empty_stalls()) | ({} if recorded else {"recorded": False})


def has_waits(trace: Trace) -> bool:
    """Whether the export can hold stream waits at all (a cheap look before reading anything)."""
    return trace.has(SYNC_TABLE) and trace.row_counts.get(SYNC_TABLE, 1) > 0


def trace_stalls(trace: Trace, deps: Dependencies | None = None) -> Stalls:
    """Stalls of the recorded timeline of *trace*."""
    deps = dependencies(trace) if deps is None else deps
    return op_stalls(deps, deps.ops.start, deps.ops.end)
