"""The ``profile-step analyze --json`` document for one trace."""

from __future__ import annotations

from typing import Any

import polars as pl

from profiler.analysis.attribution import OP_KINDS
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.kernels_slowed import add_kernels_beside
from profiler.analysis.overlap import device_metrics
from profiler.analysis.stalls import add_stalls
from profiler.trace.loader import Trace


def trace_info(trace: Trace) -> dict[str, Any]:
    """Facts about the export itself and its GPUs."""
    return {
        "path": str(trace.path),
        "nsys_version": trace.nsys_version,
        "schema_version": trace.schema_version,
        "gpus": {str(d): n for d, n in trace.devices.select("id", "name").iter_rows()},
        "window": trace.window.facts(),  # the part of the recording every number comes from
    }


def analyze(
    trace: Trace,
    device: int | None = None,
    by: str | None = None,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    findings: FindingsConfig | None = None,
) -> dict[str, Any]:
    """METRICS.md ``devices`` plus a ``trace`` block; with *by*, the per-group view too:
    ``ranges`` (METRICS.md), ``steps``, ``layers`` or ``ops``; with a *findings* configuration,
    ``findings`` (the rules' verdicts, and the rules skipped and why)."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.analysis.xla_names import DEFAULT_LAYER_PATTERN

    # without a view or findings, no op is attributed to NVTX ranges (no launches to read)
    kinds = OP_KINDS if by is not None or findings is not None else ()
    # kernels with names and launch shapes (kernels_beside_copies), read first: the spans come from them
    named = trace.kernels if device is None else trace.kernels.filter(pl.col("device") == device)
    bd = Breakdown(trace, layer_pattern or DEFAULT_LAYER_PATTERN, step_range, kinds=kinds)
    doc: dict[str, Any] = {
        "trace": trace_info(trace),
        "devices": device_metrics(
            bd.kernels,
            trace.copies,
            trace.memsets,
            device,
            trace.memory_events,
            kernel_sets=bd.kernel_sets if device is None else None,
            contexts=bd.copy_contexts if device is None else None,
        ),
    }
    add_stalls(doc["devices"], bd.stalls)
    add_kernels_beside(doc["devices"], named, trace.copies, bd.kernel_groups if device is None else None)
    if findings is not None:
        from profiler.analysis.findings import run_findings
        from profiler.analysis.run_metrics import find_manifest

        devices = doc["devices"] if device is None else None
        doc["findings"] = run_findings(trace, find_manifest(trace.path), findings, bd, devices)
    if by is None:
        return doc
    if by == "range":
        groups: Any = bd.by_range()
    elif by == "step":
        groups = bd.by_step()
    elif by == "layer":
        groups = bd.by_layer()
    elif by == "op":
        groups = bd.by_op()
    else:
        raise ValueError(f"unknown view {by!r}")
    if device is not None and isinstance(groups, list):
        groups = [g for g in groups if g["device"] == str(device)]
    doc[{"range": "ranges", "step": "steps", "layer": "layers", "op": "ops"}[by]] = groups
    doc["attribution"] = bd.facts()
    return doc


def run_summary(trace: Trace) -> dict[str, Any]:
    """What a finished run shows: its steps (outliers left out of the median, as everywhere) and
    its offload copies over all devices."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.analysis.run_metrics import totals
    from profiler.analysis.steps import step_summary

    doc = analyze(trace)
    steps = Breakdown(trace, kinds=()).by_step(copies=False)
    annotated = step_summary(trace.nvtx)
    warm = sum(1 for s in steps["steps"] if (s["excluded"] or "").startswith("warm-up"))
    return {
        **annotated,
        "steps": len(steps["steps"]),  # by the one definition of a step (Breakdown.steps)
        "warmup_steps": annotated["warmup_steps"] + warm,
        "step_source": steps["source"],
        "step_source_note": steps["source_note"],
        "median_step_ns": steps["median_included_step_ns"],
        "excluded_steps": steps["excluded"],
        "devices": doc["devices"],
        "offload": totals([d["copies"]["offload"] for d in doc["devices"].values()]),
        "analysis": doc,
    }
