"""The Timeline tab: one step (or the whole capture) of one (run, GPU), lane by lane.

A finding's "show in timeline" button marks its ops here (``timeline-focus``).
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import figures, ids, tab_gate
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.view import Page, TabView
from dashboards.widgets import RUN_PROMPT, dropdown, graph


def layout(page: Page) -> list[Any]:
    """The tab, its run choice filled in (the step follows once the tab is shown)."""
    return [
        html.Div(
            [
                dropdown(ids.TIMELINE_RUN, "run and GPU", "60", page.options, page.runs["timeline"]),
                dropdown(ids.TIMELINE_STEP, "step"),
            ],
            className="control",
        ),
        dcc.Loading(graph(ids.TIMELINE_GRAPH, config={"scrollZoom": True, "displaylogo": False})),
        html.Div(id=ids.TIMELINE_NOTE, className="muted"),
        dcc.Store(id=ids.TIMELINE_FOCUS),  # what a finding's button asks to mark
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    @tab_gate.callback(
        app,
        "timeline",
        Output(ids.TIMELINE_STEP, "options"),
        Output(ids.TIMELINE_STEP, "value"),
        Input(ids.TIMELINE_RUN, "value"),
        State(ids.TIMELINE_STEP, "value"),
    )
    def on_timeline_run(vid, current):
        if not vid:
            return [], None
        ranges = store.get(View.parse(vid).rid).ranges
        names = ranges.filter(ranges["lane"] == "step")["name"].to_list()
        opts = [{"label": "whole capture", "value": "__all__"}] + [{"label": n, "value": n} for n in names]
        if current in names or current == "__all__":
            return opts, current
        return opts, (names[len(names) // 2] if names else "__all__")

    @tab_gate.callback(
        app,
        "timeline",
        Output(ids.TIMELINE_GRAPH, "figure"),
        Output(ids.TIMELINE_NOTE, "children"),
        Input(ids.TIMELINE_STEP, "value"),
        Input(ids.TIMELINE_FOCUS, "data"),
        State(ids.TIMELINE_RUN, "value"),
    )
    def on_timeline_step(step, mark, vid):
        if not vid or step is None:
            return figures.note_figure(RUN_PROMPT), ""
        view = View.parse(vid)
        run = store.get(view.rid)
        window = None
        if step != "__all__":
            r = run.ranges.filter((run.ranges["lane"] == "step") & (run.ranges["name"] == step))
            if r.height:
                window = (int(r["start"][0]), int(r["end"][0]))
        device = int(view.device) if view.device is not None else None
        focus = mark["focus"] if isinstance(mark, dict) and mark.get("vid") == vid else None
        fig, stats = figures.timeline_figure(run.device_ops(device), run.ranges, window, focus=focus)
        if not stats["events"]:
            return fig, ""
        note = f"{stats['events']:,} GPU ops of GPU {view.device} in the window. {figures.TIMELINE_SHADES}"
        if focus:
            what = focus.split(":", 1)[1].replace("|", ", ")
            note += (
                f" ▼ marks the {stats['marked']:,} ops of the finding ({what}) in the window."
                if stats["marked"]
                else f" None of the finding's ops ({what}) runs in this window: pick 'whole capture'."
            )
        if stats["occupancy_lanes"]:
            note += (
                " Lanes with too many ops to draw one by one are drawn as occupancy: the filled height is the share of "
                f"each of the {stats['bins']:,} time bins during which something ran on the stream "
                f"(an empty outline is 0%, a full band 100%): {', '.join(stats['occupancy_lanes'])}."
            )
        if store.refs[view.rid].synthetic:
            note += " SYNTHETIC run: a model of a step, not a measurement."
        return fig, note


TAB = TabView("timeline", "Timeline", layout, register, run_choice=ids.TIMELINE_RUN)
