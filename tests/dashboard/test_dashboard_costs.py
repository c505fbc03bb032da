"""The dashboard's views of what the copies cost, in a real headless Chromium: stalls beside exposed
time, the what-if for another host link, bandwidth by context per copy stream, the findings (and
their links to the evidence), and the policy trade (frontier, per-policy table, planned vs moved,
a profile-step plan).  Every drawn number is compared with the analysis function that defines it;
no overlapping labels, no empty chart without a note, a screenshot of every view."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from profiler.analysis.policies import frontier, plan_table, planned_vs_moved, policy_table
from profiler.analysis.whatif import step_medians, trace_whatif
from profiler.capture import step_module
from profiler.runs.discover import discover
from profiler.runs.result import collect
from profiler.runs.store import CacheFiles
from profiler.stored.folder import manifest_of
from profiler.synthetic.demo import StepModel, write_demo_runs
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.dashboard import DIVISORS, bar_units, check_page, dashboard, open_page, pick, wait_graph
from tests.helpers.policy_runs import AOT, A, MiB, step_trace

pytestmark = pytest.mark.browser
DEMO = replace(StepModel(), layers=3, steps=2)
AOT_RUNS = {"offload_x": ("aaa111", 10, 1), "none": ("bbb222", 30, 2)}  # policy: (id, peak GiB, folder time)


def aot_run(folder: Path, policy: str, rid: str, peak_gib: int, n: int) -> Path:
    """A run folder of the real GPU compiler's plan (../shared/hlo) with a trace that moves its copies,
    measured device memory and a memory limit (as tests/runs/test_policies.py's plan_run)."""
    run = folder / f"20260101T00000{n}-{policy}-{rid}"
    dump = run / "xla_dump"
    dump.mkdir(parents=True)
    (dump / "module_0001.jit_train_step.sm_9.0a_gpu_after_optimizations.txt").write_text(AOT.read_text())
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    b.domain(1, "profile-step", tid=A)
    for s in range(3):
        step_trace(b, s * 2 * 1_000_000, s)
    b.write(run / "trace.sqlite")
    manifest = {
        "policy": policy,
        "devices": [{"id": 0, "kind": "NVIDIA H100 80GB HBM3"}],
        "runtime": {
            "device_memory": {
                "available": True,
                "devices": [{"id": 0, "peak_bytes_in_use": peak_gib * 2**30, "bytes_limit": 60 * 2**30}],
            }
        },
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    step_module.record(run, dump, own_dump=False)
    return run


def plan_doc(folder: Path) -> Path:
    """A profile-step plan folder: plan.json as capture/plan.py writes it, for two policies."""
    from profiler.xla.compiled import load_module
    from profiler.xla.plan import offload_plan

    module, _, _ = load_module(AOT)
    plan = offload_plan(module)
    out = folder / "plans" / "20260101T000000-h100-ccc333"
    out.mkdir(parents=True)
    results = []
    for policy, temp in (("none", 70 * 10**9), ("offload_x", 20 * 10**9)):
        memory = {
            "argument_size_in_bytes": 2 * 10**9,
            "output_size_in_bytes": 10**9,
            "alias_size_in_bytes": 10**9,
            "temp_size_in_bytes": temp,
            "host_argument_size_in_bytes": 0,
            "host_output_size_in_bytes": 0,
            "host_alias_size_in_bytes": 0,
            "host_temp_size_in_bytes": 8 * MiB if policy != "none" else 0,
        }
        results.append(
            {
                "policy": policy,
                "batch": 8,
                "dir": str(out / f"{policy}-b8"),
                "notes": [],
                "status": "ok",
                "compiled": {"module": "jit_train_step", "memory": memory, "cost": {"flops": 3e12}},
                "plan": plan if policy != "none" else None,
            }
        )
    doc = {
        "target": {"key": "h100", "label": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 10**9},
        "label": "compiled for NVIDIA H100 80GB HBM3, not measured",
        "results": results,
    }
    (out / "plan.json").write_text(json.dumps(doc))
    return out / "plan.json"


@pytest.fixture(scope="module")
def costs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("costs")
    write_demo_runs(folder, DEMO, ("none", "offload_all"))
    if AOT.is_file():
        for policy, (rid, peak, n) in AOT_RUNS.items():
            aot_run(folder, policy, rid, peak, n)
        plan_doc(folder)
    return folder


def summaries(folder: Path) -> dict[str, dict]:
    """Every run's summary by its folder name, as profile-step analyze computes it."""
    out = {}
    for trace in sorted(folder.glob("*/*.sqlite")):
        if trace.name.endswith(".profile-step.db"):
            continue
        out[trace.parent.name] = collect(open_trace(trace), manifest_of(trace))
    return out


def layout_of(page, graph: str, key: str):
    return page.evaluate(f"document.querySelector('#{graph} .js-plotly-plot').layout.{key}")


def data_of(page, graph: str) -> list[dict]:
    return page.evaluate(f"document.querySelector('#{graph} .js-plotly-plot').data")


def approx(v: float | None):
    return None if v is None else pytest.approx(v, rel=1e-12)


def shows(page, dropdown: str, text: str) -> None:
    """Wait until *dropdown* shows *text* (its value set by a callback, its label drawn)."""
    page.wait_for_function(
        f"(document.querySelector('#{dropdown}') || {{innerText: ''}}).innerText.includes({text!r})", timeout=30_000
    )


def test_what_the_copies_cost(browser, costs):
    have_aot = AOT.is_file()
    runs = summaries(costs)
    demo = runs["synthetic-4-offload_all"]
    n_rows = 4 + (2 if have_aot else 0)
    with dashboard(costs) as (url, _):
        page = open_page(browser, url, n_rows)
        page.wait_for_function(
            f"document.querySelectorAll('#policy-bars .row-label').length == {n_rows}", timeout=60_000
        )

        # policies: stalled by copies per GPU and direction = the device's stalls object, in the copy time's unit
        heads = page.evaluate("[...document.querySelectorAll('#policy-bars .head strong')].map(e => e.textContent)")
        assert heads[2].startswith("stalled by copies")
        div = bar_units(page)[0]  # the copy time's unit
        bars = {
            (r, s): v
            for r, s, v in page.evaluate(
                "[...document.querySelectorAll('#policy-bars .bar')]"
                ".map(b => [b.dataset.row, b.dataset.series, +b.dataset.value])"
            )
        }
        for dev in ("0", "1"):
            for d, dl in (("d2h", "D2H"), ("h2d", "H2D")):
                want = demo["stalls"][dev]["by_blocker"][d]["stall_ns"] / div
                assert bars[(f"offload_all · synthetic · GPU {dev}", f"{dl} stalled")] == pytest.approx(want, rel=1e-12)
        assert demo["stalls"]["0"]["by_blocker"]["d2h"]["stall_ns"] > 0
        if have_aot:  # no stream waits in those exports: said, not drawn as zero
            assert "D2H: no stream waits" in page.inner_text("#policy-bars")
        check_page(page, "7-policies-stalls")

        # findings: every finding of the selected runs, most severe first within a run, with what to try
        page.get_by_text("Findings (", exact=False).first.click()
        page.wait_for_selector("#findings-panel .finding", timeout=30_000)
        shown = page.evaluate(
            "[...document.querySelectorAll('#findings-panel .finding')]"
            ".map(f => [f.closest('.run-findings').dataset.run, f.dataset.rule, f.dataset.severity, f.dataset.view])"
        )
        found = demo["findings"]["findings"]
        folder_of = {ref.id: ref.trace.parent.name for ref in discover([costs])}
        per_run: dict[str, list] = {}
        for rid, rule, severity, view in shown:
            per_run.setdefault(folder_of[rid], []).append((rule, severity, view))
        for name, got in per_run.items():
            assert got == [(f["id"], f["severity"], f["view"]) for f in runs[name]["findings"]["findings"]]
        assert per_run["synthetic-4-offload_all"] and found
        ranks = [("problem", "warning", "info").index(sev) for _, _, sev, _ in shown]
        assert ranks[0] == min(ranks)  # the run with the most severe finding comes first
        total = sum(len(s["findings"]["findings"]) for s in runs.values())
        assert len(shown) == total
        assert f"Findings ({total})" in page.inner_text("#tabs")
        text = page.inner_text("#findings-panel")
        assert found[0]["verdict"] in text and found[0]["try"] in text
        assert "Could not decide: slow-link" in text  # the none run's skipped rule, in a muted line
        # a finding's evidence is sent when first unfolded: one line per item of the summary's evidence
        first = page.locator("#findings-panel .finding").first
        rid = first.evaluate("f => f.closest('.run-findings').dataset.run")
        evidence = runs[folder_of[rid]]["findings"]["findings"][0]["evidence"]  # the panel's order (above)
        assert evidence and first.locator(".evidence li").count() == 0
        first.locator(".evidence summary").click()
        page.wait_for_function(
            f"document.querySelectorAll('#findings-panel .finding .evidence li').length == {len(evidence)}",
            timeout=30_000,
        )
        assert first.locator(".evidence li").all_inner_texts() == [f"{k}: {v}" for k, v in evidence.items()]
        check_page(page, "8-findings")

        # a finding's button opens the view of its evidence with its run and GPU selected
        layer_finding = next(f for f in found if f["view"] == "layers")
        demo_rid = next(r for r, name in folder_of.items() if name == "synthetic-4-offload_all")
        in_demo = f"#findings-panel .run-findings[data-run='{demo_rid}']"
        button = page.locator(f"{in_demo} .finding[data-view='layers'] button").first
        # a run-wide finding of a two-GPU run: it opens GPU 0 and says its numbers are over both
        assert button.inner_text() == "Show GPU 0 in the Per layer tab (the finding is over all GPUs)"
        button.click()
        page.wait_for_function(
            "document.querySelector('#tabs .tab--selected').innerText.includes('Per layer')", timeout=30_000
        )
        wait_graph(page, "layer-graph", "gd.data.length == 5")
        shows(page, "layer-run", "offload_all · synthetic · GPU 0")
        assert layer_finding["id"] in ("exposed-at-boundaries", "stall-hotspot")

        # per layer: the stalled series = the layers' stall_ns on that GPU (analyze --by layer)
        data = {t["name"]: t for t in data_of(page, "layer-graph")}
        stalled = data["stalled by copies"]
        div = DIVISORS[layout_of(page, "layer-graph", "yaxis.title.text").split("(")[1].rstrip(")")]
        want = [demo["layers"][n]["devices"]["0"]["offload"]["stall_ns"] / div for n in stalled["x"]]
        assert stalled["y"] == [pytest.approx(v, rel=1e-12) for v in want]
        assert max(want) > 0
        assert "Stalled by copies" in page.inner_text("#layer-hint")
        check_page(page, "9-layers-stalls")

        # the timeline button of a finding: that tab, that run
        page.get_by_text("Findings (", exact=False).first.click()
        page.wait_for_selector(f"{in_demo} .finding[data-view='timeline'] button", timeout=30_000)
        page.locator(f"{in_demo} .finding[data-view='timeline'] button").first.click()
        page.wait_for_function(
            "document.querySelector('#tabs .tab--selected').innerText.includes('Timeline')", timeout=30_000
        )
        page.wait_for_function("document.querySelector('#timeline-note').innerText.includes('GPU 0')", timeout=30_000)
        shows(page, "timeline-run", "offload_all · synthetic · GPU 0")

        # copy streams: GB/s alone, beside kernels, beside other copies, mixed = streams[].contexts
        page.get_by_text("Copy streams", exact=True).click()
        pick(page, "streams-run", "offload_all · synthetic · GPU 1")
        wait_graph(page, "streams-graph", "gd.data.length == 6 && gd.data[1].y[0] !== undefined")
        page.wait_for_timeout(500)
        traces = {t.get("name"): t for t in data_of(page, "streams-graph")}
        streams = demo["streams"]["1"]
        for ctx, name in (("alone", "alone"), ("kernels", "beside kernels"), ("copies", "beside other copies")):
            assert traces[name]["y"] == [approx(s["contexts"][ctx]["gbps"]) for s in streams]
        assert traces["all copies"]["y"] == [approx(s["gbps"]) for s in streams]
        assert any(s["contexts"]["alone"]["gbps"] for s in streams) and any(
            s["contexts"]["kernels"]["gbps"] for s in streams
        )
        check_page(page, "10-streams-contexts")

        # what-if: copies at half their recorded time; predicted median step = whatif's, per (run, GPU)
        page.click("#whatif-tab")
        pick(page, "whatif-to", "multiply every copy's time by a number")
        page.wait_for_function("document.querySelector('#whatif-value').value == '0.5'", timeout=30_000)
        # the figure of factor 0.5, every run replayed: the default link's was there already (the server
        # replays the first view's runs at start-up)
        half = "(gd.layout.title || {}).text && gd.layout.title.text.includes('every copy taking 0.5x')"
        computing = "document.querySelector('#whatif-note .computing')"
        wait_graph(
            page, "whatif-graph", f"gd.data.length == 4 && gd.data[1].y.length == {n_rows} && {half} && !{computing}"
        )
        fig = data_of(page, "whatif-graph")
        s_div = DIVISORS[layout_of(page, "whatif-graph", "xaxis.title.text").split("(")[1].rstrip(")")]
        g_div = DIVISORS[layout_of(page, "whatif-graph", "xaxis2.title.text").split("(")[1].rstrip(")")]
        predicted = dict(zip(fig[1]["y"], fig[1]["x"], strict=True))
        spans = dict(zip(fig[3]["y"], fig[3]["x"], strict=True))
        for folder, label in (
            ("synthetic-4-offload_all", "offload_all · synthetic"),
            ("synthetic-0-none", "none · synthetic"),
        ):
            med = step_medians(trace_whatif(open_trace(next((costs / folder).glob("*.sqlite"))), 0.5))
            for dev in ("0", "1"):
                assert predicted[f"{label} · GPU {dev}"] == pytest.approx(med[dev]["predicted_ns"] / s_div, rel=1e-12)
                assert spans[f"{label} · GPU {dev}"] == pytest.approx(med[dev]["span_ns"] / g_div, rel=1e-12)
        assert (
            predicted["offload_all · synthetic · GPU 0"]
            < dict(zip(fig[0]["y"], fig[0]["x"], strict=True))["offload_all · synthetic · GPU 0"]
        )
        note = page.inner_text("#whatif-note")
        assert "every h2d/d2h copy takes 0.5x its recorded time" in note and "host synchronization modeled" in note
        check_page(page, "11-whatif")
        # cached with the run's analysis: one row per factor
        db = CacheFiles.of(next((costs / "synthetic-4-offload_all").glob("*.sqlite"))).db
        with sqlite3.connect(db) as con:
            keys = [k for (k,) in con.execute("SELECT key FROM whatif")]
        assert any("/0.5/host" in k for k in keys)

        # policy trade: the frontier's points = policies.frontier of the selected runs
        page.get_by_text("Policy trade", exact=True).click()
        wait_graph(page, "trade-frontier", "gd.data.length >= 1")
        order = ["synthetic-0-none", "synthetic-4-offload_all"] + (
            [p.name for p in sorted(costs.glob("2026*"))] if have_aot else []
        )
        points = frontier(policy_table([runs[o] for o in order]))
        x_div = DIVISORS[layout_of(page, "trade-frontier", "xaxis.title.text").split("(")[1].rstrip(")")]
        y_div = DIVISORS[layout_of(page, "trade-frontier", "yaxis.title.text").split("(")[1].rstrip(")")]
        drawn = {}
        for t in data_of(page, "trade-frontier"):
            for x, y, c in zip(t["x"], t["y"], t["customdata"], strict=True):
                drawn[c[0]] = (x, y, c[6], t["name"])
        labels = ["none · synthetic", "offload_all · synthetic"] + (
            ["offload_x · aaa111", "none · bbb222"] if have_aot else []
        )
        for p, label in zip(points, labels, strict=True):
            x, y, cost, source = drawn[label]
            assert x == pytest.approx(p["step_ns"] / x_div, rel=1e-12)
            assert y == pytest.approx(p["memory_bytes"] / y_div, rel=1e-12)
            assert cost == p["copy_cost_ns"]
            assert source.startswith("peak measured")
        text = page.inner_text("#trade-frontier-note")
        assert "CUDA memory events (trace)" in text
        if have_aot:
            shapes = layout_of(page, "trade-frontier", "shapes")
            assert [s["y0"] for s in shapes] == [pytest.approx(60 * 2**30 / y_div)]
            assert "memory_stats()" in text
        assert "no compiled.json in the run folder" in page.inner_text("#trade-table-box")
        check_page(page, "12-trade")

        if have_aot:
            # TFLOP/s: the compiled runs only; the demo runs are left out, and the note says why
            page.get_by_text("TFLOP/s per device", exact=True).click()
            page.wait_for_function(
                "document.querySelector('#trade-frontier .js-plotly-plot').layout.xaxis.title.text.startsWith('TFLOP')",
                timeout=30_000,
            )
            drawn = {
                c[0]: x for t in data_of(page, "trade-frontier") for x, c in zip(t["x"], t["customdata"], strict=True)
            }
            assert drawn == {
                lab: pytest.approx(p["tflops"], rel=1e-12) for p, lab in zip(points, labels, strict=True) if p["tflops"]
            }
            assert "no FLOPs per step" in page.inner_text("#trade-frontier-note")

            # planned vs moved per layer: the first run with a plan; = policies.planned_vs_moved
            wait_graph(page, "pvm-graph", "gd.data.length == 4")
            assert "offload_x · aaa111" in page.inner_text("#pvm-run")
            pvm = planned_vs_moved(runs[order[2]])
            b_div = DIVISORS[layout_of(page, "pvm-graph", "yaxis.title.text").split("(")[1].rstrip(")")]
            traces = {t["name"]: t for t in data_of(page, "pvm-graph")}
            assert traces["D2H planned"]["y"] == [pytest.approx(r["planned_d2h_bytes"] / b_div) for r in pvm["rows"]]
            assert traces["D2H moved"]["y"] == [pytest.approx(r["moved_d2h_bytes"] / b_div) for r in pvm["rows"]]
            assert "d2h planned, not seen" in page.inner_text("#pvm-flags")

            # the profile-step plan given as an input: compiled memory per policy against the usable memory
            wait_graph(page, "plan-graph", "gd.data.length == 2")
            tab = plan_table(json.loads(next(costs.glob("plans/*/plan.json")).read_text()))
            m_div = DIVISORS[layout_of(page, "plan-graph", "yaxis.title.text").split("(")[1].rstrip(")")]
            dev = data_of(page, "plan-graph")[0]
            assert dev["y"] == [pytest.approx(r["device_bytes"] / m_div) for r in tab["rows"]]
            assert "at batch 8: offload_x fits" in page.inner_text("#plan-note")
            assert "NO" in page.inner_text("#plan-table-box")
            check_page(page, "13-trade-plan")
