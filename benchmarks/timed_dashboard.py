"""The dashboard with every callback request timed on the server: ``python -m dashboards``'s arguments,
and one JSON line per ``_dash-update-component`` (and ``_dash-layout``) request appended to ``$DASH_TIMES``:

    {"outputs": "layer-graph.figure...", "wall_ms": 12.3, "cpu_ms": 11.9, "at_s": 4.2}

(``cpu_ms``: the serving thread's CPU time; ``at_s``: seconds after the server's start.)
``bench_dashboard.py --server-times`` starts the server so and sums the lines per view.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import flask  # noqa: E402

from dashboards import app as dash_app  # noqa: E402
from profiler.cli import main  # noqa: E402

STARTED = time.perf_counter()
_LOCK = threading.Lock()


def outputs_of(body: Any) -> str:
    """The callback's outputs as Dash names them (``id.prop``, several joined by ``..``)."""
    return str(body.get("output", "?")) if isinstance(body, dict) else "?"


def timed(create: Any, out: Path) -> Any:
    """``create_app`` with a timer around each callback request, written to *out*."""

    def create_timed(store: Any) -> Any:
        app = create(store)

        @app.server.before_request
        def start() -> None:
            flask.g.t0 = (time.perf_counter(), time.thread_time())

        @app.server.after_request
        def stop(response: flask.Response) -> flask.Response:
            path = flask.request.path
            if path.endswith(("_dash-update-component", "_dash-layout")) and "t0" in flask.g:
                w0, c0 = flask.g.t0
                body = flask.request.get_json(silent=True) if path.endswith("component") else {"output": "_dash-layout"}
                line = {
                    "outputs": outputs_of(body),
                    "wall_ms": round(1000 * (time.perf_counter() - w0), 2),
                    "cpu_ms": round(1000 * (time.thread_time() - c0), 2),
                    "at_s": round(time.perf_counter() - STARTED, 2),
                }
                with _LOCK, out.open("a") as f:
                    f.write(json.dumps(line) + "\n")
            return response

        return app

    return create_timed


if __name__ == "__main__":
    dash_app.create_app = timed(dash_app.create_app, Path(os.environ["DASH_TIMES"]))
    sys.exit(main(["dashboard", *sys.argv[1:]]))
