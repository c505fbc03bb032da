"""Sums of one run's numbers over devices, layers and instructions (pure: documents in, numbers out).

The run itself (its policy, steps, copies per direction, layers) is put together once, by
``profiler.runs.result.build``; these are the sums it and the results database share.
"""

from __future__ import annotations

from typing import Any

from profiler.analysis.breakdown import Breakdown

DIRECTIONS = ("h2d", "d2h", "offload")
SUM_KEYS = (
    "count",
    "bytes",
    "duration_sum_ns",
    "busy_ns",
    "overlap_compute_ns",
    "overlap_nccl_ns",
    "overlap_any_ns",
    "exposed_ns",
    "stall_ns",
)


def totals(per_device: list[dict[str, Any]]) -> dict[str, Any]:
    """Copy-class metrics summed over devices; ratios recomputed from the sums."""
    out: dict[str, Any] = {k: sum(m.get(k, 0) for m in per_device) for k in SUM_KEYS}
    out["hidden_fraction"] = out["overlap_any_ns"] / out["busy_ns"] if out["busy_ns"] else None
    out["gbps"] = out["bytes"] / out["duration_sum_ns"] if out["duration_sum_ns"] else None
    return out


def copy_ops(bd: Breakdown) -> list[dict[str, Any]]:
    """Copy bytes per XLA instruction (or innermost range) and device, for planned-vs-moved."""
    out = []
    for r in bd.by_op(top_kernels=False):
        c = r["copies"]
        if c["d2h"]["count"] or c["h2d"]["count"]:
            out.append(
                {
                    "op": r["name"],
                    "device": r["device"],
                    **{f"{d}_{k}": c[d][k] for d in ("d2h", "h2d") for k in ("bytes", "count")},
                    "exposed_ns": c["offload"]["exposed_ns"],
                }
            )
    return out


def top_by_name(rows: list[dict[str, Any]], n: int = 5) -> list[dict[str, Any]]:
    """The *n* kernel names that overlapped copies most: rows of one name (from several GPUs) added."""
    by: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = by.setdefault(r["name"], {"name": r["name"], "overlap_ns": 0, "kernels": 0})
        t["overlap_ns"] += r["overlap_ns"]
        t["kernels"] += r["kernels"]
    return sorted(by.values(), key=lambda t: (-t["overlap_ns"], t["name"]))[:n]
