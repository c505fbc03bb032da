"""The dashboard's tabs are one list (``app.TABS``): the tabs a finding names are in it, and what the
page derives from it (the gate's stores, the runs table's run choices, the findings' buttons) follows it."""

from __future__ import annotations

import ast

import pytest

from dashboards import app, findings_view, ids, timeline_view
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


def component(tree, cid):
    """The component of id *cid* in a layout."""
    if getattr(tree, "id", None) == cid:
        return tree
    children = getattr(tree, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json") and (found := component(child, cid)) is not None:
            return found
    return None


def test_the_timeline_opens_on_its_step(tmp_path):
    """The page comes with the timeline's step filled in for an analyzed run (its first opening is then
    one request, the figure's), the middle step of the run's NVTX steps; a run not analyzed yet, none."""
    run = ROOT / "sample_traces" / "demo-synthetic" / "synthetic-2-offload_qkv" / "synthetic-trace.sqlite"
    (tmp_path / run.name).symlink_to(run)
    store = RunStore([tmp_path])
    page = app.create_app(store).layout()
    assert component(page, ids.TIMELINE_STEP).value is None  # not analyzed: the step follows when shown
    (rid,) = store.refs
    ranges = store.get(rid).ranges
    steps = ranges.filter(ranges["lane"] == "step")["name"].to_list()
    assert len(steps) == 3
    page = app.create_app(store).layout()
    step = component(page, ids.TIMELINE_STEP)
    assert step.value == steps[1]
    assert [o["value"] for o in step.options] == [timeline_view.ALL, *steps]
    assert component(page, ids.TIMELINE_RUN).value.startswith(rid)
