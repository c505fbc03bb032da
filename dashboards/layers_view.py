"""The Per layer tab: copy time (and stalls) per layer of one (run, GPU); a click opens a layer's copies.

Every number is the run summary's ``layers`` entry for the GPU, shown as it is.
"""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, dash_table, dcc, html

from dashboards import copy_numbers, ids, kernels_view, selection, tab_gate
from dashboards.data import RunStore
from dashboards.figures import (
    COLORS,
    DIRECTION_LABEL,
    HIDDEN_TINT,
    Figure,
    esc,
    grouped_bars,
    is_note,
    note_figure,
)
from dashboards.rows import View
from dashboards.styles import CELL, HEADER
from dashboards.view import Page, TabView
from dashboards.widgets import RUN_PROMPT, dropdown, graph
from profiler.analysis.stalls import STALL_OVER_COPY_TIME
from profiler.units import human_bytes, human_time, time_unit


def layer_figure(layers: dict[str, dict[str, Any]], title: str, stalls: bool = False) -> Figure:
    """Per layer of one (run, device): copy time hidden and exposed, per direction, and (*stalls*: the
    trace has stream waits) the time other work waited for the layer's copies; click a bar for details.

    *layers* maps a layer name to its h2d / d2h / offload numbers (one device, with ``stall_ns``).
    """
    names = list(layers)
    if not names:
        return note_figure(
            "No layers in this run: no layer=N NVTX ranges, and no XLA thunk ranges under a named layer "
            "scope (jax.named_scope('layer_3'); --layer-pattern to match other names)."
        )
    if not any(layers[n]["offload"]["count"] for n in names):
        return note_figure(
            f"{len(names)} layers found, but none of them copied data between host and device "
            "(no D2H or H2D copy was launched inside a layer)."
        )
    stalled = [layers[n]["offload"].get("stall_ns") or 0 for n in names] if stalls else []
    name, div = time_unit([layers[n][d]["busy_ns"] for n in names for d in ("d2h", "h2d")] + stalled)
    x = [esc(n) for n in names]
    data = []
    for d in ("d2h", "h2d"):
        dl = DIRECTION_LABEL[d]
        exposed = [layers[n][d]["exposed_ns"] / div for n in names]
        hidden = [layers[n][d]["overlap_any_ns"] / div for n in names]
        custom = [
            [
                n,
                f"{layers[n][d]['count']:,} copies, {human_bytes(layers[n][d]['bytes'])}, "
                f"busy {human_time(layers[n][d]['busy_ns'])}",
            ]
            for n in names
        ]
        tip = "layer %{customdata[0]}: " + dl + " %{customdata[1]}<br>"
        common = {"type": "bar", "x": x, "offsetgroup": d, "customdata": custom, "showlegend": True}
        data.append(
            {
                **common,
                "y": exposed,
                "name": f"{dl} exposed",
                "marker": {"color": COLORS[d]},
                "hovertemplate": tip + f"exposed %{{y:.3f}} {name}<extra></extra>",
            }
        )
        data.append(
            {
                **common,
                "y": hidden,
                "base": exposed,
                "name": f"{dl} hidden",
                "marker": {"color": HIDDEN_TINT[d]},
                "hovertemplate": tip + f"hidden %{{y:.3f}} {name}<extra></extra>",
            }
        )
    if stalls:
        data.append(
            {
                "type": "bar",
                "x": x,
                "offsetgroup": "stall",
                "y": [v / div for v in stalled],
                "name": "stalled by copies",
                "marker": {"color": COLORS["stall"]},
                "showlegend": True,
                "customdata": [
                    [
                        n,
                        f"D2H {human_time(layers[n]['d2h'].get('stall_ns') or 0)}, "
                        f"H2D {human_time(layers[n]['h2d'].get('stall_ns') or 0)}",
                    ]
                    for n in names
                ],
                "hovertemplate": "layer %{customdata[0]}: other work waited "
                f"%{{y:.3f}} {name} for its copies (%{{customdata[1]}})<extra></extra>",
            }
        )
    return grouped_bars(
        data,
        x,
        esc(title),
        "layer",
        height=400,
        yaxis={
            "title": {"text": f"{'time' if stalls else 'copy time'} ({name})"},  # the title says whose, summed how
            "rangemode": "tozero",
        },
    )


def layer_copies(copies: pl.DataFrame, t0: int, limit: int = 500) -> list[dict[str, Any]]:
    """The first *limit* of one layer's *copies* (``Analysis.layer_copies``, by start), times from *t0*,
    for the details table."""
    return [
        {
            "direction": DIRECTION_LABEL.get(c, c),
            "stream": s,
            "start_ms": (st - t0) / 1e6,
            "duration_us": (en - st) / 1e3,
            "size": human_bytes(b or 0),
            "bytes": b or 0,
        }
        for c, s, st, en, b in copies.head(limit).select("cls", "stream", "start", "end", "bytes").iter_rows()
    ]


def layout(page: Page) -> list[Any]:
    """The tab, its run choice filled in."""
    return [
        html.Div(
            dropdown(ids.LAYER_RUN, "run and GPU", options=page.options, value=page.runs["layers"]), className="control"
        ),
        dcc.Loading(graph(ids.LAYER_GRAPH)),
        html.Div(id=ids.LAYER_HINT, className="muted"),
        html.Div(id=ids.LAYER_KERNELS),
        html.Div(id=ids.LAYER_DETAILS),
    ]


def with_layer_copies(run: Any) -> bool:
    """Whether a run has layers whose copies a GPU made (what this view draws)."""
    return any((v.offload or {}).get("count") for v in run.layers.values())


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "layers")

    @gate(
        Output(ids.LAYER_GRAPH, "figure"),
        Output(ids.LAYER_HINT, "children"),
        Input(ids.LAYER_RUN, "value"),
    )
    def on_layer_run(vid):
        if not vid:
            return note_figure(RUN_PROMPT), ""
        view = View.parse(vid)
        run = store.get(view.rid).run
        per_device = {name: v.devices.get(view.device) or copy_numbers.ZERO3 for name, v in run.layers.items()}
        short, _ = selection.view_label(store, view)
        what = "Copy time" + (" and stalls" if copy_numbers.waits(run, view.device) else "")
        title = f"{what} per layer, one GPU, all steps summed: {short}"
        if store.refs[view.rid].synthetic:
            title += " (SYNTHETIC: a model, not a measurement)"
        waits = copy_numbers.waits(run, view.device)
        fig = layer_figure(per_device, title, stalls=waits > 0)
        if is_note(fig):  # which runs would fill this view
            return fig, selection.runs_that(store, with_layer_copies, [view], "layers with copies")
        hint = "Click a layer's bar to see its copies and the kernels that hid them."
        if waits:
            hint += (
                " Stalled by copies: the time GPU work waited, through a CUDA event, for the layer's copies to "
                "finish (counted at the copy, even when the waiting op runs on another GPU)."
            )
            if copy_numbers.stall_over_copy(per_device.values()):
                hint += f" Where a layer's stall bar is longer than its copy time: {STALL_OVER_COPY_TIME}."
        elif copy_numbers.stalls_not_measured(run, view.device):
            hint += f" Stalls not measured: {copy_numbers.stalls_not_measured(run, view.device)}."
        else:
            hint += " No stream waits (CUDA events) on this GPU: stalls cannot be measured."
        return fig, hint

    @app.callback(
        Output(ids.LAYER_DETAILS, "children"),
        Input(ids.LAYER_GRAPH, "clickData"),
        State(ids.LAYER_RUN, "value"),
        prevent_initial_call=True,
    )
    def on_layer_click(click, vid):
        if not click or not vid:
            return []
        layer = click["points"][0].get("customdata")
        layer = layer[0] if isinstance(layer, list) else layer
        view = View.parse(vid)
        run = store.get(view.rid)
        info = run.run.layers.get(layer)
        if info is None:
            return html.P("Unknown layer.")
        per_dev = info.devices.get(view.device) or copy_numbers.ZERO3
        by_device = info.top_kernels_by_device
        top = by_device.get(view.device, []) if by_device is not None else info.top_kernels
        kernels = [
            html.Li(f"{t['name']}: {human_time(t['overlap_ns'])} over {t['kernels']:,} kernel(s)") for t in top
        ] or [html.Li(f"no kernel of GPU {view.device} overlapped these copies")]
        whose = f"GPU {view.device}" if by_device is not None else "all GPUs of the run"
        summary_rows = [
            {
                "direction": DIRECTION_LABEL.get(d, d),
                "copies": per_dev[d]["count"],
                "size": human_bytes(per_dev[d]["bytes"]),
                "busy": human_time(per_dev[d]["busy_ns"], nanoseconds=True),
                "exposed": human_time(per_dev[d]["exposed_ns"], nanoseconds=True),
                "hidden": "no copies"
                if per_dev[d]["hidden_fraction"] is None
                else f"{100 * per_dev[d]['hidden_fraction']:.1f}%",
                "stalled by these copies": human_time(per_dev[d].get("stall_ns") or 0, nanoseconds=True)
                if copy_numbers.waits(run.run, view.device)
                else "not measured"
                if copy_numbers.stalls_not_measured(run.run, view.device)
                else "no stream waits",
            }
            for d in ("d2h", "h2d", "offload")
        ]
        device = int(view.device) if view.device is not None else None
        copies = layer_copies(run.layer_copies(layer, device), run.t0)
        over = copy_numbers.stall_over_copy([per_dev]) and copy_numbers.waits(run.run, view.device)
        why = [html.P(f"Stalled more than the copies took: {STALL_OVER_COPY_TIME}.", className="muted")] if over else []
        return html.Div(
            id=ids.LAYER_DETAIL_BOX,
            children=[
                html.H4(f"Layer {layer}, GPU {view.device}", className="layer-title"),
                dash_table.DataTable(
                    id=ids.LAYER_SUMMARY,
                    data=summary_rows,
                    columns=[
                        {"id": c, "name": c}
                        for c in ("direction", "copies", "size", "busy", "exposed", "hidden", "stalled by these copies")
                    ],
                    style_cell=CELL,
                    style_header=HEADER,
                ),
                *why,
                html.Strong(f"Kernels of {whose} that overlapped these copies"),
                html.Ul(kernels),
                html.Strong(f"The copies ({len(copies):,} shown, in time order)"),
                dash_table.DataTable(
                    id=ids.LAYER_COPIES,
                    data=copies,
                    page_size=10,
                    columns=[
                        {"id": "direction", "name": "direction"},
                        {"id": "stream", "name": "stream", "type": "numeric"},
                        {"id": "start_ms", "name": "start (ms)", "type": "numeric", "format": {"specifier": ".3f"}},
                        {
                            "id": "duration_us",
                            "name": "duration (µs)",
                            "type": "numeric",
                            "format": {"specifier": ".1f"},
                        },
                        {"id": "size", "name": "size"},
                        {"id": "bytes", "name": "bytes", "type": "numeric", "format": {"specifier": ",d"}},
                    ],
                    style_cell=CELL,
                    style_header=HEADER,
                ),
            ],
        )

    kernels_view.register_layers(app, store)


TAB = TabView("layers", "Per layer", layout, register, run_choice=ids.LAYER_RUN)
