"""The comparison as a pull-request comment (Markdown) or a terminal table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler import units
from profiler.analysis.compare import METRICS, STEPS_GATE
from profiler.analysis.work import SPLIT_KEYS
from profiler.conventions import device_word, is_tpu_name
from profiler.report.findings_text import by_saving, findings_markdown, saving_text
from profiler.report.text import table
from profiler.trace.jax_profile import is_jax_trace_name
from profiler.units import wrap

SIDES = ("base", "head")

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
    "work_rate",
    "kernel_excess_ns",
)
# shown only when some run knows them (a measured peak, a compiled step module, kernels on both sides,
# kernels beside copies)
OPTIONAL_METRICS = ("peak_device_bytes", "flops_per_step", "tflops", "work_rate", "kernel_excess_ns")


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
        return units.ms(v, unit=True)
    if unit == "bytes":  # each size in its own unit, as analyze prints them: 12 B, 4.50 GiB (not "0.0 MiB")
        return units.human_bytes(v)
    if unit == "fraction":
        return units.pct(v)
    if unit == "FLOPs":
        return f"{v / 1e12:.2f} TFLOP"  # as analyze prints a step's FLOPs
    if unit == "TFLOP/s":
        return f"{v:.1f} TFLOP/s"
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
        return ("-" if d["delta"] < 0 else "+") + units.human_bytes(abs(d["delta"])) + rel
    if unit == "FLOPs":
        return f"{d['delta'] / 1e12:+.2f} TFLOP{rel}"
    if unit == "TFLOP/s":
        return f"{d['delta']:+.1f} TFLOP/s{rel}"
    return f"{d['delta']:+.1f}{rel}"


def cell(metric: str, d: dict[str, Any], failed: bool = False) -> str:
    text = f"{value(metric, d['base'])} → {value(metric, d['head'])}"
    if d["delta"]:
        text += f" ({change(metric, d)})"
    return text + (" ❌" if failed else "")


def verdict(cmp: dict[str, Any]) -> str:
    if not cmp["policies"]:
        return (
            "⚠️ profile-step: no policy in common between base and head (--pair compares one run of each side as a pair)"
        )
    if cmp["passed"]:
        return (
            f"✅ profile-step: no overlap regression ({len(cmp['policies'])} "
            f"polic{'y' if len(cmp['policies']) == 1 else 'ies'}; {', '.join(cmp['thresholds'])})"
        )
    limits = [f for f in cmp["failures"] if "threshold" in f]
    if not limits:  # only new findings failed: name the one that saves most
        worst = by_saving(cmp["failures"])[0]
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
    if metric == "work_rate" and pol.get("work"):
        text += work_because(pol["work"])
    text += layer_blame(pol, metric if metric in ("exposed_ns", "stall_ns") else "exposed_ns")
    if len(limits) > 1:  # named, three at most, in the gate's order: a step 4x slower is not "1 more limit"
        m = [(f["threshold"].split(":")[0], f) for f in limits[1:]]
        named = [f"{METRICS[k][0]} in `{f['policy']}` ({change(k, f)})" for k, f in m[:3]]
        text += "; also crossed: " + ", ".join(named) + (f" and {len(m) - 3} more" if len(m) > 3 else "")
    findings = len(cmp["failures"]) - len(limits)
    if findings > 0:
        text += f"; {findings} new finding(s) gated"
    return text


def layer_blame(pol: dict[str, Any], per_layer: str) -> str:
    """``; most new exposed time in layer X (...)``, the layer whose time grew most; none by exposed time
    where the layers' exposed times overlap (each is its own union: METRICS.md) by at least that layer's
    growth, since then its growth may be gaps that other layers' copies hold (a TPU's copies span from
    start to the end of their done, several layers' at once): the layer by its stall instead, where known."""
    grew = [lay for lay in pol["layers"] if (lay[per_layer]["delta"] or 0) > 0]
    if not grew:
        return ""
    top = max(grew, key=lambda lay: lay[per_layer]["delta"])
    overlap = pol.get("layers_overlap_ns") or {}
    spill = max((v or 0) for v in (overlap.get("base"), overlap.get("head"), 0))
    if per_layer == "exposed_ns" and spill >= top[per_layer]["delta"]:
        measured = (
            pol["metrics"]["stall_ns"]["delta"] is not None
        )  # stalls on both sides (none from jax.profiler's GPU)
        by_stall = layer_blame(pol, "stall_ns") if measured else ""
        if by_stall:
            return by_stall
        side = "head" if (overlap.get("head") or 0) >= (overlap.get("base") or 0) else "base"
        return (
            f"; no layer named: the layers' exposed times overlap ({side}'s add up to {value('exposed_ns', spill)} "
            "more than its whole, copies of several layers in flight together), more than any layer's grew"
        )
    what = "exposed time" if per_layer == "exposed_ns" else "stall"
    # per layer the copies' time over the capture, every GPU's added (not a per-step median, as above)
    return (
        f"; most new {what} in layer `{top['layer']}` ({change(per_layer, top[per_layer])} over the capture, all GPUs)"
    )


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
    for side in SIDES:
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
    if line := accelerators_line(cmp):
        out += [line, ""]
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
            if c["note"] and c["note"] not in ("not measurable", STEPS_GATE)
        ]
        if notes:
            out += ["Not gated: " + "; ".join(notes) + ".", ""]
        footnote = of_note(cmp, metrics)
        if any(m in ("peak_device_bytes", "flops_per_step", "tflops") for m in metrics):
            footnote += (
                " Peak device memory is the largest `memory_stats()` peak over the devices; FLOPs per step "
                "are XLA's cost analysis of the step's compiled module, TFLOP/s those FLOPs over the median step."
            )
        if "work_rate" in metrics:
            footnote += (
                " Kernel work per GPU time is head's kernel time per GPU-second with each kernel name's calls "
                "counted at base's time per call (100% = the same work in the same time); it gates when a "
                "side has no steps."
            )
        out.append(footnote)
        out.append("")
        notes = table_notes(cmp)
        out += [f"Note (`{p}`): {line}." for p, line in notes] + ([""] if notes else [])
    for side, names in (("head", cmp["missing"]["in_head"]), ("base", cmp["missing"]["in_base"])):
        if names:
            out += [f"Missing in {side}: " + ", ".join(f"`{n}`" for n in names), ""]
    for pol in cmp["policies"]:
        out += work_markdown(pol)
    for pol in cmp["policies"]:
        if line := step_line(pol):
            out += [line, ""]
    if idle := no_gpu_line(cmp):
        out += [idle, ""]
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
                inferred = lay["inferred_index"] and lay["layer"].endswith("]")  # "layers (every iteration)": none
                name = f"`{lay['layer']}`" + (" (index inferred)" if inferred else "")
                out.append("| " + " | ".join([name, *(cell(m, lay[m]) for m in LAYER_COLUMNS)]) + " |")
            out.append("")
        for side, names in (
            ("head", pol["layers_missing"]["in_head"]),
            ("base", pol["layers_missing"]["in_base"]),
        ):
            if names and not pol["layers"]:  # one side moved nothing per layer (a policy that offloads nothing)
                other = "base" if side == "head" else "head"
                out += [f"No layer of {side} moved anything; {other}'s: " + ", ".join(f"`{n}`" for n in names), ""]
            elif names:
                out += [f"Layers missing in {side}: " + ", ".join(f"`{n}`" for n in names), ""]
        out += ["</details>", ""]
    if cmp["policies"]:
        out += ["<details><summary>How these runs were made</summary>", ""]
        for pol in cmp["policies"]:
            for side in SIDES:
                r = pol["runs"][side]
                name = Path(r["trace"]).name
                recorder = "JAX's profiler" if is_jax_trace_name(name) else f"nsys {r['nsys'] or '(version unknown)'}"
                facts = [f"trace `{name}`", recorder]
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


def table_notes(cmp: dict[str, Any]) -> list[tuple[str, str]]:
    """What a number of the table is, where it is not what its name suggests: GB/s of a TPU side
    (METRICS.md ``gbps``: bytes over the copies' summed time), kernel work per GPU time where the
    two sides ran no kernel name in common (not compared), or where it and TFLOP/s move apart."""
    out = []
    for pol in cmp["policies"]:
        m = pol["metrics"]
        tpu = [side for side in SIDES if any(is_tpu_name(g) for g in pol["runs"][side]["gpus"] or ())]
        if any(m[k][side] is not None for k in ("d2h_gbps", "h2d_gbps") for side in tpu):
            out.append(
                (
                    pol["policy"],
                    f"GB/s on the TPU ({' and '.join(tpu)}) is bytes over the copies' summed time "
                    "(docs/metrics.md gbps): a TPU copy spans from its start to the end of its done, with several in "
                    "flight at once, so it is not the host link's rate",
                )
            )
        rate, tflops = m.get("work_rate") or {}, m.get("tflops") or {}
        if rate.get("delta") and tflops.get("delta") and (rate["delta"] > 0) != (tflops["delta"] > 0):
            out.append(
                (
                    pol["policy"],
                    "kernel work per GPU time and TFLOP/s per device move apart: the work counts each kernel name's "
                    "calls at base's time per call, which misprices a name that runs other sizes in head (one cuBLAS "
                    "GEMM kernel runs every size); where FLOPs are known, TFLOP/s measures the work",
                )
            )
        work = pol.get("work") or {}
        if work and work.get("rate") is None and work.get("names_in_common") == 0:
            out.append(
                (
                    pol["policy"],
                    "kernel work per GPU time not compared: base and head ran no kernel name "
                    "in common (another accelerator or compiler), so no work is counted at base's time per call",
                )
            )
    return out


def of_note(cmp: dict[str, Any], metrics: list[str]) -> str:
    """What the table's columns are, from each cell's ``of`` (as ``metric_label`` says it per row in the
    terminal): per-step medians, and each cell that is its whole capture's instead, named."""

    def held(m: str) -> bool:  # a per-step metric with a value on some side
        return any(p["metrics"][m].get("of") and p["metrics"][m][k] is not None for p in cmp["policies"] for k in SIDES)

    stepped = [m for m in metrics if held(m)]
    cells = [
        (f"`{pol['policy']}` {side}'s {METRICS[m][0]}", pol["metrics"][m]["of"][side] == "whole capture")
        for pol in cmp["policies"]
        for m in stepped
        for side in SIDES
        if pol["metrics"][m].get("of") and pol["metrics"][m][side] is not None
    ]
    whole = [name for name, w in cells if w]
    out = []
    if stepped:
        names = [METRICS[m][0] for m in stepped]
        listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        listed = f"Columns {listed}"
        if whole and len(whole) == len(cells):
            out.append(f"{listed}: the whole capture (no step holds them)")
        else:
            out.append(f"{listed}: the median over each side's steps")
            if whole:
                out[-1] += f", except {', '.join(whole)}: the whole capture (no step holds it)"
    out.append("bytes and GB/s: the whole capture")  # their labels say so too
    return "; ".join(out) + "."


def metric_label(m: str, d: dict[str, Any]) -> str:
    """A metric's name in a policy's row, with what its values are where that depends on the run (its
    delta *d*'s ``of``: each side's median step, or its whole capture where no step holds the metric)."""
    label = METRICS[m][0]
    of = d.get("of")
    if not of or m == "step_ns":
        return label
    if of["base"] == of["head"]:
        return f"{label}, {of['base']}"
    return f"{label}, base's {of['base']}, head's {of['head']}"


def accelerators_line(cmp: dict[str, Any]) -> str | None:
    """One line where base and head ran on different devices (by name): what the changes measure."""
    pairs = {
        (tuple(sorted(set(pol["runs"]["base"]["gpus"] or ()))), tuple(sorted(set(pol["runs"]["head"]["gpus"] or ()))))
        for pol in cmp["policies"]
    }
    differ = [(b, h) for b, h in pairs if b and h and b != h]
    if not differ:
        return None
    said = "; ".join(f"base ran on {', '.join(b)}, head on {', '.join(h)}" for b, h in sorted(differ))
    return f"Different accelerators: {said}: each change is the hardware's as much as the code's."


def render_terminal(cmp: dict[str, Any]) -> str:
    """The comparison for a terminal: its verdict, the table, then notes and findings, each wrapped to the
    terminal's width (the table aside)."""
    out = [wrap(verdict(cmp).replace("`", ""))]
    if line := accelerators_line(cmp):
        out.append(wrap(line))
    rows = []
    for pol in cmp["policies"]:
        for m in shown_metrics(cmp):
            d = pol["metrics"][m]
            rows.append(
                [
                    pol["policy"],
                    metric_label(m, d),
                    value(m, d["base"]),
                    value(m, d["head"]),
                    change(m, d),
                    "FAIL" if _failed(pol, m) else "",
                ]
            )
    if rows:
        out += ["", table(("policy", "metric", "base", "head", "change", "gate"), rows, left=(0, 1, 5))]
        out += [wrap(f"note ({p}): {line}") for p, line in table_notes(cmp)]
    for side, names in (("head", cmp["missing"]["in_head"]), ("base", cmp["missing"]["in_base"])):
        if names:
            out.append(f"missing in {side}: {', '.join(names)}")
    for pol in cmp["policies"]:
        for f in by_saving((pol.get("findings") or {}).get("new", [])):
            said = f"new in head ({pol['policy']}): {f['severity']} {f['id']} ({saving_text(f)}): {f['verdict']}"
            out.append(wrap(said))
    for pol in cmp["policies"]:
        out += work_terminal(pol)
    out += [line for pol in cmp["policies"] if (line := step_line(pol))]
    if idle := no_gpu_line(cmp):
        out.append(idle.replace("`", ""))
    return "\n".join(out)


def step_line(pol: dict[str, Any]) -> str | None:
    """One line when the two sides' steps are programs of different names: their numbers per step
    then compare different programs (``profiler.xla.step_program`` chose each)."""
    step = pol.get("step") or {}
    base, head = (step.get(side) or {} for side in SIDES)
    if not pol.get("programs_differ"):
        return None  # the same program (xla.same_program): program ids differ from process to process
    return (
        f"step ({pol['policy']}): base {base.get('chosen_by') or base['step_program']}; head "
        f"{head.get('chosen_by') or head['step_program']}: head's step is {pol['programs_differ']}; "
        "the per-step numbers compare different programs, no percentage between them"
    )


def no_gpu_line(cmp: dict[str, Any]) -> str | None:
    """Which runs had no GPU activity, whose copy numbers are shown as not measured (–), not 0."""
    sides = [
        f"`{pol['policy']}` ({', '.join(s for s in ('base', 'head') if not pol['gpu_activity'][s])})"
        for pol in cmp["policies"]
        if not all((pol.get("gpu_activity") or {"base": True, "head": True}).values())
    ]
    if not sides:
        return None
    return f"No GPU activity in {', '.join(sides)}: copy times, bytes and rates are not measured (–)."


# --- work per window (profiler.analysis.work) ---------------------------------------------------
SPLIT_LABELS = {
    "compute_ns": "compute",
    "nccl_ns": "NCCL (not under compute)",
    "exposed_copies_ns": "exposed copies",
    "other_ns": "other GPU work",
    "idle_ns": "idle (no GPU op)",
    "stall_ns": "stalled by copies (within the above)",
}


def _rel(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}%"


def kernel_change(k: dict[str, Any]) -> str:
    """``flash_fwd calls 68 → 60 (-11.8%)``, ``SendRecv per call 0.385 → 0.544 ms (+41.3%)``."""
    c, pc = k["calls"], k["per_call_ns"]
    parts = []
    if c["relative"] is None or abs(c["relative"]) >= 0.005:
        parts.append(f"calls {c['base']:,} → {c['head']:,} ({_rel(c['relative'])})")
    if pc["relative"] is not None and abs(pc["relative"]) >= 0.005:
        u = units.time_unit([pc["base"], pc["head"]])
        parts.append(
            f"per call {units.scaled(pc['base'], u[1], 3)} → {units.scaled(pc['head'], u[1], 3)} {u[0]} "
            f"({_rel(pc['relative'])})"
        )
    return f"`{k['name'][:60]}` " + ", ".join(parts or ["unchanged"])


def work_because(work: dict[str, Any]) -> str:
    """What the verdict adds on a work-rate failure: the two kernel changes that cost most."""
    parts = [kernel_change(k) for k in work["kernels"][:2]]
    b, h = work["window"]["base"]["idle_ns"], work["window"]["head"]["idle_ns"]
    if not work["step"] and h > b:
        parts.append(f"idle per GPU {units.human_time(b)} → {units.human_time(h)}")
    return ("; " + "; ".join(parts)) if parts else ""


def _split_rows(sides: dict[str, dict[str, Any]], keys: tuple[str, ...]) -> tuple[list[list[str]], str]:
    u = units.time_unit([v for side in sides.values() for k, v in side.items() if v is not None])
    rows = []
    for k in keys:
        b, h = sides["base"].get(k), sides["head"].get(k)
        if b is None and h is None:
            continue
        d = None if b is None or h is None else h - b
        sign = "+" if d is not None and d > 0 else ""
        rows.append(
            [
                SPLIT_LABELS.get(k, k),
                units.scaled(b, u[1], 3),
                units.scaled(h, u[1], 3),
                "–" if d is None else sign + units.scaled(d, u[1], 3),
            ]
        )
    return rows, u[0]


def accelerator(pol: dict[str, Any], side: str) -> str:
    """What one side's devices are called: ``TPU`` where the run names a TPU, else ``GPU``."""
    return device_word((pol.get("runs") or {}).get(side, {}).get("gpus") or ())


def work_sections(pol: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of the work tables of one policy: the step's split (both sides with
    steps) or the window's, then the kernel names that changed."""
    work = pol.get("work")
    if not work:
        return []
    out = []
    if work["step"]:
        sides, total, what = work["step"], "step_ns", "the mean included step, per GPU"
    else:
        sides, total, what = work["window"], "span_ns", "the window, per GPU"
    word = {side: accelerator(pol, side) for side in SIDES}
    dev = word["base"] if word["base"] == word["head"] else "device"  # a GPU against a TPU: devices
    rows, unit = _split_rows(sides, (*SPLIT_KEYS, "stall_ns"))
    rows = [[r[0].replace("GPU", dev), *r[1:]] for r in rows]
    head_rows, _ = _split_rows({s: {"t": v[total]} for s, v in sides.items()}, ("t",))
    rows.insert(0, ["step" if work["step"] else "window", *head_rows[0][1:]])
    gpus = work["gpus"]
    n = " / ".join(f"{gpus[s]} {word[s]}" + ("s" if gpus[s] > 1 else "") for s in SIDES)
    if gpus["base"] == gpus["head"] and word["base"] == word["head"]:
        n = f"{gpus['base']} {word['base']}" + ("s" if gpus["base"] > 1 else "")
    if word["base"] == word["head"]:
        what = what.replace("per GPU", f"per {word['base']}")
    else:
        what = what.replace("per GPU", "per device")
    out.append((f"Where the time went: {what} ({n})", ["part", f"base {unit}", f"head {unit}", f"change {unit}"], rows))
    if work["kernels"] and work.get("names_in_common") != 0:  # none in common: every name only on one side
        krows = []
        for k in work["kernels"]:
            c, pc, t = k["calls"], k["per_call_ns"], k["time_ns"]
            u = units.time_unit([pc["base"], pc["head"]])
            tu = units.time_unit([t["base"], t["head"]])
            krows.append(
                [
                    k["name"][:60] + (" (NCCL)" if k["nccl"] else ""),
                    f"{c['base']:,} → {c['head']:,} ({_rel(c['relative'])})",
                    f"{units.scaled(pc['base'], u[1], 3)} → {units.scaled(pc['head'], u[1], 3)} {u[0]} "
                    f"({_rel(pc['relative'])})",
                    f"{units.scaled(t['base'], tu[1])} → {units.scaled(t['head'], tu[1])} {tu[0]}",
                ]
            )
        title = f"Kernel names whose calls or time per call changed, by the time the change cost (all {dev}s)"
        if work["kernels_listed"] > len(work["kernels"]):
            title += f", the first {len(work['kernels'])} of {work['kernels_listed']}"
        out.append((title, ["kernel", "calls", "time per call", "time"], krows))
    return out


def work_markdown(pol: dict[str, Any]) -> list[str]:
    out = []
    for title, heads, rows in work_sections(pol):
        out += [f"<details><summary>{title}: <code>{pol['policy']}</code></summary>", ""]
        out.append("| " + " | ".join(heads) + " |")
        out.append("|" + "---|" * len(heads))
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out += ["", "</details>", ""]
    return out


def work_terminal(pol: dict[str, Any]) -> list[str]:
    out = []
    for title, heads, rows in work_sections(pol):
        out += ["", f"{pol['policy']}: {title}", table(heads, rows, left=(0,))]
    return out
