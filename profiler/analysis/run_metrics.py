"""The numbers of one profiled run that record, compare and the dashboard share.

A *run* is one trace (plus its manifest when profile-step made it): its policy,
its steps, its copies per direction over all devices, and its layers.  All
numbers come from ``overlap``/``breakdown``; nothing is computed twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiler.analysis.attribution import OP_KINDS
from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.kernels_slowed import add_kernels_beside, kernel_totals
from profiler.analysis.overlap import device_metrics
from profiler.analysis.policies import executed_modules, step_compiled
from profiler.analysis.stalls import add_stalls
from profiler.analysis.work import run_work
from profiler.conventions import COMPILED, MANIFEST, rank_from_name
from profiler.trace.loader import Trace

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


def find_compiled(trace_path: Path) -> dict[str, Any] | None:
    """The compiled.json (the step's compiled module, see profiler.capture.step_module) beside the trace."""
    cand = trace_path.parent / COMPILED
    try:
        return json.loads(cand.read_text()) if cand.is_file() else None
    except (OSError, ValueError):
        return None


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


def find_manifest(trace_path: Path) -> dict[str, Any] | None:
    """The manifest.json of the run folder holding *trace_path*, if any."""
    cand = trace_path.parent / MANIFEST
    try:
        return json.loads(cand.read_text()) if cand.is_file() else None
    except (OSError, ValueError):
        return None


def _compiled(trace: Trace, bd: Breakdown) -> dict[str, Any]:
    """The compiled step of the run folder, matched to the module the steps analysis found."""
    ms = bd.module_steps
    step = (ms.module, ms.program_id) if ms.module else None
    return step_compiled(find_compiled(trace.path), executed_modules(bd.ranges.ranges), step, ms.chosen_by)


def _top_by_name(rows: list[dict[str, Any]], n: int = 5) -> list[dict[str, Any]]:
    """The *n* kernel names that overlapped copies most: rows of one name (from several GPUs) added."""
    by: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = by.setdefault(r["name"], {"name": r["name"], "overlap_ns": 0, "kernels": 0})
        t["overlap_ns"] += r["overlap_ns"]
        t["kernels"] += r["kernels"]
    return sorted(by.values(), key=lambda t: (-t["overlap_ns"], t["name"]))[:n]


def collect(
    trace: Trace,
    manifest: dict[str, Any] | None = None,
    detail: bool = True,
    findings: FindingsConfig | None = None,
    breakdown: Breakdown | None = None,
) -> dict[str, Any]:
    """One run's summary: policy, steps, per-direction totals, per-layer totals, findings.

    ``detail=False`` (the per-rank task) leaves out per-step copy numbers, the
    kernels that hid each layer's copies, per-stream numbers, peak memory and
    the findings.  *breakdown*: the trace's attribution when the caller keeps it
    (the dashboard writes its ops and ranges next); it must attribute the kinds
    *detail* needs (all ops, or copies alone).
    """
    # copy numbers per layer and step need only the copies attributed; top kernels need all ops
    bd = breakdown if breakdown is not None else Breakdown(trace, kinds=OP_KINDS if detail else ("copy",))
    devices = device_metrics(
        bd.kernels,
        trace.copies,
        trace.memsets,
        memory=trace.memory_events if detail else None,
        kernel_sets=bd.kernel_sets,
        streams=detail,
    )
    add_stalls(devices, bd.stalls)
    if detail:
        add_kernels_beside(devices, bd.kernels, trace.copies)
    steps = bd.by_step(copies=detail)
    layers: dict[str, dict[str, Any]] = {}
    for row in bd.by_layer(top_kernels=detail):
        entry = layers.setdefault(
            row["name"], {"inferred_index": row["inferred_index"], "per_device": [], "top_kernels": []}
        )
        entry["per_device"].append(row["copies"])
        entry["top_kernels"] += row["top_kernels"]
        if row["device"] is not None:
            entry.setdefault("by_device", {})[row["device"]] = row["copies"]
            entry.setdefault("top_by_device", {})[row["device"]] = row["top_kernels"]
    policy = (manifest or {}).get("policy") or bd.policy or "default"
    rank = (manifest or {}).get("rank")
    if rank is None:
        rank = rank_from_name(trace.path)
    step_rows = []
    for s in steps["steps"]:
        off = totals([c["offload"] for c in s["devices"].values()])
        step_rows.append(
            {
                "name": s["name"],
                "duration_ns": s["duration_ns"],
                "excluded": s["excluded"],
                "exposed_ns": off["exposed_ns"],
                "stall_ns": off["stall_ns"],
                "busy_ns": off["busy_ns"],
                "hidden_fraction": off["hidden_fraction"],
            }
        )
    found = run_findings(trace, manifest, findings, bd, devices) if detail else None
    return {
        "policy": policy,
        "rank": rank,
        "findings": found,
        "trace": str(trace.path),
        "nsys_version": trace.nsys_version,
        "manifest": manifest,
        "gpus": sorted(set(trace.devices["name"].drop_nulls().to_list())),
        "device_names": {str(d): n for d, n in trace.devices.select("id", "name").iter_rows() if n},
        "window": trace.window.facts(),  # the part of the recording these numbers come from
        "step_source": steps["source"],
        "steps": step_rows,
        "median_step_ns": steps["median_included_step_ns"],
        "copies": {d: totals([dev["copies"][d] for dev in devices.values()]) for d in DIRECTIONS},
        "devices": {dev: {d: m["copies"][d] for d in DIRECTIONS} for dev, m in devices.items()},
        "streams": {dev: m["streams"] for dev, m in devices.items()},
        "stalls": {dev: m["stalls"] for dev, m in devices.items()},
        "stall_ns": sum(m["stalls"]["by_blocker"]["offload"]["stall_ns"] for m in devices.values()),
        # kernels slowed by copies (METRICS.md), per device, and the excess kernel time over all devices
        **kernel_totals(devices),
        "peak_memory_bytes": {dev: m["memory"]["peak_allocated_bytes"] for dev, m in devices.items() if "memory" in m},
        "compute": {
            dev: {"compute": m["compute"], "nccl": m["nccl"], "span_ns": m["span_ns"]} for dev, m in devices.items()
        },
        # per device: calls and time per kernel name, the window's time split; the split per included step
        "work": run_work(
            bd.kernels,
            trace.copies,
            trace.memsets,
            bd.kernel_sets,
            {dev: m["window_ns"] for dev, m in devices.items()},
            steps["steps"],
        )
        if detail
        else None,
        "layers": {
            name: {
                "inferred_index": v["inferred_index"],
                "top_kernels": _top_by_name(v["top_kernels"]),  # all GPUs of the run, each name once
                "top_kernels_by_device": {dev: _top_by_name(t) for dev, t in (v.get("top_by_device") or {}).items()},
                **{d: totals([c[d] for c in v["per_device"]]) for d in DIRECTIONS},
                "devices": v.get("by_device", {}),  # per device: the h2d/d2h/offload numbers
            }
            for name, v in layers.items()
        },
        # issue 14: the step's compiled module (memory, FLOPs, labelled offload plan) and copies per instruction
        "compiled": _compiled(trace, bd) if detail else None,
        "copy_ops": copy_ops(bd) if detail else [],
    }
