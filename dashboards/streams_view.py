"""The Copy streams tab: one (run, GPU)'s copy streams against a host link's rate (its own, or one picked).

The streams are the run summary's ``streams`` for the GPU; the default link comes from the GPU's model.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import figures, ids, links, selection, tab_gate
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.view import Page, TabView
from dashboards.widgets import RUN_PROMPT, dropdown, graph

LINK_OPTIONS = [{"label": links.label(lk), "value": lk.key} for lk in links.LINKS] + [
    {"label": "custom (GB/s per direction)", "value": links.CUSTOM}
]


def link_choice(store: RunStore, vid: str | None) -> tuple[str | None, float | None, str]:
    """The link drawn by default for a (run, GPU): from its device model, and why."""
    if not vid:
        return None, None, ""
    view = View.parse(vid)
    link, why = links.run_link(store.get(view.rid).run, view.device)
    return link.key, link.gbps, f"Link drawn: {why}. Pick another, or a custom rate, to compare."


def layout(page: Page) -> list[Any]:
    """The tab, its run choice and that run's link filled in."""
    value = page.runs["streams"]
    link_key, link_gbps, link_note = link_choice(page.store, value)
    return [
        html.Div(
            [
                dropdown(ids.STREAMS_RUN, "run and GPU", "45", page.options, value),
                html.Div(
                    dcc.Dropdown(id=ids.LINK_PRESET, clearable=False, value=link_key, options=LINK_OPTIONS),
                    className="select select-35",
                ),
                dcc.Input(
                    id=ids.LINK_GBPS,
                    type="number",
                    value=link_gbps,
                    min=0.1,
                    debounce=True,
                    disabled=True,
                    className="number",
                ),
                html.Span("GB/s"),
            ],
            className="control",
        ),
        html.Div(link_note, id=ids.LINK_NOTE, className="muted"),
        dcc.Loading(graph(ids.STREAMS_GRAPH)),
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    @app.callback(
        Output(ids.LINK_PRESET, "value"),
        Output(ids.LINK_GBPS, "value"),
        Output(ids.LINK_NOTE, "children"),
        Input(ids.STREAMS_RUN, "value"),
        prevent_initial_call=True,
    )
    def on_streams_run(vid):
        key, gbps, note = link_choice(store, vid)
        return (key, gbps, note) if vid else (dash.no_update, dash.no_update, "")

    @app.callback(
        Output(ids.LINK_GBPS, "disabled"),
        Output(ids.LINK_GBPS, "value", allow_duplicate=True),
        Input(ids.LINK_PRESET, "value"),
        prevent_initial_call=True,
    )
    def on_preset(key):
        if key == links.CUSTOM or key is None:
            return False, dash.no_update
        return True, links.BY_KEY[key].gbps

    @tab_gate.callback(
        app,
        "streams",
        Output(ids.STREAMS_GRAPH, "figure"),
        Input(ids.STREAMS_RUN, "value"),
        Input(ids.LINK_GBPS, "value"),
        State(ids.LINK_PRESET, "value"),
    )
    def on_streams(vid, gbps, key):
        if not vid:
            return figures.note_figure(RUN_PROMPT)
        view = View.parse(vid)
        streams = store.get(view.rid).run.streams.get(view.device, []) if view.device else []
        name = links.BY_KEY[key].name if key in links.BY_KEY else "custom link"
        short, _ = selection.view_label(store, view)
        title = figures.esc(short)
        if store.refs[view.rid].synthetic:
            title += " (SYNTHETIC: a model, not a measurement)"
        fig = figures.streams_figure(streams, float(gbps or links.BY_KEY[links.FALLBACK].gbps), name, title)
        return fig


TAB = TabView("streams", "Copy streams", layout, register, run_choice=ids.STREAMS_RUN)
