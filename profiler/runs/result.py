"""One typed result per run, built by one function that calls the analysis once.

``build`` attributes the trace (one ``Breakdown``), computes its METRICS.md devices
(``device_metrics``, ``add_stalls``, ``add_kernels_beside``) and its findings, once; the
steps, layers, compiled step and work of the run are derived from that same analysis
when first asked for.  The documents the tool prints and stores are views of it:

- ``RunResult.analysis_json(by)``: ``profile-step analyze --json`` (``analyze``);
- ``RunResult.to_json()``: the run document of ``record``, ``compare``, the dashboard and
  the per-rank task (``collect``);
- ``RunResult.summary_json()``: what ``profile-step run`` shows of a finished run (``run_summary``).

Only this module and ``folder`` read a run's files: the analysis gets frames and documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from profiler.analysis.attribution import OP_KINDS
from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.kernels_slowed import add_kernels_beside, kernel_totals
from profiler.analysis.links import Link
from profiler.analysis.overlap import device_metrics
from profiler.analysis.policies import step_compiled
from profiler.analysis.run_metrics import DIRECTIONS, copy_ops, top_by_name, totals
from profiler.analysis.stalls import add_stalls
from profiler.analysis.steps import step_summary
from profiler.analysis.work import run_work
from profiler.conventions import DEFAULT_RANK_PATTERN, rank_from_name
from profiler.errors import InputError, ProfilerError
from profiler.runs.discover import NoTrace, trace_paths
from profiler.stored import folder
from profiler.stored.summary import RunSummary, StepRow
from profiler.trace.loader import Trace
from profiler.trace.window import Window
from profiler.xla.names import DEFAULT_LAYER_PATTERN

VIEWS = {"range": "ranges", "step": "steps", "layer": "layers", "op": "ops"}


@dataclass(frozen=True)
class TraceInfo:
    """Facts about the export itself and its GPUs."""

    path: Path
    nsys_version: str | None
    schema_version: Any
    device_names: dict[str, str | None]  # every device of the export, by decimal id
    window: Window  # the part of the recording every number comes from
    source: str | None = None  # what the export was converted from (a JAX profiler trace); None: nsys's
    origin: Path | None = None  # the file the user named, when the export was made from it

    @classmethod
    def of(cls, trace: Trace) -> TraceInfo:
        names = {str(d): n for d, n in trace.devices.select("id", "name").iter_rows()}
        return cls(
            trace.path, trace.nsys_version, trace.schema_version, names, trace.window, trace.source, trace.origin
        )

    @property
    def gpus(self) -> list[str]:
        """The GPU models of the run, each once."""
        return sorted({n for n in self.device_names.values() if n is not None})

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "path": str(self.path),
                "nsys_version": self.nsys_version,
                "schema_version": self.schema_version,
                "gpus": self.device_names,
                "window": self.window.facts(),
            }
            | ({"source": self.source} if self.source else {})
            | ({"origin": str(self.origin)} if self.origin else {})
        )


@dataclass(frozen=True)
class Steps:
    """The run's steps by the one definition of a step (``Breakdown.by_step``)."""

    source: str
    source_note: str | None
    median_ns: int | None  # of the included steps
    excluded: Any
    rows: tuple[StepRow, ...]
    groups: list[dict[str, Any]] = field(repr=False)  # by_step's own rows (per device copies included)


@dataclass(frozen=True)
class LayerResult:
    """One layer's copies over all devices and per device, and the kernels that hid them."""

    inferred_index: int | None
    copies: dict[str, dict[str, Any]]  # h2d / d2h / offload, summed over devices
    devices: dict[str, dict[str, Any]]  # per device: the h2d/d2h/offload numbers
    top_kernels: list[dict[str, Any]]  # all GPUs of the run, each name once
    top_kernels_by_device: dict[str, list[dict[str, Any]]]

    def to_json(self) -> dict[str, Any]:
        return {
            "inferred_index": self.inferred_index,
            "top_kernels": self.top_kernels,
            "top_kernels_by_device": self.top_kernels_by_device,
            **self.copies,
            "devices": self.devices,
        }


@dataclass(eq=False)
class RunResult:
    """One run's analysis: made once by ``build``; every document of the run is a view of it."""

    trace: Trace = field(repr=False)
    breakdown: Breakdown = field(repr=False)
    info: TraceInfo
    manifest: dict[str, Any] | None
    devices: dict[str, dict[str, Any]]  # METRICS.md ``devices``, keyed by decimal deviceId
    findings: dict[str, Any] | None  # the rules' verdicts; None when not asked for
    detail: bool = True  # False (the per-rank task): no per-step copies, top kernels, streams, memory, work
    device: int | None = None  # the one device analysed, None for all

    @cached_property
    def policy(self) -> str:
        return (self.manifest or {}).get("policy") or self.breakdown.policy or "default"

    @cached_property
    def rank(self) -> int | None:
        rank = (self.manifest or {}).get("rank")
        return rank_from_name(self.trace.source_path) if rank is None else rank

    @cached_property
    def steps(self) -> Steps:
        s = self.breakdown.by_step(copies=self.detail)
        rows = []
        for step in s["steps"]:
            off = totals([c["offload"] for c in step["devices"].values()])
            per = {d: totals([c[d] for c in step["devices"].values()]) for d in ("d2h", "h2d")}
            rows.append(
                StepRow(
                    step["name"],
                    step["duration_ns"],
                    step["excluded"],
                    off["exposed_ns"],
                    off["stall_ns"] if self.trace.waits_recorded else None,
                    off["busy_ns"],
                    off["hidden_fraction"],
                    {d: {k: m[k] for k in ("count", "busy_ns", "exposed_ns")} for d, m in per.items()}
                    if step["devices"]
                    else None,
                )
            )
        return Steps(
            s["source"], s.get("source_note"), s["median_included_step_ns"], s["excluded"], tuple(rows), s["steps"]
        )

    @cached_property
    def layers(self) -> dict[str, LayerResult]:
        per: dict[str, dict[str, Any]] = {}
        for row in self.breakdown.by_layer(top_kernels=self.detail):
            entry = per.setdefault(
                row["name"], {"index": row["inferred_index"], "copies": [], "top": [], "by_dev": {}, "top_by_dev": {}}
            )
            entry["copies"].append(row["copies"])
            entry["top"] += row["top_kernels"]
            if row["device"] is not None:
                entry["by_dev"][row["device"]] = row["copies"]
                entry["top_by_dev"][row["device"]] = row["top_kernels"]
        return {
            name: LayerResult(
                v["index"],
                {d: totals([c[d] for c in v["copies"]]) for d in DIRECTIONS},
                v["by_dev"],
                top_by_name(v["top"]),
                {dev: top_by_name(t) for dev, t in v["top_by_dev"].items()},
            )
            for name, v in per.items()
        }

    @cached_property
    def compiled(self) -> dict[str, Any] | None:
        """The step program's compiled module (memory, FLOPs, labelled offload plan): the program whose
        executions are the steps (one rule: ``profiler.xla.step_program``), from its HLO only."""
        if not self.detail:
            return None
        return step_compiled(self.breakdown.compiled, self.breakdown.module_steps.step)

    def step_brief(self) -> dict[str, Any] | None:
        """The step program in brief (the run line's): its label, how it was chosen, its dump module,
        fingerprint and notes."""
        comp = self.compiled
        if not comp:
            return None
        keys = ("step_program", "chosen_by", "module", "fingerprint", "agreement", "notes")
        return {k: comp.get(k) for k in keys}

    @cached_property
    def work(self) -> dict[str, Any] | None:
        """Per device: calls and time per kernel name, the window's time split; the split per included step."""
        if not self.detail:
            return None
        bd = self.breakdown
        windows = {dev: m["window_ns"] for dev, m in self.devices.items()}
        return run_work(bd.kernels, self.trace.copies, self.trace.memsets, bd.kernel_sets, windows, self.steps.groups)

    def timeline(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The dashboard's timeline: the GPU ops (with their layer, each device's in time order, so
        a step's window is a slice) and the NVTX step and layer ranges (``lane``, name, start, end)."""
        bd = self.breakdown
        layers = bd.layer_assignment()
        ops = (
            bd.ops.join(layers.select("op_id", "layer"), on="op_id", how="left")
            .select("op_id", "kind", "device", "stream", "start", "end", "name", "is_nccl", "cls", "bytes", "layer")
            .sort("device", "start")
        )
        r = bd.ranges.ranges
        steps = bd.step_ranges().select(pl.lit("step").alias("lane"), "name", "start", "end")
        layer_ranges = bd.layer_ranges.join(r.select("range_id", "end"), on="range_id").select(
            pl.lit("layer").alias("lane"), pl.col("layer").alias("name"), "start", "end"
        )
        return ops, pl.concat([steps, layer_ranges])

    def copies(self) -> dict[str, dict[str, Any]]:
        """Copy-class metrics per direction over all devices."""
        return {d: totals([dev["copies"][d] for dev in self.devices.values()]) for d in DIRECTIONS}

    # --- the documents -------------------------------------------------------------------------
    def summary(self) -> RunSummary:
        """The run document, typed: what compare, the policy table and the dashboard read (the same
        type as a run read back from the results database)."""
        return RunSummary.from_json(self.to_json())

    def brief(self) -> RunSummary:
        """The run document without what the verdict never reads (layers, work, copies per XLA
        operation): ``analyze TRACE`` and ``findings`` need no more, and they cost a fifth of the time
        on a run with layers.  The compiled step stays: the policy table's fit and device kind read it."""
        devices = self.devices
        return RunSummary.from_json(
            {
                "policy": self.policy,
                "rank": self.rank,
                "findings": self.findings,
                "trace": str(self.trace.source_path),
                "manifest": self.manifest,
                "gpus": self.info.gpus,
                "device_names": {d: n for d, n in self.info.device_names.items() if n},
                "window": self.info.window.facts(),
                "step_source": self.steps.source,
                "steps": [r.to_json() for r in self.steps.rows],
                "median_step_ns": self.steps.median_ns,
                "copies": self.copies(),
                "devices": {dev: {d: m["copies"][d] for d in DIRECTIONS} for dev, m in devices.items()},
                "compute": {
                    dev: {"compute": m["compute"], "nccl": m["nccl"], "span_ns": m["span_ns"]}
                    for dev, m in devices.items()
                },
                "peak_memory_bytes": {
                    dev: m["memory"]["peak_allocated_bytes"] for dev, m in devices.items() if "memory" in m
                },
                "compiled": self.compiled,
            }
        )

    def to_json(self) -> dict[str, Any]:
        """The run document (``record``, ``compare``, the dashboard, the per-rank task)."""
        devices = self.devices
        return {
            "policy": self.policy,
            "rank": self.rank,
            "findings": self.findings,
            "trace": str(self.trace.source_path),
            "nsys_version": self.info.nsys_version,
            "manifest": self.manifest,
            "gpus": self.info.gpus,
            "device_names": {d: n for d, n in self.info.device_names.items() if n},
            "window": self.info.window.facts(),  # the part of the recording these numbers come from
            "step_source": self.steps.source,
            "steps": [r.to_json() for r in self.steps.rows],
            "median_step_ns": self.steps.median_ns,
            "copies": self.copies(),
            "devices": {dev: {d: m["copies"][d] for d in DIRECTIONS} for dev, m in devices.items()},
            "streams": {dev: m["streams"] for dev, m in devices.items()},
            "stalls": {dev: m["stalls"] for dev, m in devices.items()},
            "stall_ns": sum(m["stalls"]["by_blocker"]["offload"]["stall_ns"] for m in devices.values())
            if self.trace.waits_recorded
            else None,
            # kernels slowed by copies (METRICS.md), per device, and the excess kernel time over all devices
            **kernel_totals(devices),
            "peak_memory_bytes": {
                dev: m["memory"]["peak_allocated_bytes"] for dev, m in devices.items() if "memory" in m
            },
            "compute": {
                dev: {"compute": m["compute"], "nccl": m["nccl"], "span_ns": m["span_ns"]} for dev, m in devices.items()
            },
            "work": self.work,
            "layers": {name: v.to_json() for name, v in self.layers.items()},
            "compiled": self.compiled,
            "copy_ops": copy_ops(self.breakdown) if self.detail else [],
        }

    def analysis_json(self, by: str | None = None, with_findings: bool = True) -> dict[str, Any]:
        """``analyze --json``: METRICS.md ``devices`` plus a ``trace`` block; the findings when they
        were asked for; with *by*, the per-group view too (``ranges``, ``steps``, ``layers``, ``ops``)
        and the attribution's facts."""
        doc: dict[str, Any] = {"trace": self.info.to_json(), "devices": self.devices}
        if with_findings and self.findings is not None:
            doc["findings"] = self.findings
        if by is None:
            return doc
        bd = self.breakdown
        views = {"range": bd.by_range, "step": bd.by_step, "layer": bd.by_layer, "op": bd.by_op}
        if by not in views:
            raise ValueError(f"unknown view {by!r}")
        groups: Any = views[by]()
        if self.device is not None and isinstance(groups, list):
            groups = [g for g in groups if g["device"] == str(self.device)]
        doc[VIEWS[by]] = groups
        doc["attribution"] = bd.facts()
        return doc

    def summary_json(self) -> dict[str, Any]:
        """What a finished run shows: its steps (outliers left out of the median, as everywhere) and
        its offload copies over all devices."""
        steps = self.breakdown.by_step(copies=False)
        annotated = step_summary(self.trace.nvtx)
        warm = sum(1 for s in steps["steps"] if (s["excluded"] or "").startswith("warm-up"))
        return {
            **annotated,
            "steps": len(steps["steps"]),  # by the one definition of a step (Breakdown.steps)
            "warmup_steps": annotated["warmup_steps"] + warm,
            "step_source": steps["source"],
            "step_source_note": steps["source_note"],
            "median_step_ns": steps["median_included_step_ns"],
            "excluded_steps": steps["excluded"],
            "included_steps": steps["included_steps"],
            "compiled_step": self.step_brief(),
            "devices": self.devices,
            "offload": self.copies()["offload"],
            "analysis": self.analysis_json(),
        }


def build(
    trace: Trace,
    manifest: dict[str, Any] | None = None,
    *,
    detail: bool = True,
    device: int | None = None,
    kinds: tuple[str, ...] | None = None,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    findings: FindingsConfig | None = None,
    link: Link | None = None,
) -> RunResult:
    """The one analysis of *trace* (and its run's *manifest*): attribution, METRICS.md devices,
    stalls, kernels beside copies and, with a *findings* configuration, the findings (against the
    host *link* given, ``--link``; else each GPU's own).

    *kinds*: the GPU ops attributed to NVTX ranges (default: all with *detail*, else copies only;
    ``()`` when no per-group view is wanted).  ``detail=False`` (the per-rank task) leaves out
    per-step copy numbers, the kernels that hid each layer's copies, per-stream numbers, peak
    memory, kernels beside copies, work and the findings.  *device*: only that GPU's numbers.
    """
    if kinds is None:
        kinds = OP_KINDS if detail else ("copy",)
    bd = Breakdown(trace, layer_pattern or DEFAULT_LAYER_PATTERN, step_range, kinds=kinds)
    devices = device_metrics(
        bd.kernels,
        trace.copies,
        trace.memsets,
        device,
        trace.memory_events if detail else None,
        kernel_sets=bd.kernel_sets if device is None else None,
        streams=detail,
        contexts=bd.copy_contexts if device is None else None,
    )
    add_stalls(devices, bd.stalls, trace.waits_recorded)
    if detail:  # kernels with names and launch shapes: the trace's, whatever the attribution read
        named = trace.kernels if device is None else trace.kernels.filter(pl.col("device") == device)
        add_kernels_beside(devices, named, trace.copies, bd.kernel_groups if device is None else None)
    found = None
    if detail and findings is not None:
        found = run_findings(trace, manifest, findings, bd, devices if device is None else None, link)
    return RunResult(trace, bd, TraceInfo.of(trace), manifest, devices, found, detail, device)


# --- the documents by their old names: each one call of ``build`` -------------------------------
def analyzed(
    trace: Trace,
    device: int | None = None,
    by: str | None = None,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    findings: FindingsConfig | None = None,
    link: Link | None = None,
) -> RunResult:
    """The one analysis of a trace as ``profile-step analyze`` asks for it: its documents are
    ``analysis_json(by)`` (``--json``) and ``summary()`` (what the verdict reads)."""
    if by is not None and by not in VIEWS:
        raise ValueError(f"unknown view {by!r}")
    # without a view or findings, no op is attributed to NVTX ranges (no launches to read)
    kinds = OP_KINDS if by is not None or findings is not None else ()
    return build(
        trace,
        folder.manifest_of(trace.source_path),
        device=device,
        kinds=kinds,
        layer_pattern=layer_pattern,
        step_range=step_range,
        findings=findings,
        link=link,
    )


def analyze(trace: Trace, by: str | None = None, **options: Any) -> dict[str, Any]:
    """``profile-step analyze --json`` of one trace (see ``RunResult.analysis_json``); *options*: those
    of ``analyzed`` (device, layer_pattern, step_range, findings, link)."""
    return analyzed(trace, by=by, **options).analysis_json(by)


def collect(
    trace: Trace,
    manifest: dict[str, Any] | None = None,
    detail: bool = True,
    findings: FindingsConfig | None = None,
) -> dict[str, Any]:
    """One run's document: policy, steps, per-direction totals, per-layer totals, findings."""
    return build(trace, manifest, detail=detail, findings=(findings or FindingsConfig()) if detail else None).to_json()


def run_summary(trace: Trace) -> dict[str, Any]:
    """What a finished run shows (see ``RunResult.summary_json``)."""
    return build(trace, kinds=()).summary_json()


def findings_of(
    trace: Trace,
    config: FindingsConfig,
    layer_pattern: str | None = None,
    step_range: str | None = None,
    link: Link | None = None,
) -> dict[str, Any]:
    """``findings --json``'s entry for one trace: its policy and the findings of its run."""
    manifest = folder.manifest_of(trace.source_path)
    bd = Breakdown(trace, layer_pattern or DEFAULT_LAYER_PATTERN, step_range)
    found = run_findings(trace, manifest, config, bd, link=link)
    return {"policy": (manifest or {}).get("policy") or bd.policy, **found}


def rank_result(path: str, nsys: str | None = None, pattern: str = DEFAULT_RANK_PATTERN) -> dict[str, Any]:
    """The per-rank task: one rank's export analysed where it lies, returned as a small dict (its
    devices' copies, per-layer offload numbers, step time); never raises (a failure comes back as
    ``error``)."""
    from profiler.trace import load_trace

    p = Path(path)
    out: dict[str, Any] = {"path": path, "rank": rank_from_name(p, pattern)}
    try:
        manifest = folder.manifest_of(p)
        if out["rank"] is None and manifest and manifest.get("rank") is not None:
            out["rank"] = int(manifest["rank"])
        run = build(load_trace(p, nsys), manifest, detail=False)
        devices = {dev: {d: m["copies"][d] for d in DIRECTIONS} for dev, m in run.devices.items()}
        doc = {
            "policy": run.policy,
            "median_step_ns": run.steps.median_ns,
            "copies": run.copies(),
            "devices": devices,
            "layers": {name: v.copies for name, v in run.layers.items()},
        }
    except ProfilerError as exc:
        return {**out, "error": str(exc)}
    except Exception as exc:  # a rank must never take the others down
        return {**out, "error": f"{path}: {type(exc).__name__}: {exc}"}
    if out["rank"] is None and devices:
        out["rank"] = min(int(d) for d in devices)  # one GPU per rank: its device id
    return {**out, **doc}


def load_runs(
    arg: str, db: Path, nsys: str | None = None, skipped: list[NoTrace] | None = None, window: str | None = None
) -> list[RunSummary]:
    """The runs *arg* names: its traces analysed (``RunResult.summary``) through the analysis *window*
    (default: each run's own), or the runs recorded under that label in the results database; run
    folders without a trace go to *skipped* when it is given."""
    from profiler.runs.store import load_label
    from profiler.trace import load_trace

    traces = trace_paths(arg, skipped)
    if traces is not None:
        return [RunSummary.from_json(collect(load_trace(t, nsys, window), folder.manifest_of(t))) for t in traces]
    if db.is_file():
        return [RunSummary.from_json(doc) for doc in load_label(db, arg)]
    raise InputError(arg, f"is neither a trace, a run folder, nor a label (no results database {db})")
