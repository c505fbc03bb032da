"""The Ranks tab: the selected ranks of one multi-rank job side by side, stragglers and slow links named.

The numbers are ``profiler.analysis.ranks.cross_rank`` over the ranks' summaries.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import ids, selection, tab_gate
from dashboards.data import RunStore
from dashboards.figures import Figure, category_axis, esc, figure, note_figure, text_px
from dashboards.rows import View
from dashboards.selection import runs_that, selected_views
from dashboards.view import Page, TabView
from dashboards.widgets import dropdown, graph
from profiler.stored.summary import RunSummary
from profiler.units import natural_key, time_unit


def rank_heatmap(summaries: list[RunSummary], policy: str | None) -> Figure:
    """Rank by layer: exposed copy time of each rank's layers, for one policy."""
    runs = sorted((s for s in summaries if s.policy == policy and s.rank is not None), key=lambda s: s.rank)
    if not runs:
        return note_figure("Select runs that are ranks of one job (a rank in their name or manifest).")
    layers = sorted({n for s in runs for n in s.layers}, key=natural_key)
    if not layers:
        return note_figure("These ranks have no layers (layer=N ranges or XLA thunks under a named layer scope).")
    values = [[s.layers[n].offload["exposed_ns"] if n in s.layers else None for n in layers] for s in runs]
    name, div = time_unit([v for row in values for v in row])
    heat = {
        "type": "heatmap",
        "z": [[None if v is None else v / div for v in row] for row in values],
        "x": [esc(n) for n in layers],
        "y": [f"rank {s.rank}" for s in runs],
        "colorscale": "Oranges",
        "colorbar": {"title": {"text": f"exposed ({name})"}},
        "customdata": [[s.rank] * len(layers) for s in runs],
        "hovertemplate": f"%{{y}}, layer %{{x}}: exposed %{{z:.3f}} {name}<extra></extra>",
    }
    xaxis, bottom = category_axis(heat["x"])
    return figure(
        [heat],
        height=max(300, 26 * len(runs) + 100 + bottom),
        margin={"t": 20, "b": bottom + 30, "l": text_px(heat["y"]) + 16},
        xaxis={**xaxis, "title": {"text": "layer"}},
        yaxis={"autorange": "reversed", "type": "category"},
    )


def layout(page: Page) -> list[Any]:
    """The tab, its policy choice filled in (hidden while no rank is selected)."""
    options, value, classes = rank_choices(page.store, page.views, None)
    return [
        html.Div(
            dropdown(ids.RANK_POLICY, "policy", options=options, value=value), id=ids.RANK_CONTROLS, className=classes
        ),
        dcc.Loading(graph(ids.RANK_HEATMAP)),
        html.Ul(id=ids.RANK_FINDINGS),
    ]


def _ranks(store: RunStore, views: list[View]) -> list[tuple[str, RunSummary]]:
    """(path, summary) of the analyzed runs among *views* that are ranks of a job, each once."""
    out, seen = [], set()
    for v in views:
        if v.rid in store.results and v.rid not in seen:
            seen.add(v.rid)
            run = store.results[v.rid].run
            if run.rank is not None:
                out.append((store.refs[v.rid].name, run))
    return out


def rank_choices(
    store: RunStore, views: list[View], current: str | None
) -> tuple[list[dict[str, str]], str | None, str]:
    """The policies of the selected ranks, the one shown (kept where possible), and the controls' classes."""
    policies = sorted({run.policy for _, run in _ranks(store, views)})
    value = current if current in policies else (policies[0] if policies else None)
    classes = "control" if policies else "control hidden"
    return [{"label": p, "value": p} for p in policies], value, classes


def tab_label(store: RunStore, views: list[View]) -> str:
    """``Ranks``, or ``Ranks (none)`` where no selected run is a rank of a job: the tab would only say so."""
    return "Ranks" if _ranks(store, views) else "Ranks (none)"


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "ranks")

    @app.callback(
        Output(ids.RANK_POLICY, "options"),
        Output(ids.RANK_POLICY, "value"),
        Output(ids.RANK_CONTROLS, "className"),
        *selection.TICKED,
        State(ids.RANK_POLICY, "value"),
        prevent_initial_call=True,
    )
    def on_rank_runs(selected, data, current):
        return rank_choices(store, selected_views(selected, data), current)

    @gate(
        Output(ids.RANK_HEATMAP, "figure"),
        Output(ids.RANK_FINDINGS, "children"),
        Input(ids.RANK_POLICY, "value"),
        *selection.TICKED,
    )
    def on_rank_policy(policy, selected, data):
        from profiler.analysis.ranks import cross_rank

        runs = [(path, run) for path, run in _ranks(store, selected_views(selected, data)) if run.policy == policy]
        if not runs:
            return (
                note_figure(
                    "None of the selected runs is a rank of a multi-rank job. Ranks come from file or folder "
                    "names (report.3.sqlite, ...-rank3-...) or the run's manifest: "
                    "profile-step analyze DIR --ranks reads a whole job. "
                    + runs_that(store, lambda r: r.rank is not None, selected_views(selected, data), "a rank")
                ),
                [],
            )
        fig = rank_heatmap([run for _, run in runs], policy)
        doc = cross_rank([{**run.to_json(), "path": path} for path, run in runs])["policies"].get(policy)
        items = []
        if doc:
            items += [
                html.Li(f"straggler rank {s['rank']}: step {s['vs_median']:.2f}x the median; " + "; ".join(s["why"]))
                for s in doc["stragglers"]
            ]
            items += [
                html.Li(
                    f"slow link? rank {s['rank']} {s['direction']} {s['gbps']:.1f} GB/s vs median "
                    f"{s['median_gbps']:.1f} GB/s"
                )
                for s in doc["sick_links"]
            ]
            items = items or [html.Li("no straggler and no slow link among these ranks")]
        return fig, items


TAB = TabView("ranks", tab_label, layout, register)
