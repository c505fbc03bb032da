"""The Dash app: runs and policies, per-layer overlap, a step's timeline, copy streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, State, dash_table, dcc, html

from dashboards import figures
from dashboards.data import RunStore
from profiler.errors import ProfilerError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
RUN_COLUMNS = [
    ("run", "run", "text"),
    ("policy", "policy", "text"),
    ("rank", "rank", "numeric"),
    ("status", "status", "text"),
    ("date", "date", "text"),
    ("device", "device", "text"),
    ("steps", "steps", "numeric"),
    ("step_ms", "median step ms", "numeric"),
    ("offload_mib", "offloaded MiB", "numeric"),
    ("exposed_ms", "exposed copy ms", "numeric"),
    ("hidden_pct", "hidden %", "numeric"),
]
FORMAT_3 = {"specifier": ".3f"}
FORMAT_1 = {"specifier": ".1f"}


def _columns() -> list[dict[str, Any]]:
    cols = []
    for cid, name, typ in RUN_COLUMNS:
        col: dict[str, Any] = {"id": cid, "name": name, "type": typ}
        if cid in ("step_ms", "exposed_ms"):
            col["format"] = FORMAT_3
        elif cid in ("offload_mib", "hidden_pct"):
            col["format"] = FORMAT_1
        cols.append(col)
    return cols


def table_rows(store: RunStore) -> list[dict[str, Any]]:
    """Rows for every run analyzed so far (errors included), in discovery order."""
    rows = []
    for rid, ref in store.refs.items():
        if rid in store.results:
            rows.append(figures.run_row(rid, ref.name, store.results[rid].summary, ref.manifest))
        elif rid in store.errors:
            rows.append(figures.error_row(rid, ref.name, store.errors[rid]))
    return rows


def _card(message: str) -> html.Div:
    return html.Div(
        [html.Strong("Cannot show this run: "), html.Span(message)],
        className="error-card",
        style={
            "border": "1px solid #d62728",
            "background": "#fff5f5",
            "padding": "8px",
            "margin": "6px 0",
            "borderRadius": "4px",
        },
    )


def _run_options(store: RunStore, ids: list[str]) -> list[dict[str, str]]:
    out = []
    for rid in ids:
        ref = store.refs[rid]
        policy = store.results[rid].summary["policy"] if rid in store.results else "?"
        out.append({"label": f"{policy} — {ref.name}", "value": rid})
    return out


def create_app(store: RunStore) -> dash.Dash:
    app = dash.Dash(__name__, title="profile-step", update_title=None)
    app.layout = html.Div(
        style={"fontFamily": "sans-serif", "margin": "12px 20px"},
        children=[
            html.H2("profile-step: are the offload copies hidden?"),
            html.Div(id="progress", style={"color": "#555", "margin": "4px 0"}),
            dcc.Interval(id="poll", interval=700, n_intervals=0),
            dash_table.DataTable(
                id="runs",
                columns=_columns(),
                data=[],
                row_selectable="multi",
                selected_rows=[],
                sort_action="native",
                filter_action="native",
                page_size=15,
                style_cell={
                    "textAlign": "left",
                    "fontSize": "13px",
                    "maxWidth": "360px",
                    "overflow": "hidden",
                    "textOverflow": "ellipsis",
                },
                style_data_conditional=[{"if": {"filter_query": "{status} = error"}, "color": "#d62728"}],
            ),
            html.Div(id="errors"),
            dcc.Tabs(
                id="tabs",
                value="policies",
                children=[
                    dcc.Tab(
                        label="Policies",
                        value="policies",
                        children=[
                            dcc.Loading(dcc.Graph(id="policy-graph")),
                        ],
                    ),
                    dcc.Tab(
                        label="Per layer",
                        value="layers",
                        children=[
                            dcc.Dropdown(id="layer-run", clearable=False, placeholder="run"),
                            dcc.Loading(dcc.Graph(id="layer-graph")),
                            html.Div(id="layer-details"),
                        ],
                    ),
                    dcc.Tab(
                        label="Timeline",
                        value="timeline",
                        children=[
                            html.Div(
                                style={"display": "flex", "gap": "8px"},
                                children=[
                                    html.Div(
                                        dcc.Dropdown(id="timeline-run", clearable=False, placeholder="run"),
                                        style={"flex": "2"},
                                    ),
                                    html.Div(
                                        dcc.Dropdown(id="timeline-step", clearable=False, placeholder="step"),
                                        style={"flex": "1"},
                                    ),
                                ],
                            ),
                            dcc.Loading(dcc.Graph(id="timeline-graph", config={"scrollZoom": True})),
                            html.Div(id="timeline-note", style={"color": "#555"}),
                        ],
                    ),
                    dcc.Tab(
                        label="Ranks",
                        value="ranks",
                        children=[
                            dcc.Dropdown(id="rank-policy", clearable=False, placeholder="policy"),
                            dcc.Loading(dcc.Graph(id="rank-heatmap")),
                            html.Ul(id="rank-findings"),
                        ],
                    ),
                    dcc.Tab(
                        label="Copy streams",
                        value="streams",
                        children=[
                            html.Div(
                                style={"display": "flex", "gap": "8px", "alignItems": "center"},
                                children=[
                                    html.Div(
                                        dcc.Dropdown(id="streams-run", clearable=False, placeholder="run"),
                                        style={"flex": "2"},
                                    ),
                                    html.Div(
                                        dcc.Dropdown(
                                            id="link-preset",
                                            clearable=False,
                                            value=900.0,
                                            options=[{"label": k, "value": v} for k, v in figures.LINKS.items()],
                                        ),
                                        style={"flex": "2"},
                                    ),
                                    dcc.Input(
                                        id="link-gbps",
                                        type="number",
                                        min=1,
                                        value=900.0,
                                        debounce=True,
                                        style={"width": "100px"},
                                    ),
                                    html.Span("GB/s"),
                                ],
                            ),
                            dcc.Loading(dcc.Graph(id="streams-graph")),
                        ],
                    ),
                ],
            ),
        ],
    )

    @app.callback(
        Output("progress", "children"),
        Output("runs", "data"),
        Output("poll", "disabled"),
        Output("runs", "selected_rows"),
        Input("poll", "n_intervals"),
        State("runs", "selected_rows"),
        State("runs", "data"),
    )
    def refresh(_n: int, selected: list[int], old: list[dict[str, Any]]):
        done, total, current = store.progress()
        rows = table_rows(store)
        finished = done >= total
        if not total:
            msg = "No runs found. Give run folders or traces: profile-step dashboard runs/ trace.sqlite"
        elif finished:
            msg = f"{total} run(s)."
        else:
            msg = f"Analyzing runs: {done}/{total} done" + (f", now {current}" if current else "") + " …"
        if len(rows) == len(old or []) and selected is not None:
            return msg, dash.no_update, finished, dash.no_update
        keep = {old[i]["id"] for i in (selected or []) if i < len(old or [])}
        # the first six stay selected as runs arrive, unless the user chose otherwise meanwhile
        automatic = sorted(selected or []) == list(range(min(len(old or []), 6)))
        new_sel = [i for i, r in enumerate(rows) if r["id"] in keep or (automatic and i < 6)]
        return msg, rows, finished, new_sel

    @app.callback(
        Output("policy-graph", "figure"),
        Output("errors", "children"),
        Output("layer-run", "options"),
        Output("timeline-run", "options"),
        Output("streams-run", "options"),
        Input("runs", "selected_rows"),
        State("runs", "data"),
    )
    def on_select(selected: list[int], rows: list[dict[str, Any]]):
        ids = [rows[i]["id"] for i in (selected or []) if i < len(rows or [])]
        good, cards = [], []
        for rid in ids:
            try:
                good.append((rid, store.get(rid).summary))
            except ProfilerError as exc:
                cards.append(_card(str(exc)))
        labels = figures.unique_labels([s["policy"] for _, s in good], [store.refs[r].name for r, _ in good])
        fig = figures.policy_figure([(lab, s) for lab, (_, s) in zip(labels, good, strict=True)])
        opts = _run_options(store, [rid for rid, _ in good])
        return fig, cards, opts, opts, opts

    for dd in ("layer-run", "timeline-run", "streams-run"):

        @app.callback(Output(dd, "value"), Input(dd, "options"), State(dd, "value"))
        def default_run(options: list[dict[str, str]], value: str | None):
            values = [o["value"] for o in options or []]
            return value if value in values else (values[0] if values else None)

    def selected_summaries(selected: list[int], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i in selected or []:
            if i < len(rows or []) and rows[i]["id"] in store.results:
                out.append({**store.results[rows[i]["id"]].summary, "path": store.refs[rows[i]["id"]].name})
        return out

    @app.callback(
        Output("rank-policy", "options"),
        Output("rank-policy", "value"),
        Input("runs", "selected_rows"),
        State("runs", "data"),
        State("rank-policy", "value"),
    )
    def on_rank_runs(selected: list[int], rows: list[dict[str, Any]], current: str | None):
        ranked = [s for s in selected_summaries(selected, rows) if s.get("rank") is not None]
        policies = sorted({s["policy"] for s in ranked})
        value = current if current in policies else (policies[0] if policies else None)
        return [{"label": p, "value": p} for p in policies], value

    @app.callback(
        Output("rank-heatmap", "figure"),
        Output("rank-findings", "children"),
        Input("rank-policy", "value"),
        Input("runs", "selected_rows"),
        State("runs", "data"),
    )
    def on_rank_policy(policy: str | None, selected: list[int], rows: list[dict[str, Any]]):
        from profiler.analysis.ranks import cross_rank

        runs = [s for s in selected_summaries(selected, rows) if s.get("rank") is not None and s["policy"] == policy]
        fig = figures.rank_heatmap(runs, policy)
        doc = cross_rank(runs)["policies"].get(policy) if runs else None
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

    @app.callback(Output("layer-graph", "figure"), Input("layer-run", "value"))
    def on_layer_run(rid: str | None):
        if not rid:
            return figures.layer_figure({"layers": {}})
        return figures.layer_figure(store.get(rid).summary)

    @app.callback(Output("layer-details", "children"), Input("layer-graph", "clickData"), State("layer-run", "value"))
    def on_layer_click(click: dict[str, Any] | None, rid: str | None):
        if not click or not rid:
            return html.P("Click a layer's bar to see its copies and the kernels that hid them.")
        layer = click["points"][0].get("customdata")
        run = store.get(rid)
        info = run.summary["layers"].get(layer)
        if info is None:
            return html.P("Unknown layer.")
        kernels = [
            html.Li(f"{t['name']}: {t['overlap_ns'] / 1e6:.3f} ms over {t['kernels']} kernel(s)")
            for t in info["top_kernels"]
        ] or [html.Li("no kernel overlapped these copies")]
        copies = figures.layer_copies(run.ops, layer)
        off = info["offload"]
        return html.Div(
            id="layer-detail-box",
            children=[
                html.H4(f"Layer {layer}"),
                html.P(
                    f"offload: {off['count']} copies, {off['bytes'] / 2**20:.2f} MiB, "
                    f"busy {off['busy_ns'] / 1e6:.3f} ms, exposed {off['exposed_ns'] / 1e6:.3f} ms"
                ),
                html.Strong("Kernels that overlapped them"),
                html.Ul(kernels),
                dash_table.DataTable(
                    id="layer-copies",
                    data=copies,
                    page_size=10,
                    columns=[
                        {
                            "id": c,
                            "name": c,
                            "type": "numeric" if c != "direction" else "text",
                            "format": {"specifier": ".3f"} if c in ("start_ms", "duration_us", "MiB") else None,
                        }
                        for c in ("direction", "device", "stream", "start_ms", "duration_us", "MiB")
                    ],
                ),
            ],
        )

    @app.callback(Output("timeline-step", "options"), Output("timeline-step", "value"), Input("timeline-run", "value"))
    def on_timeline_run(rid: str | None):
        if not rid:
            return [], None
        steps = store.get(rid).ranges
        names = steps.filter(steps["lane"] == "step")["name"].to_list()
        opts = [{"label": "whole capture", "value": "__all__"}] + [{"label": n, "value": n} for n in names]
        return opts, (names[len(names) // 2] if names else "__all__")

    @app.callback(
        Output("timeline-graph", "figure"),
        Output("timeline-note", "children"),
        Input("timeline-step", "value"),
        State("timeline-run", "value"),
    )
    def on_timeline_step(step: str | None, rid: str | None):
        if not rid or step is None:
            return figures.go.Figure(), ""
        run = store.get(rid)
        window = None
        if step != "__all__":
            r = run.ranges.filter((run.ranges["lane"] == "step") & (run.ranges["name"] == step))
            if r.height:
                window = (int(r["start"][0]), int(r["end"][0]))
        fig, stats = figures.timeline_figure(run.ops, run.ranges, window)
        note = f"{stats['events']} GPU events in the window, {stats['drawn_segments']} segments drawn"
        if stats["downsampled_lanes"]:
            note += f"; lanes merged to screen resolution: {', '.join(stats['downsampled_lanes'])}"
        return fig, note

    @app.callback(Output("link-gbps", "value"), Input("link-preset", "value"))
    def on_preset(v: float):
        return v

    @app.callback(Output("streams-graph", "figure"), Input("streams-run", "value"), Input("link-gbps", "value"))
    def on_streams(rid: str | None, gbps: float | None):
        if not rid:
            return figures.go.Figure()
        return figures.streams_figure(store.get(rid).summary, float(gbps or 900.0))

    return app


def default_paths(root: Path) -> list[Path]:
    """The embedded default: the project's sample_traces/ and the user's runs/."""
    return [p for p in (root / "sample_traces", Path.cwd() / "runs") if p.exists()]


def serve(
    paths: list[Path],
    host: str = "127.0.0.1",
    port: int = 8050,
    allow_remote: bool = False,
    nsys: str | None = None,
    debug: bool = False,
) -> None:
    if host not in LOCAL_HOSTS and not allow_remote:
        raise ProfilerError(
            f"refusing to listen on {host}: the dashboard serves your traces; "
            "pass --allow-remote to bind anything but localhost"
        )
    for p in paths:
        if not p.exists():
            raise ProfilerError(f"{p}: no such file or folder")
    store = RunStore([p.resolve() for p in paths], nsys)
    store.warm_up()
    app = create_app(store)
    print(
        f"profile-step dashboard: {len(store.refs)} run(s) from {', '.join(map(str, paths)) or 'nothing'}; "
        f"open http://{host}:{port}/",
        flush=True,
    )
    app.run(host=host, port=port, debug=debug)
