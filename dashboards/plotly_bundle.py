"""plotly.js for the dashboard's charts: the cartesian partial bundle instead of the full one.

Dash loads plotly.js when the first chart is shown, from the ``plotly`` package's ``plotly.min.js``
(4.8 MB: every trace type, maps and 3D included).  The charts here draw only ``bar``, ``scatter`` and
``heatmap`` traces, all in the cartesian bundle (1.5 MB, MIT, npm's ``plotly.js-cartesian-dist-min``,
which the set-up fetches into ``vendor/`` with its licence: scripts/fetch_plotly_bundle.py), which a
browser evaluates in a third of the time (0.37 s of CPU against 1.1 s in headless Chromium).  The
bundle answers the full bundle's URL only when its version is the installed ``plotly``'s, which
Dash's ``dcc.Graph`` is built for; with another ``plotly`` version, or no bundle fetched, the full
bundle is served as before.
"""

from __future__ import annotations

import re
from pathlib import Path

import dash
import flask

BUNDLE = Path(__file__).resolve().parent / "vendor" / "plotly-cartesian.min.js"
LICENSE = BUNDLE.with_name("plotly-cartesian.LICENSE")
TRACE_TYPES = frozenset(  # the bundle's trace modules (its README)
    {"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image", "pie"}
    | {"scatter", "scatterternary", "violin"}
)
FULL = "_dash-component-suites/plotly/package_data/plotly.min.js"  # where Dash's renderer loads plotly.js from


def bundle_version(path: Path = BUNDLE) -> str | None:
    """The plotly.js version in the bundle's banner (``plotly.js (cartesian - minified) v4.1.1``)."""
    try:
        with path.open("rb") as f:
            head = f.read(300).decode("ascii", "replace")
    except OSError:
        return None
    found = re.search(r"plotly\.js \(cartesian[^)]*\) v(\S+)", head)
    return found.group(1) if found else None


def installed_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


def use_bundle(app: dash.Dash) -> bool:
    """Serve the cartesian bundle at the full bundle's URL when the versions agree; whether it is served."""
    if bundle_version() != installed_version():
        return False
    path = app.config.routes_pathname_prefix + FULL  # the server side of the URL the page asks for

    @app.server.before_request
    def cartesian_plotly() -> flask.Response | None:
        if flask.request.path != path:
            return None
        return flask.send_file(BUNDLE, mimetype="application/javascript", max_age=3600)

    return True
