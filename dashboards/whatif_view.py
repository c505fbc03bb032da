"""The what-if view: the selected runs' step time with their copies on another host link.

Each (run, GPU) row's trace link comes from its GPU's model (``links.default_link``) unless the user
names it; the factor is ``analysis.links.copy_scale(from, to)`` (or given directly); the predicted
times are ``whatif.trace_whatif``'s documents per run and factor (``data.WhatIfs``: in the background,
each one replay of the run's prepared graph, ``replay_graph``; cached in memory and in the run's results
file) reduced by ``whatif.step_medians``.  The page says
"computing" while a run's replay is not there yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import ids, links, selection, tab_gate
from dashboards.data import RunStore
from dashboards.figures import COLORS, TITLE, Figure, esc, figure, note_figure, text_px, unique
from dashboards.rows import View
from dashboards.view import Page, TabView
from dashboards.widgets import choice, graph
from profiler.analysis.links import Link, copy_scale
from profiler.analysis.whatif import step_medians
from profiler.trace.jax_profile import NO_WAITS, PLAN_FROM
from profiler.units import human_time, time_unit

FACTOR = "factor"
AUTO = "auto"
DEFAULT_TARGET = "nvlink-c2c"
TARGET_OPTIONS = (
    [{"label": links.label(lk), "value": lk.key} for lk in links.LINKS]
    + [{"label": "custom link (GB/s per direction)", "value": links.CUSTOM}]
    + [{"label": "multiply every copy's time by a number", "value": FACTOR}]
)
FROM_OPTIONS = [{"label": "each GPU's own link (from its model)", "value": AUTO}] + [
    {"label": links.label(lk), "value": lk.key} for lk in links.LINKS
]
PREDICTED = "#56B4E9"  # sky blue: the replay; the measured bars keep the step colour


@dataclass(frozen=True)
class Scale:
    """The factor of one (run, GPU) and the sentence that says where it comes from."""

    factor: float
    text: str


def scale_for(store: RunStore, view: View, target: str, value: float | None, source: str) -> Scale:
    """``F`` for *view*: given directly, or the view's link (its GPU's, or *source*) over the target link."""
    if target == FACTOR:
        return Scale(float(value), f"every h2d/d2h copy takes {float(value):g}x its recorded time")
    to = links.BY_KEY[target] if target in links.BY_KEY else Link("custom", f"{float(value):g} GB/s", float(value))
    if source == AUTO:
        frm, why = links.run_link(store.results[view.rid].run, view.device)
        why = why.split(": ", 1)[1] if ": " in why else why
    else:
        frm, why = links.BY_KEY[source], "as chosen"
    f = copy_scale(frm, to)
    faster = f"{1 / f:.3g}x faster" if 0 < f < 1 else f"{f:.3g}x slower" if f > 1 else "as fast"
    return Scale(
        f,
        f"{frm.name} ({frm.gbps:g} GB/s, {why}) -> {to.name} ({to.gbps:g} GB/s): every h2d/d2h copy {faster} "
        f"(its time x {f:.3g})",
    )


def not_modelled(store: RunStore, rid: str) -> str | None:
    """Why the replay cannot model the copies' cost in *rid* (the run's findings say it, ``copy_free``'s
    ``not_modelled``: a JAX profiler trace records no stream waits, so what waits for a copy is not known),
    or None."""
    return ((store.results[rid].run.findings or {}).get("copy_free") or {}).get("not_modelled")


def tab_label(store: RunStore, views: list[View]) -> str:
    """``What-if``, or ``What-if (not modelled)`` where every selected run analyzed so far is one the replay
    cannot model (``not_modelled``): the tab would only say why."""
    done = {v.rid for v in views if v.rid in store.results}
    return "What-if (not modelled)" if done and all(not_modelled(store, rid) for rid in done) else "What-if"


def whatif_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Per (run, GPU): median step and GPU span, measured and predicted, as horizontal bars."""
    if not rows:
        return note_figure("Nothing replayed yet.")
    labels = unique([r["label"] for r in rows])
    y = [esc(lab) for lab in labels]
    s_name, s_div = time_unit([v for r in rows for v in (r["measured_ns"], r["predicted_ns"])])
    g_name, g_div = time_unit([v for r in rows for v in (r["measured_span_ns"], r["span_ns"])])

    def val(v: float | None, d: float) -> float | None:
        return None if v is None else v / d

    def change(before: float | None, after: float | None) -> str:
        if not before or after is None:
            return ""
        pct = 100 * (after - before) / before
        return "no change" if pct == 0 else f"{pct:+.2g}%" if abs(pct) < 0.1 else f"{pct:+.1f}%"

    has_steps = any(r["measured_ns"] is not None for r in rows)
    panels = (("measured_ns", "predicted_ns", s_div), ("measured_span_ns", "span_ns", g_div))
    data = []
    for axis, (m_key, p_key, div) in enumerate(panels):
        if axis == 0 and not has_steps:
            continue  # no median step to draw: the GPU span alone, said in the title
        suffix = "" if axis == 0 or not has_steps else "2"
        for key, name, color in ((m_key, "measured", COLORS["step"]), (p_key, "predicted", PREDICTED)):
            data.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "y": y,
                    "x": [val(r[key], div) for r in rows],
                    "name": name,
                    "legendgroup": name,
                    "showlegend": axis == 0 or not has_steps,
                    "xaxis": "x" + suffix,
                    "yaxis": "y" + suffix,
                    "marker": {"color": color},
                    "text": [change(r[m_key], r[p_key]) if key == p_key else "" for r in rows],
                    "textposition": "outside",
                    "cliponaxis": False,
                    "customdata": [human_time(r[key]) if r[key] is not None else "no step ranges" for r in rows],
                    "hovertemplate": f"%{{y}}: {name} %{{customdata}}<extra></extra>",
                }
            )
    tops = [
        max((v for r in rows for v in (r["measured_ns"], r["predicted_ns"]) if v is not None), default=1) / s_div,
        max((v for r in rows for v in (r["measured_span_ns"], r["span_ns"]) if v is not None), default=1) / g_div,
    ]
    height = max(300, 70 * len(rows) + 170)
    left = text_px(y) + 16
    if not has_steps:
        return figure(
            data,
            barmode="group",
            height=height,
            margin={"t": 80, "b": 90, "l": left, "r": 60},
            title={"text": esc(title + " (no step ranges in these runs: the GPU span only)"), **TITLE},
            showlegend=True,
            legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0},
            xaxis={"range": [0, tops[1] * 1.2], "title": {"text": f"GPU span of the capture ({g_name})"}},
            yaxis={"type": "category", "autorange": "reversed"},
        )
    return figure(
        data,
        barmode="group",
        height=height,
        margin={"t": 80, "b": 90, "l": left, "r": 60},
        title={"text": esc(title), **TITLE},
        showlegend=True,
        legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0},
        xaxis={"domain": [0, 0.44], "range": [0, tops[0] * 1.2], "title": {"text": f"median step ({s_name})"}},
        yaxis={"type": "category", "autorange": "reversed"},
        xaxis2={
            "domain": [0.56, 1],
            "anchor": "y2",
            "range": [0, tops[1] * 1.2],
            "title": {"text": f"GPU span of the capture ({g_name})"},
        },
        yaxis2={"type": "category", "autorange": "reversed", "anchor": "x2", "matches": "y", "showticklabels": False},
    )


def compute(
    store: RunStore, views: list[View], target: str, value: float | None, source: str, host: bool
) -> tuple[Figure, list[Any], bool]:
    """The figure, the sentences under the controls, and whether some replay is still computing."""
    if not views:
        return note_figure("Select runs in the table above, then choose a link here."), [], False
    if target in (links.CUSTOM, FACTOR) and (value is None or not value >= 0 or (target == links.CUSTOM and not value)):
        what = (
            "a bandwidth in GB/s above 0"
            if target == links.CUSTOM
            else "a number of 0 or more (0: copies take no time)"
        )
        return note_figure(f"Enter {what}."), [], False
    ready, lines, waiting, modeled = [], [], [], set()
    scales: dict[str, list[str]] = {}  # the sentence of a factor -> the rows it applies to
    unmodelled: dict[str, list[str]] = {}  # why the replay cannot model a run -> its rows (never replayed)
    for view in views:
        if view.rid not in store.results:
            continue
        label, _ = selection.view_label(store, view)
        if view.device is None:
            lines.append(html.Li(f"{label}: no GPU activity, nothing to replay"))
            continue
        why = not_modelled(store, view.rid)
        if why:
            unmodelled.setdefault(why, []).append(label)
            continue
        scale = scale_for(store, view, target, value, source)
        scales.setdefault(scale.text, []).append(label)
        state, doc = store.whatifs.get(view.rid, scale.factor, host)
        if state == "computing":
            waiting.append(label)
            continue
        if state == "error":
            lines.append(html.Li(f"{label}: {doc}", className="error-text"))
            continue
        med = step_medians(doc).get(view.device)
        if med is None:
            lines.append(html.Li(f"{label}: {scale.text}; no GPU op of this device in the replay"))
            continue
        modeled.add(doc["host_sync_modeled"])
        if not med["steps"]:
            lines.append(html.Li(f"{label}: no step ranges, the GPU span only"))
        ready.append({"label": label, "view": view.id, "factor": scale.factor, **med})
        free = ((store.results[view.rid].run.findings or {}).get("copy_free") or {}).get("devices", {})
        cf = free.get(str(view.device))
        if cf and (cf["saving_ns"] or cf.get("step_saving_ns")):  # the findings' bound, from the run summary
            per_step = (
                f", {human_time(cf['step_saving_ns'], nanoseconds=True)} per step"
                if cf.get("step_saving_ns") is not None
                else ""
            )
            lines.append(
                html.Li(
                    f"{label}: copy-free (every h2d/d2h copy removed, nothing waits for them): the GPU span "
                    f"{human_time(cf['saving_ns'], nanoseconds=True)} shorter{per_step}; no finding saves more",
                    className="copy-free",
                )
            )
    sync = (
        "host synchronization modeled (a call that waited for the GPU returns when its work is done, and its "
        "thread's later launches move with it)"
        if modeled == {True}
        else "host launch times as recorded"
        if modeled == {False}
        else "host synchronization modeled for some runs only"
        if modeled
        else ""
    )
    to = (
        links.label(links.BY_KEY[target])
        if target in links.BY_KEY
        else f"a custom link of {value:g} GB/s"
        if target == links.CUSTOM
        else f"every copy taking {value:g}x its time"
    )
    title = f"What-if: {to}" + (f"; {sync.split(' (')[0]}" if sync else "")
    every = len(scales) == 1 and len(views) > 1
    said = [
        html.Li(text + (" (every selected row)" if every else ": " + ", ".join(rows)), className="scale")
        for text, rows in scales.items()
    ]
    if waiting:
        said.append(html.Li(f"computing: {', '.join(waiting)} …", className="computing"))
    gone = [f"{', '.join(who)}: not modelled: {why}" for why, who in unmodelled.items()]
    lines += [html.Li(text, className="not-modelled") for text in gone]
    notes: list[Any] = [html.Ul(said + lines, className="notes-list")]
    if sync:
        notes.append(
            html.Div(
                f"Model: every h2d/d2h copy's duration scaled as above, each op after its stream and blockers; {sync}.",
                className="muted",
            )
        )
    if ready:
        fig = whatif_figure(ready, title)
    elif waiting:
        fig = note_figure(f"Computing the what-if for {len(waiting)} run(s) …")
    elif gone:  # the replay of these copies would say "no change": what waits for them is not in the trace
        hint = f" ({PLAN_FROM})" if NO_WAITS in unmodelled else ""
        fig = note_figure(
            f"No what-if for the selected rows (listed above): not modelled: {'; '.join(unmodelled)}.{hint}"
        )
    else:
        fig = note_figure("None of the selected rows has GPU activity to replay.")
    fig["layout"]["meta"] = {**(fig["layout"].get("meta") or {}), "rows": ready}
    return fig, notes, bool(waiting)


def start_first(store: RunStore, views: list[View]) -> None:
    """Queue the replays the tab's first view asks for (the default link from each GPU's own, host
    synchronization modeled) for *views*, the first view's rows: they are computed in the background
    while the user reads the first view, not when the tab is opened."""
    for view in views:
        if view.rid in store.results and view.device is not None and not not_modelled(store, view.rid):
            store.whatifs.get(view.rid, scale_for(store, view, DEFAULT_TARGET, None, AUTO).factor, model_host=True)


def layout(page: Page) -> list[Any]:
    return [
        html.Div(
            [
                html.Span("Copies on:"),
                choice(ids.WHATIF_TO, TARGET_OPTIONS, DEFAULT_TARGET, "30"),
                dcc.Input(
                    id=ids.WHATIF_VALUE,
                    type="number",
                    value=None,
                    placeholder="GB/s or x",  # used by "custom link" and "factor F"; empty for a named link
                    min=0,
                    debounce=True,
                    disabled=True,
                    className="number",
                ),
                html.Span("the traces' link:"),
                choice(ids.WHATIF_FROM, FROM_OPTIONS, AUTO, "30"),
                dcc.Checklist(
                    id=ids.WHATIF_HOST,
                    options=[{"label": " model host synchronization", "value": "host"}],
                    value=["host"],
                ),
            ],
            className="control wrap",
        ),
        html.Div(id=ids.WHATIF_NOTE, className="small"),
        dcc.Loading(graph(ids.WHATIF_GRAPH)),
        dcc.Interval(id=ids.WHATIF_POLL, interval=800, disabled=True),
        html.Div(
            "Predicted with profile-step whatif's replay (docs/whatif.md): per selected row, the median of the "
            "included steps' predicted times, and the GPU span of the capture. Limits: copies run at the same "
            "fraction of any link; kernels keep their durations.",
            className="muted",
        ),
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "whatif")

    @app.callback(
        Output(ids.WHATIF_VALUE, "disabled"),
        Output(ids.WHATIF_VALUE, "value"),
        Input(ids.WHATIF_TO, "value"),
        prevent_initial_call=True,
    )
    def on_target(target):
        if target == FACTOR:
            return False, 0.5
        if target == links.CUSTOM:
            return False, 200
        return True, None

    @gate(
        Output(ids.WHATIF_GRAPH, "figure"),
        Output(ids.WHATIF_NOTE, "children"),
        Output(ids.WHATIF_POLL, "disabled"),
        Input(ids.WHATIF_TO, "value"),
        Input(ids.WHATIF_VALUE, "value"),
        Input(ids.WHATIF_FROM, "value"),
        Input(ids.WHATIF_HOST, "value"),
        Input(ids.RUNS, "selected_rows"),
        Input(ids.WHATIF_POLL, "n_intervals"),
        State(ids.RUNS, "data"),
        hidden=lambda *_: (dash.no_update, dash.no_update, True),  # hidden: the poll stops
    )
    def on_whatif(target, value, source, host, selected, _n, data):
        views = selection.selected_views(selected, data)
        fig, notes, waiting = compute(store, views, target, value, source or AUTO, "host" in (host or []))
        return fig, notes, not waiting


TAB = TabView("whatif", tab_label, layout, register)
