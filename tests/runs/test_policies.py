"""The policy decision: per-policy table, planned vs moved, compare gates, with known answers.

The planned side is the real GPU compiler's plan (../shared/hlo, a two-layer step compiled
for an H100); the moved side an nsys-schema export whose thunk ranges carry that module's
instruction names, with copies chosen so that every flag has a known answer.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from profiler.analysis.compare import compare, parse_threshold, run_value
from profiler.analysis.policies import planned_vs_moved, policy_row, policy_table
from profiler.report.compare_text import render_markdown
from profiler.runs.result import collect
from profiler.stored.folder import manifest_of
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.policy_runs import STEP_NS, MiB


def collected(run: Path) -> dict:
    return collect(open_trace(run / "trace.sqlite"), manifest_of(run / "trace.sqlite"))


def test_planned_vs_moved_flags_each_difference(plan_run):
    run = collected(plan_run)
    assert run["compiled"]["module"] == "module_0001.jit_train_step"
    assert run["compiled"]["chosen_by"] == "jit_train_step (program 1): ran 3 times, the only program that ran"
    pvm = planned_vs_moved(run)
    rows = {(r["layer"], r["activation"], r["unplanned_op"]): r for r in pvm["rows"]}
    l1 = rows[("layer_1", None, None)]
    assert (l1["planned_d2h_bytes"], l1["moved_d2h_bytes"]) == (4 * MiB, 4 * MiB)
    assert (l1["planned_h2d_bytes"], l1["moved_h2d_bytes"]) == (4 * MiB, 4 * MiB)
    assert l1["flag"] == "ok"
    l0 = rows[("layer_0", None, None)]
    assert (l0["planned_d2h_bytes"], l0["moved_d2h_bytes"]) == (4 * MiB, 0)
    assert l0["flag"] == "d2h planned, not seen"
    extra = rows[(None, None, "fusion.9")]
    assert extra["moved_d2h_bytes"] == MiB and extra["flag"] == "d2h moved, not planned"
    assert pvm["differences"] == 2 and pvm["steps"] == 3


def test_policy_row_numbers(plan_run):
    run = collected(plan_run)
    row = policy_row(run)
    flops = run["compiled"]["cost"]["flops"]
    assert row["median_step_ns"] == STEP_NS
    assert row["tflops"] == pytest.approx(flops / 1e-3 / 1e12)
    assert row["mfu"] == pytest.approx(30e9 / 1e-3 / 989.4e12)
    assert (row["peak_device_bytes"], row["device_limit_bytes"]) == (10 * 2**30, 60 * 2**30)
    assert row["peak_device_source"] == "memory_stats()"
    # arguments 16 MiB + 1 MiB, outputs 16 MiB + 4 B of which 16 MiB aliased, temp 50 MB; host 8 MiB
    assert row["compiled_device_bytes"] == 16 * MiB + MiB + 4 + 50_000_000
    assert row["compiled_host_bytes"] == 8 * MiB
    assert row["planned_d2h_bytes_per_step"] == 8 * MiB
    assert row["moved_d2h_bytes_per_step"] == 5 * MiB  # 4 MiB planned + 1 MiB unplanned, per step
    # no stream waits in the export: zero stall where the run summary measures stalls, else "-"
    assert row["stalled_ns"] == (0 if "stall_ns" in run else None)
    assert policy_row(run, peak_override=100.0)["mfu"] == pytest.approx(30e9 / 1e-3 / 100e12)


def _run(policy: str, flops: float | None, steps: list[int], stalls: list[int] | None = None) -> dict:
    return {
        "policy": policy,
        "trace": f"/x/{policy}/trace.sqlite",
        "steps": [
            {"name": f"step={i}", "duration_ns": d, "excluded": None, "exposed_ns": 10 * i}
            | ({"stall_ns": stalls[i]} if stalls else {})
            for i, d in enumerate(steps)
        ],
        "median_step_ns": sorted(steps)[len(steps) // 2],
        "copies": {d: {"bytes": 0} for d in ("d2h", "h2d", "offload")},
        "compiled": {"cost": {"flops": flops} if flops else None, "memory": None, "plan": None, "notes": []},
    }


def test_policy_table_recompute_and_stalls():
    tab = policy_table(
        [
            _run("remat", 120.0, [10, 10, 10], stalls=[0, 5, 7]),
            _run("none", 100.0, [8, 8, 8]),
            _run("offload_qkv", None, [9, 9, 9]),
        ]
    )
    rows = {r["policy"]: r for r in tab["rows"]}
    assert tab["baseline"] == "none"
    assert rows["remat"]["recompute_overhead"] == pytest.approx(0.2)
    assert rows["none"]["recompute_overhead"] == 0
    assert rows["offload_qkv"]["recompute_overhead"] is None and rows["offload_qkv"]["tflops"] is None
    assert rows["remat"]["stalled_ns"] == 5 and rows["none"]["stalled_ns"] is None
    assert rows["remat"]["exposed_ns"] == 10
    no_base = policy_table([_run("remat", 120.0, [10])])
    assert no_base["baseline"] is None and no_base["rows"][0]["recompute_overhead"] is None


def test_policy_row_is_per_device_and_per_step():
    """A two-GPU trace's step and copy sums are halved; a trace without steps moves nothing 'per step'."""
    two = _run("offload_all", None, [10, 10, 10], stalls=[0, 6, 8]) | {
        "devices": {"0": {}, "1": {}},
        "copies": {"d2h": {"bytes": 600}, "h2d": {"bytes": 300}, "offload": {"bytes": 900}},
    }
    row = policy_table([two])["rows"][0]
    assert row["devices"] == 2
    assert row["stalled_ns"] == 3 and row["exposed_ns"] == 5  # medians of (0, 3, 4) and (0, 5, 10)
    assert row["moved_d2h_bytes_per_step"] == 100 and row["moved_h2d_bytes_per_step"] == 50
    stepless = two | {"steps": [], "median_step_ns": None, "stall_ns": 40}
    row = policy_table([stepless])["rows"][0]
    assert row["moved_d2h_bytes_per_step"] is None and row["stalled_ns"] is None


def test_compare_gates_the_new_metrics(plan_run):
    base = collected(plan_run)
    head = copy.deepcopy(base)
    head["compiled"]["cost"]["flops"] *= 1.2  # more recomputation, same step time: FLOPs and TFLOP/s up
    head["manifest"]["runtime"]["device_memory"]["devices"][0]["peak_bytes_in_use"] = 12 * 2**30
    assert run_value(head, "peak_device_bytes") == 12 * 2**30
    assert run_value(head, "tflops") == pytest.approx(1.2 * run_value(base, "tflops"))
    gates = [parse_threshold(t) for t in ("flops_per_step:+10%", "peak_device_bytes:+10%", "tflops:-5%")]
    result = compare([base], [head], gates)
    failed = {f["threshold"] for f in result["failures"]}
    assert failed == {"flops_per_step:+10%", "peak_device_bytes:+10%"}  # TFLOP/s went up: no failure
    slower = copy.deepcopy(base)
    for s in slower["steps"]:
        s["duration_ns"] *= 2
    slower["median_step_ns"] *= 2
    assert not compare([base], [slower], [parse_threshold("tflops:-5%")])["passed"]
    md = render_markdown(result)
    assert "FLOPs per step" in md and "peak device memory" in md and "TFLOP/s per device" in md


def test_analyze_runs_table_and_json(plan_run, tmp_path):
    proc = run_cli("analyze", str(plan_run), str(plan_run))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "offload_x" in out and "planned, not seen" in out and "moved, not planned" in out
    assert "10.00 GiB" in out  # the measured peak
    doc = json.loads(run_cli("analyze", "--json", str(plan_run)).stdout)
    assert set(doc) == {"verdict", "policies", "planned_vs_moved", "no_trace"} and doc["no_trace"] == []
    assert doc["policies"]["rows"][0]["planned_d2h_bytes_per_step"] == 8 * MiB


def test_columns_without_a_value_in_any_run_are_left_out_and_named():
    """A column whose every row is '-' (a CPU run's FLOPs, copies, memory) is taken out of the table
    and named once; the first three columns stay even when empty, and a column with one value stays."""
    from profiler.report.policies_text import drop_empty_columns

    headers = ("policy", "steps", "step ms", "peak dev", "FLOPs", "MFU")
    rows = [["a", "3", "-", "-", "1.0 G", "-"], ["b", "0", "-", "-", "-", "-"]]
    kept, out, gone = drop_empty_columns(headers, rows)
    assert kept == ("policy", "steps", "step ms", "FLOPs")
    assert out == [["a", "3", "-", "1.0 G"], ["b", "0", "-", "-"]]
    assert gone == ["peak dev", "MFU"]
    assert drop_empty_columns(headers, []) == (headers, [], [])


def test_a_scalar_the_host_fetches_is_not_an_unplanned_offload(tmp_path):
    """none and remat on the H200 move 4 bytes D2H per step outside any XLA instruction (the loss): no
    offload, so not flagged 'moved, not planned', and not counted a difference."""
    from tests.helpers.paths import ROOT

    runs = [
        p
        for p in (ROOT / "sample_traces" / "h200-example").iterdir()
        if p.is_dir() and p.name.split("-")[1] in ("none", "remat")
    ]
    doc = json.loads(run_cli("analyze", "--json", *map(str, runs), env={"PROFILE_STEP_CACHE": str(tmp_path)}).stdout)
    for pvm in doc["planned_vs_moved"]:
        (row,) = pvm["rows"]
        assert row["moved_d2h_bytes"] == 4 and row["flag"].startswith("host's own copies")
        assert pvm["differences"] == 0


def test_a_module_this_jaxlib_cannot_parse_is_said_as_a_newer_xlas():
    """The H200 runs' compiled.json keep jaxlib's parse error of their module (written by jaxlib
    0.11.2); the row says which XLA wrote it, that the jaxlib analyzing it could not read it (which one
    that was is not recorded), and where the parser's error is."""
    from profiler.xla.compiled import UNPARSED, unparsed_why
    from tests.helpers.paths import ROOT

    run = next((ROOT / "sample_traces" / "h200-example").glob("*-offload_mlp-??????"))
    from profiler.trace import load_trace

    row = policy_row(collect(load_trace(run / "trace.json.gz"), manifest_of(run / "trace.json.gz")))
    (note,) = [n for n in row["notes"] if "cost analysis" in n and "XLA" in n.split(":")[0]]
    assert note == (
        "no XLA cost analysis: the run's XLA (jaxlib 0.11.2) wrote a module that the jaxlib analyzing the run "
        "could not parse, a newer XLA's text (the parser's words are in the run folder's compiled.json)"
    )
    assert "(was parsing " in (run / "compiled.json").read_text()  # where the note says they are
    assert not any(n.startswith(UNPARSED) for n in row["notes"])
    assert unparsed_why("another note", "0.11.2") == "another note"
    assert unparsed_why(UNPARSED, None).startswith("no XLA cost analysis: the run's XLA wrote a module that")


def test_a_scans_copies_named_by_its_loop_meet_the_movements_planned_inside_it(tmp_path):
    """A JAX trace names a scanned layer loop's copies by the loop (while.21, while.29): they were
    'moved, not planned' beside 'planned, not seen' rows of the activations the plan moves inside it.
    Each loop is one row now, its movements' activations joined. The compiled.json of the pipelined run
    is copied without its loops' ``top`` (as written before it existed): the run's dump gives it back.
    That run moves 1.31 of its 1.50 GiB planned: the three copies XLA peeled out of its loop are not seen."""
    import shutil

    from profiler.trace import load_trace

    h200 = Path(__file__).parents[2] / "sample_traces" / "h200-example"

    def rows(suffix: str, strip: bool = False):
        (run,) = h200.glob(f"*-{suffix}")
        copy = tmp_path / run.name
        shutil.copytree(run, copy)
        if strip:
            doc = json.loads((copy / "compiled.json").read_text())
            for m in doc["modules"]:
                for mv in (m.get("plan") or {}).get("movements") or []:
                    mv.pop("top", None)
            (copy / "compiled.json").write_text(json.dumps(doc))
        trace = copy / "trace.json.gz"
        pvm = planned_vs_moved(collect(load_trace(trace), manifest_of(trace)))
        return [(r["layer"], r["activation"], r["flag"]) for r in pvm["rows"]], pvm["rows"][0]

    said, first = rows("offload_qkv-scan-986b04")
    assert said[0] == ("layers", "key_proj, query_proj, value_proj", "ok")
    assert first["planned_d2h_bytes"] == first["moved_d2h_bytes"] == 3 * 8 * 64 * MiB
    said, first = rows("offload_qkv-scan-lhs-pipelined-28c859", strip=True)
    assert said[0] == ("layers", None, "d2h differs (-12%)")
    assert first["moved_d2h_bytes"] == 3 * 7 * 64 * MiB and first["moved_h2d_bytes"] == first["planned_h2d_bytes"]


def test_a_tpu_loop_whose_body_the_trace_names_keeps_its_activations_rows():
    """A TPU trace names the copies inside a scanned loop by their own instructions: those movements keep
    their rows (they read 'h2d moved, not planned' beside a joined loop row 'h2d differs (-99%)' when the
    loop took them all); the 21 MiB its copies' ranges leave to the loop stay the loop's."""
    from profiler.trace import load_trace

    shape = Path(__file__).parents[2] / "sample_traces" / "tpu-v5e-h200-shape"
    (run,) = shape.glob("*-offload_qkv-scan-??????")
    trace = run / "trace.json.gz"
    rows = planned_vs_moved(collect(load_trace(trace), manifest_of(trace)))["rows"]
    said = {(r["activation"], r["unplanned_op"]): r["flag"] for r in rows}
    assert said == {
        ("key_proj", None): "ok",
        ("query_proj", None): "ok",
        ("value_proj", None): "ok",
        (None, "while.2"): "h2d moved, not planned",
    }


def test_a_run_whose_copies_all_moved_as_planned_is_one_line_unless_wide():
    """The H200 example's offload_qkv: 24 rows of 'ok' read as one line (what moved, over which layers and
    activations), the whole table with --wide; a run with nothing planned says so with its host's copies."""
    from tests.helpers.paths import ROOT

    h200 = ROOT / "sample_traces" / "h200-example"
    qkv = next(h200.glob("*-offload_qkv-b50f27"))
    none = next(h200.glob("*-none-*"))
    short = " ".join(run_cli("analyze", "--no-findings", str(qkv), str(none)).stdout.split())
    assert (
        "every planned copy moved as planned, 1.50 GiB D2H and 1.50 GiB H2D: 8 layers (layer_0 to layer_7) x "
        "key_proj, query_proj, value_proj (24 rows: --wide lists them); the host's own copies moved 4 B, not an "
        "offload"
    ) in short
    assert (
        "policy none (3 step ranges; step jit_step (program 14589)): nothing planned; the host's own copies moved 4 B"
        in short
    )
    # two runs of that kind share one line (the H200 example's none and remat)
    remat = next(h200.glob("*-remat-*"))
    both = " ".join(run_cli("analyze", "--no-findings", str(qkv), str(none), str(remat)).stdout.split())
    assert "planned vs moved per step, none, remat: nothing planned; the host's own copies moved 4 B each" in both
    assert "policy none (3 step ranges" not in both
    wide = run_cli("analyze", "--no-findings", "--wide", str(qkv)).stdout
    rows = [line.split() for line in wide.splitlines() if line.startswith("layer_")]
    assert len([r for r in rows if r[-1] == "ok"]) == 24 and "as planned" not in wide


def test_the_per_layer_table_says_which_copies_no_layer_launched():
    """The H200 example's offload_qkv-scan-lhs-pipelined: XLA pipelines the scanned loop's offloads out of its
    iterations, so the per-layer table (copies by the range that launched them) holds no d2h, while planned
    vs moved (by instruction) gives the loop 1.31 GiB per step: a note reconciles the two; an unrolled run
    whose layers launched every copy has none."""
    from tests.helpers.paths import ROOT

    h200 = ROOT / "sample_traces" / "h200-example"
    scan = next(h200.glob("*-offload_qkv-scan-lhs-pipelined-*"))
    doc = json.loads(run_cli("analyze", "--json", "--by", "layer", "--no-findings", str(scan)).stdout)
    whole = doc["devices"]["0"]["copies"]["d2h"]["bytes"]
    assert whole > 2**30 and sum(g["copies"]["d2h"]["bytes"] for g in doc["layers"]) == 0
    text = " ".join(run_cli("analyze", "--by", "layer", "--no-findings", str(scan)).stdout.split())
    size = f"{whole / 2**30:.2f} GiB"
    assert f"note: device 0: {size} of its {size} d2h were launched outside every layer's ranges" in text
    qkv = next(h200.glob("*-offload_qkv-b50f27"))
    assert "outside every layer" not in run_cli("analyze", "--by", "layer", "--no-findings", str(qkv)).stdout
