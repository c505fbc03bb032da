"""Every number agrees with every other (issue 30): one run, read in analyze's text and --json,
findings (text and --json), whatif (text and --json), compare's pull-request comment and the
dashboard in a real browser; a number shown in two of them is one number, or its two definitions are
named beside it.  The built run is a SYNTHETIC demonstration run (two GPUs, steps, layers, copies,
stream waits, a blocking call per step); the real traces go through every view but the browser."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profiler.analysis.findings.rules.text import dur
from profiler.report.findings_text import saving_text
from profiler.report.text import offload_units
from profiler.synthetic.demo import StepModel, write_demo_runs
from profiler.units import human_time
from tests.helpers.cli import run_cli
from tests.helpers.dashboard import bar_units, dashboard, open_page, unit_of

MODEL = replace(StepModel(), layers=2, steps=3)
TRACE = "synthetic-trace.sqlite"


def cli_json(*args: str) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def cli_text(*args: str) -> str:
    proc = run_cli(*args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def device_blocks(text: str, marker: str = "Device ") -> dict[str, str]:
    """The text of each ``Device N`` block of analyze's or whatif's output."""
    parts = re.split(rf"^{marker}(\d+)", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def ms3(ns: int) -> str:
    """A time as compare's comment writes it: milliseconds with three decimals."""
    return f"{ns / 1e6:.3f}"


def t(ns: int) -> str:
    """A time as analyze's and whatif's lines write it: in its own unit (``188 ms``, ``0 ns``)."""
    return human_time(ns, nanoseconds=True)


def check_views(trace: Path) -> tuple[dict, dict]:
    """Read *trace* in every terminal view and assert the numbers they share agree; return the
    analyze --json documents (plain and --by step) for the caller's own checks."""
    doc = cli_json("analyze", str(trace))
    by_step = cli_json("analyze", "--by", "step", str(trace))["steps"]
    text = cli_text("analyze", str(trace))
    found = cli_json("findings", str(trace))["runs"][0]
    found_text = cli_text("findings", str(trace))
    wi = cli_json("whatif", str(trace))
    wi_text = cli_text("whatif", str(trace))
    devices = doc["devices"]

    # analyze text = analyze --json: per device, per direction, exposed and busy copy time; stalls
    blocks = device_blocks(text)
    for dev, d in devices.items():
        block = blocks[dev]
        if d["copies"]["offload"]["count"]:
            u = offload_units(d["copies"])  # the table's unit, chosen by its busy time
            assert f"busy {u.time}" in block
        for cls in ("h2d", "d2h", "offload"):
            m = d["copies"][cls]
            if not m["count"]:
                continue
            row = re.search(rf"^{cls}\s+(.*)$", block, flags=re.M)
            assert row, (dev, cls)
            cells = row.group(1).split()
            assert u.t(m["busy_ns"]) in cells and u.t(m["exposed_ns"]) in cells, (dev, cls, cells)
        waits = d["stalls"]["waits"]["total"]
        stalled = d["stalls"]["by_blocker"]["offload"]["stall_ns"]
        if waits:
            assert f"stalled by copies: {t(stalled)}" in block, dev

    # analyze --json's findings = findings --json, and every finding's saving and attributed time in
    # both texts as the json says them
    assert [(f["id"], f["saving_ns"], f["attributed_ns"]) for f in doc["findings"]["findings"]] == [
        (f["id"], f["saving_ns"], f["attributed_ns"]) for f in found["findings"]
    ]
    assert doc["findings"]["copy_free"] == found["copy_free"]
    for f in found["findings"]:
        head = f"{f['id']} ({saving_text(f)})" if f["saving_ns"] is not None else f"{f['id']} (attributed"
        flat = " ".join(found_text.split())
        assert head in flat and head in " ".join(text.split()), f["id"]
        if f["attributed_ns"] is not None:
            assert f"attributed {dur(f['attributed_ns'])}" in flat, f["id"]
        if f["id"] == "exposed-copies":  # the rule's time is the device's exposed copy time
            assert f["attributed_ns"] == devices[f["where"]["device"]]["copies"]["offload"]["exposed_ns"]
        if f["id"] in ("kernels-slowed-by-copies", "nccl-slowed-by-copies"):
            kb = devices[f["where"]["device"]]["kernels_beside_copies"]
            assert f["evidence"]["all_groups_excess_ns"] == kb["excess_ns"]

    # whatif = analyze: each device's window, its stalls, the copy-free replay of the findings
    wi_blocks = device_blocks(wi_text)
    for dev, d in devices.items():
        w = wi["devices"][dev]
        assert w["measured_span_ns"] == d["span_ns"] == found["copy_free"]["devices"][dev]["window_ns"]
        assert w["copy_free_span_ns"] == found["copy_free"]["devices"][dev]["copy_free_span_ns"]
        assert f"copy-free:         {t(d['span_ns'])} -> {t(w['copy_free_span_ns'])}" in wi_blocks[dev]
        if d["stalls"]["waits"]["total"]:
            assert f"stalled by copies: {t(d['stalls']['by_blocker']['offload']['stall_ns'])}" in wi_blocks[dev]
        else:  # analyze says stalls cannot be measured: whatif says so too, never 0.000 -> 0.000
            assert "stalled by copies: not measured" in wi_blocks[dev]
        # whatif's steps are analyze's steps: the same count, the same included median
        steps = w["steps"]
        assert len(steps) == len(by_step["steps"]), dev
        included = [s["measured_ns"] for s in steps if not s["excluded"]]
        if included:
            assert int(np.median(included)) == by_step["median_included_step_ns"], dev
    return doc, by_step


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A head run (offload_all, the demo model) and its base (the same model over a link fast enough to
    hide every copy)."""
    root = tmp_path_factory.mktemp("cross")
    head = write_demo_runs(root / "head", MODEL, ("offload_all",))[0]
    base = write_demo_runs(root / "base", replace(MODEL, link_gbps=5_000.0), ("offload_all",))[0]
    return base, head


def test_every_view_agrees_on_a_built_run(built):
    base, head = built
    doc, by_step = check_views(head / TRACE)
    assert doc["findings"]["findings"], "the demo run has findings to compare"
    # compare's comment lists the findings new in head with the saving findings --json gives them
    md = cli_text("compare", "--format", "markdown", str(base), str(head))
    # and its exposed copy time is the per-step median of analyze --by step (every GPU's added)
    steps = by_step["steps"]
    per_step = [sum(d["offload"]["exposed_ns"] for d in s["devices"].values()) for s in steps if not s["excluded"]]
    table = [line.split(" | ") for line in md.splitlines() if line.startswith("| ")]
    column = table[0].index("exposed copy time")
    row = next(r for r in table if r[0] == "| `offload_all`")
    assert row[column].split(" → ")[1].startswith(f"{ms3(int(np.median(per_step)))} ms"), row[column]
    new = [f for f in doc["findings"]["findings"] if f"`{f['id']}`" in md]
    assert new
    for f in new:
        if f["saving_ns"] is not None:
            assert f"saves {dur(f['saving_ns'])}" in md, f["id"]


@pytest.mark.shared
@pytest.mark.parametrize(
    "name",
    [
        "gpu4__nsys_vectorAdd_streams_10000000__7498cc2.sqlite",
        "flexgen__nsight_report7.sqlite",
    ],
)
def test_every_view_agrees_on_real_traces(shared_traces, name):
    check_views(shared_traces / name)


@pytest.mark.browser
def test_the_dashboard_shows_the_same_numbers(browser, built):
    _, head = built
    doc = cli_json("analyze", str(head / TRACE))
    devices, found = doc["devices"], doc["findings"]["findings"]
    with dashboard(head.parent) as (url, _):
        page = open_page(browser, url, 2, bars=2)

        # the runs table: exposed copy time (both directions, counted once), steps, median step
        heads = page.evaluate("[...document.querySelectorAll('#runs th')].map(e => e.innerText.trim())")
        exposed_head = next(h for h in heads if h.startswith("exposed copies"))
        assert "D2H and H2D as one, whole capture" in exposed_head  # the bars below show each direction
        div = unit_of(exposed_head)
        cells = page.evaluate(
            "[...document.querySelectorAll('#runs tr')].map(r => Object.fromEntries("
            "[...r.querySelectorAll('td[data-dash-column]')].map(c => [c.dataset.dashColumn, c.innerText.trim()])))"
        )
        rows = {c["device"].split(" · ")[0]: c for c in cells if c.get("device")}
        for dev, d in devices.items():
            row = rows[f"GPU {dev}"]
            assert float(row["exposed"].replace(",", "")) == pytest.approx(
                d["copies"]["offload"]["exposed_ns"] / div, rel=5e-4
            )
            assert int(row["steps"]) == sum(1 for s in doc_steps(head) if not s["excluded"])

        # the policy bars: each direction's exposed and stalled time = analyze --json, in the head's unit
        bar_heads = page.evaluate("[...document.querySelectorAll('#policy-bars .head strong')].map(e => e.textContent)")
        t_div = bar_units(page)[0]  # the bars' unit (each value beside its bar carries its own)
        assert "per direction" in bar_heads[1]
        bars = {
            (r, ser): v
            for r, ser, v in page.evaluate(
                "[...document.querySelectorAll('#policy-bars .bar')]"
                ".map(b => [b.dataset.row, b.dataset.series, +b.dataset.value])"
            )
        }
        for dev, d in devices.items():
            label = f"offload_all · synthetic · GPU {dev}"
            for cls, name in (("d2h", "D2H"), ("h2d", "H2D")):
                assert bars[(label, f"{name} exposed")] == pytest.approx(
                    d["copies"][cls]["exposed_ns"] / t_div, rel=1e-12
                )
                stall = d["stalls"]["by_blocker"][cls]["stall_ns"]
                assert bars[(label, f"{name} stalled")] == pytest.approx(stall / t_div, rel=1e-12)

        # kernels slowed by copies: the kernel time lost of analyze --json
        lost = page.evaluate(
            "[...document.querySelectorAll('#policy-kernels tr')].map(r => [...r.querySelectorAll('td')]"
            ".map(c => c.innerText.trim()))"
        )
        for dev, d in devices.items():
            kb = d["kernels_beside_copies"]
            row = next(r for r in lost if r and r[0].endswith(f"GPU {dev}"))
            assert human_time(kb["excess_ns"], nanoseconds=True) in row, (dev, row)

        # the findings: in the summary's order, each with the saving and attributed time findings --json gives
        page.get_by_text("Findings (", exact=False).first.click()
        page.wait_for_selector("#findings-panel .finding", timeout=30_000)
        shown = page.evaluate(
            "[...document.querySelectorAll('#findings-panel .finding')].map(f => [f.dataset.rule, "
            "f.querySelector('.cost').dataset.saving, f.querySelector('.cost').dataset.attributed, "
            "f.querySelector('.cost').innerText])"
        )
        assert [r for r, *_ in shown] == [f["id"] for f in found]
        for (rule, saving, attributed, words), f in zip(shown, found, strict=True):
            assert saving == ("" if f["saving_ns"] is None else str(f["saving_ns"])), rule
            assert attributed == ("" if f["attributed_ns"] is None else str(f["attributed_ns"])), rule
            assert words == saving_text(f), rule

        # the what-if view states the findings' copy-free bound per GPU (from the run summary)
        page.click("#whatif-tab")
        page.wait_for_selector(".copy-free", timeout=60_000)
        said = " ".join(page.evaluate("[...document.querySelectorAll('.copy-free')].map(e => e.innerText)"))
        for dev, cf in doc["findings"]["copy_free"]["devices"].items():
            want = f"GPU {dev}: copy-free (every h2d/d2h copy removed, nothing waits for them): the GPU span "
            want += f"{human_time(cf['saving_ns'], nanoseconds=True)} shorter, "
            assert want + f"{human_time(cf['step_saving_ns'], nanoseconds=True)} per step" in said, said
        page.close()


def doc_steps(run: Path) -> list[dict]:
    return cli_json("analyze", "--by", "step", str(run / TRACE))["steps"]["steps"]
