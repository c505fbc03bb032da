"""Reads of a run summary's copy and stall numbers for one GPU, shared by the policy and layer views."""

from __future__ import annotations

from typing import Any

from profiler.stored.summary import RunSummary
from profiler.trace.jax_profile import NO_WAITS

ZERO = {"count": 0, "bytes": 0, "busy_ns": 0, "overlap_any_ns": 0, "exposed_ns": 0, "hidden_fraction": None}
ZERO3 = {d: ZERO for d in ("h2d", "d2h", "offload")}


def waits(run: RunSummary, device: str | None) -> int:
    """Stream waits recorded on *device*: without any, stalls cannot be measured there."""
    return int((run.device_stalls(device).get("waits") or {}).get("total") or 0)


def stalls_not_measured(run: RunSummary, device: str | None) -> str | None:
    """Why stalls cannot be measured on *device* at all, in the words ``analyze`` prints: the trace could
    not record stream waits (a JAX profiler trace, whose device ``stalls`` say ``"recorded": false``);
    None where it could (an nsys export without waits simply had none)."""
    return NO_WAITS if run.device_stalls(device).get("recorded") is False else None


def stall_over_copy(per_device: Any) -> bool:
    """Whether any direction of these copy numbers (``{d2h: {...}, h2d: {...}}`` each) stalled other work
    longer than the copies ran (``STALL_OVER_COPY_TIME`` says why that can be)."""
    return any((c[d].get("stall_ns") or 0) > c[d]["busy_ns"] for c in per_device for d in ("d2h", "h2d"))


def stalled(run: RunSummary, device: str | None) -> dict[str, int]:
    """GPU time on *device* stalled waiting for D2H and for H2D copies (the device's ``stalls`` object)."""
    by = run.device_stalls(device).get("by_blocker") or {}
    return {d: int((by.get(d) or {}).get("stall_ns") or 0) for d in ("d2h", "h2d")}
