"""The ``profile-step analyze --json`` document for one trace."""

from __future__ import annotations

from typing import Any

from profiler.analysis.overlap import device_metrics
from profiler.trace.loader import Trace


def trace_info(trace: Trace) -> dict[str, Any]:
    """Facts about the export itself and its GPUs."""
    return {
        "path": str(trace.path),
        "nsys_version": trace.nsys_version,
        "schema_version": trace.schema_version,
        "gpus": {str(d): n for d, n in trace.devices.select("id", "name").iter_rows()},
    }


def analyze(trace: Trace, device: int | None = None) -> dict[str, Any]:
    """METRICS.md ``devices`` plus a ``trace`` block describing the export."""
    return {
        "trace": trace_info(trace),
        "devices": device_metrics(trace.kernels, trace.copies, trace.memsets, device),
    }


def offload_totals(devices: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``offload`` class summed over devices (hidden fraction recomputed from the sums)."""
    keys = ("count", "bytes", "busy_ns", "overlap_any_ns", "exposed_ns", "duration_sum_ns")
    tot = {k: sum(d["copies"]["offload"][k] for d in devices.values()) for k in keys}
    tot["hidden_fraction"] = tot["overlap_any_ns"] / tot["busy_ns"] if tot["busy_ns"] else None
    return tot


def run_summary(trace: Trace) -> dict[str, Any]:
    """What a finished run shows: its steps and its offload copies over all devices."""
    from profiler.analysis.steps import step_summary

    doc = analyze(trace)
    return {**step_summary(trace.nvtx), "devices": doc["devices"], "offload": offload_totals(doc["devices"]),
            "analysis": doc}
