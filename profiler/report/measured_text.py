"""Terminal text for ``profile-step pgle`` and ``plan --pgle`` / ``plan --calibrate``."""

from __future__ import annotations

from typing import Any

from profiler.analysis.accuracy import calibrated_accuracy
from profiler.report.table import table
from profiler.units import human_bytes, human_time
from profiler.xla.pgle import PGLE_FLAG


def render_pgle_written(s: dict[str, Any]) -> str:
    """What ``profile-step pgle`` wrote."""
    twice = ": overlapping work counts twice" if s["cost_ms"] > s["step_ms"] else ""
    lines = [
        f"wrote {s['file']}: {s['instructions']} instruction costs of {s['module']} "
        f"(median of {s['executions']} executions; step {s['step_ms']:.2f} ms, instructions "
        f"{s['cost_ms']:.2f} ms together{twice})",
    ]
    if s.get("step"):
        lines.append(f"step: {s['step']}")
    rows = [
        [cls, str(v["instructions"]), f"{v['ms']:.3f}"]
        for cls, v in sorted(s["by_class"].items(), key=lambda kv: -kv[1]["ms"])
    ]
    lines.append(table(["class", "instructions", "ms per step"], rows))
    if not s["hlo"]:
        lines.append(
            "no HLO of the step: instructions are named as the trace names them, classes guessed from the names"
        )
    lines += [f"note: {n}" for n in s["notes"]]
    lines.append(f"use: profile-step plan --pgle {s['file']} ... (XLA: {PGLE_FLAG}={s['file']})")
    return "\n".join(lines)


def _pos(c: dict[str, Any] | None) -> str:
    return "-" if c is None else f"{c['position']}..{c['done_position']}"


def _between(c: dict[str, Any] | None) -> str:
    if c is None or c["between"] is None:
        return "-"
    us = c.get("between_us")
    return f"{c['between']}" + (f" ({human_time(us * 1000)})" if us else "")


def render_pgle_moves(doc: dict[str, Any]) -> str:
    """Per (policy, batch): each copy-start's placement without -> with the profile."""
    p = doc["pgle"]
    out = [
        f"Schedule with the PGLE profile {p['profile']} ({p['costs']} costs; compiled again in {p['out_dir']}):",
        "position: copy-start..copy-done in the entry computation's schedule; between: instructions with work "
        "between them (what can hide the copy; their profiled time)",
    ]
    for r in doc["results"]:
        g = r.get("pgle") or {}
        at = f"{r['policy']}" + (f", batch {r['batch']}" if r.get("batch") is not None else "")
        if g.get("status") != "ok":
            out.append(f"\n{at}: {g.get('note', 'not compiled')}")
            continue
        moved = "schedule changed" if g["schedule_changed"] else "schedule unchanged"
        out.append(
            f"\n{at}: {moved}; {g['copies_moved']} of {len(g['copies'])} copies moved; "
            f"{g['profile_names_found']} of the profile's names are instructions of this module"
        )
        rows = [
            [
                c["name"],
                c["direction"] or "-",
                _pos(c["before"]),
                _pos(c["after"]),
                _between(c["before"]),
                _between(c["after"]),
                *(_exposed(c) if "exposed_ns_before" in c else []),
            ]
            for c in g["copies"]
        ]
        heads = ["copy-start", "dir", "position", "with profile", "between", "with profile"]
        if g["copies"] and "exposed_ns_before" in g["copies"][0]:
            heads += ["exposed (predicted)", "with profile"]
        if rows:
            out.append(table(heads, rows))
        else:
            out.append("no copy-start in the entry computation")
        pr = g.get("predicted")
        if pr:
            b, a = pr["before"], pr["after"]
            out.append(
                f"predicted on {pr['link']} (the profile's costs, XLA's estimates or the roofline elsewhere), "
                "schedule compiled without -> with the profile: exposed copy time "
                f"{human_time(b['predicted_exposed_ns'])} -> "
                f"{human_time(a['predicted_exposed_ns'])}; step {human_time(b['predicted_step_ns'])} -> "
                f"{human_time(a['predicted_step_ns'])}"
            )
    return "\n".join(out)


def render_calibrated(doc: dict[str, Any]) -> str:
    """``plan --calibrate``: the calibration, then each result's predictions per link."""
    cal = doc["calibration"]
    out = [
        f"Calibrated by {cal['source']} ({cal['module']} on {cal['gpu'] or 'an unnamed GPU'}, measured step "
        f"{human_time(cal['measured_step_ns'])}, {cal['instructions']} instructions measured); predicted, not measured",
    ]
    rows = [
        [c, str(v["instructions"]), human_time(v["measured"], True), human_time(v["roofline"], True),
         f"{cal['scale'][c]:.2f}" if c in cal["scale"] else "-"]
        for c, v in sorted(cal["class_ns"].items())
    ]  # fmt: skip
    out.append(table(["class", "instructions", "measured", "roofline", "scale"], rows))
    if cal["copy_bandwidth"]:
        out.append(
            "copies: "
            + "; ".join(
                f"{r['cls']} from {human_bytes(r['size_lo'])}: {r['gbps']:.2f} GB/s" for r in cal["copy_bandwidth"]
            )
            + f" (on {cal['link']}; another link scales these by its bandwidth)"
        )
    else:
        out.append("copies: none measured: a copy takes its bytes over the link's bandwidth")
    out += [f"note: {n}" for n in cal["notes"]]
    rows, hows = [], []
    for r in doc["results"]:
        for p in r.get("calibrated") or []:
            hows.append(p["costed"])
            rows.append(
                [
                    r["policy"],
                    "-" if r.get("batch") is None else str(r["batch"]),
                    p["link_name"],
                    human_time(p["predicted_step_ns"]),
                    human_time(p["predicted_exposed_ns"]),
                ]
            )
    # XLA's own estimates (roofline.with_xla) where the compiled modules carry them: a column of their own
    kinds = ("measured", "xla", "scaled", "roofline") if any(h.get("xla") for h in hows) else ("measured", "scaled",
                                                                                                "roofline")  # fmt: skip
    for row, how in zip(rows, hows, strict=True):
        row.append("/".join(str(how.get(k, 0)) for k in kinds))
    out.append("")
    if rows:
        heads = ["policy", "batch", "link", "step", "exposed copy", "/".join(kinds)]
        out.append(table(heads, rows, left=(0, 2)))
        out.append(calibrated_accuracy(cal["gpu"], doc.get("target", {}).get("label"), "xla" in kinds).line())
        out.append(
            "measured: instructions of the same name and shape as the run's; "
            + ("xla: XLA's own estimate in the compiled module; " if "xla" in kinds else "")
            + "scaled: roofline x the class's scale"
        )
    else:
        out.append("no compiled result to predict")
    return "\n".join(out)


TINY_CLASS = 0.001  # a class under this share of the step gets no measured-over-roofline ratio


def _exposed(c: dict[str, Any]) -> list[str]:
    return [human_time(c.get("exposed_ns_before")), human_time(c.get("exposed_ns_after"))]


def render_from_recording(doc: dict[str, Any]) -> str:
    """``plan --from RECORDING``: the recorded step against its replay, its roofline and its predictions."""
    m = doc["measured_step_ns"]
    r, roof = doc["replay"], doc["roofline"]
    out = [
        f"{doc['source']} ({doc['kind']}): {doc['module']} on {doc['gpu'] or 'an unnamed device'}, measured step "
        f"{human_time(m)}" + (f"; {doc['chosen_by']}" if doc.get("chosen_by") else ""),
        f"  replayed with its own measured durations: {human_time(r['step_ns'])} ({_pct(r['error'])})"
        + (
            f"; {human_time(r['unplaced_ns'])} of measured time the schedule could not place (listed below)"
            if r["unplaced_ns"]
            else "; every measured op placed"
        ),
        f"  uncalibrated roofline on its own device, {roof['link']}: {human_time(roof['step_ns'])} "
        f"({_pct(roof['error'])}; the roofline was {roof['expected_error']} on real steps)",
    ]
    tiny = {c for c, v in doc["classes"].items() if v["measured"] < TINY_CLASS * m}
    rows = [
        [c, str(v["instructions"]), human_time(v["measured"], True), human_time(v["roofline"], True),
         f"{v['measured'] / v['roofline']:.2f}" if v["roofline"] and c not in tiny else "-"]
        for c, v in sorted(doc["classes"].items())
    ]  # fmt: skip
    classed = sum(v["measured"] for v in doc["classes"].values())
    out += [
        "",
        "measured against the roofline per op class, per step (a loop body's ops times their trips):",
        table(["class", "ops", "measured", "roofline", "ratio"], rows),
        f"  the classes hold {human_time(classed)} of the {human_time(m)} step; the rest is time the "
        "device waited for copies and ops no class costs",
    ]
    if "reduction" in doc["classes"]:
        out.append("  reduction: fusions that reduce (softmax, norms, sums); fusion: the other fusions")
    if tiny:
        out.append(f"  no ratio for {', '.join(sorted(tiny))}: under 0.1% of the step, its ratio says nothing")
    big = [
        [x["instruction"], human_time(x["measured_ns"], True), human_time(x["roofline_ns"], True)]
        for x in doc["largest"]
    ]
    out += ["", "the instructions furthest from the roofline:", table(["instruction", "measured", "roofline"], big)]
    if r["unplaced"]:
        why: dict[str, list[str]] = {}  # each reason once, its names in the document's order (largest first)
        for u in r["unplaced"]:
            why.setdefault(u["why"], []).append(f"{u['name']} {human_time(u['ns'], True)}")
        out += ["", "measured but not placed by the schedule (time per step): " + "; ".join(
            f"{reason}: {', '.join(names)}" for reason, names in why.items())]  # fmt: skip
    pred = [
        [p["target"], p["link"], human_time(p["step_ns"]), human_time(p["exposed_ns"]),
         _pct(p["error"]) if p["error"] is not None else
         f"({p['expected_error']} on real steps)" if p["expected_error"] else "unchecked",
         f"{p['costed']['measured']}/{p['costed']['scaled']}/{p['costed']['roofline']}"]
        for p in doc["predicted"]
    ]  # fmt: skip
    heads = ["target", "link", "step", "exposed copy", "error", "measured/scaled/roofline"]
    out += ["", "predicted from this recording (predicted, not measured):", table(heads, pred, left=(0, 1))]
    out += [
        "error: against this recording's measured step where the prediction is of it (its own device and link: "
        "in-sample), else what such predictions were off on real steps; measured/scaled/roofline: instructions "
        "costed by their own measured time, by their op class's measured-over-roofline scale, by the roofline alone"
    ]
    own = [p for p in doc["predicted"] if p["error"] is not None and not p["expected_error"] and p["costed"]["copy"]]
    if own:  # the same kernels' times as the replay line's: only the copies differ, and the page says so
        p = own[0]
        out += [
            f"{p['target']} on {p['link']}: the replay above, but each copy priced for the link instead of taking "
            f"its measured time ({human_time(p['step_ns'])}, {_pct(p['error'])}, against the replay's "
            f"{human_time(r['step_ns'])}, {_pct(r['error'])})"
        ]
    if any(p["error"] is None and not p["expected_error"] for p in doc["predicted"]):
        out += [
            "unchecked: its own device's measured kernels with the copies priced for another link; no step was "
            f"recorded on that link to check it against (the replay of the recorded link: {_pct(r['error'])})"
        ]
    out += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(out)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"
