"""The dashboard in a real headless Chromium: runs per GPU, policies, a layer click, the timeline,
copy streams; numbers = analyze --json; no overlapping labels, no empty chart without a note,
a screenshot of every view (tests/artifacts/, for review)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from dashboards.app import NATIVES
from profiler.synthetic.demo import StepModel, write_demo_runs
from tests.helpers.cli import analyze_json, run_cli
from tests.helpers.dashboard import (
    DIVISORS,
    bar_units,
    check_page,
    dashboard,
    figure,
    open_page,
    pick,
    unit_of,
    wait_graph,
)
from tests.helpers.training_traces import training_export

pytestmark = pytest.mark.browser
DEMO = replace(StepModel(), layers=3, steps=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dash")
    training_export(policy="offload_qkv", exposed={1: 30_000}).write(folder / "qkv.sqlite")
    training_export(policy="offload_mlp", exposed={0: 50_000, 2: 10_000}).write(folder / "mlp.sqlite")
    evil = training_export(policy="<i>evil</i>", layers=1)
    evil.nvtx(5, 10, "layer=<img src=x onerror=alert(1)>", tid=100, domain_id=1)
    evil.write(folder / "evil.sqlite")
    (folder / "broken.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"junk")
    write_demo_runs(folder, DEMO, ("offload_all",))  # two GPUs, labelled synthetic
    return folder


@pytest.fixture(scope="module")
def server(runs):
    with dashboard(runs) as (url, proc):
        yield url, proc


# (the dashboard serves the cartesian bundle: dashboards/plotly_bundle.py)


def test_dashboard_end_to_end(browser, server, runs):
    url, _ = server
    page = open_page(browser, url, 6, analyzed=5)
    table = page.inner_text("#runs")
    assert "offload_qkv" in table and "offload_mlp" in table and "error" in table
    # a two-GPU run is two rows, each with its own device, labelled synthetic
    assert "GPU 0 · NVIDIA H100 80GB HBM3 (synthetic)" in table and "GPU 1 · NVIDIA H100 80GB HBM3 (synthetic)" in table
    assert "SYNTHETIC demo" in table
    # the steps cell says where the steps and the analysis window come from
    page.locator("#runs td[data-dash-column='steps']").nth(2).hover()
    page.wait_for_selector(".dash-tooltip", timeout=10_000)
    tip = page.inner_text(".dash-tooltip")
    assert tip.startswith("steps: profile-step step=N ranges. Analysis window: the whole recording"), tip
    page.mouse.move(0, 0)
    page.wait_for_selector(".error-card", timeout=30_000)
    assert "broken.sqlite" in page.inner_text("#errors")

    # policies: every row's exposed and hidden D2H time and bytes equal analyze --json (per GPU)
    page.wait_for_function("document.querySelectorAll('#policy-bars .row-label').length == 5", timeout=60_000)
    # the bars' unit (each value beside its bar carries its own)
    t_div, b_div = bar_units(page)
    values = page.evaluate(
        "[...document.querySelectorAll('#policy-bars .bar')]"
        ".map(b => [b.dataset.row, b.dataset.series, +b.dataset.value])"
    )
    bars = {(row, series): v for row, series, v in values}
    expected = {
        "offload_qkv · qkv · GPU 0": analyze_json(runs / "qkv.sqlite")["devices"]["0"],
        "offload_mlp · mlp · GPU 0": analyze_json(runs / "mlp.sqlite")["devices"]["0"],
    }
    demo = analyze_json(runs / "synthetic-4-offload_all" / "synthetic-trace.sqlite")["devices"]
    expected |= {f"offload_all · synthetic · GPU {d}": demo[d] for d in ("0", "1")}
    text = page.inner_text("#policy-bars")
    for label, dev in expected.items():
        d2h = dev["copies"]["d2h"]
        assert bars[(label, "D2H exposed")] == pytest.approx(d2h["exposed_ns"] / t_div, rel=1e-12)
        assert bars[(label, "D2H hidden")] == pytest.approx(d2h["overlap_any_ns"] / t_div, rel=1e-12)
        assert bars[(label, "D2H bytes")] == pytest.approx(d2h["bytes"] / b_div, rel=1e-12)
        assert f"{d2h['count']:,} copies" in text
    assert demo["0"]["copies"]["d2h"] != demo["1"]["copies"]["d2h"]  # not one summed row
    assert "SYNTHETIC" in text
    check_page(page, "1-policies")

    # per layer: the mlp run's bars against analyze --by layer; click layer 0
    page.get_by_text("Per layer", exact=True).click()
    pick(page, "layer-run", "offload_mlp · mlp · GPU 0")
    wait_graph(page, "layer-graph", "gd.data.length >= 4 && gd.data[0].customdata[0][0] == '0'")
    layers = {r["name"]: r["copies"] for r in analyze_json(runs / "mlp.sqlite", "--by", "layer")["layers"]}
    fig = figure(page, "layer-graph")
    bars = {t["name"]: t for t in fig["data"]}
    assert bars["D2H exposed"]["x"] == sorted(layers, key=int)
    div = unit_of(page.evaluate("document.querySelector('#layer-graph .ytitle').textContent"))
    for i, name in enumerate(bars["D2H exposed"]["x"]):
        assert bars["D2H exposed"]["y"][i] == pytest.approx(layers[name]["d2h"]["exposed_ns"] / div)
    assert bars["D2H exposed"]["y"][0] * div == pytest.approx(4 * 50_000)
    assert "Click a layer" in page.inner_text("#layer-hint")
    page.locator("#layer-graph").scroll_into_view_if_needed()  # the mouse clicks what is in view
    box = page.locator("#layer-graph .point").first.bounding_box()  # layer 0's d2h bar
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#layer-detail-box", timeout=30_000)
    detail = page.inner_text("#layer-detail-box")
    assert "Layer 0" in detail and "fusion_layer0" in detail
    assert page.locator("#layer-copies tr").count() >= 2
    check_page(page, "2-layers")

    # the timeline of the synthetic run's GPU 1: its streams, the steps and the layers
    page.get_by_text("Timeline", exact=True).click()
    pick(page, "timeline-run", "offload_all · synthetic · GPU 1")
    page.wait_for_function("document.querySelector('#timeline-note').innerText.includes('GPU 1')", timeout=30_000)
    lanes = page.evaluate("document.querySelector('#timeline-graph .js-plotly-plot').layout.yaxis.ticktext")
    assert lanes[:2] == ["NVTX steps", "layers (GPU time)"]
    assert {"compute · stream 13", "NCCL · stream 16", "D2H · stream 14", "H2D · stream 15"} <= set(lanes)
    check_page(page, "3-timeline")

    # ranks: none of these runs is a rank: the tab's label says so, then a note, no empty chart or dropdown
    assert page.inner_text("#ranks-tab") == "Ranks (none)"
    page.click("#ranks-tab")
    wait_graph(page, "rank-heatmap", "gd.layout.meta && gd.layout.meta.note")
    assert not page.is_visible("#rank-policy")
    check_page(page, "4-ranks")

    # copy streams: the link comes from the device model, and says so
    page.get_by_text("Copy streams", exact=True).click()
    pick(page, "streams-run", "offload_all · synthetic · GPU 0")
    # the figure of the run picked, not the one shown before it (a race CI lost once)
    picked = "((gd.layout.title || {}).text || '').includes('synthetic')"
    wait_graph(page, "streams-graph", f"gd.data.length == 6 && {picked}")
    page.wait_for_function("document.querySelector('#link-note').innerText.includes('synthetic')", timeout=30_000)
    note = page.inner_text("#link-note")
    assert "PCIe Gen5 x16" in note and "NVIDIA H100 80GB HBM3 (synthetic)" in note
    fig = figure(page, "streams-graph")
    assert [t["y"] for t in fig["data"]][1] == [pytest.approx(s["gbps"]) for s in demo["0"]["streams"]]
    check_page(page, "5-streams")


def test_the_browsers_own_functions_are_kept(browser, server):
    """Dash's @babel/polyfill replaces the trims, parseFloat and parseInt with slower JavaScript ones;
    the page puts the browser's own back before it draws (``app.NATIVES``)."""
    page = open_page(browser, server[0], 6, viewport=None)
    # the polyfill also makes Function.prototype.toString say "[native code]" of its own functions:
    # the source is read with the toString of a fresh frame
    replaced = page.evaluate(
        """names => {
          const frame = document.body.appendChild(document.createElement('iframe'));
          const source = f => frame.contentWindow.Function.prototype.toString.call(f);
          return names.filter(([owner, name]) => !source(eval(owner)[name]).includes('[native code]'));
        }""",
        [list(n) for n in NATIVES],
    )
    assert replaced == []
    assert page.evaluate("[' a\\u00a0'.trim(), parseFloat(' 1.5e3x'), parseInt('0x1f'), Number.parseFloat('7')]") == [
        "a",
        1500,
        31,
        7,
    ]
    page.close()


def test_one_line_in_the_terminal(runs, browser):
    """waitress, no request log, no development-server warning: one line with the address."""
    with dashboard(runs) as (url, proc):
        page = open_page(browser, url, 4, viewport=None)
        page.get_by_text("Per layer", exact=True).click()
        wait_graph(page, "layer-graph")
        page.close()
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    assert lines[0].startswith("profile-step dashboard: ") and url in lines[0]


def test_names_are_text_not_html(browser, runs):
    with dashboard(runs) as (url, _):
        page = open_page(browser, url, 4, viewport=None)
        assert "<i>evil</i>" in page.inner_text("#runs")  # shown literally
        page.get_by_text("Per layer", exact=True).click()
        pick(page, "layer-run", "<i>evil</i> · evil · GPU 0")
        page.wait_for_function("document.querySelector('#layer-graph .xtick') !== null", timeout=30_000)
        ticks = page.evaluate("document.querySelector('#layer-graph .xaxislayer-above').textContent")
        assert "<img src=x onerror=alert(1)>" in ticks
        assert page.evaluate("document.querySelectorAll('#layer-graph img').length") == 0


def test_no_file_outside_the_given_folders(server):
    """The running server answers its page, then refuses every path that climbs out of its folders with
    a 4xx and without the file (http.client sends each path as written: no client-side clean-up)."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(server[0])

    def get(path: str) -> tuple[int, str]:
        con = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
        try:
            con.request("GET", path)
            reply = con.getresponse()
            return reply.status, reply.read().decode(errors="replace")
        finally:
            con.close()

    assert get("/")[0] == 200  # the server is up: the refusals below are its answers
    for path in (
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/assets/../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/etc/passwd",
        "/assets/..%2f..%2fetc%2fpasswd",
        "/_dash-component-suites/../../../etc/passwd",
    ):
        status, body = get(path)
        assert 400 <= status < 500, (path, status)
        assert "root:" not in body, path


def test_remote_binding_needs_a_flag(runs):
    proc = run_cli("dashboard", "--host", "0.0.0.0", str(runs))
    assert proc.returncode == 2
    assert "--allow-remote" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cache_is_written_in_the_cache_folder_and_reused(runs, monkeypatch):
    from dashboards.data import RunStore
    from profiler.runs import store as stored
    from profiler.runs.store import CacheFiles

    files = CacheFiles.of(runs / "qkv.sqlite")
    cache = files.db
    beside = sorted(p.name for p in runs.iterdir())
    store = RunStore([runs])
    rid = next(r for r, ref in store.refs.items() if ref.name == "qkv.sqlite")
    first = store.get(rid).summary
    assert cache.is_file() and files.ops.is_file() and not cache.is_relative_to(runs)
    assert sorted(p.name for p in runs.iterdir()) == beside, "nothing written beside the traces"
    before = cache.stat().st_mtime_ns
    assert RunStore([runs]).get(rid).summary == first
    assert cache.stat().st_mtime_ns == before, "a current cache is reused"
    os.utime(runs / "qkv.sqlite")  # the trace changed: the analysis is redone
    store2 = RunStore([runs])
    assert store2.get(rid).summary["copies"] == first["copies"]
    assert cache.stat().st_mtime_ns != before
    # another profile-step's code (an upgrade, a local change): its cached analysis is not this code's
    again = cache.stat().st_mtime_ns
    assert RunStore([runs]).get(rid).summary == store2.get(rid).summary and cache.stat().st_mtime_ns == again
    monkeypatch.setattr(stored, "code_digest", lambda: "other code")
    assert RunStore([runs]).get(rid).summary["copies"] == first["copies"]
    assert cache.stat().st_mtime_ns != again


def test_rank_heatmap(browser, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rankdash")
    for r in range(3):
        training_export(exposed={1: 20_000 * r}, step_jitter=(500_000,) if r == 2 else (0,)).write(
            folder / f"report.{r}.sqlite"
        )
    with dashboard(folder) as (url, _):
        page = open_page(browser, url, 3, analyzed=3)
        page.wait_for_function("document.querySelector('#ranks-tab').innerText == 'Ranks'", timeout=30_000)
        page.click("#ranks-tab")
        wait_graph(page, "rank-heatmap", "gd.data.length == 1 && gd.data[0].y.length == 3")
        (heat,) = figure(page, "rank-heatmap")["data"]
        doc = json.loads(run_cli("analyze", "--ranks", "--json", str(folder)).stdout)
        unit = (
            page.evaluate("document.querySelector('#rank-heatmap .js-plotly-plot').data[0].colorbar.title.text")
            .split("(")[1]
            .rstrip(")")
        )
        want = [[r["layers_exposed_ns"][layer] / DIVISORS[unit] for layer in heat["x"]] for r in doc["per_rank"]]
        assert heat["z"] == [[pytest.approx(v) for v in row] for row in want]
        assert heat["y"] == ["rank 0", "rank 1", "rank 2"]
        page.wait_for_function(
            "document.querySelector('#rank-findings').innerText.includes('straggler rank 2')", timeout=30_000
        )
        check_page(page, "6-ranks-heatmap")
