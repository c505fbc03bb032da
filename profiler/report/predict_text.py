"""The plan's predicted steps as text: per policy, batch and host link, then offloading against
rematerialization (``profiler.analysis.offload_vs_remat``)."""

from __future__ import annotations

import textwrap
from typing import Any

from profiler.analysis.accuracy import of_costs
from profiler.analysis.late_copies import fix, sentence
from profiler.predict.step import label_of
from profiler.report.table import table
from profiler.units import human_bytes, human_time, scaled, time_unit

LEGEND = (
    "step = predicted step time; exposed = copy time the compute stream waits for (not hidden); compute = "
    "kernels on the compute stream; D2H, H2D = the copies' time on the link, one stream per direction"
)


def render_predictions(tab: dict[str, Any]) -> list[str]:
    """Lines for ``render_plan``: nothing when no result has a prediction."""
    preds = tab.get("predictions") or []
    if not preds:
        return []
    unit, div = time_unit(p["predicted_step_ns"] for p in preds)
    rows = []
    for p in preds:
        copy = p.get("predicted_copy_ns") or {}
        rows.append(
            [
                p["policy"],
                "-" if p["batch"] is None else str(p["batch"]),
                p["link_name"] or p["link"],
                scaled(p["predicted_step_ns"], div),
                scaled(p["predicted_exposed_ns"], div),
                scaled(p["predicted_compute_ns"], div),
                scaled(copy.get("d2h"), div),
                scaled(copy.get("h2d"), div),
                "-" if p["fits"] is None else ("yes" if p["fits"] else "NO"),
            ]
        )
    heads = ("policy", "batch", "link", f"step {unit}", f"exposed {unit}", f"compute {unit}", f"D2H {unit}",
             f"H2D {unit}", "fits")  # fmt: skip
    head = label_of(of_costs([p.get("cost_model") for p in preds]).costed)
    out = [f"\n{head}, {tab['target'].get('label')}:", table(heads, rows, left=(0, 2, 8)), *textwrap.wrap(LEGEND, 118)]
    out += textwrap.wrap(tab.get("accuracy") or "", 118)  # plan_table's: how far such predictions were off
    for link in tab.get("links") or []:
        out.append(f"link {link['name']}: {link['gbps']:g} GB/s per direction, {link['why']}")
    out += verdict_lines(tab.get("offload_vs_remat") or [])
    out += late_lines(preds)
    out += layer_table(tab)
    return out


def late_lines(preds: list[dict[str, Any]], width: int | None = 118) -> list[str]:
    """One line per policy whose copies back to the device are late (``analysis.late_copies``): at its
    largest batch, on the slowest link it was predicted for; then what starts them earlier."""
    worst: dict[str, dict[str, Any]] = {}
    for p in preds:
        s = p.get("late_copies") or {}
        if not s.get("count"):
            continue
        prev = worst.get(p["policy"])
        key = ((p["batch"] or 0), s["waited_ns"])
        if prev is None or key > ((prev["batch"] or 0), prev["late_copies"]["waited_ns"]):
            worst[p["policy"]] = p
    out = []
    for policy, p in worst.items():
        at = f", batch {p['batch']}" if p["batch"] is not None else ""
        s = p["late_copies"]
        line = f"late copies back, {policy}{at}, {p['link_name'] or p['link']}: {sentence(s)}; {fix(s)}"
        out += textwrap.wrap(line, width, subsequent_indent="  ") if width else [line]
    return out


def verdict_lines(verdicts: list[dict[str, Any]], width: int | None = 118) -> list[str]:
    """One sentence per (batch, link): offloading against rematerialization, by how much (wrapped to
    *width* for a terminal; None: one line each)."""
    out = []
    for v in verdicts:
        at = f"batch {v['batch']}, " if v["batch"] is not None else ""
        where = f"{at}{v['link_name']}"
        if v["winner"] is None:
            missing = "remat" if v["remat_step_ns"] is None else "no offload policy"
            side = [p for p in v["not_fitting"] if (p == "remat" if missing == "remat" else p.startswith("offload"))]
            if not side:  # that side has no prediction at all: nothing to say about fitting
                what = "no remat" if missing == "remat" else "no offload policy"
                out.append(f"{where}: {what} predicted in this plan to compare with (--policies)")
                continue
            why = f" ({', '.join(v['not_fitting'])} {'does' if len(v['not_fitting']) == 1 else 'do'} not fit)"
            out.append(f"{where}: {missing} has no fitting prediction to compare{why}")
            continue
        off, rem, exp = v["offload_step_ns"], v["remat_step_ns"], v["offload_exposed_ns"]
        unit, div = time_unit([off, rem, v["fastest_step_ns"]])
        if v["winner"] == "unchecked":
            out += _wrap(
                f"{where}: too short to call: {v['offload_policy']} {off / div:.2f} {unit} against remat "
                f"{rem / div:.2f} {unit} predicted, where kernel launches, which the prediction does not price, "
                f"decide; its error was measured on real steps of {human_time(v['checked_from_ns'])} and more: "
                "grow the step (the script's size options) for an answer",
                width,
            )
            continue
        if v["winner"] == "offload":
            verb = (
                f"offloading beats rematerialization by {human_time(v['saving_ns'])} per step "
                f"({100 * v['saving']:.1f}%)"
            )
        elif v["winner"] == "remat":
            verb = (
                f"rematerialization beats offloading by {human_time(-v['saving_ns'])} per step "
                f"({-100 * v['saving']:.1f}%)"
            )
        else:
            verb = "offloading and rematerialization tie"
        exposed = f"{human_time(exp)} of copy time exposed" if exp else "no copy time exposed"
        line = (
            f"{where}: {verb}: {v['offload_policy']} {off / div:.2f} {unit} ({exposed}) "
            f"against remat {rem / div:.2f} {unit}"
        )
        if v["winner"] == "tie" and v.get("tie_within") and v["saving"]:
            line += (
                f", {abs(100 * v['saving']):.1f}% apart: within the predictions' error (two predicted steps "
                f"within {100 * v['tie_within']:.0f}% of each other are a tie); {_by_memory(v)}"
            )
        if v["fastest_fitting"] not in (v["offload_policy"], "remat"):
            line += f"; fastest that fits: {v['fastest_fitting']} {v['fastest_step_ns'] / div:.2f} {unit}"
        out += _wrap(line, width)
    return out


def _wrap(line: str, width: int | None) -> list[str]:
    return textwrap.wrap(line, width, subsequent_indent="  ") if width else [line]


def _by_memory(v: dict[str, Any]) -> str:
    """A tie's advice: the side that needs less device memory, with both sides' memory."""
    lighter = v.get("lighter")
    if lighter is None:
        return "pick by memory"
    mem = {v["offload_policy"]: v["offload_device_bytes"], "remat": v["remat_device_bytes"]}
    other = next(p for p in mem if p != lighter)
    need = f"{human_bytes(mem[lighter])} of device memory against {other}'s {human_bytes(mem[other])}"
    return f"pick by memory: {lighter}, {need}"


def plan_line(tab: dict[str, Any]) -> str | None:
    """The plan's answer in one line: offloading against rematerialization at the largest batch on the
    first link asked (the others follow in the plan's output); None without such a comparison."""
    found = tab.get("offload_vs_remat") or []
    if not found:
        return None
    largest = max((v["batch"] for v in found if v["batch"] is not None), default=None)
    v = next(v for v in found if v["batch"] == largest)
    line = f"The plan ({tab['label']}): {verdict_lines([v], width=None)[0]}"
    if v["not_fitting"]:
        line += f"; too big at this batch: {', '.join(v['not_fitting'])}"
    others = len(found) - 1
    return line + (f" ({others} other batch/link case{'s' if others != 1 else ''} below)" if others else "")


def render_against(tab: dict[str, Any]) -> list[str]:
    """Predicted against measured per policy row and per layer (``recorded.against_measured``);
    nothing when no row has a prediction."""
    rows = [r for r in tab["rows"] if (r.get("predicted") or {}).get("predicted_step_ns") is not None]
    if not rows:
        told = tune_lines(tab)
        return ["", *told] if told else []
    vals = [v for r in rows for v in (r["predicted"]["predicted_step_ns"], r["predicted"]["measured_step_ns"])]
    unit, div = time_unit(vals)
    body = []
    for r in rows:
        p = r["predicted"]
        err = p["step_error"]
        body.append(
            [
                r["policy"],
                scaled(p["measured_step_ns"], div),
                scaled(p["predicted_step_ns"], div),
                "-" if err is None else f"{100 * err:+.1f}%",
                scaled(p["measured_exposed_ns"], div),
                scaled(p["predicted_exposed_ns"], div),
                p["link"] or "-",
            ]
        )
    heads = ("policy", f"measured {unit}", f"predicted {unit}", "error", f"exposed {unit}", f"pred. exposed {unit}",
             "link")  # fmt: skip
    acc = of_costs([r["predicted"].get("cost_model") for r in rows])
    out = [f"\n{label_of(acc.costed)} against measured, per step and device:", table(heads, body, left=(0, 6))]
    out += textwrap.wrap(acc.line(), 118)
    out += _layers_table(rows)
    targets: dict[str, list[str]] = {}  # one line per target, not one per run (each run's own dump: one)
    for r in rows:
        t = r["predicted"].get("target")
        if t:
            own = t.startswith("the dump's ") and t.endswith(".gpu_target_config.pbtxt")
            targets.setdefault("its own dump's gpu_target_config.pbtxt" if own else t, []).append(r["policy"])
    for t, policies in targets.items():
        who = "every run" if len(policies) == len(rows) > 1 else ", ".join(policies)
        out.append(f"target of {who}: {t}")
    missing = [r["policy"] for r in tab["rows"] if r not in rows]
    for r in tab["rows"]:
        if r["policy"] in missing:
            why = next(iter((r.get("predicted") or {}).get("notes") or []), "no prediction")
            out.append(f"{r['policy']}: {why}")
    out += tune_lines(tab)
    return out


TABLE_WIDTH = 160  # the terminal width fit() keeps; a wider per-layer table is said per policy instead


def _layers_table(rows: list[dict[str, Any]]) -> list[str]:
    """Exposed copy time per layer and step, predicted / measured: a table, one row per policy and one
    column per layer (a scanned step's loop is one column, ``layers``), where it fits the terminal;
    else a line per policy."""
    per = {r["policy"]: {x["layer"]: x for x in r["predicted"]["layers"] if x["layer"] is not None} for r in rows}
    per = {policy: lays for policy, lays in per.items() if lays}
    names = list(dict.fromkeys(n for lays in per.values() for n in lays))
    if not names:
        return []
    keys = ("predicted_exposed_ns", "measured_exposed_ns")
    unit, div = time_unit([x[k] for lays in per.values() for x in lays.values() for k in keys if x[k] is not None])

    def cell(x: dict[str, Any] | None) -> str:
        return "" if x is None else " / ".join(scaled(x[k], div) for k in keys)

    body = [[policy, *(cell(lays.get(n)) for n in names)] for policy, lays in per.items()]
    grid = table(("policy", *names), body)
    if max(len(line) for line in grid.splitlines()) <= TABLE_WIDTH:
        out = [f"exposed copy time per layer and step ({unit}), predicted / measured:", grid]
    else:
        out = [
            f"exposed per layer and step, {policy}: "
            + "; ".join(
                f"{n} predicted {human_time(x[keys[0]])}, measured {human_time(x[keys[1]])}" for n, x in lays.items()
            )
            for policy, lays in per.items()
        ]
    unmeasured = [p for p, lays in per.items() if all(x["measured_exposed_ns"] is None for x in lays.values())]
    if unmeasured:
        out.append(f"  (measured -: the traces of {', '.join(unmeasured)} have no layer ranges to measure layers by)")
    whole = {r["policy"]: r["predicted"].get("measured_exposed_ns") for r in rows}
    short = []  # runs whose layers hold much less exposed time than the run: copies launched outside them
    for policy, lays in per.items():
        if policy in unmeasured:
            continue
        inside = sum(x["measured_exposed_ns"] or 0 for x in lays.values())
        if whole.get(policy) and inside < 0.9 * whole[policy]:
            short.append(f"{policy} {human_time(inside)} of {human_time(whole[policy])}")
    if short:
        out.append(
            "  (measured per layer: the copies launched inside the layers' own ranges; the rest of a run's exposed "
            f"time ran outside every layer: {'; '.join(short)})"
        )
    return out


def tune_lines(tab: dict[str, Any]) -> list[str]:
    """One line per run that ``tune --verify`` captured: what tune predicted for it, against the
    measured step where the run was on a GPU."""
    out = []
    for r in tab["rows"]:
        p = r.get("predicted") or {}
        t = p.get("tune")
        if not t or t.get("predicted_step_ns") is None:
            continue
        told = (
            f"tune predicted {r['policy']} ({t['label']}) on {t['target']}, {t['link']}: step "
            f"{human_time(t['predicted_step_ns'], nanoseconds=True)}, exposed "
            f"{human_time(t['predicted_exposed_ns'], nanoseconds=True)}"
        )
        if t.get("step_error") is not None:
            told += (
                f"; measured {human_time(p['measured_step_ns'], nanoseconds=True)}, "
                f"exposed {human_time(p['measured_exposed_ns'], nanoseconds=True)}: "
                f"step error {100 * t['step_error']:+.1f}%"
            )
        else:
            told += " (not comparable with this run's measured step: it did not run on a GPU)"
        out.append(told)
    return out


def layer_table(tab: dict[str, Any]) -> list[str]:
    """Predicted exposed copy time per layer at the largest batch, one column per policy and link
    (only policies whose copies are attributed to layers)."""
    preds = [p for p in tab.get("predictions") or [] if any(x["layer"] for x in p.get("layers") or [])]
    if not preds:
        return []
    top = max((p["batch"] or 0) for p in preds)
    preds = [p for p in preds if (p["batch"] or 0) == top]
    layers = list(dict.fromkeys(x["layer"] for p in preds for x in p["layers"]))
    from profiler.units import natural_key

    layers.sort(key=lambda n: natural_key(n or "~"))
    vals = [x["exposed_ns"] for p in preds for x in p["layers"]]
    unit, div = time_unit(vals)
    cells = {(p["policy"], p["link"], x["layer"]): x["exposed_ns"] for p in preds for x in p["layers"]}
    names = [str(lay or "(no layer)") for lay in layers]
    if len(layers) <= 10:  # a row per policy and link, a column per layer
        heads = ["policy", "link", *names]
        rows = [
            [
                p["policy"],
                p["link_name"] or p["link"],
                *(scaled(cells.get((p["policy"], p["link"], lay)), div) for lay in layers),
            ]
            for p in preds
        ]
        left: tuple[int, ...] = (0, 1)
    else:
        heads = ["layer", *(f"{p['policy']} {p['link_name'] or p['link']}" for p in preds)]
        rows = [
            [name, *(scaled(cells.get((p["policy"], p["link"], lay)), div) for p in preds)]
            for name, lay in zip(names, layers, strict=True)
        ]
        left = (0,)
    at = f", batch {top}" if top else ""
    return [f"\npredicted exposed copy time per layer ({unit}){at}:", table(heads, rows, left=left)]
