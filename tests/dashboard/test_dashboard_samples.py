"""The dashboard on sample_traces where no GPU ran here: the example's real H200 runs first (measured
by jax.profiler: their copies, layers and plan; stalls and costs said not measured or not modelled, as
analyze says them); where no measured policy run has copies, a real public trace first (its hidden copies
per GPU and per stream, labelled with its licence), the SYNTHETIC demo after it; and the rough edges a
newcomer met on real traces (unknown GPU link, a stream of both directions, What-if without steps)."""

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
from profiler.trace.jax_profile import NO_WAITS
from tests.helpers import dashboard as ui
from tests.helpers.cli import analyze_json, run_cli
from tests.helpers.dashboard import check_page, dashboard, open_page, wait_graph
from tests.helpers.paths import ROOT

SAMPLES = ROOT / "sample_traces"
H200 = SAMPLES / "h200-example"
# the shown tab's text, with its figures' notes (plotly draws them as SVG)
TAB_TEXT_JS = """
(graphId) => {
  const tab = document.getElementById(graphId).closest('.tab-content');
  const notes = [...tab.querySelectorAll('.js-plotly-plot')].map(gd => (gd.layout.meta || {}).note || '');
  return tab.innerText + ' ' + notes.join(' ');
}
"""
# the cells of a DataTable's rows, by column id (the runs table: only its ticked rows)
TABLE_ROWS_JS = """
([tableId, ticked]) => [...document.querySelectorAll(`#${tableId} tr`)]
  .filter(tr => tr.querySelector('td[data-dash-column]') && (!ticked || tr.querySelector('input:checked')))
  .map(tr => Object.fromEntries([...tr.querySelectorAll('td[data-dash-column]')]
    .map(td => [td.dataset.dashColumn, td.innerText.trim()])))
"""


def copy_samples(root, h200: bool):
    """A copy of sample_traces (the dashboard caches beside traces): two public traces, a demo run, a CPU
    run, and with *h200* the eight H200 runs of the example."""
    public = root / "public"
    shutil.copytree(SAMPLES / "public" / "licenses", public / "licenses")
    for name in ("CATALOG.tsv", "README.md", "flexgen__nsight_report7.sqlite", "nsysai__h100_2gpu_1s.sqlite"):
        shutil.copy(SAMPLES / "public" / name, public / name)
    shutil.copytree(
        SAMPLES / "demo-synthetic" / "synthetic-4-offload_all", root / "demo-synthetic" / "synthetic-4-offload_all"
    )
    cpu = next((SAMPLES / "cpu-example").glob("*-offload_qkv-*"))
    shutil.copytree(cpu, root / "cpu-example" / cpu.name)
    if h200:
        shutil.copytree(H200, root / "h200-example")
    return root


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """sample_traces as a fresh checkout has it (trimmed): the H200 runs, public traces, the demo, a CPU run."""
    return copy_samples(tmp_path_factory.mktemp("samples") / "sample_traces", h200=True)


@pytest.fixture(scope="module")
def public_samples(tmp_path_factory):
    """The same without the H200 runs: no measured policy run with copies."""
    return copy_samples(tmp_path_factory.mktemp("public-samples") / "sample_traces", h200=False)


@pytest.mark.browser
def test_first_view_is_the_h200_runs_of_the_example(browser, samples):
    """What profile-step dashboard and the quickstart show first on a machine without a GPU: the eight real
    H200 runs, labelled as jax.profiler's, with analyze's verdict and numbers; what such a trace cannot
    measure says so, in every tab, instead of showing a zero. Its screenshot is the README's
    (tests/artifacts/dashboard-samples-1-first-view.png, copied to docs/dashboard-first-view.png)."""
    doc = json.loads(run_cli("analyze", "--json", str(samples / "h200-example")).stdout)
    policies = {r["policy"]: r for r in doc["policies"]["rows"]}
    assert len(policies) == 8
    with dashboard(samples) as (url, _):
        page = open_page(browser, url, 12, analyzed=12, bars=8)
        # the ticked rows: the eight H200 runs, measured on a real GPU by jax.profiler, with analyze's steps
        ticked = page.evaluate(TABLE_ROWS_JS, ["runs", True])
        assert sorted(r["policy"] for r in ticked) == sorted(policies)
        assert {(r["source"], r["device"], r["status"]) for r in ticked} == {
            ("jax.profiler run", "GPU 0 · NVIDIA H200", "ok")
        }
        step = page.inner_text("#runs th[data-dash-column='step']")
        assert "median step (ms)" in step
        # GiB copied with four significant digits kept ("9" beside "8.438" read as a count)
        assert {r["policy"]: r["bytes"] for r in ticked}["offload_qkv"] == "9.000"
        # the eight ticked rows fit the table's scrolled box (340 px hid the last two of them)
        hidden = page.evaluate(
            """() => {
              const rows = [...document.querySelectorAll('#runs tr')].filter(tr => tr.querySelector('input:checked'));
              let box = rows[0].parentElement;
              while (box && getComputedStyle(box).overflowY !== 'auto') box = box.parentElement;
              const bottom = box.getBoundingClientRect().bottom;
              return rows.filter(tr => tr.getBoundingClientRect().bottom > bottom + 1).length;
            }"""
        )
        assert hidden == 0
        for r in ticked:
            assert float(r["step"]) == pytest.approx(policies[r["policy"]]["median_step_ns"] / 1e6, rel=5e-4)
        table = page.inner_text("#runs")
        assert "public trace" in table and "SYNTHETIC demo" in table  # listed, not first
        prov = " ".join(page.inner_text("#provenance").split())
        assert "Measured on a real GPU with JAX's own profiler (jax.profiler, not nsys)" in prov
        assert "h200-example: 8 run(s) on NVIDIA H200" in prov and f"not modelled: {NO_WAITS}" in prov
        # the verdict on top: analyze's verdict of the same runs, in the same words
        panel = " ".join(page.inner_text("#verdict").split())
        lines = verdict_lines(doc["verdict"])
        assert lines and all(" ".join(text.split()) in panel for _, text in lines), panel

        # Policies: stalls said not measured, as analyze says it, never drawn or written as 0
        bars = page.inner_text("#policy-bars")
        assert f"stalls (not measured: {NO_WAITS})" in " ".join(bars.split())
        assert "stalled by copies" not in bars and "no stream waits," not in bars
        qkv = next(p.parent.name for p in (samples / "h200-example").glob("*-offload_qkv-??????/trace.json.gz"))
        dev = analyze_json(samples / "h200-example" / qkv / "trace.json.gz")["devices"]["0"]
        t_div, b_div = ui.bar_units(page)
        values = page.evaluate(
            "[...document.querySelectorAll('#policy-bars .bar')]"
            ".map(b => [b.dataset.row, b.dataset.series, +b.dataset.value])"
        )
        shown = {(row, series): v for row, series, v in values}
        label = f"offload_qkv · {qkv.rsplit('-', 1)[1]} · GPU 0"
        for d, name in (("d2h", "D2H"), ("h2d", "H2D")):
            assert shown[(label, f"{name} exposed")] == pytest.approx(dev["copies"][d]["exposed_ns"] / t_div)
            assert shown[(label, f"{name} hidden")] == pytest.approx(dev["copies"][d]["overlap_any_ns"] / t_div)
            assert shown[(label, f"{name} bytes")] == pytest.approx(dev["copies"][d]["bytes"] / b_div)
        # kernels slowed by copies: a run without kernels both alone and beside copies measured nothing
        kernels = page.evaluate(TABLE_ROWS_JS, ["policy-kernels-table", False])
        assert len(kernels) == 8 and any(k["groups"] == "0" for k in kernels)
        assert all(k["kernel time lost"] == "-" for k in kernels if k["groups"] == "0")
        assert all(k["kernel time lost"] != "-" for k in kernels if k["groups"] != "0")
        check_page(page, "samples-1-first-view")

        # Per layer: it opens on the run whose copies the verdict shows (offload_mlp, the fastest that
        # offloads), its copies per layer as analyze --by layer gives them; stalls not measured
        page.get_by_text("Per layer", exact=True).click()
        wait_graph(page, "layer-graph", "gd.data.length >= 4")
        mlp = next(p.parent.name for p in (samples / "h200-example").glob("*-offload_mlp-??????/trace.json.gz"))
        assert page.inner_text("#layer-run").startswith(f"offload_mlp · {mlp.rsplit('-', 1)[1]}")
        layers = {
            r["name"]: r["copies"]
            for r in analyze_json(samples / "h200-example" / mlp / "trace.json.gz", "--by", "layer")["layers"]
        }
        assert len(layers) == 8
        fig = ui.figure(page, "layer-graph")
        drawn = {t["name"]: t for t in fig["data"]}
        div = ui.unit_of(page.evaluate("document.querySelector('#layer-graph .ytitle').textContent"))
        assert drawn["H2D exposed"]["x"] == sorted(layers)
        for i, name in enumerate(drawn["H2D exposed"]["x"]):
            assert drawn["H2D exposed"]["y"][i] == pytest.approx(layers[name]["h2d"]["exposed_ns"] / div)
        assert f"Stalls not measured: {NO_WAITS}" in page.inner_text("#layer-hint")
        check_page(page, "samples-1-h200-layers")

        # Policy trade: analyze's per-policy table, its empty columns left out and said so, the plan read
        page.get_by_text("Policy trade", exact=True).click()
        page.wait_for_selector("#trade-table", timeout=60_000)
        trade = {r["run"].split(" · ")[0]: r for r in page.evaluate(TABLE_ROWS_JS, ["trade-table", False])}
        heads = page.inner_text("#trade-table tr")
        assert "D2H planned / step (GiB)" in heads and "peak dev" not in heads and "stalled" not in heads
        for policy, r in policies.items():
            assert float(trade[policy]["planned"]) == pytest.approx(r["planned_d2h_bytes_per_step"] / 2**30, 1e-3)
        box = " ".join(page.inner_text("#trade-table-box").split())
        assert "left out, no value in any run: peak dev, measured; compiled dev; compiled host" in box
        assert f"stalled / step not measured: {NO_WAITS} (all runs)" in box
        wait_graph(page, "pvm-graph", "gd.data.length == 4")  # offload_qkv's plan against what moved
        wait_graph(page, "trade-frontier", "gd.layout.meta && gd.layout.meta.note")
        assert "(all 8 runs)" in ui.figure(page, "trade-frontier")["layout"]["meta"]["note"]
        check_page(page, "samples-1-h200-trade")

        # What-if: the replay cannot know what waits for the copies: not modelled (its label says so before the
        # click), not "no change"; no rank among the runs, and the Ranks tab's label says that
        assert page.inner_text("#whatif-tab") == "What-if (not modelled)"
        assert page.inner_text("#ranks-tab") == "Ranks (none)"
        page.click("#whatif-tab")
        # its replay runs in a process of its own: under load the placeholder ("Loading …") comes first
        wait_graph(
            page, "whatif-graph", "gd.layout.meta && gd.layout.meta.note && !gd.layout.meta.note.includes('Loading')"
        )
        page.wait_for_timeout(500)  # the notes under the figure come with it, in the same callback
        said = page.evaluate(TAB_TEXT_JS, "whatif-graph")
        assert f"not modelled: {NO_WAITS}" in said and "no change" not in said
        check_page(page, "samples-1-h200-whatif")

        # Copy streams: the H200's host link, from its model
        page.get_by_text("Copy streams", exact=True).click()
        wait_graph(page, "streams-graph", "gd.data.length >= 2")
        note = page.inner_text("#link-note")
        assert "PCIe Gen5 x16" in note and "NVIDIA H200" in note
        check_page(page, "samples-1-h200-streams")
        page.close()


@pytest.mark.browser
def test_first_view_is_a_real_public_trace_without_measured_policy_runs(browser, public_samples):
    samples = public_samples
    with dashboard(samples) as (url, _):
        page = open_page(browser, url, 6, analyzed=4)
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
        check_page(page, "samples-public-first-view")

        # a tab the first view's trace cannot fill names the runs that would (or says none here does)
        for tab, graph_id in (
            ("Per layer", "layer-graph"),
            ("Policy trade", "trade-frontier"),
            ("Ranks (none)", "rank-heatmap"),
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
            check_page(page, f"samples-public-{graph_id}")

        # per stream: GPU 0's copy streams against the RTX 4090's PCIe Gen4 link, said why
        page.get_by_text("Copy streams", exact=True).click()
        wait_graph(page, "streams-graph", "gd.data.length >= 2 && (gd.layout.title.text || '').includes('report7')")
        assert "NVIDIA GeForce RTX 4090" in page.inner_text("#link-note")
        check_page(page, "samples-public-streams")

        # a 2026.2 export names no GPU: the link is assumed, and the page says so
        row = page.locator("#runs tr", has_text="h100_2gpu_1s").filter(has_text="GPU 1")
        assert "unknown GPU" in row.inner_text()
        row.locator("input").click()
        ui.pick(page, "streams-run", "h100_2gpu_1s · GPU 1")
        page.wait_for_function("document.querySelector('#link-note').innerText.includes('unknown GPU')", timeout=60_000)
        note = page.inner_text("#link-note")
        assert "PCIe Gen4 x16" in note and "assumed: unknown GPU" in note
        wait_graph(page, "streams-graph", "(gd.layout.title.text || '').includes('h100')")
        bars = ui.figure(page, "streams-graph")["data"][0]
        both = [i for i, x in enumerate(bars["x"]) if "D2H" in x and "H2D" in x]
        assert both, bars["x"]  # the compute stream carries both directions: striped, not the grey of "mixed"
        assert all(bars["marker"]["pattern"]["shape"][i] == "/" for i in both)
        assert all(bars["marker"]["color"][i] != "#BBBBBB" for i in range(len(bars["x"])))
        check_page(page, "samples-public-streams-unknown-gpu")

        # What-if on a trace without steps: the GPU span alone, no empty "median step" axes
        page.click("#whatif-tab")
        wait_graph(page, "whatif-graph", "gd.data.length >= 2")
        layout = page.evaluate("document.querySelector('#whatif-graph .js-plotly-plot').layout")
        assert "no step ranges" in layout["title"]["text"] and "xaxis2" not in layout
        assert layout["xaxis"]["title"]["text"].startswith("GPU span")
        check_page(page, "samples-public-whatif-no-steps")
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
    # hovering a copy says what it moved (a copy has no name: it read "None (100 ns)")
    hovers = {h for t in fig["data"] for h in t.get("hovertext") or []}
    assert "D2H 1.00 MiB (0.10 µs)" in hovers and not any(h.startswith("None") for h in hovers)
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
    button = _finding(op, "r1", [View("r1", "0")], 0, 0).children[3].children[0]
    assert button.children == "Show GPU 0 in the Timeline tab"  # nothing of it to mark there: no promise
    assert (
        "marked ▼"
        in _finding({**nccl, "severity": "warning", "verdict": "v", "try": "t"}, "r1", [View("r1", "0")], 1, 1)
        .children[3]
        .children[0]
        .children
    )


def test_a_reason_for_no_saving_shared_by_findings_is_said_once_in_the_panel(tmp_path):
    """The H200 scanned run's findings have one reason for no saving (a JAX trace holds no stream waits):
    the panel says it once above them and each finding refers to it, as ``profile-step findings`` does."""
    from dashboards.data import RunStore
    from dashboards.findings_view import panel

    (run,) = H200.glob("*-offload_qkv-scan-986b04")
    shutil.copytree(run, tmp_path / run.name, ignore=shutil.ignore_patterns("*.profile-step.db", "*.parquet"))
    store = RunStore([tmp_path / run.name])
    (rid,) = store.refs
    store.get(rid)

    def text(node) -> str:
        if isinstance(node, str | int | float):
            return str(node)
        kids = getattr(node, "children", None) if not isinstance(node, list) else node
        kids = kids if isinstance(kids, list) else [kids] if kids is not None else []
        return " ".join(text(k) for k in kids)

    said = " ".join(text(panel(store, [View(rid, "0")])).split())
    assert said.count("a JAX profiler trace holds no stream waits") == 1
    assert said.count("not modelled (above)") >= 2
