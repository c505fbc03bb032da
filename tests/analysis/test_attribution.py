"""Attribution of GPU ops to NVTX ranges, XLA thunks, layers and steps, with known answers."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from profiler.analysis.attribution import _blocks
from profiler.analysis.breakdown import Breakdown, _join_ranges
from profiler.report.text import render_groups
from profiler.runs.result import analyze
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from profiler.xla.names import parse_xla
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

A, B, C, D = 100, 200, 300, 400  # thread ids, all in process 100


def launch_copy(
    b: ExportBuilder,
    t: int,
    gpu: tuple[int, int],
    kind: str,
    nbytes: int = 1000,
    tid: int = A,
    device: int = 0,
) -> None:
    corr = b.copy(gpu[0], gpu[1], kind, nbytes, device=device)
    b.runtime(t, t + 5, corr, name="cudaMemcpyAsync", tid=tid)


def launch_kernel(b: ExportBuilder, t: int, gpu: tuple[int, int], name: str, tid: int = A) -> None:
    corr = b.kernel(gpu[0], gpu[1], name)
    b.runtime(t, t + 5, corr, tid=tid)


@pytest.fixture
def ranges_trace(build):
    b = ExportBuilder()
    # thread A: outer [0,1000) > inner [100,500); an open range from 900
    b.nvtx(0, 1000, "outer", tid=A)
    b.nvtx(100, 500, "inner", tid=A)
    b.nvtx(900, None, "open_r", tid=A)
    # thread B: a registered "inner", a start/end range ending on B, one ending on C
    b.nvtx(0, 2000, "inner", tid=B, registered=True)
    b.nvtx(250, 350, "se_same", tid=B, event_type=60, end_tid=B)
    b.nvtx(0, 3000, "se_other", tid=B, event_type=60, end_tid=C)
    launch_copy(b, 50, (60, 160), "d2h", 1000)  # outer
    launch_copy(b, 100, (200, 300), "h2d", 2000)  # at inner's start: inner and outer
    launch_kernel(b, 500, (250, 400), "fusion_3")  # at inner's end: outer only
    launch_copy(b, 99, (400, 450), "d2h", 4000)  # just before inner: outer only
    launch_copy(b, 1000, (1000, 1100), "d2h", 8000)  # at outer's end: open_r only
    launch_copy(b, 300, (500, 600), "d2h", 16000, tid=B)  # B: inner, se_same (se_other left out)
    launch_copy(b, 600, (0, 10), "d2h", 32000, device=1)  # outer, on device 1
    launch_kernel(b, 5, (0, 80), "gemm", tid=D)  # thread D has no ranges
    return build(b)


def by_name(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["name"], r["device"]): r["copies"] for r in rows}


def test_ranges_follow_metrics_md(ranges_trace):
    doc = analyze(open_trace(ranges_trace), by="range")
    rows = by_name(doc["ranges"])
    assert set(rows) == {("outer", "0"), ("inner", "0"), ("se_same", "0"), ("open_r", "0"), ("outer", "1")}
    outer = rows[("outer", "0")]
    # d2h [60,160) and [400,450); kernels on device 0: gemm [0,80), fusion_3 [250,400)
    assert (outer["d2h"]["count"], outer["d2h"]["bytes"], outer["d2h"]["busy_ns"]) == (2, 5000, 150)
    assert outer["d2h"]["overlap_any_ns"] == 20 and outer["d2h"]["exposed_ns"] == 130
    assert (outer["h2d"]["count"], outer["h2d"]["busy_ns"], outer["h2d"]["overlap_compute_ns"]) == (
        1,
        100,
        50,
    )
    assert (
        outer["offload"]["busy_ns"],
        outer["offload"]["overlap_any_ns"],
        outer["offload"]["exposed_ns"],
    ) == (250, 70, 180)
    assert "occupancy" not in outer["offload"]
    inner = rows[("inner", "0")]  # thread A's copy at 100 and thread B's copy at 300 (registered name)
    assert (inner["h2d"]["count"], inner["d2h"]["count"], inner["d2h"]["bytes"]) == (1, 1, 16000)
    assert inner["d2h"]["overlap_any_ns"] == 0 and inner["h2d"]["overlap_any_ns"] == 50
    assert rows[("se_same", "0")]["d2h"]["bytes"] == 16000
    assert rows[("open_r", "0")]["d2h"]["bytes"] == 8000
    assert rows[("outer", "1")]["d2h"] == {
        **rows[("outer", "1")]["d2h"],
        "count": 1,
        "bytes": 32000,
        "busy_ns": 10,
        "exposed_ns": 10,
    }
    facts = doc["attribution"]
    assert facts["open_ranges"] == 1 and facts["cross_thread_ranges"] == 1
    text = render_groups(doc, "range")  # analyze --by range says both under its table
    assert "1 NVTX ranges were still open at the end (extended to the end)" in text
    assert "1 start/end ranges ended on another thread (left out)" in text and "could not be parsed" not in text


def test_ranges_json_from_cli(ranges_trace):
    proc = run_cli("analyze", "--by", "range", "--json", str(ranges_trace))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {(r["name"], r["device"]) for r in doc["ranges"]} >= {("outer", "0"), ("inner", "0")}
    for r in doc["ranges"]:
        assert set(r) == {"name", "device", "copies"}
        assert set(r["copies"]) == {"h2d", "d2h", "offload"}
    text = run_cli("analyze", "--by", "range", str(ranges_trace))
    assert "still open" in text.stdout and "another thread" in text.stdout


def test_each_copy_counts_once_per_name(build):
    """Nested ranges with the same name: the copy is in both, and counted once."""
    b = ExportBuilder()
    b.nvtx(0, 100, "loop", tid=A)
    b.nvtx(10, 90, "loop", tid=A)
    launch_copy(b, 20, (20, 40), "d2h", 100)
    rows = by_name(analyze(open_trace(build(b)), by="range")["ranges"])
    assert rows[("loop", "0")]["d2h"]["count"] == 1
    assert rows[("loop", "0")]["d2h"]["duration_sum_ns"] == 20


# --- XLA thunk names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "module", "path", "hlo", "uid", "layer"),
    [
        ("XlaModule:#hlo_module=jit_step,program_id=12#", "module", "jit_step", None, None, None, None),
        (
            "Thunk:#name=jit(step)/jvp(layer_3)/dot_general,hlo_op=fusion.12#",
            "thunk",
            None,
            "jit(step)/jvp(layer_3)/dot_general",
            "fusion.12",
            None,
            "layer_3",
        ),
        (
            "Thunk:#name=jit(step)/transpose(jvp(layers))/while/body/x,hlo_op=copy-start.4,unique_hlo_op_id=77#",
            "thunk",
            None,
            "jit(step)/transpose(jvp(layers))/while/body/x",
            "copy-start.4",
            77,
            "layers",
        ),
        ("Thunk:#name=a,b/c,hlo_op=fusion#", "thunk", None, "a,b/c", "fusion", None, None),
        (
            "Thunk:#name=jit(f)/decoder_2/q,hlo_op=x.1#",
            "thunk",
            None,
            "jit(f)/decoder_2/q",
            "x.1",
            None,
            "decoder_2",
        ),
        ("Thunk:#garbage", "malformed", None, None, None, None, None),
        ("XlaModule:#nothing#", "malformed", None, None, None, None, None),
        ("step=3", None, None, None, None, None, None),
        ("", None, None, None, None, None, None),
    ],
)
def test_parse_xla_names(text, kind, module, path, hlo, uid, layer):
    row = parse_xla(pl.DataFrame({"t": [text]}), "t", None).row(0, named=True)
    assert (
        row["xla_kind"],
        row["hlo_module"],
        row["op_path"],
        row["hlo_op"],
        row["hlo_op_id"],
        row["layer"],
    ) == (kind, module, path, hlo, uid, layer)


def test_parse_huge_and_activation_names():
    long = "Thunk:#name=" + "x/" * 30_000 + "query_proj,hlo_op=f#"  # 60 kB: long, still a path
    row = parse_xla(pl.DataFrame({"t": [long]}), "t", None).row(0, named=True)
    assert row["xla_kind"] == "thunk" and row["activation"] == "query_proj"
    huge = "Thunk:#name=" + "x/" * 500_000 + "query_proj,hlo_op=f#"  # a megabyte: no real op path
    row = parse_xla(pl.DataFrame({"t": [huge]}), "t", None).row(0, named=True)
    assert row["xla_kind"] == "malformed" and row["activation"] is None


TSL = 2  # the domain id the tests give XLA's NVTX domain


def xla_step_trace(b: ExportBuilder, t0: int, step: int, scan: bool) -> None:
    """One step: 2 layers forward then backward, one copy per thunk; unrolled or under a scan."""
    if step == 0:
        b.domain(TSL, "TSL", tid=A)
    b.nvtx(t0, t0 + 1000, f"step={step}", tid=A)
    b.nvtx(t0 + 1, t0 + 999, "XlaModule:#hlo_module=jit_step,program_id=1#", tid=A, domain_id=TSL)
    t = t0 + 10
    layers = [("layers", 0), ("layers", 1)] if scan else [("layer_0", 0), ("layer_1", 1)]
    for direction in ("fwd", "bwd"):
        seq = layers if direction == "fwd" else list(reversed(layers))
        for name, idx in seq:
            path = f"jit(step)/jvp({name})/mlpwi" if direction == "fwd" else f"jit(step)/transpose(jvp({name}))/x"
            hlo = "copy-start.1" if direction == "fwd" else "copy-start.2"
            if not scan:
                hlo += f".{idx}"
            b.nvtx(t, t + 50, f"Thunk:#name={path},hlo_op={hlo}#", tid=A, domain_id=TSL)
            kind, nbytes = ("d2h", 1000 * (idx + 1)) if direction == "fwd" else ("h2d", 10 * (idx + 1))
            launch_copy(b, t + 1, (t + 5, t + 45), kind, nbytes)
            t += 100


def add_annotated_domain(b: ExportBuilder) -> None:
    b.domain(1, "profile-step", tid=A)


@pytest.mark.parametrize("scan", [False, True])
def test_layers_from_thunks(build, scan):
    b = ExportBuilder()
    for s in range(2):
        xla_step_trace(b, s * 2000, s, scan)
    bd = Breakdown(open_trace(build(b)))
    rows = {r["name"]: r for r in bd.by_layer()}
    names = ["layers[0]", "layers[1]"] if scan else ["layer_0", "layer_1"]
    assert sorted(rows) == names
    for idx, name in enumerate(names):
        c = rows[name]["copies"]
        # per step one d2h of 1000*(idx+1) bytes forward and one h2d of 10*(idx+1) backward; 2 steps
        assert (c["d2h"]["count"], c["d2h"]["bytes"]) == (2, 2000 * (idx + 1))
        assert (c["h2d"]["count"], c["h2d"]["bytes"]) == (2, 20 * (idx + 1)), "backward numbered in reverse"
        assert rows[name]["inferred_index"] is scan


def test_a_scan_timed_as_one_range_is_every_iteration_not_layer_0(build):
    """The H200 example's scanned run: each direction's loop is one thunk (``while.21``: its body's thunks
    are not timed per iteration), so the loop runs once per execution. Its copies are every layer's:
    named ``layers (every iteration)``, not ``layers[0]`` with an index inferred."""
    b = ExportBuilder()
    for s in range(2):
        t0 = s * 2000
        if s == 0:
            b.domain(TSL, "TSL", tid=A)
        b.nvtx(t0, t0 + 1000, f"step={s}", tid=A)
        b.nvtx(t0 + 1, t0 + 999, "XlaModule:#hlo_module=jit_step,program_id=1#", tid=A, domain_id=TSL)
        for k, (path, kind) in enumerate(
            (("jit(step)/jvp(layers)/while", "d2h"), ("jit(step)/transpose(jvp(layers))/while", "h2d"))
        ):
            t = t0 + 10 + 400 * k
            b.nvtx(t, t + 300, f"Thunk:#name={path},hlo_op=while.{21 + 8 * k}#", tid=A, domain_id=TSL)
            for i in range(2):  # two layers' copies inside the one loop range
                launch_copy(b, t + 1 + i, (t + 10 + 100 * i, t + 90 + 100 * i), kind, 1000)
    rows = {r["name"]: r for r in Breakdown(open_trace(build(b))).by_layer()}
    assert list(rows) == ["layers (every iteration)"]
    c = rows["layers (every iteration)"]["copies"]
    assert (c["d2h"]["count"], c["h2d"]["count"]) == (4, 4)  # 2 steps x 2 layers each way


def test_steps_and_outliers(build):
    b = ExportBuilder()
    add_annotated_domain(b)
    for s, dur in enumerate([5000, 1000, 1000, 1100]):
        t0 = s * 10_000
        b.nvtx(t0, t0 + dur, f"step={s}", tid=A, domain_id=1)
        launch_copy(b, t0 + 10, (t0 + 20, t0 + 70), "d2h", 100 * (s + 1))
    doc = analyze(open_trace(build(b)), by="step")
    steps = doc["steps"]
    assert steps["attribution"] == "launch thread"
    assert [s["name"] for s in steps["steps"]] == ["step=0", "step=1", "step=2", "step=3"]
    assert [s["devices"]["0"]["d2h"]["bytes"] for s in steps["steps"]] == [100, 200, 300, 400]
    # the first steps, slow before any normal one, are the first executions (compilation): warm-up
    assert steps["excluded"] == [
        {"name": "step=0", "reason": "warm-up: first steps, 5.0x the median step (compilation, first executions)"}
    ]
    assert steps["outlier_reference_ns"] == 1050  # the yardstick: every step that no range marks warm-up
    assert steps["median_step_ns"] == steps["median_included_step_ns"] == 1000  # one median: the included
    assert steps["included_steps"] == 3


def test_compiling_steps_are_warmup_and_a_later_slow_one_an_outlier(build):
    """Steps 0 and 1 hold XLA's compilation (step 1 is not slow: the compile range says it), step 2
    is normal, step 4 is slow after normal steps: an outlier."""
    b = ExportBuilder()
    add_annotated_domain(b)
    b.domain(TSL, "TSL", tid=A)
    for s, dur in enumerate([9000, 1000, 1000, 1000, 5000, 1100]):
        t0 = s * 10_000
        b.nvtx(t0, t0 + dur, f"step={s}", tid=A, domain_id=1)
        launch_copy(b, t0 + 10, (t0 + 20, t0 + 70), "d2h", 100)
    b.nvtx(100, 8000, "XlaCompile:#module=jit_step,program_id=1#", tid=B, domain_id=TSL)
    b.nvtx(10_100, 10_500, "XlaCompile:#module=jit_step,program_id=2#", tid=B, domain_id=TSL)
    steps = analyze(open_trace(build(b)), by="step")["steps"]
    assert {e["name"]: e["reason"] for e in steps["excluded"]} == {
        "step=0": "warm-up: XLA compiled during it",
        "step=1": "warm-up: XLA compiled during it",
        "step=4": "outlier: 5.0x the median step",
    }
    assert steps["median_step_ns"] == 1000 and steps["included_steps"] == 3


def test_steps_by_time_when_launched_elsewhere(build):
    """The step ranges' thread launches nothing: ops are placed by GPU time within the process."""
    b = ExportBuilder()
    add_annotated_domain(b)
    b.nvtx(0, 1000, "step=0", tid=A, domain_id=1)
    launch_copy(b, 10, (100, 200), "d2h", 64, tid=B)
    steps = analyze(open_trace(build(b)), by="step")["steps"]
    assert steps["attribution"].startswith("GPU time window")
    assert steps["steps"][0]["devices"]["0"]["d2h"]["bytes"] == 64


def test_layer_table_names_top_kernels(build):
    b = ExportBuilder()
    add_annotated_domain(b)
    b.nvtx(0, 1000, "layer=7", tid=A, domain_id=1)
    b.nvtx(0, 2000, "policy=offload_qkv", tid=A, domain_id=1)
    launch_copy(b, 10, (0, 100), "d2h", 2**20)
    launch_kernel(b, 20, (0, 60), "attention_fwd")
    launch_kernel(b, 30, (60, 80), "mlp_fwd")
    proc = run_cli("analyze", "--by", "layer", str(build(b)))
    assert proc.returncode == 0, proc.stderr
    assert "7" in proc.stdout and "attention_fwd 0.060" in proc.stdout  # 60 ns, in the table's µs
    assert "kernels that hid the copies (µs)" in proc.stdout
    doc = json.loads(run_cli("analyze", "--by", "layer", "--json", str(build(b))).stdout)
    (row,) = doc["layers"]
    assert row["policy"] == "offload_qkv"
    assert [t["name"] for t in row["top_kernels"]] == ["attention_fwd", "mlp_fwd"]
    assert [t["overlap_ns"] for t in row["top_kernels"]] == [60, 20]
    assert row["copies"]["d2h"]["exposed_ns"] == 20


def test_bad_nvtx_text_is_handled(build):
    b = ExportBuilder()
    b.domain(TSL, "TSL", tid=A)
    b.nvtx(0, 100, "", tid=A, domain_id=TSL)
    b.nvtx(0, 100, "Thunk:#name=broken", tid=A, domain_id=TSL)
    b.nvtx(1, 100, "Thunk:#name=ok,hlo_op=f#", tid=A, domain_id=TSL)
    b.nvtx(5, 100, "Thunk:#name=" + "y" * 2_000_000 + ",hlo_op=g#", tid=A, domain_id=TSL)  # the innermost
    b.nvtx(0, 100, None, tid=A, domain_id=TSL)
    launch_copy(b, 10, (10, 20), "d2h", 1)
    doc = analyze(open_trace(build(b)), by="op")
    assert doc["attribution"]["malformed_xla_ranges"] == 2  # cut short; a 2 MB op path
    # the innermost range is not an XLA thunk: the copy is listed under that range's name
    (row,) = doc["ops"]
    assert row["name"].startswith("Thunk:#name=yyy") and row["copies"]["d2h"]["count"] == 1


def test_nvtx_text_that_is_not_utf8(build):
    import sqlite3

    b = ExportBuilder()
    b.nvtx(0, 100, "placeholder", tid=A)
    launch_copy(b, 10, (10, 20), "d2h", 8)
    path = build(b)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(? AS TEXT) WHERE text = 'placeholder'", (b"layer\xff\xfe",))
    con.commit()
    con.close()
    proc = run_cli("analyze", "--by", "range", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["ranges"]
    assert row["name"].startswith("layer") and row["copies"]["d2h"]["bytes"] == 8


def test_blocks_are_consecutive_positions():
    # by hand: block 1 is 5, 6; block 2 is 0; block 3 is 9, 10, 11
    assert _blocks(np.array([5, 0, 9]), np.array([2, 1, 3])).tolist() == [5, 6, 0, 9, 10, 11]


def test_step_members_by_lookup_are_the_join():
    """``breakdown._join_ranges``: the rows of the join, whether the lookup or the join makes them."""
    pairs = pl.DataFrame({"op_id": [0, 1, 1, 2, 3], "range_id": [0, 0, 2, 1, 3]})
    members = pl.DataFrame({"range_id": [2, 0], "index": pl.Series([1, 0], dtype=pl.UInt32), "name": ["b", "a"]})
    got = _join_ranges(pairs, members, 4).sort("op_id", "range_id")
    # by hand: ops 0 and 1 are in range 0 (step a, index 0), op 1 in range 2 (step b); ranges 1 and 3 in no step
    assert got.rows() == [(0, 0, 0, "a"), (1, 0, 0, "a"), (1, 2, 1, "b")]
    assert got.equals(pairs.join(members, on="range_id").sort("op_id", "range_id"))
    twice = pl.concat([members, members.head(1).with_columns(pl.lit(5, pl.UInt32).alias("index"))])
    assert _join_ranges(pairs, twice, 4).height == 4  # range 2 in two steps: the join's answer, op 1 twice


def test_stall_caused_by_position_is_the_join():
    """The stall each copy caused, found by its position among the stalls' ops, is what the join on
    the five op keys (the independent reference) gives."""
    path = ROOT / "sample_traces" / "demo-synthetic" / "synthetic-4-offload_all" / "synthetic-trace.sqlite"
    bd = Breakdown(open_trace(path))
    op_id, ns = bd._stall_caused_by_position()
    keys = ["pid", "device", "stream", "correlation_id", "start"]
    joined = bd.stalls.caused_by_copies().join(bd.ops.select("op_id", *keys), on=keys)
    assert op_id.size == joined.height > 0 and (ns > 0).all()
    assert dict(zip(op_id.tolist(), ns.tolist(), strict=True)) == dict(joined.select("op_id", "stall_caused_ns").rows())
    assert (bd.stall_caused[op_id] == ns).all() and int(bd.stall_caused.sum()) == int(ns.sum())
