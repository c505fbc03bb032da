"""The Dash app: runs and policies, findings, the policy trade, a what-if for another host link,
per-layer overlap, a step's timeline, ranks, copy streams.

Every chart stands for one (run, GPU) row of the runs table (``rows.View``).  A tab's figure is
computed only while the tab is shown; the page's first view comes with the table filled in.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, State, dash_table, dcc, html

from dashboards import (
    bars,
    copy_numbers,
    figures,
    findings_view,
    kernels_view,
    layers_view,
    plan_view,
    ranks_view,
    rows,
    selection,
    streams_view,
    timeline_view,
    trade,
    whatif_view,
    widgets,
)
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.styles import ERROR_COLOR, FONT_FAMILY, MUTED, PAGE
from profiler.errors import ProfilerError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
TABS = ("policies", "findings", "trade", "whatif", "layers", "timeline", "ranks", "streams")


def all_rows(store: RunStore) -> list[dict[str, Any]]:
    """Rows for every run analyzed so far (errors included), in discovery order."""
    out = []
    for rid, ref in store.refs.items():
        if rid in store.results:
            summary = store.results[rid].summary
            out += [rows.raw_row(ref, summary, v.device) for v in rows.views(ref, summary)]
        elif ref.no_trace:
            out.append(rows.no_trace_row(ref))
        elif rid in store.errors:
            out.append(rows.error_row(ref, store.errors[rid]))
    return out


def table_rows(store: RunStore) -> list[dict[str, Any]]:
    """The rows as the browser gets them (units applied, private keys dropped)."""
    return rows.table(all_rows(store))[1]


def create_app(store: RunStore) -> dash.Dash:
    app = dash.Dash(__name__, title="profile-step", update_title=None)

    def view_label(view: View) -> tuple[str, str]:
        ref = store.refs[view.rid]
        summary = store.results[view.rid].summary
        return rows.label(ref, summary, view.device), rows.full_name(ref, summary, view.device)

    def options(view_ids: list[str]) -> list[dict[str, Any]]:
        out = []
        for vid in view_ids:
            view = View.parse(vid)
            if view.rid in store.results:
                short, full = view_label(view)
                out.append({"label": html.Span(short, title=full), "value": vid, "search": full})
        return out

    def layout() -> html.Div:
        """The page with its first view filled in: no callback stands between loading and seeing."""
        raw = all_rows(store)
        columns, data, tips = rows.table(raw)
        selected = rows.default_selection(raw)
        done, total, _ = store.progress()
        views = selected_views(selected, data)
        sel = follow_rows(views, [None, None, None])
        opts, (layer_run, timeline_run, streams_run) = sel["options"], sel["values"]
        rank_opts, rank_value, rank_style = ranks_view.rank_choices(store, views, None)
        return html.Div(
            style=PAGE,
            children=[
                html.H2("profile-step: are the offload copies hidden?", style={"margin": "4px 0"}),
                html.Div(_progress(done, total, None, len(store.plans)), id="progress", style=MUTED),
                dcc.Interval(id="poll", interval=700, n_intervals=0, disabled=done >= total),
                dash_table.DataTable(
                    id="runs",
                    columns=columns,
                    data=data,
                    tooltip_data=tips,
                    tooltip_header=rows.header_tooltips(columns),
                    tooltip_delay=300,
                    tooltip_duration=None,
                    row_selectable="multi",
                    selected_rows=selected,
                    sort_action="native",
                    filter_action="native",
                    page_action="none",
                    style_table={"overflowX": "auto", "maxHeight": "340px", "overflowY": "auto"},
                    style_header={"fontWeight": "bold", "whiteSpace": "normal", "height": "auto"},
                    style_cell={
                        "textAlign": "left",
                        "fontSize": "13px",
                        "fontFamily": FONT_FAMILY,
                        "maxWidth": "280px",
                        "overflow": "hidden",
                        "textOverflow": "ellipsis",
                        "padding": "3px 6px",
                    },
                    style_cell_conditional=[{"if": {"column_id": "device"}, "maxWidth": "360px"}],
                    style_data_conditional=[
                        {"if": {"filter_query": "{status} = error"}, "color": ERROR_COLOR},
                        {"if": {"filter_query": "{source} = 'SYNTHETIC demo'"}, "fontStyle": "italic"},
                    ],
                ),
                html.Div(rows.SOURCE_NOTE, id="table-note", style=MUTED),
                html.Div(sel["provenance"], id="provenance", style=MUTED),
                # plotly.js (5 MB) loads after the first view, so that the other views open at once
                dcc.Interval(id="warm", interval=600, max_intervals=1),
                html.Div(id="plotly-warm", style={"display": "none"}),
                html.Div(sel["errors"], id="errors"),
                dcc.Tabs(
                    id="tabs",
                    value="policies",
                    children=[
                        dcc.Tab(
                            label="Policies",
                            value="policies",
                            children=[
                                html.Div(sel["bars"], id="policy-bars"),
                                html.Div(kernels_view.policy_panel(store, views), id="policy-kernels"),
                            ],
                        ),
                        dcc.Tab(
                            id="findings-tab",
                            label=findings_view.count_label(store, views),
                            value="findings",
                            children=findings_view.layout(),
                        ),
                        dcc.Tab(label="Policy trade", value="trade", children=trade.layout(list(store.plans.values()))),
                        dcc.Tab(label="What-if", value="whatif", children=whatif_view.layout()),
                        layers_view.tab(opts, layer_run),
                        timeline_view.tab(opts, timeline_run),
                        ranks_view.tab(rank_opts, rank_value, rank_style),
                        streams_view.tab(store, opts, streams_run),
                    ],
                ),
            ],
        )

    @app.callback(
        Output("progress", "children"),
        Output("runs", "columns"),
        Output("runs", "data"),
        Output("runs", "tooltip_data"),
        Output("poll", "disabled"),
        Output("runs", "selected_rows"),
        Input("poll", "n_intervals"),
        State("runs", "selected_rows"),
        State("runs", "data"),
        prevent_initial_call=True,
    )
    def refresh(_n: int, selected: list[int], old: list[dict[str, Any]]):
        done, total, current = store.progress()
        raw = all_rows(store)
        finished = done >= total
        msg = _progress(done, total, current, len(store.plans))
        if len(raw) == len(old or []):
            return msg, dash.no_update, dash.no_update, dash.no_update, finished, dash.no_update
        columns, data, tips = rows.table(raw)
        keep = {old[i]["id"] for i in (selected or []) if i < len(old or [])}
        before = [r for r in raw if r["id"] in {o["id"] for o in old or []}]
        untouched = keep == {before[i]["id"] for i in rows.default_selection(before)} if before else True
        # the first view's choice follows the runs as they come in, until the user picks rows
        new_sel = rows.default_selection(raw) if untouched else [i for i, r in enumerate(data) if r["id"] in keep]
        return msg, columns, data, tips, finished, new_sel

    def follow_rows(views: list[View], current: list[str | None]) -> dict[str, Any]:
        """Everything that follows from the selected rows: the policy figure, error cards, provenance,
        and the run choices (with their values kept where possible) of the per-run tabs."""
        good, cards, items, prov, seen, with_copies = [], [], [], [], set(), set()
        for view in views:
            if store.refs[view.rid].no_trace:  # its row says why; nothing to draw
                continue
            try:
                summary = store.get(view.rid).summary
            except ProfilerError as exc:
                cards.append(widgets.card(str(exc)))
                continue
            ref = store.refs[view.rid]
            good.append(view.id)
            off = (summary["devices"].get(view.device) or {}) if view.device else {}
            if (off.get("offload") or {}).get("count"):
                with_copies.add(view.id)
            items.append(
                figures.Item(
                    label=rows.label(ref, summary, view.device),
                    full=rows.full_name(ref, summary, view.device),
                    copies={d: off.get(d) or copy_numbers.ZERO for d in ("h2d", "d2h", "offload")},
                    step_ns=summary["median_step_ns"],
                    peak_bytes=(summary.get("peak_memory_bytes") or {}).get(view.device),
                    synthetic=ref.synthetic,
                    waits=copy_numbers.waits(summary, view.device),
                    stalled=copy_numbers.stalled(summary, view.device),
                )
            )
            if ref.provenance is not None and ref.id not in seen:
                seen.add(ref.id)
                p = ref.provenance
                prov.append(
                    html.Li(
                        [
                            html.Strong(rows.short_id(ref)),
                            f": real trace from {p.repo} (commit {p.commit[:10]}, {p.licence}), {p.path}. "
                            f"{p.description}",
                        ]
                    )
                )
        # a per-run view opens on the first selected row with copies (else the first row)
        first = next((v for v in good if v in with_copies), good[0] if good else None)
        values = [v if v in good else first for v in current]
        failed = [widgets.card(msg) for rid, msg in list(store.errors.items()) if rid not in {v.rid for v in views}]
        return {
            "bars": bars.policy_table(items),
            "errors": cards + failed,  # every run that cannot be read, selected or not
            "provenance": [
                html.Strong("Real traces from public repositories (not made by this project):"),
                html.Ul(prov),
            ]
            if prov
            else [],
            "options": options(good),
            "values": values,
        }

    @app.callback(
        Output("policy-bars", "children"),
        Output("errors", "children"),
        Output("provenance", "children"),
        Output("layer-run", "options"),
        Output("layer-run", "value"),
        Output("timeline-run", "options"),
        Output("timeline-run", "value"),
        Output("streams-run", "options"),
        Output("streams-run", "value"),
        Input("runs", "selected_rows"),
        State("runs", "data"),
        State("layer-run", "value"),
        State("timeline-run", "value"),
        State("streams-run", "value"),
        prevent_initial_call=True,
    )
    def on_select(selected, data, *current):
        sel = follow_rows(selected_views(selected, data), list(current))
        opts, (v1, v2, v3) = sel["options"], sel["values"]
        return sel["bars"], sel["errors"], sel["provenance"], opts, v1, opts, v2, opts, v3

    @app.callback(Output("plotly-warm", "children"), Input("warm", "n_intervals"), prevent_initial_call=True)
    def warm(_n):
        return dcc.Graph(figure=figures.note_figure(""), style={"display": "none"})

    findings_view.register(app, store)
    trade.register(app, store)
    plan_view.register(app, store)
    whatif_view.register(app, store)
    kernels_view.register(app, store)
    layers_view.register(app, store)
    timeline_view.register(app, store)
    ranks_view.register(app, store)
    streams_view.register(app, store)
    app.layout = layout  # a function: each page load gets the runs analyzed so far
    return app


selected_views = selection.selected_views


def _progress(done: int, total: int, current: str | None, plans: int = 0) -> str:
    if not total:
        return "No runs found. Give run folders or traces: profile-step dashboard runs/ trace.sqlite" + (
            f" ({plans} profile-step plan(s): see Policy trade)" if plans else ""
        )
    if done >= total:
        return f"{total} run(s); one row per GPU. Pick rows to compare them below."
    return f"Analyzing runs: {done}/{total} done" + (f", now {current}" if current else "") + " …"


def default_paths(root: Path) -> list[Path]:
    """The embedded default: the project's sample_traces/, the user's runs/ and plans/ (profile-step plan)."""
    return [p for p in (root / "sample_traces", Path.cwd() / "runs", Path.cwd() / "plans") if p.exists()]


def serve(
    paths: list[Path],
    host: str = "127.0.0.1",
    port: int = 8050,
    allow_remote: bool = False,
    nsys: str | None = None,
    debug: bool = False,
    licences: tuple[str, ...] | None = None,
) -> None:
    """Serve the app with waitress (a production WSGI server; no request log): one line says where."""
    if host not in LOCAL_HOSTS and not allow_remote:
        raise ProfilerError(
            f"refusing to listen on {host}: the dashboard serves your traces; "
            "pass --allow-remote to bind anything but localhost"
        )
    for p in paths:
        if not p.exists():
            raise ProfilerError(f"{p}: no such file or folder")
    store = RunStore([p.resolve() for p in paths], nsys, licences)

    def preload() -> None:
        """The ops of the first view's runs, read and split by GPU ahead of their first timeline."""
        raw = all_rows(store)
        for i in rows.default_selection(raw):
            view = View.parse(raw[i]["id"])
            if view.rid in store.results:
                store.results[view.rid].device_ops(int(view.device) if view.device is not None else None)

    store.warm_up(then=preload)
    app = create_app(store)
    if debug:
        app.run(host=host, port=port, debug=True)
        return
    from waitress.server import create_server

    logging.getLogger("waitress").setLevel(logging.ERROR)
    try:
        server = create_server(app.server, host=host, port=port, threads=8, ident="profile-step")
    except OSError as exc:
        raise ProfilerError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); try --port") from None
    where = ", ".join(map(str, paths)) or "nothing"
    shown = f"[{host}]" if ":" in host else host
    print(
        f"profile-step dashboard: {len(store.refs)} run(s)"
        + (f" and {len(store.plans)} plan(s)" if store.plans else "")
        + f" from {where}; "
        f"open http://{shown}:{getattr(server, 'effective_port', port)}/ (Ctrl-C to stop)",
        flush=True,
    )
    try:
        server.run()
    except KeyboardInterrupt:
        print(file=sys.stderr)
    finally:
        server.close()
