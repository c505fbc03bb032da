"""Dashboard speed in a real headless Chromium, with the analysis cached.

    python benchmarks/bench_dashboard.py [--repeat 3] [--data DIR]

Makes two annotated exports of 1,000,000 GPU events each (800k kernels, 200k
copies; 10 steps x 48 layers) under benchmarks/data/dash/ (or DIR), analyzes them once
(their analyses in profile-step's cache), starts the dashboard on them and measures, in Chromium:
the first view (page load until the runs table and the policy bars are
drawn), switching to each view (tab), switching the per-layer view between
the two runs, and clicking a layer: wall time, and the CPU time of the page's
main thread (which a machine shared with other work stretches less).  The
what-if view is timed twice: the first time (the cached what-ifs are dropped
before the run; the server starts the replays of the first view's runs in the
background when it starts, so the first what-if waits only for what is left
of them: the run prints when they were stored and when the tab was clicked,
both from the server's start) and later (from the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.make_export import make  # noqa: E402
from dashboards.data import RunStore  # noqa: E402
from profiler.runs.store import CacheFiles  # noqa: E402
from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from tests.helpers.dashboard import answers  # noqa: E402

DATA = HERE / "data" / "dash"


POLICY_READY = "document.querySelectorAll('#policy-bars .bar').length >= 8"  # 4 rows, D2H and H2D


def graph_ready(graph: str, n: int = 1) -> str:
    return (
        f"document.querySelector('#{graph} .js-plotly-plot') && "
        f"document.querySelector('#{graph} .js-plotly-plot').data.length >= {n}"
    )


IN_FLIGHT = """since => {
  const spans = performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))
    .filter(e => e.startTime >= since).map(e => [e.startTime, e.responseEnd]).sort((x, y) => x[0] - y[0]);
  let total = 0, lo = -1, hi = -1;
  for (const [s, e] of spans) {
    if (s > hi) { total += hi - lo; lo = s; hi = e; } else { hi = Math.max(hi, e); }
  }
  return (total + hi - lo) / 1000;
}"""


def in_flight(page, since: float) -> float:
    """Seconds since *since* (the page's clock, ms) during which a request was in flight: the union of
    the resource timings (the page, its scripts, Dash's callbacks), waiting for the server included."""
    return page.evaluate(IN_FLIGHT, since)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=DATA, help="where the two exports are made (and their caches)")
    ap.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to wait after the first view before the first tab (default 0: at once, plotly.js "
        "perhaps still loading; a user reading the first view gives it that time)",
    )
    ap.add_argument(
        "--server-times",
        type=Path,
        help="time every callback on the server (benchmarks/timed_dashboard.py), its lines kept in this file",
    )
    a = ap.parse_args()
    data = a.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    for name, seed, policy in (("a.sqlite", 0, "offload_qkv"), ("b.sqlite", 1, "offload_mlp")):
        if not (data / name).exists():
            make(data / name, 800_000, 200_000, 20_000, seed=seed, annotate=True, policy=policy)
    t = time.perf_counter()
    store = RunStore([data])
    for rid in store.refs:
        store.get(rid)
    print(f"analysis (cold or cached) of both runs: {time.perf_counter() - t:.1f} s")
    load_before = os.getloadavg()
    dbs = sorted(CacheFiles.of(data / name).db for name in ("a.sqlite", "b.sqlite"))  # their cached analyses
    for db in dbs:  # the what-if's first view computes its replays
        with sqlite3.connect(db) as con:
            con.execute("DROP TABLE IF EXISTS whatif")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    stored: dict[str, float] = {}  # results file -> seconds after the server's start when a what-if was in it

    def watch() -> None:
        """When the server has stored each run's first what-if (it starts the replays at start-up)."""
        while len(stored) < len(dbs) and time.perf_counter() - started < 300:
            for db in dbs:
                if db.name not in stored:
                    with contextlib.suppress(sqlite3.Error), sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                        if con.execute("SELECT count(*) FROM whatif").fetchone()[0]:
                            stored[db.name] = time.perf_counter() - started
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    clicked: list[float] = []  # seconds after the server's start when the what-if tab was first clicked
    env = dict(os.environ)
    command = [sys.executable, "-m", "dashboards"]
    if a.server_times:
        a.server_times.unlink(missing_ok=True)
        env["DASH_TIMES"] = str(a.server_times.resolve())
        command = [sys.executable, str(HERE / "timed_dashboard.py")]
    server = subprocess.Popen(
        [*command, str(data), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/"
    answers(url, 200, 0.1)
    from playwright.sync_api import sync_playwright

    results: dict[str, list[float]] = {
        "first view": [],
        "tab: per layer": [],
        "switch run (per-layer view)": [],
        "click a layer": [],
        "tab: timeline (one step)": [],
        "tab: copy streams": [],
        "tab: findings": [],
        "tab: policy trade": [],
        "tab: what-if, first (replays both runs)": [],
        "tab: what-if, cached": [],
        "tab: policies": [],
    }

    cpu: dict[str, list[float]] = {k: [] for k in results}
    served: dict[str, list[float]] = {k: [] for k in results}
    server_cpu: dict[str, list[float]] = {k: [] for k in results}  # --server-times: the callbacks' CPU, summed

    def server_lines() -> list[dict]:
        if not a.server_times or not a.server_times.exists():
            return []
        return [json.loads(line) for line in a.server_times.read_text().splitlines() if line.strip()]

    def mark() -> int:
        return len(server_lines())

    def charge(key: str, since: int) -> None:
        """The callbacks served since *since* (lines of --server-times), their CPU summed, to *key*."""
        if a.server_times:
            time.sleep(0.2)  # a callback answered as the view was drawn is written just after
            server_cpu[key].append(sum(x["cpu_ms"] for x in server_lines()[since:]) / 1000)

    def thread_time(cdp) -> float:
        """CPU seconds of the page's main thread so far (Chromium's ThreadTime metric)."""
        return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "ThreadTime")

    def tab(page, label: str, ready: str, key: str, exact: bool = True) -> None:
        m = mark()
        c0, t0, p0 = thread_time(page.cdp), time.perf_counter(), page.evaluate("performance.now()")
        page.get_by_text(label, exact=exact).first.click()
        page.wait_for_function(ready, timeout=120_000)
        results[key].append(time.perf_counter() - t0)
        cpu[key].append(thread_time(page.cdp) - c0)
        served[key].append(in_flight(page, p0))
        charge(key, m)

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            for _ in range(a.repeat):
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.cdp = page.context.new_cdp_session(page)
                page.cdp.send("Performance.enable")
                m = mark()
                c0, t0 = thread_time(page.cdp), time.perf_counter()
                page.goto(url)
                page.wait_for_function("document.querySelectorAll('#runs tr').length >= 4", timeout=120_000)
                page.wait_for_function(POLICY_READY, timeout=120_000)
                page.evaluate("performance.setResourceTimingBufferSize(100000)")
                results["first view"].append(time.perf_counter() - t0)
                cpu["first view"].append(thread_time(page.cdp) - c0)
                served["first view"].append(in_flight(page, 0.0))
                charge("first view", m)
                time.sleep(a.settle)

                tab(page, "Per layer", graph_ready("layer-graph", 4), "tab: per layer")
                before = page.evaluate(
                    "JSON.stringify(document.querySelector('#layer-graph .js-plotly-plot').data[1].y)"
                )
                page.click("#layer-run")
                m = mark()
                c0, t0, p0 = thread_time(page.cdp), time.perf_counter(), page.evaluate("performance.now()")
                page.get_by_text("offload_mlp · b · GPU 0", exact=True).last.click()
                page.wait_for_function(
                    "JSON.stringify(document.querySelector('#layer-graph .js-plotly-plot').data[1].y) !== "
                    + repr(before),
                    timeout=120_000,
                )
                results["switch run (per-layer view)"].append(time.perf_counter() - t0)
                cpu["switch run (per-layer view)"].append(thread_time(page.cdp) - c0)
                served["switch run (per-layer view)"].append(in_flight(page, p0))
                charge("switch run (per-layer view)", m)

                box = page.locator("#layer-graph .point").nth(5).bounding_box()
                m = mark()
                c0, t0, p0 = thread_time(page.cdp), time.perf_counter(), page.evaluate("performance.now()")
                page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.wait_for_selector("#layer-detail-box", timeout=120_000)
                results["click a layer"].append(time.perf_counter() - t0)
                cpu["click a layer"].append(thread_time(page.cdp) - c0)
                served["click a layer"].append(in_flight(page, p0))
                charge("click a layer", m)

                tab(
                    page,
                    "Timeline",
                    "document.querySelector('#timeline-note').innerText.includes('GPU ops')",
                    "tab: timeline (one step)",
                )
                note = page.inner_text("#timeline-note")
                tab(page, "Copy streams", graph_ready("streams-graph", 6), "tab: copy streams")
                tab(
                    page,
                    "Findings (",  # the tab (its count follows); the verdict panel has a "findings" line too
                    "document.querySelectorAll('#findings-panel .run-findings').length >= 2",
                    "tab: findings",
                    exact=False,
                )
                # these runs have no memory numbers: the frontier is a note saying so, then the policy table
                drawn = "(() => { const g = document.querySelector('#trade-frontier .js-plotly-plot');"
                drawn += " return g && (g.data.length >= 1 || (g.layout.meta && g.layout.meta.note)); })()"
                tab(page, "Policy trade", drawn, "tab: policy trade")
                first = not results["tab: what-if, first (replays both runs)"]
                key = "tab: what-if, first (replays both runs)" if first else "tab: what-if, cached"
                if first:
                    clicked.append(time.perf_counter() - started)
                # drawn with every selected run replayed: no run is still "computing" (a figure of the runs
                # done so far has its 4 traces already)
                tab(
                    page,
                    "What-if",
                    graph_ready("whatif-graph", 4) + " && !document.querySelector('#whatif-note .computing')",
                    key,
                )
                tab(page, "Policies", POLICY_READY, "tab: policies")
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)
    print(f"timeline: {note}")
    head = f"{'view':40s} {'median s':>9s} {'max s':>7s} {'page CPU s':>11s} {'requests s':>11s}"
    print(head + (f" {'server CPU s':>13s}" if a.server_times else "") + f"  (n={a.repeat})")
    for name, vals in results.items():
        if not vals:
            continue
        med = statistics.median
        line = f"{name:40s} {med(vals):9.2f} {max(vals):7.2f} {med(cpu[name]):11.2f} {med(served[name]):11.2f}"
        print(line + (f" {med(server_cpu[name]):13.3f}" if server_cpu[name] else ""))
    done = ", ".join(f"{name} {t:.1f} s" for name, t in sorted(stored.items())) or "not within the run"
    print(
        f"the first what-if's replays (started by the server at start-up) were stored: {done} after the server's "
        f"start; the what-if tab was first clicked {clicked[0] if clicked else float('nan'):.1f} s after it"
    )
    print("page CPU: CPU time of the page's main thread (Chromium's ThreadTime), median")
    loads = " to ".join(f"{x[0]:.1f} (1 min), {x[1]:.1f} (5 min)" for x in (load_before, os.getloadavg()))
    print(f"load average of this machine ({os.cpu_count()} CPUs), at the start and at the end: {loads}")
    print("requests: time with a request to the server in flight (the page, its scripts, callbacks), median")


if __name__ == "__main__":
    main()
