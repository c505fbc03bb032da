"""Many ranks: one small result per rank export, and the cross-rank view.

``profiler.runs.result.rank_result`` is the per-rank task: it reads one export where it lies and
returns only a small dict (its METRICS.md devices, per-layer offload numbers,
step times), so memory stays bounded by one rank per worker.  ``cross_rank``
combines the results: min/median/max of exposed copy time per layer and
policy, straggler ranks and why, and ranks whose copy bandwidth stands out.
"""

from __future__ import annotations

import statistics
from typing import Any

from profiler.stored.summary import RunSummary
from profiler.units import natural_key

SICK_LINK_FACTOR = 0.7  # a rank below 70% of the median copy bandwidth is flagged
STRAGGLER_FACTOR = 1.1  # a rank 10% slower than the median step is a straggler


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def cross_rank(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Spread per layer and policy, stragglers and why, and sick links.

    *results*: per rank, ``{"path", "rank", "error"}`` of a failed rank, else its run document with
    its ``path`` (``rank_result``, or a full run document), read as a ``RunSummary``."""
    done = sorted((r for r in results if "error" not in r), key=lambda r: (r["rank"] is None, r["rank"]))
    failed = [{"rank": r["rank"], "path": r["path"], "error": r["error"]} for r in results if "error" in r]
    ok = [(r["path"], RunSummary.of(r)) for r in done]
    by_policy: dict[str, list[RunSummary]] = {}
    for _, r in ok:
        by_policy.setdefault(r.policy, []).append(r)
    policies = {}
    for policy, runs in by_policy.items():
        layer_names = sorted({n for r in runs for n in r.layers}, key=natural_key)
        layers = {
            name: {
                "exposed_ns": _spread([r.layers[name].offload["exposed_ns"] for r in runs if name in r.layers]),
                "ranks": len([r for r in runs if name in r.layers]),
            }
            for name in layer_names
        }
        policies[policy] = {
            "ranks": [r.rank for r in runs],
            "exposed_ns": _spread([r.offload["exposed_ns"] for r in runs]),
            "step_ns": _spread([r.median_step_ns for r in runs if r.median_step_ns is not None]),
            "layers": layers,
            "stragglers": stragglers(runs),
            "sick_links": sick_links(runs),
        }
    return {
        "ranks": len(results),
        "analyzed": len(ok),
        "failed": failed,
        "per_rank": [
            {
                "rank": r.rank,
                "path": path,
                "policy": r.policy,
                "median_step_ns": r.median_step_ns,
                "exposed_ns": r.offload["exposed_ns"],
                "hidden_fraction": r.offload["hidden_fraction"],
                "d2h_gbps": r.copy("d2h")["gbps"],
                "h2d_gbps": r.copy("h2d")["gbps"],
                "layers_exposed_ns": {n: v.offload["exposed_ns"] for n, v in r.layers.items()},
            }
            for path, r in ok
        ],
        "policies": policies,
    }


def stragglers(runs: list[RunSummary]) -> list[dict[str, Any]]:
    """Ranks whose median step is well above the median rank's, with the likely reasons."""
    steps = [r.median_step_ns for r in runs if r.median_step_ns]
    if len(steps) < 2:
        return []
    med_step = statistics.median(steps)
    med_exposed = statistics.median(r.offload["exposed_ns"] for r in runs)
    hidden = [r.offload["hidden_fraction"] for r in runs if r.offload["hidden_fraction"] is not None]
    med_hidden = statistics.median(hidden) if hidden else None
    out = []
    for r in runs:
        if not r.median_step_ns or r.median_step_ns <= STRAGGLER_FACTOR * med_step:
            continue
        off = r.offload
        why = []
        if off["exposed_ns"] > med_exposed:
            why.append(f"exposed copy time {off['exposed_ns'] / 1e6:.3f} ms vs median {med_exposed / 1e6:.3f} ms")
        if med_hidden is not None and off["hidden_fraction"] is not None and off["hidden_fraction"] < med_hidden:
            why.append(f"hidden {100 * off['hidden_fraction']:.1f}% vs median {100 * med_hidden:.1f}%")
        for d in ("d2h", "h2d"):
            rates = [x.copy(d)["gbps"] for x in runs if x.copy(d)["gbps"]]
            if rates and r.copy(d)["gbps"] and r.copy(d)["gbps"] < statistics.median(rates):
                why.append(f"{d} {r.copy(d)['gbps']:.1f} GB/s vs median {statistics.median(rates):.1f} GB/s")
        out.append(
            {
                "rank": r.rank,
                "median_step_ns": r.median_step_ns,
                "vs_median": r.median_step_ns / med_step,
                "why": why or ["not explained by copies: look at compute and NCCL"],
            }
        )
    return sorted(out, key=lambda s: -s["vs_median"])


def sick_links(runs: list[RunSummary]) -> list[dict[str, Any]]:
    """Ranks whose achieved copy bandwidth in a direction is far below the median rank's."""
    out = []
    for d in ("d2h", "h2d"):
        rates = [r.copy(d)["gbps"] for r in runs if r.copy(d)["gbps"]]
        if len(rates) < 2:
            continue
        med = statistics.median(rates)
        out += [
            {"rank": r.rank, "direction": d, "gbps": r.copy(d)["gbps"], "median_gbps": med}
            for r in runs
            if r.copy(d)["gbps"] and r.copy(d)["gbps"] < SICK_LINK_FACTOR * med
        ]
    return out
