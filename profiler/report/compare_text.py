"""The comparison as a pull-request comment (Markdown) or a terminal table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.compare import METRICS
from profiler.report.findings_text import findings_markdown
from profiler.report.text import table

SUMMARY_METRICS = (
    "step_ns",
    "exposed_ns",
    "stall_ns",
    "hidden_fraction",
    "d2h_bytes",
    "h2d_bytes",
    "d2h_gbps",
    "h2d_gbps",
    "peak_device_bytes",
    "flops_per_step",
    "tflops",
    "kernel_excess_ns",
)
# shown only when some run knows them (a measured peak, a compiled step module, kernels beside copies)
OPTIONAL_METRICS = ("peak_device_bytes", "flops_per_step", "tflops", "kernel_excess_ns")


def shown_metrics(cmp: dict[str, Any]) -> list[str]:
    """SUMMARY_METRICS less the optional ones that no policy has on either side (kernel time lost beside
    copies: that no policy lost)."""

    def known(v: Any, m: str) -> bool:  # kernel time lost: shown once some run lost any
        return bool(v) if m == "kernel_excess_ns" else v is not None

    return [
        m
        for m in SUMMARY_METRICS
        if m not in OPTIONAL_METRICS
        or any(known(p["metrics"][m]["base"], m) or known(p["metrics"][m]["head"], m) for p in cmp["policies"])
    ]


LAYER_COLUMNS = ("exposed_ns", "stall_ns", "hidden_fraction", "d2h_bytes", "h2d_bytes")


def value(metric: str, v: float | None) -> str:
    if v is None:
        return "–"
    unit = METRICS[metric][1] if metric in METRICS else ("fraction" if "fraction" in metric else "ns")
    if unit == "ns":
        return f"{v / 1e6:.3f} ms"
    if unit == "bytes":
        return f"{v / 2**20:.1f} MiB"
    if unit == "fraction":
        return f"{100 * v:.1f}%"
    if unit == "FLOPs":
        return f"{v / 1e9:.3f} GFLOP"
    if unit == "TFLOP/s":
        return f"{v:.4g} TFLOP/s"
    return f"{v:.1f}"


def change(metric: str, d: dict[str, Any]) -> str:
    if d["delta"] is None:
        return "–"
    unit = METRICS[metric][1] if metric in METRICS else ("fraction" if "fraction" in metric else "ns")
    if unit == "fraction":
        return f"{100 * d['delta']:+.1f} pt"
    rel = f", {100 * d['relative']:+.1f}%" if d["relative"] is not None else ""
    if unit == "ns":
        return f"{d['delta'] / 1e6:+.3f} ms{rel}"
    if unit == "bytes":
        return f"{d['delta'] / 2**20:+.1f} MiB{rel}"
    if unit == "FLOPs":
        return f"{d['delta'] / 1e9:+.3f} GFLOP{rel}"
    if unit == "TFLOP/s":
        return f"{d['delta']:+.4g} TFLOP/s{rel}"
    return f"{d['delta']:+.1f}{rel}"


def cell(metric: str, d: dict[str, Any], failed: bool = False) -> str:
    text = f"{value(metric, d['base'])} → {value(metric, d['head'])}"
    if d["delta"]:
        text += f" ({change(metric, d)})"
    return text + (" ❌" if failed else "")


def verdict(cmp: dict[str, Any]) -> str:
    if not cmp["policies"]:
        return "⚠️ profile-step: no policy in common between base and head"
    if cmp["passed"]:
        return (
            f"✅ profile-step: no overlap regression ({len(cmp['policies'])} "
            f"polic{'y' if len(cmp['policies']) == 1 else 'ies'}; {', '.join(cmp['thresholds'])})"
        )
    limits = [f for f in cmp["failures"] if "threshold" in f]
    if not limits:  # only new findings failed
        worst = cmp["failures"][0]
        text = (
            f"❌ profile-step: new {worst['severity']} finding `{worst['finding']}` in `{worst['policy']}`: "
            f"{worst['verdict']}"
        )
        if len(cmp["failures"]) > 1:
            text += f"; {len(cmp['failures']) - 1} more new finding(s) gated"
        return text
    worst = limits[0]
    metric = worst["threshold"].split(":")[0]
    label = METRICS[metric][0]
    text = (
        f"❌ profile-step: {label} regressed in `{worst['policy']}`: "
        f"{value(metric, worst['base'])} → {value(metric, worst['head'])} "
        f"({change(metric, worst)}; limit {worst['threshold']})"
    )
    pol = next(p for p in cmp["policies"] if p["policy"] == worst["policy"])
    per_layer = metric if metric in ("exposed_ns", "stall_ns") else "exposed_ns"
    grew = [lay for lay in pol["layers"] if (lay[per_layer]["delta"] or 0) > 0]
    if grew:
        top = max(grew, key=lambda lay: lay[per_layer]["delta"])
        what = "exposed time" if per_layer == "exposed_ns" else "stall"
        text += f"; most new {what} in layer `{top['layer']}` ({change(per_layer, top[per_layer])})"
    if len(cmp["failures"]) > 1:
        text += f"; {len(cmp['failures']) - 1} more limit(s) crossed"
    return text


def noise_text(pol: dict[str, Any], threshold: str) -> str:
    """`` (noise ±X)`` for a check that the step-to-step spread kept from failing."""
    metric = threshold.split(":")[0]
    spread = pol["metrics"][metric].get("noise")
    if spread is None:
        return ""
    text = f"{100 * spread:.1f} pt" if METRICS[metric][1] == "fraction" else value(metric, spread)
    return f" (change {change(metric, pol['metrics'][metric])}, noise ±{text})"


def _failed(pol: dict[str, Any], metric: str) -> bool:
    return any(c["failed"] and c["threshold"].startswith(metric + ":") for c in pol["checks"])


def rank_line(pol: dict[str, Any]) -> str:
    """Per-rank spread of exposed copy time on both sides of a multi-rank policy."""
    parts = []
    for side in ("base", "head"):
        s = pol["rank_spread"][side]
        if s is None:
            parts.append(f"{side}: one run")
            continue
        parts.append(
            f"{side}: {s['ranks']} ranks, exposed min/median/max {value('exposed_ns', s['min'])} / "
            f"{value('exposed_ns', s['median'])} / {value('exposed_ns', s['max'])}, "
            f"compared rank {s['compared_rank']} (slowest)"
        )
    return f"`{pol['policy']}` ranks: " + "; ".join(parts)


def render_markdown(cmp: dict[str, Any]) -> str:
    """A pull-request comment: verdict, summary table, per-layer details, provenance."""
    out = [f"### {verdict(cmp)}", ""]
    if cmp["policies"]:
        metrics = shown_metrics(cmp)
        heads = ["policy", "steps (base/head)", *(METRICS[m][0] for m in metrics)]
        out.append("| " + " | ".join(heads) + " |")
        out.append("|" + "---|" * len(heads))
        for pol in cmp["policies"]:
            cells = [f"`{pol['policy']}`", f"{pol['steps']['base']}/{pol['steps']['head']}"]
            cells += [cell(m, pol["metrics"][m], _failed(pol, m)) for m in metrics]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        for pol in cmp["policies"]:
            if pol.get("rank_spread"):
                out += [rank_line(pol), ""]
        notes = [
            f"`{pol['policy']}` {c['threshold']}: {c['note']}" + noise_text(pol, c["threshold"])
            for pol in cmp["policies"]
            for c in pol["checks"]
            if c["note"] and c["note"] != "not measurable"
        ]
        if notes:
            out += ["Not gated: " + "; ".join(notes) + ".", ""]
        footnote = (
            "Step time, exposed copy time, time stalled by copies and hidden fraction are per-step medians "
            "when the runs hold steps; bytes and GB/s cover the whole capture."
        )
        if any(m in OPTIONAL_METRICS for m in metrics):
            footnote += (
                " Peak device memory is the largest `memory_stats()` peak over the devices; FLOPs per step "
                "are XLA's cost analysis of the step's compiled module, TFLOP/s those FLOPs over the median step."
            )
        out.append(footnote)
        out.append("")
    for side, names in (("head", cmp["missing"]["in_head"]), ("base", cmp["missing"]["in_base"])):
        if names:
            out += [f"Missing in {side}: " + ", ".join(f"`{n}`" for n in names), ""]
    for pol in cmp["policies"]:
        found = pol.get("findings") or {}
        out += findings_markdown(found.get("new", []), found.get("gone", []), pol["policy"])
    for pol in cmp["policies"]:
        if not pol["layers"] and not any(pol["layers_missing"].values()):
            continue
        out += [f"<details><summary>Per layer: <code>{pol['policy']}</code></summary>", ""]
        if pol["layers"]:
            heads = ["layer", *(METRICS[m][0] for m in LAYER_COLUMNS)]
            out.append("| " + " | ".join(heads) + " |")
            out.append("|" + "---|" * len(heads))
            for lay in pol["layers"]:
                name = f"`{lay['layer']}`" + (" (index inferred)" if lay["inferred_index"] else "")
                out.append("| " + " | ".join([name, *(cell(m, lay[m]) for m in LAYER_COLUMNS)]) + " |")
            out.append("")
        for side, names in (
            ("head", pol["layers_missing"]["in_head"]),
            ("base", pol["layers_missing"]["in_base"]),
        ):
            if names:
                out += [f"Layers missing in {side}: " + ", ".join(f"`{n}`" for n in names), ""]
        out += ["</details>", ""]
    if cmp["policies"]:
        out += ["<details><summary>How these runs were made</summary>", ""]
        for pol in cmp["policies"]:
            for side in ("base", "head"):
                r = pol["runs"][side]
                facts = [f"trace `{Path(r['trace']).name}`", f"nsys {r['nsys'] or '?'}"]
                if r["jax"]:
                    facts.append(f"jax {r['jax']}")
                if r["gpus"]:
                    facts.append(", ".join(r["gpus"]))
                if r["git"]:
                    facts.append(f"commit {r['git'][:12]}")
                out.append(f"- `{pol['policy']}` {side}: " + "; ".join(facts))
                if r["command"]:
                    out.append(f"  - `{r['command']}`")
                if r["xla_flags"]:
                    out.append(f"  - `XLA_FLAGS={r['xla_flags']}`")
        out += ["", "</details>", ""]
    return "\n".join(out).rstrip() + "\n"


def render_terminal(cmp: dict[str, Any]) -> str:
    out = [verdict(cmp).replace("`", "")]
    rows = []
    for pol in cmp["policies"]:
        for m in shown_metrics(cmp):
            d = pol["metrics"][m]
            rows.append(
                [
                    pol["policy"],
                    METRICS[m][0],
                    value(m, d["base"]),
                    value(m, d["head"]),
                    change(m, d),
                    "FAIL" if _failed(pol, m) else "",
                ]
            )
    if rows:
        out += ["", table(("policy", "metric", "base", "head", "change", "gate"), rows, left=(0, 1, 5))]
    for side, names in (("head", cmp["missing"]["in_head"]), ("base", cmp["missing"]["in_base"])):
        if names:
            out.append(f"missing in {side}: {', '.join(names)}")
    for pol in cmp["policies"]:
        for f in (pol.get("findings") or {}).get("new", []):
            out.append(f"new in head ({pol['policy']}): {f['severity']} {f['id']}: {f['verdict']}")
    return "\n".join(out)
