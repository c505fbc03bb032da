"""The dashboard in a real headless Chromium: runs, policies, a layer click, numbers = analyze --json."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, CHROMIUM_FLAGS
from tests.conftest import ROOT, run_cli
from tests.training_traces import training_export

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "tests" / "artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium (scripts/setup.sh --browser)")
        pytest.skip("no chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dash")
    training_export(policy="offload_qkv", exposed={1: 30_000}).write(folder / "qkv.sqlite")
    training_export(policy="offload_mlp", exposed={0: 50_000, 2: 10_000}).write(folder / "mlp.sqlite")
    evil = training_export(policy="<i>evil</i>", layers=1)
    evil.nvtx(5, 10, "layer=<img src=x onerror=alert(1)>", tid=100, domain_id=1)
    evil.write(folder / "evil.sqlite")
    (folder / "broken.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"junk")
    return folder


@contextlib.contextmanager
def dashboard(folder: Path):
    """`python -m dashboards FOLDER` on a free port; yields its URL once it answers."""
    port = free_port()
    env = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dashboards", str(folder), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail(proc.stdout.read())
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def server(runs):
    with dashboard(runs) as url:
        yield url


def analyze_json(path: Path, *extra: str) -> dict:
    proc = run_cli("analyze", "--json", *extra, str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def figure_data(page, graph_id: str) -> list[dict]:
    return page.evaluate(f"document.querySelector('#{graph_id} .js-plotly-plot').data")


def wait_rows(page, n: int) -> None:
    page.wait_for_function(f"document.querySelectorAll('#runs tr').length >= {n} + 2", timeout=60_000)


def test_dashboard_end_to_end(browser, server, runs):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    wait_rows(page, 4)
    page.wait_for_function("document.querySelector('#progress').innerText.includes('4 run(s)')", timeout=60_000)
    table = page.inner_text("#runs")
    assert "offload_qkv" in table and "offload_mlp" in table and "error" in table
    # the broken run shows an error card; the rest of the app keeps working
    page.wait_for_selector(".error-card", timeout=30_000)
    assert "broken.sqlite" in page.inner_text("#errors")

    # policy comparison: exposed d2h time per run equals analyze --json (ms)
    # runs are selected as they are analyzed: wait until both offload runs are in the figure
    page.wait_for_function(
        "(() => { const g = document.querySelector('#policy-graph .js-plotly-plot');"
        " const t = g && g.data && g.data.find(d => d.name === 'd2h exposed');"
        " return !!t && t.x.includes('offload_qkv') && t.x.includes('offload_mlp'); })()",
        timeout=30_000,
    )
    data = {t["name"]: t for t in figure_data(page, "policy-graph")}
    expected = {}
    for f in ("qkv", "mlp"):
        doc = analyze_json(runs / f"{f}.sqlite")
        expected[{"qkv": "offload_qkv", "mlp": "offload_mlp"}[f]] = doc["devices"]["0"]["copies"]["d2h"]
    for policy, d2h in expected.items():
        i = data["d2h exposed"]["x"].index(policy)
        assert data["d2h exposed"]["y"][i] == d2h["exposed_ns"] / 1e6
        assert data["d2h hidden"]["y"][i] == d2h["overlap_any_ns"] / 1e6
    page.screenshot(path=str(ARTIFACTS / "dashboard-policies.png"), full_page=True)

    # per layer: pick the mlp run, check the bars against analyze --by layer, click layer 0
    page.get_by_text("Per layer", exact=True).click()
    page.click("#layer-run")
    page.get_by_text("offload_mlp — mlp.sqlite").last.click()
    page.wait_for_function(
        "document.querySelector('#layer-graph .js-plotly-plot') && "
        "document.querySelector('#layer-graph .js-plotly-plot').data.length == 4",
        timeout=30_000,
    )
    layers = {r["name"]: r["copies"] for r in analyze_json(runs / "mlp.sqlite", "--by", "layer")["layers"]}
    bars = {t["name"]: t for t in figure_data(page, "layer-graph")}
    for i, name in enumerate(bars["d2h exposed"]["customdata"]):
        assert bars["d2h exposed"]["y"][i] == layers[name]["d2h"]["exposed_ns"] / 1e6
    assert bars["d2h exposed"]["y"][bars["d2h exposed"]["customdata"].index("0")] == 4 * 50_000 / 1e6
    box = page.locator("#layer-graph .point").first.bounding_box()  # layer 0's d2h bar
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#layer-detail-box", timeout=30_000)
    detail = page.inner_text("#layer-detail-box")
    assert "Layer 0" in detail and "fusion_layer0" in detail
    assert page.locator("#layer-copies tr").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "dashboard-layers.png"), full_page=True)

    # timeline of a step, and the copy streams
    page.get_by_text("Timeline", exact=True).click()
    page.wait_for_function(
        "document.querySelector('#timeline-note').innerText.includes('segments drawn')", timeout=30_000
    )
    lanes = {t["name"] for t in figure_data(page, "timeline-graph")}
    assert any(n.startswith("D2H") for n in lanes) and any(n.startswith("compute") for n in lanes)
    assert "NVTX steps" in lanes and "NVTX layers" in lanes
    page.screenshot(path=str(ARTIFACTS / "dashboard-timeline.png"), full_page=True)
    page.get_by_text("Copy streams", exact=True).click()
    page.wait_for_function(
        "document.querySelector('#streams-graph .js-plotly-plot') && "
        "document.querySelector('#streams-graph .js-plotly-plot').data.length == 2",
        timeout=30_000,
    )
    page.screenshot(path=str(ARTIFACTS / "dashboard-streams.png"), full_page=True)


def test_names_are_text_not_html(browser, server):
    page = browser.new_page()
    page.goto(server)
    wait_rows(page, 4)
    assert "<i>evil</i>" in page.inner_text("#runs")  # shown literally
    page.get_by_text("Per layer", exact=True).click()
    page.click("#layer-run")
    page.get_by_text("<i>evil</i> — evil.sqlite").last.click()
    page.wait_for_function("document.querySelector('#layer-graph .xtick') !== null", timeout=30_000)
    ticks = page.evaluate("document.querySelector('#layer-graph .xaxislayer-above').textContent")
    assert "<img src=x onerror=alert(1)>" in ticks
    assert page.evaluate("document.querySelectorAll('#layer-graph img').length") == 0


def test_no_file_outside_the_given_folders(server):
    for path in ("../../../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "assets/../../etc/passwd"):
        try:
            body = urllib.request.urlopen(server + path, timeout=5).read().decode()
        except OSError:
            continue  # 4xx: fine
        assert "root:" not in body


def test_remote_binding_needs_a_flag(runs):
    proc = run_cli("dashboard", "--host", "0.0.0.0", str(runs))
    assert proc.returncode == 2
    assert "--allow-remote" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cache_is_written_beside_and_reused(runs):
    cache = runs / "qkv.sqlite.profile-step.db"
    assert cache.is_file() and (runs / "qkv.sqlite.ops.parquet").is_file()
    from dashboards.data import RunStore

    store = RunStore([runs])
    rid = next(r for r, ref in store.refs.items() if ref.name == "qkv.sqlite")
    before = cache.stat().st_mtime_ns
    first = store.get(rid).summary
    assert cache.stat().st_mtime_ns == before, "a current cache is reused"
    os.utime(runs / "qkv.sqlite")  # the trace changed: the analysis is redone
    store2 = RunStore([runs])
    assert store2.get(rid).summary["copies"] == first["copies"]
    assert cache.stat().st_mtime_ns != before


def test_rank_heatmap(browser, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rankdash")
    for r in range(3):
        training_export(exposed={1: 20_000 * r}, step_jitter=(500_000,) if r == 2 else (0,)).write(
            folder / f"report.{r}.sqlite"
        )
    with dashboard(folder) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        wait_rows(page, 3)
        page.wait_for_function("document.querySelector('#progress').innerText.includes('3 run(s)')", timeout=60_000)
        page.get_by_text("Ranks", exact=True).click()
        page.wait_for_function(
            "document.querySelector('#rank-heatmap .js-plotly-plot') && "
            "document.querySelector('#rank-heatmap .js-plotly-plot').data.length == 1 && "
            "document.querySelector('#rank-heatmap .js-plotly-plot').data[0].y.length == 3",
            timeout=60_000,
        )
        (heat,) = figure_data(page, "rank-heatmap")
        doc = json.loads(run_cli("analyze", "--ranks", "--json", str(folder)).stdout)
        want = [[r["layers_exposed_ns"][layer] / 1e6 for layer in heat["x"]] for r in doc["per_rank"]]
        assert heat["z"] == want
        assert heat["y"] == ["rank 0", "rank 1", "rank 2"]
        page.wait_for_function(
            "document.querySelector('#rank-findings').innerText.includes('straggler rank 2')", timeout=30_000
        )
        page.screenshot(path=str(ARTIFACTS / "dashboard-ranks.png"), full_page=True)
