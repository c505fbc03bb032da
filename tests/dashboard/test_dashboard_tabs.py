"""The dashboard's tabs are one list (``app.TABS``): the tabs a finding names are in it, and what the
page derives from it (the gate's stores, the runs table's run choices, the findings' buttons) follows it."""

from __future__ import annotations

import ast

import pytest

from dashboards import app, findings_view, ids
from dashboards.data import RunStore
from tests.helpers.paths import ROOT


def finding_views() -> set[str]:
    """Every ``view=`` a findings rule gives a ``Finding``, and the field's default, read from the source."""
    out = set()
    for path in (ROOT / "profiler/analysis/findings").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "view" and isinstance(node.value, ast.Constant):
                out.add(node.value.value)
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "view" and node.value:
                out.add(node.value.value)  # the dataclass field's default
    return out


@pytest.fixture(scope="module")
def dash_app():
    """The app over no runs: its layout and callbacks as the page gets them."""
    return app.create_app(RunStore([]))


def test_findings_name_tabs_of_the_list():
    names = [t.name for t in app.TABS]
    assert len(set(names)) == len(names)
    views = finding_views()
    # read by hand from profiler/analysis/findings/rules: layers, policies (also the default), streams, timeline
    assert views == {"layers", "policies", "streams", "timeline"}
    assert views <= set(names)
    assert views <= set(findings_view.VIEW_LABEL)  # a finding's button names its tab by the tab's label


def test_the_page_follows_the_list(dash_app):
    page = dash_app.layout()
    tabs = next(c for c in page.children if getattr(c, "id", None) == ids.TABS)
    assert [t.value for t in tabs.children] == [t.name for t in app.TABS]
    assert tabs.value == app.TABS[0].name == "policies"
    keys = list(dash_app.callback_map)
    gate = next(k for k in keys if ids.opened("policies") in k)
    assert all(f"{ids.opened(t.name)}.data" in gate for t in app.TABS)  # every tab's store, in one callback
    # the runs table's selection sets each per-run tab's choice (options and value); a finding sets its value
    select = next(k for k in keys if f"{ids.VERDICT}.children" in k)
    opened = next(k for k in keys if f"{ids.TABS}.value@" in k)
    per_run = [t.run_choice for t in app.TABS if t.per_run]
    assert per_run == [ids.LAYER_RUN, ids.TIMELINE_RUN, ids.STREAMS_RUN]
    for choice in per_run:
        assert f"{choice}.options" in select and f"{choice}.value" in select
        assert f"{choice}.value" in opened
