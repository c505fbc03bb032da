"""The Dash app: runs and policies, findings, the policy trade, a what-if for another host link,
per-layer overlap, a step's timeline, ranks, copy streams.

Every chart stands for one (run, GPU) row of the runs table (``rows.View``).  A tab's figure is
computed only while the tab is shown; the page's first view comes with the table filled in.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dash
import flask
from dash import Input, Output, dcc, html

from dashboards import (
    findings_view,
    ids,
    layers_view,
    plotly_bundle,
    ranks_view,
    rows,
    runs_view,
    selection,
    streams_view,
    tab_gate,
    timeline_view,
    trade,
    whatif_view,
)
from dashboards.data import RunStore
from dashboards.runs_view import all_rows, table_rows  # noqa: F401 (table_rows: kept importable from app)
from dashboards.view import Page, TabView
from profiler.errors import ProfilerError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
DASH_FETCHES = ("_dash-layout", "_dash-dependencies")
FIRST_VIEW_CHUNKS = tuple(f"_dash-component-suites/dash/dash_table/async-{c}.js" for c in ("table", "highlight"))
WARM_TICKS = 30  # plotly.js loads when the first view is drawn, or after 3 s at the latest
# the tabs, in their order: a new tab is a module with a TabView and one line here
TABS: tuple[TabView, ...] = (
    runs_view.POLICIES,
    findings_view.TAB,
    trade.TAB,
    whatif_view.TAB,
    layers_view.TAB,
    timeline_view.TAB,
    ranks_view.TAB,
    streams_view.TAB,
)
PER_RUN = tuple(t for t in TABS if t.per_run)
# Dash's first script, @babel/polyfill (core-js 2), replaces some of the browser's own functions with
# slower JavaScript ones: the trims, parseFloat and parseInt, which it judges non-compliant because
# the browser's no longer strip U+180E (Unicode stopped counting it as a space in 2013).  plotly.js
# calls them for every point, label and class it draws (a tenth of the timeline's drawing).  The
# browser's own are kept before Dash's scripts and put back after them, before the page is drawn.
NATIVES = (
    *(("String.prototype", f) for f in ("trim", "trimStart", "trimEnd", "trimLeft", "trimRight")),
    *((owner, f) for owner in ("window", "Number") for f in ("parseFloat", "parseInt")),
)
KEEP_NATIVES = (
    "<script>window.__natives = ["
    + ", ".join(f'[{owner}, "{name}", {owner}.{name}]' for owner, name in NATIVES)
    + "];</script>"
)
PUT_BACK_NATIVES = (
    "<script>(window.__natives || []).forEach(function (n) { if (n[0][n[1]] !== n[2]) "
    "Object.defineProperty(n[0], n[1], {value: n[2], writable: true, configurable: true}); });</script>"
)


def preloads(prefix: str) -> str:
    """Links that start, with the page's scripts, what Dash's renderer asks for only once they have run:
    the layout (the first view), the callbacks, and the runs table's code (a chunk loaded at its
    first drawing)."""
    fetches = [f'<link rel="preload" href="{prefix}{p}" as="fetch" crossorigin="anonymous">' for p in DASH_FETCHES]
    chunks = [f'<link rel="preload" href="{prefix}{p}" as="script">' for p in FIRST_VIEW_CHUNKS]
    return "\n".join(fetches + chunks)


def create_app(store: RunStore) -> dash.Dash:
    app = dash.Dash(__name__, title="profile-step", update_title=None)

    @app.server.before_request
    def refuse_climbing() -> None:
        """A path with a ``..`` segment (as sent or percent-encoded) gets 404 before any route sees it
        (Dash's page route answered 200 and its component route 500)."""
        if ".." in flask.request.path.split("/"):
            flask.abort(404)

    plotly_bundle.use_bundle(app)  # the cartesian plotly.js: a third of the full one's evaluation
    app.index_string = app.index_string.replace(
        "{%css%}", "{%css%}" + preloads(app.config.requests_pathname_prefix)
    ).replace("{%scripts%}", KEEP_NATIVES + "{%scripts%}" + PUT_BACK_NATIVES)

    def layout() -> html.Div:
        """The page with its first view filled in: no callback stands between loading and seeing."""
        raw = all_rows(store)
        views = selected_views(rows.default_selection(raw), rows.table(raw)[1])
        sel = runs_view.follow_rows(store, views, [None] * len(PER_RUN))
        page = Page(store, views, sel, {t.name: v for t, v in zip(PER_RUN, sel["values"], strict=True)})
        return html.Div(
            className="page",
            children=[
                html.H2("profile-step: are the offload copies hidden?", className="page-title"),
                *runs_view.table_part(store, raw, sel),
                # plotly.js loads once the first view is drawn, so that the other views open at once
                dcc.Interval(id=ids.WARM, interval=100, max_intervals=WARM_TICKS),
                html.Div(id=ids.PLOTLY_WARM, className="hidden"),
                html.Div(sel["errors"], id=ids.ERRORS),
                dcc.Store(id=ids.RUN_DEFAULT, data=sel["first"]),
                *tab_gate.stores(tuple(t.name for t in TABS)),
                dcc.Tabs(id=ids.TABS, value=TABS[0].name, children=[t.component(page) for t in TABS]),
            ],
        )

    # In the browser, every 0.1 s until the runs table has rows (the first view is drawn; at most
    # WARM_TICKS ticks): a hidden graph, whose first drawing loads plotly.js, and the timer stops.
    app.clientside_callback(
        "function(n) { if (!document.querySelector('#runs tr') && n < "
        + str(WARM_TICKS)
        + ") { return [window.dash_clientside.no_update, false]; }"
        " return [{type: 'Graph', namespace: 'dash_core_components',"
        " props: {className: 'hidden', figure: {data: [], layout: {}}}}, true]; }",
        Output(ids.PLOTLY_WARM, "children"),
        Output(ids.WARM, "disabled"),
        Input(ids.WARM, "n_intervals"),
        prevent_initial_call=True,
    )

    tab_gate.register(app, tuple(t.name for t in TABS))
    runs_view.register(app, store, PER_RUN)
    for tab in TABS:
        tab.wire(app, store)
    app.layout = layout  # a function: each page load gets the runs analyzed so far
    return app


selected_views = selection.selected_views


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
    first: list[Path] | None = None,
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
    for p in first or []:
        if not p.exists():
            raise ProfilerError(f"--first {p}: no such file or folder")
    store = RunStore([p.resolve() for p in paths], nsys, licences)
    store.first = [p.resolve() for p in first or []]

    def preload() -> None:
        """The replays of the first view's runs' first what-if, queued (``whatif_view.start_first``: from
        their replay graphs); then their ops, read and split by GPU and by layer ahead of their first
        timeline and layer details (``Analysis.prepare``)."""
        raw = all_rows(store)
        views = selected_views(rows.default_selection(raw), rows.table(raw)[1])
        whatif_view.start_first(store, views)
        for view in views:
            if view.rid in store.results:
                store.results[view.rid].prepare(int(view.device) if view.device is not None else None)

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
    store.whatifs.start()  # the what-if process's imports while the runs are read, not at the first replay
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
        with stop_on_sigterm():
            server.run()
    except KeyboardInterrupt:
        print(file=sys.stderr)
    finally:
        server.close()
        store.close()


class Stop(SystemExit):
    """SIGTERM received: the server stops as on Ctrl-C, cleanly.  A ``SystemExit``, which waitress lets
    through wherever the signal lands: an ``Exception`` raised while its loop was closing a connection
    was taken for that connection's error and the server went on serving (the process never ended)."""


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the block by raising ``Stop`` in the main thread (so that the server and the
    what-if process are shut down and their semaphores released, never reported leaked)."""

    def stop(signum: int, frame: object) -> None:
        raise Stop

    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
