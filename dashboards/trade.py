"""The policy trade: device memory against speed per policy, the per-policy table, the compiler's plan
against what moved per layer; then plans compiled for a GPU target (``plan_view``).

Every number comes from ``analysis.policies`` (``policy_table``, ``frontier``, ``planned_vs_moved``),
the same functions as ``profile-step analyze RUNS...``; this module draws them and says why a part
is empty.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import dash
from dash import Input, Output, State, dash_table, dcc, html

from dashboards import copy_numbers, ids, plan_view, selection, tab_gate
from dashboards import rows as rows_table
from dashboards.data import RunStore
from dashboards.figures import (
    COLORS,
    HIDDEN_TINT,
    LIMIT_COLOR,
    TITLE,
    Figure,
    esc,
    figure,
    grouped_bars,
    limit_line,
    note_figure,
    unique,
)
from dashboards.styles import CELL, FAINT_COLOR, HEADER_WRAP, SAME_STEP_BACKGROUND
from dashboards.view import Page, TabView
from dashboards.widgets import graph
from profiler.analysis.policies import frontier, is_cpu, per_step_and_gpu, planned_vs_moved, policy_table
from profiler.predict.recorded import predicted
from profiler.predict.step import COSTED
from profiler.report.policies_text import OTHER_PROGRAM, folded, not_offloaded_line, policy_marks
from profiler.stored.summary import RunSummary
from profiler.units import byte_unit, human_bytes, human_time, si, time_unit

MEMORY_MARKER = {
    "measured": ("circle", COLORS["compute"], "peak measured"),
    "compiled": ("diamond", COLORS["nccl"], "compiled step (memory_analysis(), not measured)"),
}
X_MODES = {"step": "median step time", "tflops": "TFLOP/s per device"}


def _why_no_memory(p: dict[str, Any]) -> str:
    return p["memory_detail"] or (
        "no memory_stats() recorded (a GPU run of profile-step records it), no CUDA memory events in the trace, "
        "no memory numbers of a compiled step"
    )


# Where a point's label may go, in the order tried, with the label box's offset from the point
# (x, y: -1 left/below, 0 centred, 1 right/above of the marker).
LABEL_SPOTS = (("top center", 0, 1), ("bottom center", 0, -1), ("middle right", 1, 0), ("middle left", -1, 0))
PLOT_PX = (900, 300)  # the plot area at its narrowest, for telling whether two labels would touch
CHAR_PX, LINE_PX = 7.5, 16


def place_labels(
    points: list[tuple[float, float, str, float]], x_range: tuple[float, float], y_range: tuple[float, float]
) -> list[tuple[str | None, tuple[float, float, float, float] | None]]:
    """Per point (x, y, label, marker size in px): a text position where its label touches no other
    label or marker (greedy, in the points' order), and the label's box in px; None where none fits."""
    sx = PLOT_PX[0] / ((x_range[1] - x_range[0]) or 1)
    sy = PLOT_PX[1] / ((y_range[1] - y_range[0]) or 1)
    px = [((x - x_range[0]) * sx, (y - y_range[0]) * sy, r / 2) for x, y, _, r in points]
    markers = [(cx - r, cy - r, cx + r, cy + r) for cx, cy, r in px]
    boxes: list[tuple[float, float, float, float]] = []

    def clear(b: tuple[float, float, float, float], own: int) -> bool:
        def hit(o: tuple[float, float, float, float]) -> bool:
            return b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3]

        return not any(hit(o) for o in boxes) and not any(hit(m) for i, m in enumerate(markers) if i != own)

    out: list[tuple[str | None, tuple[float, float, float, float] | None]] = []
    for i, ((cx, cy, r), (_, _, label, _)) in enumerate(zip(px, points, strict=True)):
        w, h = CHAR_PX * len(label) + 4, LINE_PX
        for spot, dx, dy in LABEL_SPOTS:
            x0 = cx - w / 2 if dx == 0 else (cx + r + 2 if dx > 0 else cx - r - 2 - w)
            y0 = cy - h / 2 if dy == 0 else (cy + r + 2 if dy > 0 else cy - r - 2 - h)
            box = (x0, y0, x0 + w, y0 + h)
            if clear(box, i):
                boxes.append(box)
                out.append((spot, box))
                break
        else:
            out.append((None, None))
    return out


def frontier_figure(points: list[dict[str, Any]], labels: list[str], x_mode: str) -> tuple[Figure, list[str]]:
    """Peak device memory against median step time (or TFLOP/s), one point per run; marker size by
    exposed + stalled copy time per step; the devices' memory limit as a dashed line.  Also the
    sentences that say which runs are not drawn, and why."""
    why_not: dict[str, list[str]] = {}  # why a run is not drawn -> its labels
    shown: list[tuple[dict[str, Any], str]] = []
    for p, lab in zip(points, labels, strict=True):
        x = p["step_ns"] if x_mode == "step" else p["tflops"]
        if p["memory_bytes"] is None:
            why_not.setdefault(f"no device memory: {_why_no_memory(p)}", []).append(lab)
        elif x is None:
            why = (
                "no step ranges"
                if x_mode == "step" or p["step_ns"] is None
                else "no FLOPs per step: no compiled step in the run folder (compiled.json, written by profile-step "
                "run)"
            )
            why_not.setdefault(why, []).append(lab)
        else:
            shown.append((p, lab))
    left_out = [f"{', '.join(who)}: {why}" for why, who in why_not.items()]
    if not shown:  # one reason once, with the runs it holds for
        if len(why_not) == 1 and len(points) > 1:
            reasons = f"{next(iter(why_not))} (all {len(points)} runs)"
        else:
            reasons = "; ".join(left_out)
        return note_figure(f"Nothing to draw for the selected runs: {reasons}."), []
    t_name, t_div = time_unit([p["step_ns"] for p, _ in shown])
    limits = sorted({p["limit_bytes"] for p, _ in shown if p["limit_bytes"]})
    m_name, m_div = byte_unit([p["memory_bytes"] for p, _ in shown] + limits)
    costs = [p["copy_cost_ns"] for p, _ in shown if p["copy_cost_ns"] is not None]
    top_cost = max(costs, default=0)

    def size(cost: float | None) -> float:
        return 12 + 28 * math.sqrt(cost / top_cost) if cost and top_cost else 12

    xs = [p["step_ns"] / t_div if x_mode == "step" else p["tflops"] for p, _ in shown]
    ys = [p["memory_bytes"] / m_div for p, _ in shown] + [v / m_div for v in limits]
    pad = (max(xs) - min(xs)) * 0.15 or max(abs(max(xs)) * 0.1, 1e-9)
    x_range, y_range = (min(xs) - pad, max(xs) + pad), (0, max(ys) * 1.2)
    placed = place_labels(
        [(x, p["memory_bytes"] / m_div, lab, size(p["copy_cost_ns"])) for x, (p, lab) in zip(xs, shown, strict=True)],
        x_range,
        y_range,
    )
    crowded = [lab for (_, lab), (pos, _) in zip(shown, placed, strict=True) if pos is None]
    if crowded:
        left_out.append(f"not labelled where the points crowd (hover a point for its run): {', '.join(crowded)}")
    position = {lab: pos for (_, lab), (pos, _) in zip(shown, placed, strict=True)}
    data = []
    for source, (symbol, color, name) in MEMORY_MARKER.items():
        group = [(p, lab) for p, lab in shown if p["memory_source"] == source]
        if not group:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": name,
                "x": [p["step_ns"] / t_div if x_mode == "step" else p["tflops"] for p, _ in group],
                "y": [p["memory_bytes"] / m_div for p, _ in group],
                "text": [esc(lab) if position[lab] else "" for _, lab in group],
                "textposition": [position[lab] or "top center" for _, lab in group],
                "cliponaxis": False,
                "marker": {
                    "symbol": symbol,
                    "color": color,
                    "opacity": 0.8,
                    "size": [size(p["copy_cost_ns"]) for p, _ in group],
                    "line": {"color": "#222", "width": 1},
                },
                "customdata": [
                    [
                        esc(lab),
                        human_time(p["step_ns"]),
                        "-" if p["tflops"] is None else f"{p['tflops']:.3g}",
                        human_bytes(p["memory_bytes"]),
                        esc(p["memory_detail"] or source),
                        "unknown" if p["copy_cost_ns"] is None else human_time(p["copy_cost_ns"]),
                        p["copy_cost_ns"],
                    ]
                    for p, lab in group
                ],
                "hovertemplate": "%{customdata[0]}<br>median step %{customdata[1]}, %{customdata[2]} TFLOP/s"
                "<br>peak device memory %{customdata[3]} (%{customdata[4]})"
                "<br>exposed + stalled copy time per step: %{customdata[5]}<extra></extra>",
            }
        )
    shapes, annotations = [], []
    for v in limits:
        shapes.append(limit_line(v / m_div))
        annotations.append(
            {
                "text": f"device memory limit {human_bytes(v)} (memory_stats() bytes_limit)",
                "showarrow": False,
                "xref": "paper",
                "yref": "y",
                "x": 0,
                "xanchor": "left",
                "y": v / m_div,
                "yanchor": "bottom",
                "font": {"size": 12, "color": LIMIT_COLOR},
            }
        )
    x_title = f"median step ({t_name})" if x_mode == "step" else "TFLOP/s per device (FLOPs per step / median step)"
    fig = figure(
        data,
        height=480,
        margin={"t": 50, "b": 100, "l": 80, "r": 40},
        title={"text": "Peak device memory against " + X_MODES[x_mode] + ", one point per run", **TITLE},
        showlegend=True,
        legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0},
        xaxis={"title": {"text": x_title}, "range": list(x_range), "zeroline": False},
        yaxis={"title": {"text": f"peak device memory ({m_name})"}, "range": list(y_range)},
        shapes=shapes,
        annotations=annotations,
    )
    return fig, left_out


# columns of numbers left out when no row has one (as analyze leaves them out), and said so under the table
OPTIONAL = ("peak", "compiled_dev", "compiled_host", "planned", "moved", "flops", "tflops", "recompute", "mfu",
            "exposed", "stalled", "pred_step", "pred_error", "pred_exposed")  # fmt: skip


def policy_datatable(
    tab: dict[str, Any], labels: list[str], stalls_not_measured: dict[str, list[str]] | None = None
) -> tuple[dash_table.DataTable, list[str]]:
    """The per-policy table (``policy_table``) with units by column, and its notes (what is missing, why;
    *stalls_not_measured*: why the traces of some rows cannot measure stalls -> those rows)."""
    rows = tab["rows"]
    t_name, t_div = time_unit([v for r in rows for v in (r["median_step_ns"], r["step_min_ns"], r["step_max_ns"])])
    c_name, c_div = time_unit([v for r in rows for v in (r["exposed_ns"], r["stalled_ns"])])
    m_name, m_div = byte_unit(
        [v for r in rows for v in (r["peak_device_bytes"], r["compiled_device_bytes"], r["compiled_host_bytes"])]
    )
    p_name, p_div = byte_unit(
        [v for r in rows for v in (r["planned_d2h_bytes_per_step"], r["moved_d2h_bytes_per_step"])]
    )

    def div(v: float | None, d: float) -> float | str | None:
        """In the column's unit; a value too small to show in it says so (the runs table's rule)."""
        if v is None:
            return None
        return f"<{rows_table.TINY:g}" if 0 < abs(v / d) < rows_table.TINY else v / d

    data = []
    notes: dict[str, list[str]] = {}
    for why, who in (stalls_not_measured or {}).items():
        notes.setdefault(f"stalled / step not measured: {why}", []).extend(who)
    for r, lab in zip(rows, labels, strict=True):
        data.append(
            {
                "run": lab + (f" {OTHER_PROGRAM}" if r.get("program_differs") else ""),  # its step: another program
                "steps": r["steps"],
                "step": div(r["median_step_ns"], t_div),
                "spread": "-"
                if r["step_min_ns"] is None
                else f"{r['step_min_ns'] / t_div:.4g}-{r['step_max_ns'] / t_div:.4g}",
                "noise": ", ".join(r["within_spread_of"]),
                "same_hlo": ", ".join(r["same_hlo_as"]),
                "peak": div(r["peak_device_bytes"], m_div),
                "compiled_dev": div(r["compiled_device_bytes"], m_div),
                # XLA:CPU keeps host memory in the device's: no host number of its own (see the notes)
                "compiled_host": None if r["host_in_device_memory"] else div(r["compiled_host_bytes"], m_div),
                "planned": div(r["planned_d2h_bytes_per_step"], p_div),
                "moved": div(r["moved_d2h_bytes_per_step"], p_div),
                "flops": si(r["flops_per_step"]),
                "tflops": r["tflops"],
                "recompute": None if r["recompute_overhead"] is None else 100 * r["recompute_overhead"],
                "mfu": None if r["mfu"] is None else 100 * r["mfu"],
                "exposed": div(r["exposed_ns"], c_div),
                "stalled": div(r["stalled_ns"], c_div),
                **_predicted_cells(r, t_div, c_div),
            }
        )
        if r["peak_device_bytes"] is None:
            notes.setdefault(
                "no measured peak device memory: "
                + (r["peak_device_source"] or "no memory_stats() and no CUDA memory events (nsys --cuda-memory-usage)"),
                [],
            ).append(lab)
        elif r["peak_device_source"]:
            notes.setdefault(f"peak dev measured by {r['peak_device_source']}", []).append(lab)
        if r["plan_note"]:
            notes.setdefault(r["plan_note"], []).append(lab)
        pred = r.get("predicted") or {}
        if pred.get("predicted_step_ns") is not None:  # which GPU and link the predicted columns are for
            on = f"{pred.get('target') or 'the recorded GPU'}, {pred.get('link') or 'its host link'}"
            notes.setdefault(f"predicted columns: {COSTED}, not measured, on {on}", []).append(lab)
        for n in r["notes"]:
            notes.setdefault(n, []).append(lab)
        if r["model_flops_per_step"] and r["mfu"] is None:
            notes.setdefault(f"no MFU: no peak FLOP/s known for {r['device_kind'] or '?'}", []).append(lab)
        if r["host_in_device_memory"]:
            notes.setdefault(
                "compiled host '-': XLA:CPU keeps host memory in the device's own memory space, so what the step "
                "places in host memory counts in compiled dev",
                [],
            ).append(lab)
    sig = {"specifier": ".4~r", "nully": "-"}
    columns = [
        {"id": "run", "name": "run", "type": "text"},
        {"id": "steps", "name": "steps", "type": "numeric"},
        {"id": "step", "name": f"median step ({t_name})", "type": "numeric", "format": sig},
        {"id": "spread", "name": f"shortest-longest step ({t_name})", "type": "text"},
        {"id": "noise", "name": "within the spread of", "type": "text"},
        {"id": "same_hlo", "name": "same compiled step as", "type": "text"},
        {"id": "peak", "name": f"peak dev, measured ({m_name})", "type": "numeric", "format": sig},
        {"id": "compiled_dev", "name": f"compiled dev ({m_name})", "type": "numeric", "format": sig},
        {"id": "compiled_host", "name": f"compiled host ({m_name})", "type": "numeric", "format": sig},
        {"id": "planned", "name": f"D2H planned / step ({p_name})", "type": "numeric", "format": sig},
        {"id": "moved", "name": f"D2H moved / step ({p_name})", "type": "numeric", "format": sig},
        {"id": "flops", "name": "FLOPs / step", "type": "text"},
        {"id": "tflops", "name": "TFLOP/s", "type": "numeric", "format": sig},
        {"id": "recompute", "name": "recompute (%)", "type": "numeric", "format": {"specifier": "+.1f", "nully": "-"}},
        {"id": "mfu", "name": "MFU (%)", "type": "numeric", "format": {"specifier": ".1f", "nully": "-"}},
        {"id": "exposed", "name": f"exposed / step ({c_name})", "type": "numeric", "format": sig},
        {"id": "stalled", "name": f"stalled / step ({c_name})", "type": "numeric", "format": sig},
        {"id": "pred_step", "name": f"predicted step ({t_name})", "type": "numeric", "format": sig},
        {
            "id": "pred_error",
            "name": "prediction error (%)",
            "type": "numeric",
            "format": {"specifier": "+.1f", "nully": "-"},
        },
        {"id": "pred_exposed", "name": f"predicted exposed ({c_name})", "type": "numeric", "format": sig},
    ]
    # notes of one kind (their numbers aside) once, as the terminal's table folds them
    lines = [f"{text} ({scope})" for scope, text in folded(notes, len(rows), "profile-step analyze --json")]
    empty = [c for c in columns if c["id"] in OPTIONAL and all(d[c["id"]] in (None, "-") for d in data)]
    if data and empty:
        columns = [c for c in columns if c not in empty]
        lines.insert(0, "left out, no value in any run: " + "; ".join(c["name"].split(" (")[0] for c in empty))
    if tab.get("baseline"):
        lines.append(f"recompute: FLOPs per step against the {tab['baseline']!r} policy")
    marks = {
        "=": "same compiled step",
        "~": "within the noise",
        "!": "runs apart",
        "cpu": "CPU runs",
        OTHER_PROGRAM: "another program",
    }
    lines = [f"{marks.get(m, m)}: {text}" for m, text in policy_marks(tab)] + lines
    table = dash_table.DataTable(
        id=ids.TRADE_TABLE,
        columns=columns,
        data=data,
        tooltip_header=HEADER_TIPS,
        tooltip_delay=300,
        tooltip_duration=None,
        style_table={"overflowX": "auto"},
        style_header=HEADER_WRAP,
        style_cell=CELL,
        # runs' and policies' names on two lines where long: the table fits a 1344-pixel window
        style_cell_conditional=[
            {"if": {"column_id": c}, "maxWidth": w, "whiteSpace": "normal", "height": "auto"}
            for c, w in (("run", "200px"), ("noise", "170px"), ("same_hlo", "170px"))
        ],
        style_data_conditional=[
            {"if": {"filter_query": '{same_hlo} != ""'}, "backgroundColor": SAME_STEP_BACKGROUND},
            {"if": {"filter_query": '{noise} != ""', "column_id": ["step", "spread", "noise"]}, "color": FAINT_COLOR},
        ],
    )
    return table, lines


def _predicted_cells(r: dict[str, Any], t_div: float, c_div: float) -> dict[str, float | None]:
    """The static prediction of the run's own step (``predict.recorded``) against the measured median."""
    p = r.get("predicted") or {}
    step, exp, err = p.get("predicted_step_ns"), p.get("predicted_exposed_ns"), p.get("step_error")
    return {
        "pred_step": None if step is None else step / t_div,
        "pred_error": None if err is None else 100 * err,
        "pred_exposed": None if exp is None else exp / c_div,
    }


HEADER_TIPS = {
    "step": "median of the included steps (warm-up and outliers left out)",
    "spread": "the shortest and the longest included step: two policies whose medians differ by less than the "
    "larger spread are within the noise",
    "noise": "policies whose median step differs from this one's by less than the larger of their spreads",
    "same_hlo": "policies whose step module has the same HLO fingerprint: the policy changed nothing the compiler saw",
    "peak": "largest measured peak device memory over the run's devices: memory_stats() at the end of the "
    "capture, else the trace's CUDA memory events",
    "compiled_dev": "what one execution of the step's compiled module keeps on the device: arguments + outputs "
    "not aliased to arguments + temporaries (memory_analysis())",
    "compiled_host": "the same in host memory (memory space 5): the offloaded activations; '-' on XLA:CPU, "
    "which keeps host memory in the device's",
    "planned": "bytes the compiler's plan sends to host per step (the step module's optimized HLO)",
    "moved": "device-to-host bytes the trace moved, per step range",
    "flops": "FLOPs per step of the step's module (XLA's cost analysis; per device)",
    "tflops": "FLOPs per step / median step",
    "recompute": "FLOPs per step / the none policy's - 1",
    "mfu": "declared model FLOPs per step / median step / the device's dense BF16 peak",
    "exposed": "median per step of offload copy time no kernel overlaps",
    "stalled": "median per step of GPU time stalled waiting for offload copies",
    "pred_step": f"the run's own compiled step on the recorded GPU and its host link: {COSTED} "
    "(profile-step's static estimate, not measured)",
    "pred_error": "predicted step / measured median step - 1: how far the static estimate was off",
    "pred_exposed": "predicted copy time the compute stream waits for, per step",
}


def pvm_figure(pvm: dict[str, Any], run: RunSummary | dict[str, Any], label: str) -> tuple[Figure, list[str]]:
    """Planned against moved bytes per step, per layer and activation (``planned_vs_moved``), and the
    flagged rows as sentences."""
    run = RunSummary.of(run)
    comp = run.compiled or {}
    per = pvm.get("per") or "per step and GPU"
    if not comp.get("plan"):
        n_steps, _, _ = per_step_and_gpu(run)
        moved = {dev: (c.get("d2h") or {}).get("bytes") or 0 for dev, c in (run.devices or {}).items()}
        each = ", ".join(f"GPU {dev} {human_bytes(b / n_steps)}" for dev, b in moved.items())
        why = "; ".join(comp.get("notes") or []) or "no compiled step"
        return (
            note_figure(
                f"No compiler plan for {label}: {why}. "
                + (
                    f"The trace moved device-to-host {per}: {each} (the Per layer view shows where)."
                    if any(moved.values())
                    else "The trace moved nothing between device and host."
                ),
                height=200,
            ),
            [],
        )
    rows = pvm["rows"]
    if not rows:
        return note_figure(
            f"Nothing planned and nothing moved for {label}" + (f" ({pvm['plan_note']})" if pvm["plan_note"] else ""),
            height=200,
        ), []
    cats = [
        esc(
            f"{x['layer'] or '-'} · {x['activation'] or '(unnamed)'}"
            if x["unplanned_op"] is None
            else x["unplanned_op"]
        )
        for x in rows
    ]
    b_name, b_div = byte_unit([x[f"{k}_{d}_bytes"] for x in rows for k in ("planned", "moved") for d in ("d2h", "h2d")])
    data = []
    for d, dl in (("d2h", "D2H"), ("h2d", "H2D")):
        for kind in ("planned", "moved"):
            data.append(
                {
                    "type": "bar",
                    "x": cats,
                    "y": [x[f"{kind}_{d}_bytes"] / b_div for x in rows],
                    "name": f"{dl} {kind}",
                    "offsetgroup": f"{d}-{kind}",
                    "marker": {
                        "color": HIDDEN_TINT[d] if kind == "planned" else COLORS[d],
                        "line": {"color": COLORS[d], "width": 1.5},
                    },
                    "customdata": [esc(x["flag"]) for x in rows],
                    "hovertemplate": f"%{{x}}: {dl} {kind} %{{y:.4g}} {b_name} "
                    + ("per step" if kind == "planned" else per)
                    + " (%{customdata})<extra></extra>",
                }
            )
    fig = grouped_bars(
        data,
        cats,
        esc(f"Planned per step vs moved {per}: {label} (step {pvm.get('step_program') or pvm['step_module'] or '?'})"),
        "layer · activation, or the XLA operation no plan explains",
        yaxis={"title": {"text": f"bytes per step and GPU ({b_name})"}, "rangemode": "tozero"},
    )
    flags = [f"{c}: {x['flag']}" for c, x in zip(cats, rows, strict=True) if x["flag"] != "ok"]
    return fig, flags + not_offloaded_line(pvm)


def _drawable(run: RunSummary, measured_gpu: bool = False) -> bool:
    """Whether a run is a point of the trade: a median step and a device memory (measured or compiled);
    with *measured_gpu*, a GPU's measurement (not a CPU run, not the synthetic demo's)."""
    row = policy_table([run])["rows"][0]
    if measured_gpu and (is_cpu(row) or run.synthetic):
        return False
    return row["median_step_ns"] is not None and (
        row["peak_device_bytes"] is not None or row["compiled_device_bytes"] is not None
    )


def _has_numbers(row: dict[str, Any]) -> bool:
    """Whether a policy row has anything the per-policy table shows but its name."""
    keys = ("median_step_ns", "peak_device_bytes", "compiled_device_bytes", "flops_per_step", "exposed_ns")
    return any(row.get(k) is not None for k in keys)


def note(text: str) -> html.Div:
    return html.Div(text, className="note muted")


# --- the view: layout and callbacks --------------------------------------------------------------


def layout(page: Page) -> list[Any]:
    return [
        html.Div(
            [
                html.Span("x axis:"),
                dcc.RadioItems(
                    id=ids.TRADE_X,
                    options=[{"label": f" {v}", "value": k} for k, v in X_MODES.items()],
                    value="step",
                    inline=True,
                    inputClassName="radio-gap",
                ),
            ],
            className="control",
        ),
        dcc.Loading(graph(ids.TRADE_FRONTIER)),
        html.Div(id=ids.TRADE_FRONTIER_NOTE, className="muted"),
        html.H4("Per policy (per step and per device)", className="section-title"),
        html.Div(id=ids.TRADE_TABLE_BOX),
        html.H4("The compiler's plan against what moved, per layer", className="section-title"),
        html.Div(
            dcc.Dropdown(id=ids.PVM_RUN, clearable=False, placeholder="run", optionHeight=40),
            className="select-narrow",
        ),
        dcc.Loading(graph(ids.PVM_GRAPH)),
        html.Ul(id=ids.PVM_FLAGS, className="small"),
        html.H4("Compiled for a GPU target, not measured (profile-step plan)", className="section-title"),
        *plan_view.layout(list(page.store.plans.values())),
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "trade")

    def runs_of(selected: list[int], data: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]], list[str]]:
        rids = [rid for rid, _ in selection.selected_runs(store, selection.selected_views(selected, data))]
        summaries = [store.results[rid].run for rid in rids]
        labels = unique([selection.run_label(store, rid)[0] for rid in rids])
        return rids, summaries, labels

    @gate(
        Output(ids.TRADE_FRONTIER, "figure"),
        Output(ids.TRADE_FRONTIER_NOTE, "children"),
        Output(ids.TRADE_TABLE_BOX, "children"),
        Output(ids.PVM_RUN, "options"),
        Output(ids.PVM_RUN, "value"),
        Input(ids.TRADE_X, "value"),
        *selection.TICKED,
        State(ids.PVM_RUN, "value"),
    )
    def on_trade(x_mode, selected, data, current):
        rids, summaries, labels = runs_of(selected, data)
        if not rids:
            empty = note_figure("Select runs in the table above: one point per run.")
            return empty, "", note("Select runs in the table above."), [], None
        tab_doc = policy_table(summaries, predict=predicted)
        points = frontier(tab_doc)
        fig, left_out = frontier_figure(points, labels, x_mode or "step")
        sources = sorted({p["memory_detail"] for p in points if p["memory_source"] == "measured"})
        lines = [html.Li(s) for s in left_out]
        if not any(p["limit_bytes"] for p in points):
            lines.append(
                html.Li(
                    "No device memory limit known: it comes from memory_stats() (bytes_limit) recorded at the end of "
                    "a profile-step run on a GPU."
                )
            )
        said = "Marker size: exposed + stalled copy time per step (medians). "
        if sources:
            said += "Measured peak from " + " and ".join(sources) + ". "
        said += "A run without a measured peak is drawn at its compiled step's memory (diamond), when it has one."
        if not any(p["memory_bytes"] is not None and p["step_ns"] is not None for p in points):
            chosen = selection.selected_views(selected, data)
            # a GPU's measured trade: neither a CPU run nor the synthetic demo is a point of it
            measured = not any(is_cpu(r) for r in tab_doc["rows"]) and not any(r.synthetic for r in summaries)
            has = functools.partial(_drawable, measured_gpu=measured)
            what = "device memory and steps" + (" measured on a GPU" if measured else "")
            lines.append(html.Li(selection.runs_that(store, has, chosen, what)))
        unmeasured: dict[str, list[str]] = {}
        for run, lab in zip(summaries, labels, strict=True):
            why = next(filter(None, (copy_numbers.stalls_not_measured(run, d) for d in run.device_ids)), None)
            if why:
                unmeasured.setdefault(why, []).append(lab)
        table, table_notes = policy_datatable(tab_doc, labels, unmeasured)
        if not any(_has_numbers(r) for r in tab_doc["rows"]):  # a table of "-": one sentence instead
            table = note("No per-policy numbers for these runs: no steps, no device memory, no compiled step.")
        options = [{"label": lab, "value": rid} for rid, lab in zip(rids, labels, strict=True)]
        # the first run with a compiler plan, else with copies: the one with most to compare
        planned = [r for r, s in zip(rids, summaries, strict=True) if s.plan]
        moved = [r for r, s in zip(rids, summaries, strict=True) if s.copy("d2h").get("bytes")]
        value = current if current in rids else (planned + moved + rids)[0]
        return (
            fig,
            [html.Div(said), html.Ul(lines, className="tight-list")],
            [table, html.Ul([html.Li(t) for t in table_notes], className="muted")],
            options,
            value,
        )

    @gate(Output(ids.PVM_GRAPH, "figure"), Output(ids.PVM_FLAGS, "children"), Input(ids.PVM_RUN, "value"))
    def on_pvm(rid):
        if not rid or rid not in store.results:
            return note_figure("Select runs in the table above, then pick one here."), []
        run = store.results[rid].run
        label, _ = selection.run_label(store, rid)
        fig, flags = pvm_figure(planned_vs_moved(run), run, label)
        return fig, [html.Li(f) for f in flags]

    plan_view.register(app, store)


TAB = TabView("trade", "Policy trade", layout, register)
