"""The dashboard on sample_traces where no GPU ran here: a real public trace first (its hidden copies
per GPU and per stream, labelled with its licence), the SYNTHETIC demo after it; and the rough edges
a newcomer met on real traces (unknown GPU link, a stream of both directions, What-if without steps)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl
import pytest

from dashboards.findings_view import _finding, focus
from dashboards.rows import View
from dashboards.timeline_view import timeline_figure
from profiler.report.verdict_text import verdict_lines
from tests.conftest import ROOT, run_cli
from tests.test_dashboard import browser, check_page, dashboard, figure, pick, wait_graph, wait_rows  # noqa: F401

SAMPLES = ROOT / "sample_traces"
# the shown tab's text, with its figures' notes (plotly draws them as SVG)
TAB_TEXT_JS = """
(graphId) => {
  const tab = document.getElementById(graphId).closest('.tab-content');
  const notes = [...tab.querySelectorAll('.js-plotly-plot')].map(gd => (gd.layout.meta || {}).note || '');
  return tab.innerText + ' ' + notes.join(' ');
}
"""


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """A copy of sample_traces (the dashboard caches beside traces): two public traces, a demo run, a CPU run."""
    root = tmp_path_factory.mktemp("samples") / "sample_traces"
    public = root / "public"
    shutil.copytree(SAMPLES / "public" / "licenses", public / "licenses")
    for name in ("CATALOG.tsv", "README.md", "flexgen__nsight_report7.sqlite", "nsysai__h100_2gpu_1s.sqlite"):
        shutil.copy(SAMPLES / "public" / name, public / name)
    shutil.copytree(
        SAMPLES / "demo-synthetic" / "synthetic-4-offload_all", root / "demo-synthetic" / "synthetic-4-offload_all"
    )
    cpu = next((SAMPLES / "cpu-example").glob("*-offload_qkv-*"))
    shutil.copytree(cpu, root / "cpu-example" / cpu.name)
    return root


@pytest.mark.browser
def test_first_view_is_a_real_public_trace(browser, samples):  # noqa: F811
    with dashboard(samples) as (url, _):
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url)
        wait_rows(page, 6)
        page.wait_for_function("document.querySelector('#progress').innerText.includes('4 run(s)')", timeout=120_000)
        page.wait_for_function(
            "document.querySelectorAll('#policy-bars .row-label').length == 2"
            " && document.querySelector('#policy-bars').innerText.includes('nsight_report7')",
            timeout=60_000,
        )
        table = page.inner_text("#runs")
        assert "public trace" in table and "SYNTHETIC demo" in table  # the demo is listed, not first
        labels = page.evaluate("[...document.querySelectorAll('#policy-bars .row-label')].map(e => e.textContent)")
        assert labels == ["nsight_report7 · GPU 0", "nsight_report7 · GPU 1"]
        prov = page.inner_text("#provenance")
        assert "Relaxed-System-Lab/FlexGen" in prov and "Apache-2.0" in prov and "real trace" in prov
        assert "SYNTHETIC" not in page.inner_text("#policy-bars")
        # the verdict on top: analyze --json's verdict of the same trace, in the same words
        doc = json.loads(
            run_cli("analyze", "--json", str(samples / "public" / "flexgen__nsight_report7.sqlite")).stdout
        )
        panel = page.inner_text("#verdict")
        lines = verdict_lines(doc["verdict"])
        assert lines and all(" ".join(text.split()) in " ".join(panel.split()) for _, text in lines), panel
        check_page(page, "samples-1-first-view")

        # a tab the first view's trace cannot fill names the runs that would (or says none here does)
        for tab, graph_id in (
            ("Per layer", "layer-graph"),
            ("Policy trade", "trade-frontier"),
            ("Ranks", "rank-heatmap"),
        ):
            page.get_by_text(tab, exact=True).click()
            wait_graph(
                page, graph_id, "gd.layout.meta && gd.layout.meta.note && !gd.layout.meta.note.includes('Loading')"
            )
            page.wait_for_timeout(500)  # the notes under the figure come with it, in the same callback
            said = page.evaluate(TAB_TEXT_JS, graph_id)
            assert "tick its rows" in said or "tick their rows" in said or "No run shown here has" in said, (tab, said)
            if tab == "Per layer":
                assert "offload_all · synthetic has layers with copies" in said
            if tab == "Policy trade":
                assert "No per-policy numbers for these runs" in said  # not a table of "-"
            check_page(page, f"samples-1-{graph_id}")

        # per stream: GPU 0's copy streams against the RTX 4090's PCIe Gen4 link, said why
        page.get_by_text("Copy streams", exact=True).click()
        wait_graph(page, "streams-graph", "gd.data.length >= 2 && (gd.layout.title.text || '').includes('report7')")
        assert "NVIDIA GeForce RTX 4090" in page.inner_text("#link-note")
        check_page(page, "samples-2-streams")

        # a 2026.2 export names no GPU: the link is assumed, and the page says so
        row = page.locator("#runs tr", has_text="h100_2gpu_1s").filter(has_text="GPU 1")
        assert "unknown GPU" in row.inner_text()
        row.locator("input").click()
        pick(page, "streams-run", "h100_2gpu_1s · GPU 1")
        page.wait_for_function("document.querySelector('#link-note').innerText.includes('unknown GPU')", timeout=60_000)
        note = page.inner_text("#link-note")
        assert "PCIe Gen4 x16" in note and "assumed: unknown GPU" in note
        wait_graph(page, "streams-graph", "(gd.layout.title.text || '').includes('h100')")
        bars = figure(page, "streams-graph")["data"][0]
        both = [i for i, x in enumerate(bars["x"]) if "D2H" in x and "H2D" in x]
        assert both, bars["x"]  # the compute stream carries both directions: striped, not the grey of "mixed"
        assert all(bars["marker"]["pattern"]["shape"][i] == "/" for i in both)
        assert all(bars["marker"]["color"][i] != "#BBBBBB" for i in range(len(bars["x"])))
        check_page(page, "samples-3-streams-unknown-gpu")

        # What-if on a trace without steps: the GPU span alone, no empty "median step" axes
        page.get_by_text("What-if", exact=True).click()
        wait_graph(page, "whatif-graph", "gd.data.length >= 2")
        layout = page.evaluate("document.querySelector('#whatif-graph .js-plotly-plot').layout")
        assert "no step ranges" in layout["title"]["text"] and "xaxis2" not in layout
        assert layout["xaxis"]["title"]["text"].startswith("GPU span")
        check_page(page, "samples-4-whatif-no-steps")
        page.close()


def test_show_in_timeline_marks_what_the_finding_names():
    ops = pl.DataFrame(
        {
            "op_id": [0, 1, 2],
            "kind": ["kernel", "kernel", "copy"],
            "device": [0, 0, 0],
            "stream": [7, 9, 20],
            "start": [0, 100, 50],
            "end": [80, 180, 150],
            "name": ["fusion", "ncclDevKernel_AllReduce", None],
            "is_nccl": [False, True, False],
            "cls": [None, None, "d2h"],
            "bytes": [0, 0, 1 << 20],
            "layer": [None, None, None],
        }
    )
    ranges = pl.DataFrame(schema={"lane": pl.String, "name": pl.String, "start": pl.Int64, "end": pl.Int64})
    nccl = {
        "id": "nccl-slowed-by-copies",
        "view": "timeline",
        "where": {"device": "0", "kernels": ["ncclDevKernel_AllReduce"]},
    }
    fig, stats = timeline_figure(ops, ranges, None, focus=focus(nccl))
    assert stats["marked"] == 1
    (marks,) = [t for t in fig["data"] if t.get("name") == "marked by the finding"]
    assert marks["x"] == [pytest.approx(np.mean([100, 180]) / 1e3)]  # µs from the window's start
    # a finding whose place the timeline cannot mark says so on its button
    op = {
        "id": "stall-hotspot",
        "severity": "warning",
        "verdict": "v",
        "try": "t",
        "view": "timeline",
        "where": {"op": "copy-start.22"},
    }
    assert focus(op) == ""
    button = _finding(op, "r1", [View("r1", "0")], 0).children[3].children[0]
    assert button.children == "Show GPU 0 in the Timeline tab"  # nothing of it to mark there: no promise
    assert (
        "marked ▼"
        in _finding({**nccl, "severity": "warning", "verdict": "v", "try": "t"}, "r1", [View("r1", "0")], 1)
        .children[3]
        .children[0]
        .children
    )
