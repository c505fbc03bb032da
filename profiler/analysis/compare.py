"""Comparing two sets of runs (base and head) and gating on thresholds.

Pure functions over runs (``stored.summary.RunSummary``; a run document is read into one).  Runs are matched by
policy, layers by name.  A threshold ``METRIC:+N%`` fails when head is more
than N% above base (``-N%``: below), ``METRIC:+N`` when more than N above in
the metric's own unit; equal to the threshold passes.  When both sides have
two or more included steps, per-step values are compared and a change
smaller than the step-to-step noise (twice the larger standard deviation)
never fails.  A relative limit on a zero base (perfectly hidden copies) is
crossed by any change in the failing direction.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from typing import Any

from profiler.stored.summary import LayerSummary, RunSummary, StepRow
from profiler.xla.same_program import difference, same_program

DEFAULT_THRESHOLDS = (
    "exposed_ns:+10%",
    "stall_ns:+10%",
    "step_ns:+5%",
    "hidden_fraction:-0.05",
    "work_rate:-0.05",
    "kernel_excess_ns:+10%",
)

# metric -> (label, unit, per-step key or None)
METRICS: dict[str, tuple[str, str, str | None]] = {
    "step_ns": ("step time", "ns", "duration_ns"),
    "exposed_ns": ("exposed copy time", "ns", "exposed_ns"),
    "stall_ns": ("stalled by copies", "ns", "stall_ns"),
    "hidden_fraction": ("hidden", "fraction", "hidden_fraction"),
    "busy_ns": ("copy busy time", "ns", "busy_ns"),
    # bytes and GB/s: the whole capture (every step of it, every device), not per step
    "d2h_bytes": ("d2h bytes, whole capture", "bytes", None),
    "h2d_bytes": ("h2d bytes, whole capture", "bytes", None),
    "d2h_gbps": ("d2h GB/s, whole capture", "GB/s", None),
    "h2d_gbps": ("h2d GB/s, whole capture", "GB/s", None),
    # the policy decision (profiler.analysis.policies): measured peak, the step module's FLOPs, achieved rate
    "peak_device_bytes": ("peak device memory", "bytes", None),
    "flops_per_step": ("FLOPs per step", "FLOPs", None),
    "tflops": ("TFLOP/s per device", "TFLOP/s", None),
    # head's kernel work per GPU time over base's (profiler.analysis.work.work_rate; base is 1): gated
    # only when a side has no steps, where equal windows can hide less work
    "work_rate": ("kernel work per GPU time (base = 100%)", "fraction", None),
    # METRICS.md "Kernels slowed by copies": excess_ns over all devices (None in a run recorded without it)
    "kernel_excess_ns": ("kernel time lost beside copies, persistent kernels aside", "ns", None),
}
STEPS_GATE = "both sides have steps: step time gates"
LAYER_METRICS = ("exposed_ns", "stall_ns", "hidden_fraction", "d2h_bytes", "h2d_bytes", "busy_ns")


@dataclass(frozen=True)
class Threshold:
    metric: str
    direction: int  # +1: fail on increase, -1: fail on decrease
    amount: float
    relative: bool

    @property
    def text(self) -> str:
        sign = "+" if self.direction > 0 else "-"
        return f"{self.metric}:{sign}{self.amount:g}{'%' if self.relative else ''}"


def parse_threshold(spec: str) -> Threshold:
    m = re.fullmatch(r"\s*(\w+)\s*:\s*([+-])\s*(\d+(?:\.\d+)?)\s*(%?)\s*", spec)
    if not m or m.group(1) not in METRICS:
        raise ValueError(
            f"bad threshold {spec!r}: expected METRIC:+N%, METRIC:-N or similar, METRIC one of {', '.join(METRICS)}"
        )
    return Threshold(m.group(1), 1 if m.group(2) == "+" else -1, float(m.group(3)), m.group(4) == "%")


def _included(run: RunSummary) -> tuple[StepRow, ...]:
    return run.included_steps


def step_flops(run: RunSummary | dict[str, Any]) -> float | None:
    """FLOPs per step of the run's compiled step module (XLA's cost analysis), if known."""
    return RunSummary.of(run).step_flops


def per_step(run: RunSummary | dict[str, Any], metric: str) -> list[float]:
    """The metric's value in each included step (empty when it has no per-step form)."""
    run = RunSummary.of(run)
    if metric == "tflops":
        flops = run.step_flops
        if not flops:
            return []
        return [flops / s.duration_ns / 1e3 for s in run.included_steps if s.duration_ns]
    key = METRICS[metric][2]
    if key is None:
        return []
    return [v for v in (getattr(s, key) for s in run.included_steps) if v is not None]


# the numbers a GPU measures: not 0 but unmeasured ("–") on a run where no GPU ran
GPU_METRICS = ("exposed_ns", "stall_ns", "hidden_fraction", "busy_ns", "d2h_bytes", "h2d_bytes", "d2h_gbps", "h2d_gbps")


def gpu_ran(run: RunSummary | dict[str, Any]) -> bool:
    """Whether the run's trace holds GPU activity (a summary without the key: assumed so)."""
    return RunSummary.of(run).gpu_ran


def run_value(run: RunSummary | dict[str, Any], metric: str) -> float | None:
    """A run's headline value: per-step median when steps exist, else the whole-trace value."""
    run = RunSummary.of(run)
    if metric in GPU_METRICS and not run.gpu_ran:
        return None
    if metric == "tflops":  # one definition with the per-policy table: FLOPs / median step
        flops, step = run.step_flops, run_value(run, "step_ns")
        return flops / step / 1e3 if flops and step else None
    steps = per_step(run, metric)
    if steps:
        return float(statistics.median(steps))
    if metric == "peak_device_bytes":
        from profiler.analysis.policies import measured_memory

        return measured_memory(run)[0]
    if metric == "flops_per_step":
        return run.step_flops
    if metric == "work_rate":  # a ratio of two runs: set by compare (work_metric)
        return None
    if metric == "kernel_excess_ns":  # persistent kernels' groups aside: their slowdown may be size alone
        from profiler.analysis.kernels_slowed import persistent_excess

        return None if run.kernel_excess_ns is None else run.kernel_excess_ns - persistent_excess(run)
    copies = run.copies
    return {
        "step_ns": run.median_step_ns,
        "exposed_ns": copies["offload"]["exposed_ns"],
        "stall_ns": run.stall_ns,
        "hidden_fraction": copies["offload"]["hidden_fraction"],
        "busy_ns": copies["offload"]["busy_ns"],
        "d2h_bytes": copies["d2h"]["bytes"],
        "h2d_bytes": copies["h2d"]["bytes"],
        "d2h_gbps": copies["d2h"]["gbps"],
        "h2d_gbps": copies["h2d"]["gbps"],
    }[metric]


def layer_value(layer: LayerSummary, metric: str) -> float | None:
    if metric in ("d2h_bytes", "h2d_bytes"):
        return layer.copies[metric[:3]]["bytes"]
    return layer.offload.get(metric)


# a base under 1/NEAR_ZERO of head (a change past +9,900%) gets no percentage: against a near-zero base
# (a 4-byte scalar copy, a layer's 0.3 ms) the percentage measures the base, not the change
NEAR_ZERO = 100


def layers_overlap_ns(run: RunSummary) -> int | None:
    """How far the run's per-layer exposed times (METRICS.md: each layer its own union) sum past its
    whole exposed time: copies of several layers in flight together count in each (None: no layers)."""
    if not run.layers or not run.gpu_ran:
        return None
    total = sum(lay.offload.get("exposed_ns") or 0 for lay in run.layers.values())
    return max(0, total - (run.offload.get("exposed_ns") or 0))


def delta(base: float | None, head: float | None) -> dict[str, Any]:
    d = None if base is None or head is None else head - base
    rel = d / base if d is not None and base and abs(head) <= NEAR_ZERO * abs(base) else None
    return {"base": base, "head": head, "delta": d, "relative": rel}


def noise(base: RunSummary, head: RunSummary, metric: str) -> float | None:
    """Twice the larger per-step standard deviation, when both sides have two or more steps."""
    b, h = per_step(base, metric), per_step(head, metric)
    if len(b) < 2 or len(h) < 2:
        return None
    return 2 * max(statistics.stdev(b), statistics.stdev(h))


def crossed(t: Threshold, d: dict[str, Any], spread: float | None) -> tuple[bool, str | None]:
    """(failed, note) for one threshold on one metric delta."""
    if d["delta"] is None:
        return False, "not measurable"
    change = d["delta"] * t.direction  # > 0: in the failing direction
    # a relative limit on a zero base: any change in the failing direction crosses it
    limit = abs(d["base"]) * t.amount / 100 if t.relative else t.amount
    if change <= 0 or change - limit <= 1e-9 * max(1.0, abs(limit)):  # at the limit passes
        return False, None
    if spread is not None and abs(d["delta"]) < spread:
        return False, "within step-to-step noise"
    return True, None


def _by_policy(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    out: dict[str, list[RunSummary]] = {}
    for r in runs:
        out.setdefault(r.policy, []).append(r)
    return out


def _ranked(runs: list[RunSummary]) -> list[RunSummary]:
    """The runs of one policy that are ranks of one job (two or more distinct ranks)."""
    ranked = [r for r in runs if r.rank is not None]
    return ranked if len({r.rank for r in ranked}) >= 2 else []


def representative(runs: list[RunSummary]) -> RunSummary:
    """The run compared for a policy: the slowest rank of a multi-rank job (it sets the pace
    of synchronous training), else the latest run."""
    ranked = _ranked(runs)
    if ranked:
        return max(ranked, key=lambda r: (r.median_step_ns or 0, r.copies["offload"]["exposed_ns"]))
    return runs[-1]


def rank_spread(runs: list[RunSummary]) -> dict[str, Any] | None:
    """min/median/max of exposed copy time (per-step median when steps exist) over the ranks."""
    ranked = _ranked(runs)
    if not ranked:
        return None
    vals = [run_value(r, "exposed_ns") or 0 for r in ranked]
    return {
        "ranks": len(ranked),
        "min": min(vals),
        "median": statistics.median(vals),
        "max": max(vals),
        "compared_rank": representative(runs).rank,
    }


SEVERITY_RANK = {"info": 0, "warning": 1, "problem": 2}


def _finding_key(f: dict[str, Any]) -> tuple[str, str]:
    return f["id"], json.dumps(f.get("where") or {}, sort_keys=True)


def findings_diff(base: RunSummary, head: RunSummary) -> dict[str, Any]:
    """The findings of head that base does not have (by rule and place), and those gone."""
    b, h = base.finding_list, head.finding_list
    bk, hk = {_finding_key(f) for f in b}, {_finding_key(f) for f in h}
    return {
        "new": [f for f in h if _finding_key(f) not in bk],
        "gone": [f for f in b if _finding_key(f) not in hk],
        "head": len(h),
        "base": len(b),
        "recorded": {"base": base.findings is not None, "head": head.findings is not None},
    }


def finding_gate(spec: str, known: set[str]) -> str:
    """``--fail-on-finding``: a rule id or a severity (that severity or worse)."""
    if spec in SEVERITY_RANK or spec in known:
        return spec
    raise ValueError(f"bad --fail-on-finding {spec!r}: a rule id ({', '.join(sorted(known))}) or a severity")


def _gated(f: dict[str, Any], gates: list[str]) -> bool:
    return any(f["id"] == g or (g in SEVERITY_RANK and SEVERITY_RANK[f["severity"]] >= SEVERITY_RANK[g]) for g in gates)


def compare(
    base_runs: list[RunSummary] | list[dict[str, Any]],
    head_runs: list[RunSummary] | list[dict[str, Any]],
    thresholds: list[Threshold],
    finding_gates: list[str] | None = None,
    pair: bool = False,
) -> dict[str, Any]:
    """The comparison document: per policy and per layer, deltas, gate results and a verdict.
    *finding_gates* (rule ids or severities) fail on findings new in head; *pair*: one policy on
    each side, two different ones, compared as one pair (``base → head``)."""
    base = _by_policy([RunSummary.of(r) for r in base_runs])
    head = _by_policy([RunSummary.of(r) for r in head_runs])
    if pair and len(base) == len(head) == 1 and set(base) != set(head):
        (bp, b_runs), (hp, h_runs) = next(iter(base.items())), next(iter(head.items()))
        base, head = {f"{bp} → {hp}": b_runs}, {f"{bp} → {hp}": h_runs}
    policies = [p for p in base if p in head]
    result: dict[str, Any] = {
        "thresholds": [t.text for t in thresholds],
        "missing": {
            "in_head": [p for p in base if p not in head],
            "in_base": [p for p in head if p not in base],
        },
        "policies": [],
        "failures": [],
        "finding_gates": list(finding_gates or []),
    }
    for p in policies:
        spread = {"base": rank_spread(base[p]), "head": rank_spread(head[p])}
        b, h = representative(base[p]), representative(head[p])
        metrics = {}
        for m in METRICS:
            d = delta(run_value(b, m), run_value(h, m))
            d["noise"] = noise(b, h, m)
            if METRICS[m][2] is not None:  # what each side's value is (run_value: a median where steps hold it)
                d["of"] = {
                    k: "median step" if per_step(r, m) else "whole capture" for k, r in (("base", b), ("head", h))
                }
            metrics[m] = d
        work = policy_work(b, h)
        metrics["work_rate"] = work_metric(work)
        checks = []
        for t in thresholds:
            failed, note = crossed(t, metrics[t.metric], metrics[t.metric]["noise"])
            if t.metric == "work_rate" and _included(b) and _included(h):
                failed, note = False, STEPS_GATE
            checks.append({"threshold": t.text, "failed": failed, "note": note})
            if failed:
                result["failures"].append({"policy": p, "threshold": t.text, **metrics[t.metric]})
        differs = programs_differ(_step(b), _step(h))
        if differs:  # each side's numbers stand, no percentage between them
            for d in metrics.values():
                d["relative"] = None
        found = findings_diff(b, h)
        for f in found["new"]:
            if _gated(f, finding_gates or []):
                result["failures"].append({"policy": p, "finding": f["id"], "severity": f["severity"], **f})
        bl, hl = b.layers, h.layers
        layers = [
            {
                "layer": name,
                "inferred_index": hl[name].inferred_index,
                **{m: delta(layer_value(bl[name], m), layer_value(hl[name], m)) for m in LAYER_METRICS},
            }
            for name in hl
            if name in bl
        ]
        result["policies"].append(
            {
                "policy": p,
                "steps": {"base": len(_included(b)), "head": len(_included(h))},
                "metrics": metrics,
                "checks": checks,
                "layers": layers,
                "layers_overlap_ns": {"base": layers_overlap_ns(b), "head": layers_overlap_ns(h)},
                "layers_missing": {
                    "in_head": [n for n in bl if n not in hl],
                    "in_base": [n for n in hl if n not in bl],
                },
                "runs": {"base": _provenance(b), "head": _provenance(h)},
                "rank_spread": spread if any(spread.values()) else None,
                "findings": found,
                "work": work,
                "gpu_activity": {"base": b.gpu_ran, "head": h.gpu_ran},
                "step": {"base": _step(b), "head": _step(h)},
                "programs_differ": differs,
            }
        )
    result["passed"] = not result["failures"]
    return result


def programs_differ(base: dict[str, Any], head: dict[str, Any]) -> str | None:
    """How the two sides' step programs differ (``xla.same_program``), or None when they are the same
    program or one is not known."""
    if same_program(base, head) is not False:
        return None
    return difference(head, base, "base")


def _step(run: RunSummary) -> dict[str, Any]:
    """The side's step program (label, how it was chosen: ``profiler.xla.step_program``, and the HLO
    fingerprint of its compiled module)."""
    comp = run.compiled or {}
    return {
        "step_signature": comp.get("signature"),
        "step_name": comp.get("step_name"),
        "step_program": comp.get("step_program"),
        "chosen_by": comp.get("chosen_by"),
        "fingerprint": comp.get("fingerprint"),
    }


# --- work per window (profiler.analysis.work): beyond the copies ---------------------------------
def _mean_stall_per_gpu(run: RunSummary) -> float | None:
    """Time stalled by copies in the mean included step, per GPU."""
    steps, n_dev = run.included_steps, len((run.work or {}).get("devices") or {}) or 1
    vals = [s.stall_ns for s in steps if s.stall_ns is not None]
    return sum(vals) / len(vals) / n_dev if vals else None


def policy_work(base: RunSummary, head: RunSummary) -> dict[str, Any] | None:
    """``work_compare`` of the two runs, with the mean step's stall time per GPU beside its split."""
    from profiler.analysis.work import work_compare

    work = work_compare(base.work, head.work)
    if work and work["step"]:
        for side, run in (("base", base), ("head", head)):
            work["step"][side]["stall_ns"] = _mean_stall_per_gpu(run)
    return work


def work_metric(work: dict[str, Any] | None) -> dict[str, Any]:
    """The ``work_rate`` metric: base 1, head the rate (None when either side ran no kernels)."""
    rate = (work or {}).get("rate")
    d = delta(1.0 if rate is not None else None, rate)
    d["noise"] = None
    return d


def _provenance(run: RunSummary) -> dict[str, Any]:
    man = run.manifest or {}
    versions = man.get("versions") or {}
    return {
        "trace": run.trace,
        "command": man.get("nsys_command_line"),
        "xla_flags": (man.get("xla_flags") or {}).get("final"),
        "nsys": versions.get("nsys") or run.nsys_version,
        "jax": versions.get("jax"),
        "gpus": list(run.gpus),
        "git": (man.get("git") or {}).get("commit"),
    }
