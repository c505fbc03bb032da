"""One answer (issue 46): the verdict printed once and first, never cut, the plan's line beside it; and
the same verdict on the terminal and the dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from profiler.report.verdict_text import render_verdict, verdict_lines
from profiler.runs.verdict import verdict
from profiler.units import COLUMNS
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "sample_traces" / "demo-synthetic"
SYNTHETIC_RUNS = [str(DEMO / f"synthetic-{n}") for n in ("0-none", "2-offload_qkv", "3-offload_mlp")]


def _run(policy: str, steps_ms: list[int]) -> dict:
    """A CPU run's document with *steps_ms* as its included steps, no memory known."""
    ns = [ms * 1_000_000 for ms in steps_ms]
    return {
        "policy": policy,
        "trace": f"/x/{policy}/trace.sqlite",
        "steps": [{"name": f"step={i}", "duration_ns": d, "excluded": None} for i, d in enumerate(ns)],
        "median_step_ns": sorted(ns)[len(ns) // 2],
        "copies": {d: {"bytes": 0} for d in ("d2h", "h2d", "offload")},
        "compiled": {"cost": None, "memory": None, "plan": None, "notes": [], "fingerprint": None, "platform": "cpu"},
    }


def test_a_long_verdict_line_is_wrapped_not_cut():
    """The fastest of several CPU runs, with no memory limit: the policies' line ends with two caveats and
    runs past 160 columns; the terminal wraps it, every word kept, and --wide keeps it whole."""
    from profiler.analysis.policies import policy_table

    runs = [_run("offload_everything_" + p, s) for p, s in (("a", [3, 3, 4]), ("b", [9, 9, 9]))]
    v = verdict(runs, policy_table(runs))
    first = verdict_lines(v)[0][1]
    assert len(first) > COLUMNS and first.endswith("CPU runs: they say nothing about a GPU")
    block = render_verdict(v)
    assert "…" not in block and all(len(ln) <= COLUMNS for ln in block.splitlines())
    assert " ".join(ln.strip() for ln in block.splitlines()).startswith(first)
    assert render_verdict(v, wide=True).splitlines()[0] == first


def test_verdict_only_and_no_verdict_split_analyze_in_two():
    """``analyze --verdict-only`` prints the verdict and nothing else; ``--no-verdict`` the rest: together
    the whole output, the verdict once."""
    whole = run_cli("analyze", *SYNTHETIC_RUNS)
    only = run_cli("analyze", "--verdict-only", *SYNTHETIC_RUNS)
    rest = run_cli("analyze", "--no-verdict", *SYNTHETIC_RUNS)
    assert whole.returncode == only.returncode == rest.returncode == 0
    doc = json.loads(run_cli("analyze", "--json", *SYNTHETIC_RUNS).stdout)
    assert only.stdout == render_verdict(doc["verdict"]) + "\n"
    assert whole.stdout == only.stdout + "\n" + rest.stdout
    assert "Verdict" not in rest.stdout and rest.stdout.startswith("policy ")
    both = run_cli("analyze", "--verdict-only", "--no-verdict", *SYNTHETIC_RUNS)
    assert both.returncode == 2 and "not allowed with" in both.stderr and "Traceback" not in both.stderr


def test_one_trace_with_verdict_only():
    trace = DEMO / "synthetic-2-offload_qkv" / "synthetic-trace.sqlite"
    doc = json.loads(run_cli("analyze", "--json", str(trace)).stdout)
    assert run_cli("analyze", "--verdict-only", str(trace)).stdout == render_verdict(doc["verdict"]) + "\n"
    assert not run_cli("analyze", "--no-verdict", str(trace)).stdout.startswith("Verdict")


def test_the_plan_says_its_answer_in_one_line_first():
    """The plan's line: offloading against remat at the largest batch on the first link, what does not fit
    there, and how many cases follow."""
    from profiler.analysis.offload_vs_remat import offload_vs_remat
    from profiler.report.predict_text import plan_line

    def pred(policy: str, batch: int, link: str, step_ms: float, fits: bool) -> dict:
        return {"policy": policy, "batch": batch, "link": link, "link_name": link.upper(), "fits": fits,
                "predicted_step_ns": int(step_ms * 1e6), "predicted_exposed_ns": 0}  # fmt: skip

    preds = [
        pred(p, b, link, ms * b, fits=not (p == "none" and b == 16))
        for b in (4, 16)
        for link in ("pcie5", "c2c")
        for p, ms in (("none", 20), ("remat", 30), ("offload_mlp", 24))
    ]
    tab = {"label": "compiled for H100, not measured", "offload_vs_remat": offload_vs_remat(preds)}
    line = plan_line(tab)
    assert line is not None and line.startswith("The plan (compiled for H100, not measured): batch 16, PCIE5: ")
    assert "offloading beats rematerialization" in line and "offload_mlp 384.00 ms" in line
    assert line.endswith("; too big at this batch: none (3 other batch/link cases below)")
    assert plan_line({"label": "x", "offload_vs_remat": []}) is None


def test_the_quickstart_prints_the_answer_first_and_hands_the_dashboard_its_runs():
    """The script: the verdict (--verdict-only) and the plan's line under '== The answer ==' before any
    detail; the details without a second verdict; the dashboard opened on the same runs (--first)."""
    text = (ROOT / "scripts" / "quickstart.sh").read_text()
    answer = text.index('echo "== The answer')
    assert text.index("profile-step analyze --verdict-only") > answer
    assert answer < text.index("== The details")
    details = text[answer:]
    commands = [ln for ln in details.splitlines() if not ln.lstrip().startswith("echo")]  # not what it prints
    analyses = [ln for ln in commands if "profile-step analyze" in ln and "--json" not in ln]
    assert len(analyses) >= 3
    assert sum("--verdict-only" in ln for ln in analyses) == 1
    assert all("--no-verdict" in ln for ln in analyses if "--verdict-only" not in ln)
    assert 'profile-step dashboard "${first[@]}"' in text and "first+=(--first" in text
    # the plan's line says its model is another than the answer's runs, in the words of its own arguments
    model = dict(re.findall(r"--(layers|d-model|seq) (\d+)", text[text.index("plan_model=(") :].splitlines()[0]))
    said = re.search(r'plan_said="([^"]*)"', text).group(1)
    assert said.startswith(f"{model['layers']} layers, d_model {model['d-model']}, sequence {model['seq']}")
    assert '"${plan_model[@]}"' in text and "another model than the runs above" in text


# --- the dashboard's verdict: the terminal's, over the runs it names --------------------------------
def _text(node: Any) -> str:
    """The visible text of a Dash component tree."""
    if node is None:
        return ""
    if isinstance(node, str | int | float):
        return str(node)
    if isinstance(node, list | tuple):
        return "".join(_text(n) for n in node)
    return _text(getattr(node, "children", None))


def _lines(panel: list[Any]) -> list[str]:
    return [_text(div) for div in panel]


def _store(*paths: Path) -> Any:
    """A dashboard store over *paths* with every run analyzed (as the background analysis leaves it)."""
    from dashboards.data import RunStore

    store = RunStore([p.resolve() for p in paths])
    for rid in store.refs:
        store.get(rid)
    return store


def _views(store: Any, rids: list[str]) -> list[Any]:
    from dashboards.rows import View, views

    return [View(rid, v.device) for rid in rids for v in views(store.refs[rid], store.results[rid].run)]


def test_the_dashboard_verdict_is_the_terminal_one_over_the_runs_it_names():
    """The SYNTHETIC demo's runs: the panel's verdict lines are, word for word, those `analyze
    --verdict-only` prints for the same runs (unwrapped: --wide), then the runs it covers, by name."""
    from dashboards.verdict_view import panel

    store = _store(DEMO)
    rids = [rid for rid, ref in store.refs.items() if ref.trace.parent.name in {Path(r).name for r in SYNTHETIC_RUNS}]
    assert len(rids) == 3
    lines = _lines(panel(store, _views(store, rids)))
    terminal = run_cli("analyze", "--verdict-only", "--wide", *SYNTHETIC_RUNS).stdout.splitlines()
    keyed = verdict_lines(json.loads(run_cli("analyze", "--json", *SYNTHETIC_RUNS).stdout)["verdict"])
    assert [ln.strip() for ln in lines[: len(terminal)]] == [f"{k}{t}" for k, t in keyed]  # key and text, spans
    assert [" ".join(t.split()) for t in terminal] == [" ".join(f"{k} {t}".split()) for k, t in keyed]
    covers = lines[-1]
    assert covers.startswith("Over the 3 runs of the selected rows (all their GPUs): ")
    assert all(p in covers for p in ("none · synthetic", "offload_qkv · synthetic", "offload_mlp · synthetic"))
    assert not any(ln.startswith("mixed") for ln in lines)


def test_a_mixed_selection_says_what_it_mixes_and_its_flags_do_not_break():
    """A SYNTHETIC run beside FlexGen's public trace: a 'mixed' flag names both sources and folders; the
    SYNTHETIC flag is one nowrap piece (the style sheet keeps it on one line)."""
    from dashboards.verdict_view import panel

    flexgen = ROOT / "sample_traces" / "public" / "flexgen__nsight_report7.sqlite"
    store = _store(DEMO / "synthetic-2-offload_qkv", flexgen)
    out = panel(store, _views(store, list(store.refs)))
    mixed = _text(out[0])
    assert mixed.startswith("mixed Mixed selection: 1 SYNTHETIC demo (synthetic-2-offload_qkv), 1 trace file ")
    flags = [c for div in out for c in (div.children if isinstance(div.children, list) else []) if
             getattr(c, "className", None) == "verdict-flag"]  # fmt: skip
    assert {_text(f) for f in flags} >= {"mixed"}
    css = (ROOT / "dashboards" / "assets" / "dashboard.css").read_text()
    assert ".verdict-flag { white-space: nowrap;" in css


def test_runs_given_first_are_the_first_view_and_the_verdict_follows_the_rows():
    """``dashboard --first RUN``: its rows are the first selection whatever else has copies; the verdict
    callback takes the table's rows as an input (an analysis that ends redraws it)."""
    from dashboards import app, ids, rows
    from dashboards.runs_view import all_rows

    store = _store(DEMO)
    store.first = [(DEMO / "synthetic-1-remat").resolve()]
    raw = all_rows(store)
    chosen = [raw[i] for i in rows.default_selection(raw)]
    assert {r["policy"] for r in chosen} == {"remat"} and raw[0]["policy"] == "remat"
    dash_app = app.create_app(store)
    verdict_cb = next(cb for key, cb in dash_app.callback_map.items() if f"{ids.VERDICT}.children" in key)
    assert {"id": ids.RUNS, "property": "data"} in verdict_cb["inputs"]


def test_a_first_run_that_is_not_there_is_one_line():
    proc = run_cli("dashboard", "--first", "no/such/run", str(DEMO), "--port", "1")
    assert proc.returncode == 2 and proc.stderr.strip().endswith("--first no/such/run: no such file or folder")
    assert "Traceback" not in proc.stderr


# --- numbers that reconcile: per step x steps = summed, per-GPU sums = total -------------------------
FLEXGEN = ROOT / "sample_traces" / "public" / "flexgen__nsight_report7.sqlite"
OFFLOAD_ALL = DEMO / "synthetic-4-offload_all"


def _analyzed(path: Path) -> dict[str, Any]:
    proc = run_cli("analyze", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_window_verdict_is_the_sum_of_its_gpus_and_says_how_cost_copies_and_savings_relate():
    """FlexGen's two RTX 4090s, no steps: the verdict's copies (the GPUs together) are the per-GPU copies
    summed, exactly; the cost (4.01 s on GPU 1), the copies (3.38 s there) and the saving (165 ms) are
    three different things, and the cost line says how they relate, in the terminal and the dashboard."""
    from dashboards.verdict_view import panel
    from profiler.report.verdict_text import RELATION

    doc = _analyzed(FLEXGEN)
    v = doc["verdict"]
    assert v["copies"]["per"] == "window" and v["copies"]["gpus"] == 2
    for d in ("d2h", "h2d"):
        for k in ("count", "busy_ns", "exposed_ns"):
            assert v["copies"][d][k] == sum(dev["copies"][d][k] for dev in doc["devices"].values()), (d, k)
    assert dict(verdict_lines(v))["cost"].endswith(RELATION)
    store = _store(FLEXGEN)
    lines = _lines(panel(store, _views(store, list(store.refs))))
    terminal = verdict_lines(v)
    assert [ln.strip() for ln in lines[: len(terminal)]] == [f"{k}{t}" for k, t in terminal]
    # the dashboard's per-GPU numbers (runs table, Policies bars: device_copies) add up to the same totals
    run = store.results[next(iter(store.refs))].run
    for d in ("d2h", "h2d"):
        assert sum(run.device_copies(g)[d]["busy_ns"] for g in run.device_ids) == v["copies"][d]["busy_ns"]


def test_per_step_figures_times_the_steps_and_gpus_give_the_summed_ones():
    """The SYNTHETIC offload_all run, 3 steps on 2 GPUs: the verdict's copies are per step and GPU; times
    3 steps (and 2 GPUs) they are the devices' window sums (the Policies bars, the runs table), and the
    verdict's per-step saving (20.3 ms on GPU 0) times steps and GPUs is the finding's summed one (121 ms)."""
    doc = _analyzed(OFFLOAD_ALL / "synthetic-trace.sqlite")
    v, devices = doc["verdict"], doc["devices"]
    steps, gpus = v["steps"], v["copies"]["gpus"]
    assert (v["copies"]["per"], steps, gpus) == ("step", 3, 2)
    for d in ("d2h", "h2d"):
        summed = [dev["copies"][d] for dev in devices.values()]
        assert v["copies"][d]["count"] * steps * gpus == sum(c["count"] for c in summed)
        per_gpu = sum(c["busy_ns"] for c in summed) / gpus
        assert abs(v["copies"][d]["busy_ns"] * steps - per_gpu) <= 0.01 * per_gpu  # the window has a little more
    best = max(doc["findings"]["findings"], key=lambda f: f.get("saving_ns") or 0)
    top = v["savings"][0]
    assert (top["rule"], top["per"]) == (best["id"], "step") and "summed windows of 2 GPUs" in best["saving_basis"]
    assert abs(top["saving_ns"] * steps * gpus - best["saving_ns"]) <= 0.02 * best["saving_ns"]


def test_each_page_says_its_unit_of_count_and_how_its_figures_relate():
    """Findings (terminal and dashboard): a saving there is summed over the window and the GPUs, the
    verdict's per step and GPU, said in one line; the Policies bars: per GPU, every step summed; the kernels
    beside copies (40) against all the GPU's kernels (80)."""
    from dashboards import bars, findings_view, kernels_view
    from profiler.report.findings_text import UNITS

    text = run_cli("analyze", str(OFFLOAD_ALL / "synthetic-trace.sqlite")).stdout
    assert " ".join(UNITS.split()) in " ".join(text.split())
    store = _store(OFFLOAD_ALL)
    views = _views(store, list(store.refs))
    assert f"Units: {UNITS}." in _text(findings_view.panel(store, views))
    heads = _bar_heads(store, views)
    assert len(heads) >= 3 and all(("per GPU" in h) != ("one step" in h) for h in heads), heads
    assert "every step summed" in bars.SUMMED and "the verdict's copies are per step and GPU" in bars.SUMMED
    flex = _store(FLEXGEN)
    run = flex.results[next(iter(flex.refs))].run
    said = kernels_view.status(kernels_view.entry(run, "0"), kernels_view.kernel_count(run, "0"))
    assert said.startswith("40 kernels ran beside copies, none alone") and "of the device's 80 kernels" in said
    assert "the other 40 partly beside copies" in said


def _bar_heads(store: Any, views: list[Any]) -> list[str]:
    """The Policies bars' column heads (bold) for *views*."""
    from dashboards.runs_view import follow_rows

    table = follow_rows(store, views, [])["bars"]
    heads = [c for c in _walk(table) if getattr(c, "className", None) == "bar-cell head"]
    return [t for t in (_text(h.children[0]) for h in heads) if t]


def _walk(node: Any) -> list[Any]:
    kids = node if isinstance(node, list | tuple) else getattr(node, "children", None)
    if isinstance(kids, list | tuple):
        return [node, *[x for k in kids for x in _walk(k)]]
    return [node] + (_walk(kids) if kids is not None and not isinstance(kids, str | int | float) else [])


# --- in the browser: the first view's verdict is the terminal's, mixed or not, its flags whole -------
FLAG_LINES_JS = (
    "() => [...document.querySelectorAll('#verdict .verdict-flag')]"
    ".map(f => [f.getClientRects().length, getComputedStyle(f).whiteSpace])"
)


@pytest.mark.browser
def test_the_first_view_shows_the_terminal_verdict_of_the_runs_given_first(browser, tmp_path):
    """`dashboard --first` on a SYNTHETIC run and FlexGen's public trace, in a narrow window: the verdict
    on top is `analyze --verdict-only` of the same two, names them, says what they mix; its flags each
    stay on one line."""
    import shutil

    from tests.helpers.dashboard import dashboard

    demo = tmp_path / "demo" / "synthetic-2-offload_qkv"
    shutil.copytree(DEMO / "synthetic-2-offload_qkv", demo)
    shutil.copy(FLEXGEN, tmp_path / FLEXGEN.name)
    first = [str(demo), str(tmp_path / FLEXGEN.name)]
    terminal = run_cli("analyze", "--verdict-only", "--wide", *first).stdout
    assert terminal.startswith("Verdict over 2 runs")
    keyed = verdict_lines(json.loads(run_cli("analyze", "--json", *first).stdout)["verdict"])
    assert [" ".join(ln.split()) for ln in terminal.splitlines()] == [" ".join(f"{k} {t}".split()) for k, t in keyed]
    with dashboard(tmp_path, *[a for f in first for a in ("--first", f)]) as (url, _):
        page = browser.new_page(viewport={"width": 760, "height": 900})
        page.goto(url)
        said = "(document.querySelector('#verdict') || {innerText: ''}).innerText"
        page.wait_for_function(f"{said}.includes('Over the 2 runs')", timeout=120_000)
        shown = " ".join(page.inner_text("#verdict").split())
        for _, text in keyed:  # the words of each line (its key is a span of its own)
            assert " ".join(text.split()) in shown, text
        assert f"Mixed selection: 1 SYNTHETIC demo (demo), 1 trace file ({tmp_path.name})" in shown
        assert "offload_qkv · synthetic, flexgen__nsight_repor" in shown
        flags = page.evaluate(FLAG_LINES_JS)
        assert flags and all(f == [1, "nowrap"] for f in flags), flags


def test_notes_that_differ_only_in_their_numbers_are_said_once():
    """The H200 runs' 'no cost analysis ... (was parsing 5726:67 ...)', one per policy with its own line
    number: one note for all, with whose numbers it shows; notes of other kinds stay apart."""
    from profiler.report.policies_text import fold_notes

    notes = {
        "FLOPs counted from the HLO (99.22 T): 203 calls": ["a"],
        "FLOPs counted from the HLO (85.98 T): 171 calls": ["b"],
        "no offload in this program": ["b", "c"],
    }
    assert fold_notes(notes, 3) == [
        "note (a, b; the numbers are a's, each run's in --json): FLOPs counted from the HLO (99.22 T): 203 calls",
        "note (b, c): no offload in this program",
    ]
    assert fold_notes({"same": ["a", "b"]}, 2) == ["note (all runs): same"]


def test_the_runs_given_first_are_analyzed_first():
    """The dashboard's background analysis takes the ``--first`` runs before the others (discovery order
    otherwise), so that its first view settles on the terminal's runs soonest."""
    from dashboards.data import RunStore

    store = RunStore([DEMO.resolve()])
    store.first = [(DEMO / "synthetic-3-offload_mlp").resolve()]
    order: list[str] = []
    analyze = store.get

    def spy(rid: str) -> Any:
        order.append(store.refs[rid].trace.parent.name)
        return analyze(rid)

    store.get = spy  # type: ignore[method-assign]
    store.warm_up().join(timeout=600)
    assert order[0] == "synthetic-3-offload_mlp" and sorted(order[1:]) == order[1:] and len(order) == 5
