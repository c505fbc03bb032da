"""What each finding costs: ``cost_ns`` per rule on exports built with known answers, the severity
that follows ``cost_share`` (named thresholds, the rule's severity as a ceiling), the order by cost
in every output, the exposed-copies finding, and the real traces where the issue saw it wrong."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import Finding, by_saving, graded, run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.synthetic.export import PAGEABLE, ExportBuilder
from profiler.trace import open_trace
from tests.helpers import reference_devices
from tests.helpers.cli import run_cli
from tests.helpers.findings_runs import (
    MIB,
    TID,
    boundary_run,
    findings_of,
    fired,
    launched,
    stall_layers,
    steps,
    waited_copy,
    warmup_in_capture,
    write_run,
)

MS = 1_000_000


# --- severity from the share, the order by cost -------------------------------------------------


def _f(rule: str, severity: str, cost: int | None, basis: int | None = 1000) -> Finding:
    return Finding(
        rule, severity, "v", "a", attributed_ns=cost, attributed_basis_ns=basis if cost is not None else None
    )


@pytest.mark.parametrize(
    ("cost", "ceiling", "want"),
    [
        (500_000, "problem", "problem"),  # 5% of 10 ms: problem_share
        (499_999, "problem", "warning"),
        (100_000, "problem", "warning"),  # 1%: warning_share
        (99_999, "problem", "info"),
        (500_000, "warning", "warning"),  # never above the rule's own severity
        (500_000, "info", "info"),
    ],
)
def test_severity_follows_the_share_under_the_rules_ceiling(cost, ceiling, want):
    f = Finding("r", ceiling, "v", "a", attributed_ns=cost, attributed_basis_ns=10 * MS)
    assert graded(f, FindingsConfig()).severity == want


def test_severity_thresholds_are_named_and_configurable():
    f = Finding("r", "problem", "v", "a", attributed_ns=20_000, attributed_basis_ns=MS)  # 2% of the window
    assert graded(f, FindingsConfig()).severity == "info"  # 20 us < severity_min_cost_ns
    low = FindingsConfig({**FindingsConfig().thresholds, "severity_min_cost_ns": 0})
    assert graded(f, low).severity == "warning"
    strict = FindingsConfig({**low.thresholds, "problem_share": 0.02})
    assert graded(f, strict).severity == "problem"
    note = Finding("r", "problem", "v", "a")  # no time cost: its rule's severity stands
    assert graded(note, FindingsConfig()).severity == "problem" and note.attributed_share is None


def test_findings_are_listed_by_cost_then_those_without():
    found = [
        _f("a", "problem", None),
        _f("b", "info", 10),
        _f("c", "warning", 500),
        _f("d", "info", None),
        _f("e", "problem", 500),
    ]
    order = ["a", "b", "c", "d", "e"]
    # equal costs: the more severe first; no cost: after every costed one, most severe first
    assert [f.rule for f in by_saving(found, order)] == ["e", "c", "b", "a", "d"]


def test_toml_thresholds_change_severities_in_the_cli(tmp_path):
    b = ExportBuilder()
    # a 50 us pageable copy that a 9.95 ms kernel waits for: removed, the kernel starts at its launch
    # (1 us) and the 10 ms window ends 50 us earlier, 0.5%; pinned (33288 ns at the assumed PCIe Gen4)
    # it gives back 16712 ns, under severity_min_cost_ns
    waited_copy(b, (1_000, 51_000), (51_000, 10_001_000), launch=1_000, host=PAGEABLE)
    path = write_run(tmp_path, b)
    plain = json.loads(run_cli("findings", "--json", str(path)).stdout)["runs"][0]["findings"]
    assert {f["id"]: f["severity"] for f in plain} == {"exposed-copies": "info", "pageable-copies": "info"}
    cfg = tmp_path / "f.toml"
    cfg.write_text("[thresholds]\nwarning_share = 0.005\n")
    out = run_cli("findings", "--json", "--findings-config", str(cfg), str(path))
    assert out.returncode == 0, out.stderr
    found = {f["id"]: f for f in json.loads(out.stdout)["runs"][0]["findings"]}
    f = found["exposed-copies"]
    assert (f["severity"], f["saving_ns"], f["saving_basis_ns"]) == ("warning", 50_000, 10 * MS)
    assert f["saving_share"] == pytest.approx(0.005) and f["saving_basis"] == "GPU 0's window"
    assert (found["pageable-copies"]["severity"], found["pageable-copies"]["saving_ns"]) == ("info", 50_000 - 33_288)


def test_pr_comment_lists_new_findings_by_cost():
    from profiler.report.findings_text import findings_markdown

    def f(rule: str, cost: int | None) -> dict:
        share = None if cost is None else cost / MS
        return {
            "id": rule,
            "severity": "info",
            "verdict": rule,
            "try": "t",
            "where": {"steps": "the capture"},
            "attributed_ns": cost,
            "attributed_share": share,
            "attributed_basis_ns": MS,
            "attributed_basis": "GPU 0's window",
        }

    new = [f("a", None), f("b", 10), f("c", 200_000)]
    md = [line for line in findings_markdown(new, [], "p") if line.startswith("- ")]
    assert [line.split("`")[1] for line in md] == ["c", "b", "a"]
    assert (
        "(the capture; attributed 200 µs, 20% of GPU 0's window (1.00 ms); no saving modelled)" in md[0]
        and "no time cost" in md[2]
    )


def test_compare_lists_new_findings_by_cost(tmp_path):
    base = ExportBuilder()
    base.copy(0, 100_000, "h2d", MIB, stream=20)
    base.kernel(0, 1 * MS, "k", stream=7)
    head = ExportBuilder()  # an exposed pageable copy (300 us) and a synchronous call (120 us)
    head.kernel(0, 1 * MS, "k", stream=7)
    head.copy(MS, MS + 300_000, "h2d", MIB, host=PAGEABLE, stream=20)
    head.runtime(MS - 10_000, MS + 110_000, 900, name="cudaMemcpy_v3020", tid=TID)
    bp, hp = write_run(tmp_path, base, name="base"), write_run(tmp_path, head, name="head")
    out = run_cli("compare", str(bp), str(hp))  # exit 1: the exposed time regressed; the text is what counts
    lines = [line for line in out.stdout.splitlines() if line.startswith("new in head")]
    assert [line.split()[5] for line in lines] == ["exposed-copies", "pageable-copies", "sync-copies"], out.stdout
    # nothing is launched after the call: returning at once gives back nothing
    assert "(saves 0 ns, 0% of the capture's GPU time (1.30 ms); attributed 120 µs)" in lines[2]


# --- cost_ns per rule ----------------------------------------------------------------------------


@pytest.mark.parametrize("window", [2 * MS, 100 * MS])
def test_pageable_cost_is_their_exposed_time(tmp_path, window):
    b = ExportBuilder()
    b.copy(0, MS, "h2d", MIB, host=PAGEABLE)  # half of it beside the kernel
    b.copy(int(1.5 * MS), int(1.8 * MS), "d2h", MIB)  # pinned: not this rule's
    b.kernel(MS // 2, window, "k")
    (f,) = fired(findings_of(write_run(tmp_path, b)), "pageable-copies")
    # nothing waits for the copy and the kernel ends the window: pinned, it gives back nothing
    assert (f["attributed_ns"], f["attributed_basis_ns"], f["saving_ns"], f["severity"]) == (MS // 2, window, 0, "info")
    assert "500 µs of them ran with no kernel beside them" in f["verdict"]


def test_sync_copies_cost_is_the_wall_time_blocked(tmp_path):
    b = ExportBuilder()
    b.kernel(0, MS, "k")
    b.runtime(1_000, 101_000, 900, name="cudaMemcpy_v3020", tid=TID)
    b.runtime(51_000, 151_000, 901, name="cudaMemcpy_v3020", tid=TID + 1)  # another thread, at the same time
    (f,) = fired(findings_of(write_run(tmp_path, b)), "sync-copies")
    assert f["evidence"]["host_ns"] == 200_000 and f["evidence"]["wall_ns"] == 150_000
    assert (f["attributed_ns"], f["attributed_basis_ns"], f["attributed_basis"]) == (
        150_000,
        MS,
        "the capture's GPU time",
    )
    assert "0.150 ms of wall time" in f["verdict"]
    # the calls waited for no GPU op of theirs and nothing is launched after them: nothing given back
    assert (f["saving_ns"], f["severity"]) == (0, "info")


def test_sync_copies_in_steps_are_a_share_of_the_steps(tmp_path):
    b = ExportBuilder()
    steps(b, [(0, 400_000), (500_000, 900_000)])
    b.runtime(100_000, 110_000, 900, name="cudaMemcpy_v3020", tid=TID)
    launched(b, 0, "kernel", 0, 10 * MS, "k")
    (f,) = fired(findings_of(write_run(tmp_path, b), severity_min_cost_ns=0), "sync-copies")
    assert (f["attributed_ns"], f["attributed_basis_ns"], f["attributed_basis"]) == (10_000, 800_000, "the 2 steps")
    # per step: the kernel was launched before the call, nothing moves; the median step is 400 us
    assert (f["saving_ns"], f["saving_basis_ns"], f["saving_basis"]) == (0, 400_000, "the median step (of 2)")


def test_copy_on_compute_stream_cost_is_the_streams_copy_time(tmp_path):
    b = ExportBuilder()
    for i in range(4):  # stream 7 runs 3 of the 4 compute kernels
        b.kernel(i * MS, i * MS + MS // 2, "k", stream=7 if i < 3 else 9)
    b.copy(500_000, 600_000, "d2h", MIB, stream=7)
    b.copy(550_000, 700_000, "h2d", MIB, stream=7)  # overlaps the first: their union is 200 us
    b.copy(600_000, 900_000, "h2d", MIB, stream=20)  # another stream: not counted
    (f,) = fired(findings_of(write_run(tmp_path, b)), "copy-on-compute-stream")
    assert (f["attributed_ns"], f["attributed_basis_ns"]) == (200_000, 3_500_000)
    # without the copies the kernels on stream 7 keep their gaps (no launches) and the kernel on stream 9
    # still ends the window at 3.5 ms: nothing given back
    assert (f["saving_ns"], f["severity"]) == (0, "info")
    assert "2 h2d/d2h copies (2.0 MiB)" in f["verdict"] and "for 200 µs" in f["verdict"]


def test_tiny_copies_on_the_compute_stream_say_bytes_not_mib(tmp_path):
    b = ExportBuilder()
    b.kernel(0, 300 * MS, "k", stream=7)
    b.copy(MS, MS + 800, "h2d", 8, stream=7)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "copy-on-compute-stream")
    assert "(8 B)" in f["verdict"] and f["severity"] == "info" and f["attributed_ns"] == 800


def test_slow_link_cost_is_the_exposed_time_a_full_link_removes(tmp_path):
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")  # PCIe Gen5 x16: 63 GB/s
    for i in range(3):
        b.copy(i * MS, i * MS + 100_000, "d2h", MIB)  # 10.49 GB/s, alone, all exposed
    (f,) = fired(findings_of(write_run(tmp_path, b)), "slow-link")
    assert f["evidence"]["exposed_ns"] == 300_000
    assert f["attributed_ns"] == round(300_000 * (1 - (MIB / 100_000) / 63))
    assert f["attributed_basis_ns"] == 2 * MS + 100_000


@pytest.mark.parametrize(("extra_exposed", "want", "saving"), [(0, 300_000, 0), (MS, 450_000, 750_000)])
def test_copy_contention_cost_is_lost_copy_time_where_it_costs(tmp_path, extra_exposed, want, saving):
    # 3 copies of 4 MiB alone in 100 us, 3 beside a kernel in 250 us: 450 us of copy time lost;
    # it costs only where the h2d copies were exposed (the 300 us alone, plus extra_exposed)
    b = ExportBuilder()
    for i in range(3):
        t = i * 10 * MS
        b.copy(t, t + 100_000, "h2d", 4 * MIB)
        s = t + 500_000
        b.copy(s, s + 250_000, "h2d", 4 * MIB)
        b.kernel(s, s + 250_000, "gemm_fusion_dot.3", stream=7)
    if extra_exposed:
        b.copy(40 * MS, 40 * MS + extra_exposed, "h2d", MIB // 2)  # too small for the contexts, exposed
    (f,) = fired(findings_of(write_run(tmp_path, b)), "copy-contention")
    assert f["evidence"]["copy_time_lost_ns"] == 450_000
    assert f["evidence"]["exposed_plus_stalled_ns"] == 300_000 + extra_exposed
    assert f["attributed_ns"] == want
    # removed, the contended copies hold up no kernel (no launches, no waits): without the extra copy the
    # kernel beside the last one still ends the window; the extra copy keeps its gap after the copy before
    # it on their stream, so each removed copy's 250 us comes off its end: 750 us
    assert f["saving_ns"] == saving
    assert f["replay"]["change"] == "the 3 h2d copies of GPU 0 that ran beside kernels removed"


def test_nccl_slowed_cost_is_the_excess_over_the_median(tmp_path):
    b = ExportBuilder()
    for i in range(3):
        b.kernel(i * 10_000, i * 10_000 + 1000, "ncclDevKernel_AllGather_RING", stream=9)
        u = 100_000 + i * 10_000
        b.kernel(u, u + 1_500, "ncclDevKernel_AllGather_RING", stream=9)
        b.copy(u, u + 1_500, "d2h", MIB, stream=20)  # beside: the copy covers the whole kernel
    (f,) = fired(findings_of(write_run(tmp_path, b)), "nccl-slowed-by-copies")
    # METRICS "Kernels slowed by copies": 3 beside x (1500 - 1000) over the group's lower medians
    assert f["attributed_ns"] == 3 * 500 and f["evidence"]["excess_ns"] == 1500


def test_boundary_costs(tmp_path):
    doc = findings_of(boundary_run(tmp_path, True))
    (f,) = fired(doc, "exposed-at-boundaries")
    assert (f["attributed_ns"], f["attributed_basis_ns"], f["attributed_basis"]) == (
        10_000,
        100_000,
        "the GPU spans of the 1 step",
    )
    assert f["severity"] == "info"  # 5 us given back: under severity_min_cost_ns
    (g,) = fired(findings_of(boundary_run(tmp_path, True), severity_min_cost_ns=0), "exposed-at-boundaries")
    # both copies removed: the d2h keeps its 90 us gap after the h2d (now at 0), ending at 90.03 us; the
    # kernel ends the step's GPU work at 95 us instead of 100 us: 5 us of the 200 us step, 2.5%
    assert (g["saving_ns"], g["saving_basis_ns"], g["severity"]) == (5_000, 200_000, "warning")


def test_layer_loop_edges_cost(tmp_path):
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i in range(4):  # layers 0 and 3 have 10 us exposed copies, 1 and 2 hidden ones
        t = i * 100_000
        b.nvtx(t, t + 50_000, f"layer={i}", tid=TID, domain_id=1)
        launched(b, t + 10, "copy", t + 1000, t + 11_000, "d2h", MIB, stream=20)
        launched(b, t + 20, "kernel", t + 1000, t + 1000 + (0 if i in (0, 3) else 10_000), "k")
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")
    assert (f["attributed_ns"], f["attributed_basis_ns"]) == (20_000, 310_000)
    # layer 3's copy ended the window at 311 us; removed, it ends where it starts (its 990 ns after its
    # launch at 300.01 us), with layer 3's empty kernel: 301 us, 10 us given back
    assert (f["saving_ns"], f["saving_basis"]) == (10_000, "GPU 0's window")


def test_stall_hotspot_cost_is_the_layers_stall(tmp_path):
    (f,) = fired(findings_of(stall_layers(tmp_path, [70_000, 10_000], "hot")), "stall-hotspot")
    assert (f["attributed_ns"], f["attributed_basis_ns"]) == (70_000, 1_209_000)
    assert (f["saving_ns"], f["severity"]) == (0, "info")  # tests/analysis/test_savings.py derives it


def test_step_outliers_cost_and_notes_without_cost(tmp_path):
    b = ExportBuilder()
    steps(b, [(0, 1000), (2000, 3000), (4000, 5000), (6000, 9001)])
    b.kernel(0, 10, "k")
    doc = findings_of(write_run(tmp_path, b), severity_min_cost_ns=0)
    (f,) = fired(doc, "step-outliers")
    assert (f["attributed_ns"], f["attributed_basis_ns"]) == (3001 - 1000, 6001)
    assert f["severity"] == "warning"  # 33% of the steps, and a warning at most
    _, doc = warmup_in_capture(tmp_path, name="warm")
    (w,) = fired(doc, "warmup-in-capture")
    assert w["attributed_ns"] is None and w["attributed_share"] is None and w["severity"] == "info"


def test_offload_missing_has_no_time_cost_and_comes_after_costed_findings(tmp_path):
    b = ExportBuilder()
    steps(b, [(0, 10 * MS)])
    launched(b, 10, "copy", 100, 200_100, "d2h", 1000)  # 200 us exposed, 1000 bytes
    launched(b, 20, "kernel", 300_000, 9 * MS, "k")
    manifest = {"policy": "offload_qkv", "runtime": {"backend": "gpu"}, "versions": {"jax": "0.10.2"}}
    manifest["program"] = ["python", "train.py", "remat_policy=qkv_proj_offloaded"]  # what says it offloads
    doc = findings_of(write_run(tmp_path, b, manifest))
    ids = [f["id"] for f in doc["findings"]]
    missing = fired(doc, "offload-missing")[0]
    assert missing["attributed_ns"] is None and missing["severity"] == "problem"
    assert ids[-1] == "offload-missing" and "exposed-copies" in ids
    costs = [f["attributed_ns"] for f in doc["findings"] if f["attributed_ns"] is not None]
    assert costs == sorted(costs, reverse=True)
    text = run_cli("findings", str(write_run(tmp_path, b, manifest, name="again"))).stdout
    assert "offload-missing (no time cost)" in text


# --- exposed-copies ------------------------------------------------------------------------------


def _exposed_export() -> ExportBuilder:
    """A 10 ms window: kernels but for [2, 3) and [7, 8) ms; an 8 MiB h2d over [1.5, 3.5) and a
    4 MiB d2h over [6.5, 8.2) ms, each 1 ms exposed; a small h2d at 9 ms, hidden."""
    b = ExportBuilder()
    for s, e in ((0, 2), (3, 7), (8, 10)):
        b.kernel(s * MS, e * MS, "k", stream=7)
    b.copy(1_500_000, 3_500_000, "h2d", 8 * MIB)
    b.copy(6_500_000, 8_200_000, "d2h", 4 * MIB)
    b.copy(9_000_000, 9_100_000, "h2d", 64 * 1024)
    return b


def test_exposed_copies_known_answer(tmp_path):
    doc = findings_of(write_run(tmp_path, _exposed_export()))
    (f,) = fired(doc, "exposed-copies")
    assert (f["attributed_ns"], f["attributed_basis_ns"]) == (2 * MS, 10 * MS)
    # no launches, no waits: the copies hold nothing up and the last kernel ends the window
    assert (f["saving_ns"], f["severity"]) == (0, "info")
    ev = f["evidence"]
    assert ev["busy_ns"] == 3_800_000 and ev["exposed_ns"] == 2 * MS
    assert ev["classes"] == {
        "h2d": {"count": 2, "bytes": 8 * MIB + 64 * 1024, "busy_ns": 2_100_000, "exposed_ns": MS},
        "d2h": {"count": 1, "bytes": 4 * MIB, "busy_ns": 1_700_000, "exposed_ns": MS},
    }
    assert ev["longest_exposed"] == [{"from_ns": 2 * MS, "to_ns": 3 * MS}, {"from_ns": 7 * MS, "to_ns": 8 * MS}]
    assert ev["by_tenth_ns"] == [0, 0, MS, 0, 0, 0, 0, MS, 0, 0]
    assert [(c["cls"], c["bytes"], c["at_ns"], c["exposed_ns"]) for c in ev["most_exposed"]] == [
        ("h2d", 8 * MIB, 1_500_000, MS),
        ("d2h", 4 * MIB, 6_500_000, MS),
    ]
    assert "53% of the h2d/d2h copy time ran with no kernel beside it: 2.00 ms of 3.80 ms" in f["verdict"]
    assert "20% of the 10.0 ms window" in f["verdict"]
    assert "100% of it in 2 tenths of the window: 2.0 ms-3.0 ms (1.00 ms), 7.0 ms-8.0 ms (1.00 ms)" in f["verdict"]
    assert "1 d2h of 4.0 MiB" in f["verdict"] and f["view"] == "timeline"


@pytest.mark.parametrize(("exposed", "fires"), [(MS + 1, True), (MS, False)])
def test_exposed_copies_fraction_boundary(tmp_path, exposed, fires):
    b = ExportBuilder()
    b.copy(0, 4 * MS, "d2h", MIB)
    b.kernel(exposed, 10 * MS, "k")  # exposed of 4 ms: 25% does not fire (exposed_copies_fraction)
    assert bool(fired(findings_of(write_run(tmp_path, b)), "exposed-copies")) is fires


def test_exposed_copies_too_small_for_the_window_say_nothing(tmp_path):
    b = ExportBuilder()
    b.kernel(0, 100 * MS, "k")
    b.copy(100 * MS, 100 * MS + 99_999, "h2d", 8)  # under 0.1% of the window (exposed_copies_min_share)
    assert not fired(findings_of(write_run(tmp_path, b)), "exposed-copies")
    assert fired(findings_of(write_run(tmp_path, b, name="low"), exposed_copies_min_share=0), "exposed-copies")


# --- the dashboard keeps the order ----------------------------------------------------------------


def _walk(node):
    yield node
    kids = getattr(node, "children", None)
    for kid in kids if isinstance(kids, list) else [kids] if kids is not None else []:
        if hasattr(kid, "to_plotly_json"):
            yield from _walk(kid)


def test_dashboard_findings_panel_lists_by_cost(tmp_path):
    from dashboards.data import RunStore
    from dashboards.findings_view import panel
    from dashboards.rows import View

    b = _exposed_export()
    b.copy(int(9.5 * MS), int(9.5 * MS) + 60_000, "h2d", MIB, host=PAGEABLE, stream=7)  # 60 us on the compute stream
    write_run(tmp_path, b)
    store = RunStore([tmp_path])
    (rid,) = store.refs
    summary = store.get(rid).summary
    found = summary["findings"]["findings"]
    nodes = [n for node in panel(store, [View(rid, "0")]) for n in _walk(node)]
    rules = [getattr(n, "data-rule") for n in nodes if getattr(n, "className", None) == "finding"]
    saved = [getattr(n, "data-saving") for n in nodes if getattr(n, "className", None) == "cost"]
    attributed = [getattr(n, "data-attributed") for n in nodes if getattr(n, "className", None) == "cost"]
    assert rules == [f["id"] for f in found] and len(rules) >= 3
    assert saved == [str(f["saving_ns"]) for f in found] and attributed == [str(f["attributed_ns"]) for f in found]
    assert [int(c) for c in saved] == sorted(map(int, saved), reverse=True)


# --- real traces -----------------------------------------------------------------------------------


def _shared_findings(shared_traces, name: str) -> tuple[dict, dict]:
    trace = open_trace(shared_traces / f"{name}.sqlite")
    bd = Breakdown(trace)
    doc = run_findings(trace, None, FindingsConfig(), bd)
    from profiler.analysis.findings.evidence import Evidence

    return doc, Evidence(trace, None, bd).devices


@pytest.mark.shared
def test_exposed_copies_on_the_streams_trace(shared_traces):
    doc, devices = _shared_findings(shared_traces, "gpu4__nsys_vectorAdd_streams_10000000__7498cc2")
    (f,) = fired(doc, "exposed-copies")
    off = devices["0"]["copies"]["offload"]
    assert f["attributed_ns"] == off["exposed_ns"] == 54_942_550 and f["attributed_basis_ns"] == devices["0"]["span_ns"]
    assert f["severity"] == "info" and f["attributed_share"] == pytest.approx(0.332, abs=0.001)
    assert f["saving_ns"] < 10_000  # tests/analysis/test_savings.py: the program is host-bound
    assert sum(f["evidence"]["by_tenth_ns"]) == off["exposed_ns"]
    # 54_942_550 above: the offload copies' time with no kernel beside them, by tests/reference_devices.py
    reference = reference_devices.devices(shared_traces / "gpu4__nsys_vectorAdd_streams_10000000__7498cc2.sqlite")
    assert reference["0"]["copies"]["offload"]["exposed_ns"] == 54_942_550
    assert "85% of the h2d/d2h copy time" in f["verdict"] and "54.9 ms" in f["verdict"]
    assert "spread over the window: 4.53 ms to 6.00 ms of it in each tenth" in f["verdict"]


@pytest.mark.shared
def test_tiny_copies_of_the_mfu_pair_are_information(shared_traces):
    for side in ("before", "after"):
        doc, _ = _shared_findings(shared_traces, f"nsysai__mfu_2gpu_{side}")
        assert doc["findings"] and {f["severity"] for f in doc["findings"]} == {"info"}, side
        assert {"pageable-copies", "copy-on-compute-stream"} <= {f["id"] for f in doc["findings"]}


@pytest.mark.shared
def test_every_shared_trace_lists_by_saving_with_severity_from_share_within_the_bound(shared_traces):
    cfg = FindingsConfig()
    for path in sorted(shared_traces.glob("*.sqlite")):
        trace = open_trace(path)
        doc = run_findings(trace, None, cfg, Breakdown(trace))
        found = doc["findings"]
        saved = [f for f in found if f["saving_ns"] is not None]
        assert found[: len(saved)] == saved, path.name  # with a saving first
        costs = [f["saving_ns"] for f in saved]
        assert costs == sorted(costs, reverse=True), path.name
        tiers = [0 if f["saving_ns"] is not None else 1 if f["attributed_ns"] is not None else 2 for f in found]
        assert tiers == sorted(tiers), path.name  # with a saving, then attributed time only, then notes
        for f in found:  # a saving, or why there is none
            assert f["saving_ns"] is not None or f["saving_basis"] or f["attributed_ns"] is None, (path.name, f["id"])
            if f["id"] in ("exposed-copies", "pageable-copies", "slow-link", "copy-contention") and f["saving_ns"]:
                # a change to one GPU's copies gives back at most that GPU's copy-free replay
                bound = doc["copy_free"]["devices"][f["where"]["device"]]["saving_ns"]
                assert 0 <= f["saving_ns"] <= bound, (path.name, f["id"])
        for f in saved:
            share = f["saving_share"] or 0 if f["saving_ns"] >= cfg["severity_min_cost_ns"] else 0
            level = 2 if share >= cfg["problem_share"] else 1 if share >= cfg["warning_share"] else 0
            if f["id"] in ("lhs-off", "step-outliers"):  # their ceiling is lower
                assert f["severity"] in ("info", "warning", "problem")[: level + 1], (path.name, f["id"])
            else:
                assert f["severity"] == ("info", "warning", "problem")[level], (path.name, f["id"])
            assert f["saving_basis_ns"] and f["saving_basis"], (path.name, f["id"])
