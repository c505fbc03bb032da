"""The plotly.js the dashboard serves: the cartesian bundle, only for the plotly version it matches.

Every drawn trace's type being one of the bundle's modules is checked in the browser tests
(``test_dashboard.check_page``: plotly draws an unknown type as a scatter, silently)."""

from __future__ import annotations

import os

import pytest

from dashboards import plotly_bundle
from dashboards.app import create_app
from dashboards.data import RunStore

URL = "/" + plotly_bundle.FULL


@pytest.fixture
def bundle():
    """The fetched bundle (scripts/setup.sh fetches it; CI must have it, elsewhere its absence skips)."""
    if plotly_bundle.bundle_version() is None:
        if os.environ.get("CI"):
            pytest.fail(f"no cartesian plotly.js in {plotly_bundle.BUNDLE}: run scripts/fetch_plotly_bundle.py")
        pytest.skip("plotly.js's cartesian bundle not fetched (scripts/fetch_plotly_bundle.py)")
    return plotly_bundle.BUNDLE


def test_the_cartesian_bundle_answers_plotlys_url(bundle):
    app = create_app(RunStore([]))
    got = app.server.test_client().get(URL)
    assert got.status_code == 200 and got.mimetype == "application/javascript"
    head = got.data[:200].decode()
    # the banner of plotly.js-cartesian-dist-min, the version of the installed plotly (what dcc.Graph expects)
    assert f"plotly.js (cartesian - minified) v{plotly_bundle.installed_version()}" in head
    assert len(got.data) == bundle.stat().st_size


def test_another_plotly_version_keeps_the_full_bundle(monkeypatch, bundle):
    monkeypatch.setattr(plotly_bundle, "installed_version", lambda: "0.0.1")
    app = create_app(RunStore([]))
    got = app.server.test_client().get(URL)
    assert got.status_code == 200
    assert b"(cartesian" not in got.data[:200]  # Dash's own plotly.min.js, every trace type
    assert len(got.data) > 2 * bundle.stat().st_size


def test_the_bundle_names_its_version(tmp_path):
    fake = tmp_path / "b.js"
    fake.write_text("/**\n* plotly.js (cartesian - minified) v9.8.7\n*/\n")
    assert plotly_bundle.bundle_version(fake) == "9.8.7"
    fake.write_text("/** plotly.js v9.8.7 */")  # the full bundle's banner: not a cartesian one
    assert plotly_bundle.bundle_version(fake) is None
    assert plotly_bundle.bundle_version(tmp_path / "missing.js") is None
