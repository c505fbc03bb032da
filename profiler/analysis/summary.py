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
