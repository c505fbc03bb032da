"""The numbers the dashboard's new views draw, defined in profiler.analysis: the what-if's median
predicted step per device, and the policy frontier's points."""

from __future__ import annotations

import pytest

from profiler.analysis.policies import frontier, policy_table
from profiler.analysis.whatif import step_medians, trace_whatif
from profiler.trace import open_trace
from tests.helpers.paths import ROOT

DEMO = ROOT / "sample_traces" / "demo-synthetic" / "synthetic-4-offload_all" / "synthetic-trace.sqlite"


def _step(name: str, measured: int, predicted: int, excluded: str | None = None) -> dict:
    return {"name": name, "excluded": excluded, "measured_ns": measured, "predicted_ns": predicted}


def test_step_medians_leave_out_excluded_steps():
    doc = {
        "devices": {
            "0": {
                "measured_span_ns": 100,
                "span_ns": 80,
                "steps": [
                    _step("step=0", 50, 10, excluded="warm-up"),
                    _step("step=1", 10, 7),
                    _step("step=2", 12, 9),
                    _step("step=3", 11, 6),
                    _step("step=4", 40, 1, excluded="outlier"),
                ],
            },
            "1": {"measured_span_ns": 5, "span_ns": 5, "steps": []},
        }
    }
    med = step_medians(doc)
    assert med["0"] == {"steps": 3, "measured_ns": 11.0, "predicted_ns": 7.0, "measured_span_ns": 100, "span_ns": 80}
    assert med["1"]["steps"] == 0 and med["1"]["measured_ns"] is None and med["1"]["predicted_ns"] is None


def test_step_medians_of_a_replay():
    """Identity at F = 1; faster copies never make the median step slower."""
    trace = open_trace(DEMO)
    same = step_medians(trace_whatif(trace, 1.0))
    half = step_medians(trace_whatif(trace, 0.5))
    for dev, m in same.items():
        assert m["steps"] == 3 and m["predicted_ns"] == m["measured_ns"] and m["span_ns"] == m["measured_span_ns"]
        assert half[dev]["predicted_ns"] < m["measured_ns"]  # this SYNTHETIC run's steps wait for copies


def _row(policy: str, **kw) -> dict:
    run = {
        "policy": policy,
        "trace": f"/x/{policy}.sqlite",
        "steps": [{"name": "step=0", "duration_ns": 10, "excluded": None, "exposed_ns": kw.get("exposed", 0)}],
        "median_step_ns": 10,
        "copies": {d: {"bytes": 0} for d in ("d2h", "h2d", "offload")},
        "compiled": {
            "cost": {"flops": 1e9},
            "memory": kw.get("compiled"),
            "plan": None,
            "notes": [],
        },
        "peak_memory_bytes": kw.get("trace_peak", {}),
        "manifest": kw.get("manifest"),
    }
    if "stall" in kw:
        run["steps"][0]["stall_ns"] = kw["stall"]
    return run


def test_frontier_points():
    compiled = {
        "argument_size_in_bytes": 100,
        "output_size_in_bytes": 50,
        "alias_size_in_bytes": 20,
        "temp_size_in_bytes": 70,
    }
    stats = {"runtime": {"device_memory": {"devices": [{"peak_bytes_in_use": 900, "bytes_limit": 1000}]}}}
    tab = policy_table(
        [
            _row("a", manifest=stats, compiled=compiled, exposed=3, stall=4),  # measured wins over compiled
            _row("b", compiled=compiled, exposed=5),  # compiled when nothing is measured
            _row("c", trace_peak={"0": 400}),  # the trace's memory events
            _row("d"),  # nothing: no point
        ]
    )
    pts = {p["policy"]: p for p in frontier(tab)}
    assert (pts["a"]["memory_bytes"], pts["a"]["memory_source"], pts["a"]["limit_bytes"]) == (900, "measured", 1000)
    assert pts["a"]["memory_detail"] == "memory_stats()"
    assert pts["a"]["copy_cost_ns"] == 7
    assert (pts["b"]["memory_bytes"], pts["b"]["memory_source"]) == (100 + 50 - 20 + 70, "compiled")
    assert pts["b"]["copy_cost_ns"] == 5  # exposed 5, stalls unknown
    assert (pts["c"]["memory_bytes"], pts["c"]["memory_detail"]) == (400, "CUDA memory events (trace)")
    assert pts["d"]["memory_bytes"] is None and pts["d"]["memory_source"] is None
    for p in pts.values():
        assert p["step_ns"] == 10 and p["tflops"] == pytest.approx(1e9 / 10e-9 / 1e12)


# --- the dashboard's stores: what-ifs computed once and kept, plans found -------------------------
def test_whatifs_are_computed_in_the_background_and_kept(tmp_path):
    import shutil
    import time

    from dashboards import replay_graph, whatif_view
    from dashboards.data import RunStore
    from dashboards.rows import View
    from profiler.cache_dir import cache_dir

    run = tmp_path / "synthetic-4-offload_all"
    shutil.copytree(DEMO.parent, run, ignore=shutil.ignore_patterns("*.profile-step.db", "*.parquet"))
    store = RunStore([tmp_path])
    (rid,) = store.refs
    store.get(rid)
    views = [View(rid, 0), View(rid, 1)]
    # what the server queues at start-up for the first view's rows: the what-if tab's first view, the
    # default link (NVLink-C2C, 450 GB/s) from each GPU's own (the demo's H100s: PCIe Gen5 x16, 63 GB/s)
    whatif_view.start_first(store, views)
    factor = whatif_view.scale_for(store, views[0], whatif_view.DEFAULT_TARGET, None, whatif_view.AUTO).factor
    assert factor == pytest.approx(63 / 450)
    for _ in range(1200):
        state, doc = store.whatifs.get(rid, factor)
        if state != "computing":
            break
        time.sleep(0.05)
    assert state == "done"
    assert doc == trace_whatif(open_trace(run / DEMO.name), factor)
    # a new dashboard on the same folder reads it from the run's results file: no recomputation
    again = RunStore([tmp_path])
    assert again.whatifs.get(rid, factor) == ("done", doc)
    # another model is another replay of the run's prepared graph (dashboards/replay_graph.py), held by
    # the what-if process: the trace is not read again, so it may be gone meanwhile
    expected = trace_whatif(open_trace(run / DEMO.name), factor, model_host=False)
    fresh = RunStore([tmp_path])  # a second dashboard on the folder, its run analyzed (from the cache)
    fresh.get(rid)
    (run / DEMO.name).unlink()
    assert _whatif(store, rid, factor, model_host=False) == ("done", expected)
    # the second dashboard's what-if process holds no graph; with the kept one gone too it must read the
    # trace: it fails with a line naming the file
    for kept in cache_dir("dashboard").rglob("*" + replay_graph.SUFFIX):
        kept.unlink()
    state, message = _whatif(fresh, rid, factor * 2)
    fresh.close()
    assert state == "error" and message.startswith(f"{run / DEMO.name}: the what-if failed ("), message


def _whatif(store, rid: str, factor: float, model_host: bool = True) -> tuple[str, object]:
    """The what-if of run *rid* once it is no longer computing (at most a minute)."""
    import time

    for _ in range(1200):
        state, doc = store.whatifs.get(rid, factor, model_host=model_host)
        if state != "computing":
            return state, doc
        time.sleep(0.05)
    return state, doc


def test_plans_are_found_and_bad_ones_named(tmp_path):
    from dashboards.data import discover_plans, read_plan
    from profiler.errors import InputError
    from profiler.runs.discover import discover

    good = tmp_path / "plans" / "20260101T000000-h100-abc"
    good.mkdir(parents=True)
    (good / "plan.json").write_text('{"target": {"label": "H100"}, "label": "compiled for H100", "results": []}')
    bad = tmp_path / "other.json"
    bad.write_text('{"not": "a plan"}')
    plans = discover_plans([tmp_path, bad])
    assert sorted(p.name for p in plans) == ["20260101T000000-h100-abc", "other.json"]
    assert discover([tmp_path, bad]) == []  # neither is a run
    by_name = {p.name: p for p in plans}
    assert read_plan(by_name["20260101T000000-h100-abc"])["label"] == "compiled for H100"
    with pytest.raises(InputError, match=r"other\.json: is not a profile-step plan document"):
        read_plan(by_name["other.json"])


def test_findings_of_unselected_gpus_are_left_out_and_named():
    from dashboards.findings_view import split_by_gpu
    from dashboards.rows import View

    found = [
        {"id": "a", "where": {"device": "0"}},
        {"id": "b", "where": {"device": 7}},
        {"id": "c", "where": {}},
        {"id": "d", "where": {"device": "12"}},
    ]
    shown, left = split_by_gpu(found, [View("r", "0")])
    assert [f["id"] for f in shown] == ["a", "c"] and left == ["7", "12"]
    shown, left = split_by_gpu(found, [View("r", "7"), View("r", "12"), View("r", "0")])
    assert [f["id"] for f in shown] == ["a", "b", "c", "d"] and left == []


def test_the_whatif_process_ends_with_its_server(tmp_path):
    """A server killed (no exit handler runs) leaves no what-if process behind: it ends within seconds."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "synthetic-4-offload_all"
    shutil.copytree(DEMO.parent, run, ignore=shutil.ignore_patterns("*.profile-step.db", "*.parquet"))
    server = (
        "import multiprocessing, sys, time\n"
        "from pathlib import Path\n"
        "from dashboards.data import RunStore\n"
        "store = RunStore([Path(sys.argv[1])])\n"
        "(rid,) = store.refs\n"
        "store.whatifs.get(rid, 0.5)\n"
        "while not multiprocessing.active_children(): time.sleep(0.05)\n"
        "print(multiprocessing.active_children()[0].pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", server, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        worker = int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def running(pid: int) -> bool:
        try:  # a zombie waiting for init to reap it has ended
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    for _ in range(200):
        if not running(worker):
            break
        time.sleep(0.1)
    assert not running(worker)


def test_kernel_time_lost_says_how_much_of_it_is_in_persistent_kernels(tmp_path):
    """The Policies tab's 'kernel time lost' is METRICS.md's number as it is; where a group of persistent
    kernels (grid = the GPU's SMs: 132 on an H200) holds part of it, the cell says how much, since the
    findings leave such groups out (the H200 example: 14.1 ms, 13.8 of it one nvjet group)."""
    from dashboards.data import RunStore
    from dashboards.kernels_view import group_rows, policy_rows
    from dashboards.rows import View
    from profiler.synthetic.export import ExportBuilder
    from tests.helpers.kernel_groups import group

    b = ExportBuilder()
    b.gpu(0, "NVIDIA H200")
    t = group("nvjet_gemm", [1000] * 3, [4000] * 3, b, 0, grid=(2, 66, 1))  # 9 us lost, persistent
    group("fusion", [1000] * 3, [2000] * 3, b, t)  # 3 us lost
    run = tmp_path / "run"
    run.mkdir()
    b.write(run / "slowed.sqlite")
    store = RunStore([run])
    (rid,) = store.refs
    store.get(rid)
    (row,) = policy_rows(store, [View(rid, "0")])
    assert row["kernel time lost"] == (
        "12.0 µs (9.00 µs of it in persistent kernels, sizes mixed: see below; 3.00 µs aside from them, as compare "
        "counts it)"
    )
    assert row["most excess"] == "nvjet_gemm 4.00x (persistent)"
    kb = store.get(rid).run.kernels_beside_copies["0"]
    assert [r["slowdown"] for r in group_rows(kb, 132)] == ["4.00x (persistent: sizes mixed)", "2.00x"]
    assert [r["slowdown"] for r in group_rows(kb)] == ["4.00x", "2.00x"]  # SMs unknown: nothing said
    # the terminal (analyze's devices view) says the same of the same groups
    from tests.helpers.cli import run_cli

    said = run_cli("analyze", "--no-verdict", str(run / "slowed.sqlite")).stdout
    assert "excess kernel time 12.000 µs (from median durations); 9.000 µs of it in persistent kernels, 3.000 µs" \
        in " ".join(said.split())  # fmt: skip
    assert "4.00x (persistent)" in said and "2.00x (persistent)" not in said
    assert "(persistent): as many blocks as the GPU has SMs" in " ".join(said.split())
