"""Rules about where the cost sits and what the steps analysis left out."""

from __future__ import annotations

from profiler.analysis.findings import Finding, changes, rule
from profiler.analysis.findings.config import at_least
from profiler.analysis.findings.evidence import CannotDecide, Evidence
from profiler.analysis.findings.rules.text import ms, names, pct


def _stall_by_name(rows: list[dict]) -> dict[str, int]:
    per: dict[str, int] = {}
    for r in rows:
        per[r["name"]] = per.get(r["name"], 0) + r["copies"]["offload"].get("stall_ns", 0)
    return per


def _summed(ev: Evidence) -> str:
    """``, its N GPUs added`` where the numbers are sums over several GPUs (each counts its own stalls)."""
    n = len(ev.devices)
    return f", the {n} GPUs' stalls added" if n > 1 else ""


@rule("stall-hotspot")
def stall_hotspot(ev: Evidence) -> list[Finding]:
    ev.need_stalls()
    total = sum(d["stalls"]["by_blocker"]["offload"]["stall_ns"] for d in ev.devices.values())
    if total < ev.config["hotspot_min_stall_ns"]:
        return []
    out = []
    for what, rows, view in (("layer", ev.layers, "layers"), ("XLA operation", ev.xla_ops, "timeline")):
        per = _stall_by_name(rows)
        if len(per) < 2:
            continue
        name, worst = max(per.items(), key=lambda kv: (kv[1], kv[0]))
        share = worst / total
        if at_least(share, ev.config["hotspot_share"]):
            out.append(
                Finding(
                    "stall-hotspot",
                    "problem",
                    f"the copies of {what} {name} cause {pct(share)} of the time stalled by copies "
                    f"({ms(worst)} of {ms(total)}{_summed(ev)})",
                    f"keep that {what}'s activation on the device (names_which_can_be_saved instead of offloaded), "
                    "or let its copy start earlier so that it lands before it is needed",
                    where={"layer" if what == "layer" else "op": name},
                    evidence={"stall_ns": worst, "total_stall_ns": total, "share": share},
                    view=view,
                    attributed_ns=worst,  # the time ops stood stalled by that layer's or operation's copies
                    change=changes.stalls_of(
                        ev,
                        changes.layer_copies(ev, [name]) if what == "layer" else changes.op_copies(ev, name),
                        f"the copies of {what} {name}",
                    ),
                    **ev.basis_windows(),
                )
            )
    if not out and not ev.layers and not ev.has_ranged_ops:
        raise CannotDecide("no layers or XLA operations to attribute the stalls to")
    return out


@rule("step-outliers")
def step_outliers(ev: Evidence) -> list[Finding]:
    steps = ev.need_steps()
    out = [s for s in steps if s["excluded"] and s["excluded"].startswith("outlier")]
    if not out:
        return []
    listed = [f"{s['name']} ({s['excluded'].removeprefix('outlier: ')})" for s in out]
    median_ns = ev.steps["median_step_ns"] or 0
    extra = int(sum(max(0, s["duration_ns"] - median_ns) for s in out))
    return [
        Finding(
            "step-outliers",
            "warning",  # the most it can be: a slow step may be a one-off (compilation, a checkpoint)
            f"{len(out)} of {len(steps)} steps were left out as outliers: {names(listed)}; medians do not include "
            f"them (median step {ms(ev.steps['median_step_ns'] or 0)})",
            "look at them in the timeline: a slow step that comes back is real cost (data loading, host "
            "callbacks, checkpointing, garbage collection)",
            where={"steps": [s["name"] for s in out]},
            evidence={"excluded": [{"name": s["name"], "duration_ns": s["duration_ns"]} for s in out]},
            view="timeline",
            attributed_ns=extra,  # the outliers' time beyond the median step
            no_saving="not modelled: an outlier step's extra time comes from outside the replayed GPU work "
            "(compilation, data loading, host callbacks, checkpoints)",
            **ev.basis_steps(steps),
        )
    ]


@rule("warmup-in-capture")
def warmup_in_capture(ev: Evidence) -> list[Finding]:
    steps = ev.need_steps()
    warm = [s for s in steps if s["excluded"] and "warm" in s["excluded"]]
    if not warm:
        return []
    spent = sum(s["duration_ns"] for s in warm)
    return [
        Finding(
            "warmup-in-capture",
            "info",  # no time cost: a note on how the capture was taken
            f"{len(warm)} warm-up step{'s' if len(warm) != 1 else ''} ran inside the capture ({ms(spent)}): "
            f"{'they are' if len(warm) != 1 else 'it is'} left out of the step "
            "medians, but their compilation and autotuning count in the device totals",
            "start capturing after warm-up: enter annotate.capture() after the warm-up steps, or call "
            "cudaProfilerStart() there",
            where={"steps": [s["name"] for s in warm]},
            evidence={"warmup_steps": len(warm), "warmup_ns": spent},
            view="timeline",
        )
    ]
