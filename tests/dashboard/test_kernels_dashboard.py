"""Kernels slowed by copies in the dashboard: the Policies and Per layer tabs show the run summary's
``kernels_beside_copies`` as it is, in a real browser."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboards import kernels_view, rows
from profiler.runs.discover import discover
from profiler.runs.result import collect
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from profiler.units import human_time
from tests.helpers.dashboard import dashboard, open_page, pick
from tests.helpers.kernel_groups import group

pytestmark = pytest.mark.browser


def slowed_trace(folder: Path) -> Path:
    # GPU 0: fusion 1000 ns alone (3), 2000 ns beside copies (3): 3 us lost; GPU 1: every kernel beside copies
    b = ExportBuilder()
    b.gpu(0)
    b.gpu(1)
    group("fusion", [1000] * 3, [2000] * 3, b, 0)
    group("fusion", [], [500] * 4, b, 0, device=1)
    return b.write(folder / "slowed.sqlite")


def text_of(page, selector: str) -> str:
    return page.evaluate(f"(document.querySelector({selector!r}) || {{innerText: ''}}).innerText")


def test_policies_and_layer_views_show_the_summary(browser, tmp_path):
    trace = slowed_trace(tmp_path)
    summary = collect(open_trace(trace))
    kb0, kb1 = (summary["kernels_beside_copies"][d] for d in ("0", "1"))
    assert kb0["excess_ns"] == 3000 and kb1 == {**kb1, "groups": 0, "calls_alone": 0, "calls_beside": 4}
    with dashboard(tmp_path) as (url, _):
        page = open_page(browser, url, 2)
        page.wait_for_function("document.querySelectorAll('#policy-kernels-table tr').length >= 3", timeout=60_000)
        policy = text_of(page, "#policy-kernels")
        assert "Kernels slowed by copies" in policy and "size bias" in policy
        assert kernels_view.status(kb0) in policy and human_time(3000) in policy and "fusion 2.00x" in policy
        assert "none alone: no baseline, 0 groups" in policy  # GPU 1
        page.get_by_text("Per layer", exact=True).click()
        page.wait_for_function(
            "(document.querySelector('#layer-kernels') || {innerText: ''}).innerText.includes('GPU 0')",
            timeout=60_000,
        )
        layer = text_of(page, "#layer-kernels")
        assert "not per layer" in layer and kernels_view.status(kb0) in layer
        row = kernels_view.group_rows(kb0)[0]
        for cell in row.values():
            assert cell in layer
        (ref,) = discover([tmp_path])
        pick(page, "layer-run", rows.label(ref, summary, "1"))
        page.wait_for_function(
            "(document.querySelector('#layer-kernels') || {innerText: ''}).innerText.includes('GPU 1')",
            timeout=60_000,
        )
        assert "no baseline" in text_of(page, "#layer-kernels")
