"""Real XLA range names (nsys-jax's Pax FSDP archives): every name parses, the twelve praxis
layers are found forward and backward, and the train steps come from the module executions with
the compile-time ones left out."""

from __future__ import annotations

import lzma
import zipfile

import polars as pl
import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.runs.result import analyze, run_summary
from profiler.trace import open_trace
from profiler.xla.names import parse_xla
from tests.helpers.cli import run_cli
from tests.helpers.jax_toolbox import ARCHIVES, PUSHPOP, archive_export, read_archive

pytestmark = pytest.mark.shared
LAYERS = [f"x_layers_{i}" for i in range(12)]
STEP_MODULE = "pjit__wrapped_step_fn"


@pytest.fixture(scope="module", params=ARCHIVES)
def archive(request, shared_traces):
    path = shared_traces / "jax-toolbox" / request.param
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="module")
def export(archive, tmp_path_factory):
    return archive_export(archive).write(tmp_path_factory.mktemp("jax-toolbox") / "trace.sqlite")


def test_every_real_name_parses(archive):
    """All thunk and module ranges of both files (host and GPU-projected), read without an export."""
    host, proj = read_archive(archive)
    names = pl.concat([host.select("Name"), proj.select("Name").drop_nulls()])
    frame = names.select(
        pl.col("Name").str.extract(r"^([^:]*):", 1).alias("domain"),
        pl.col("Name").str.replace(r"^[^:]*:", "").alias("name"),
    )
    kinds = parse_xla(frame)["xla_kind"]
    xla = frame.with_columns(kinds).filter(pl.col("domain") == "TSL")
    assert (xla["xla_kind"] == "malformed").sum() == 0
    assert xla["xla_kind"].null_count() == 0  # every TSL range is a module, a thunk or compile work
    counts = dict(xla.group_by("xla_kind").len().iter_rows())
    assert counts["thunk"] > 10_000 and counts["module"] > 300 and counts["compile"] > 10_000
    thunks = xla.filter(pl.col("xla_kind") == "thunk")["name"]
    assert thunks.str.starts_with("Thunk:#hlo_op=").sum() > 4_000  # the ones with no name= at all
    with zipfile.ZipFile(archive) as zf:  # the archive's own file, not our reading of it
        (member,) = [n for n in zf.namelist() if n.endswith(PUSHPOP)]
        raw = lzma.decompress(zf.read(member)).decode()
    assert raw.count("\n") - 1 == host.height  # every row read (one line each, one header line)


def test_layers_forward_and_backward(export):
    bd = Breakdown(open_trace(export))
    assert bd.facts()["malformed_xla_ranges"] == 0
    layers = [r["name"] for r in bd.by_layer()]
    assert sorted(layers) == sorted(LAYERS) and layers == LAYERS  # natural order
    r = bd.ranges.ranges
    ops = (
        bd.layer_assignment()
        .join(bd.pairs, on="op_id")
        .join(r.filter(pl.col("xla_kind") == "thunk").select("range_id", "backward"), on="range_id")
    )
    seen = ops.group_by("layer").agg(pl.col("backward").any().alias("bwd"), (~pl.col("backward")).any().alias("fwd"))
    assert sorted(seen.filter(pl.col("bwd") & pl.col("fwd"))["layer"]) == sorted(LAYERS)


def test_train_steps_from_module_executions(archive, export):
    trace = open_trace(export)
    steps = Breakdown(trace).by_step()
    assert steps["source"] == f"the executions of {STEP_MODULE} (program 40)"
    names = [s["name"] for s in steps["steps"]]
    assert names == [f"{STEP_MODULE}#{i}" for i in range(5)]
    excluded = {e["name"]: e["reason"] for e in steps["excluded"]}
    # compiled (with autotuning) inside the recording: its first execution is warm-up
    assert excluded == {f"{STEP_MODULE}#0": "warm-up: first execution after its compilation"}
    kept = [s for s in steps["steps"] if not s["excluded"]]
    assert len(kept) == 4
    # a step's span is its projection onto the GPU, as nsys's nvtx_gpu_proj_trace projects it
    _, proj = read_archive(archive)
    nsys_says = proj.filter(pl.col("Name").str.starts_with(f"TSL:XlaModule:#hlo_module={STEP_MODULE},")).sort(
        "Projected Start"
    )
    assert [s["start_ns"] for s in steps["steps"]] == nsys_says["Projected Start"].to_list()
    assert [s["duration_ns"] for s in steps["steps"]] == pytest.approx(nsys_says["Projected Duration"].to_list(), abs=5)
    # the autotuner's trial modules (heavier on the GPU than some steps) ran inside the compilation
    r = Breakdown(trace).ranges.ranges.filter(pl.col("xla_kind") == "module")
    assert "extracted" in set(r["hlo_module"]) and r["hlo_module"].str.starts_with("gemm_fusion_dot").any()
    summary = run_summary(trace)
    assert summary["steps"] == 5 and summary["warmup_steps"] == 1
    assert summary["median_step_ns"] == steps["median_included_step_ns"]


def test_step_table_says_where_steps_came_from(export):
    proc = run_cli("analyze", "--by", "step", str(export))
    assert proc.returncode == 0, proc.stderr
    assert f"steps from the executions of {STEP_MODULE} (program 40)" in proc.stdout
    assert "warm-up: first execution after its compilation" in proc.stdout
    doc = analyze(open_trace(export), by="layer")
    assert [g["name"] for g in doc["layers"]] == LAYERS


def test_pgle_on_the_export_measures_the_step_program_as_the_archive_does(archive, export):
    """pgle on the archive rebuilt as an export: the same program (pjit__wrapped_step_fn, program 40),
    not jit__psum (program 1: 4 blocking executions holding 2.6 to 2.9 s of host time around 16 to 19 ms
    of GPU work), and the same instructions as nsys's own projection of the archive measures."""
    from profiler.analysis import instruction_times as it
    from profiler.predict.measured import load

    _, proj = read_archive(archive)
    spans, execs, step = it.projection_spans(proj)
    e = load(export)
    assert (step.name, step.program_id) == (e.module_name, 40) == (STEP_MODULE, 40)
    assert execs.height == e.steps.height == 5
    archive_ops = set(it.instruction_times(spans)["hlo_op"])
    assert len(archive_ops) > 2_500 and set(e.times["hlo_op"]) == archive_ops
    assert e.chosen_by.startswith(f"{STEP_MODULE} (program 40): ran 5 times, the most GPU time")
    proc = run_cli("pgle", str(export), "-o", str(export.parent / "step.pbtxt"))
    assert proc.returncode == 0, proc.stderr
    assert f"{len(archive_ops)} instruction costs of {STEP_MODULE}" in proc.stdout
    assert f"step: {STEP_MODULE} (program 40): ran 5 times" in proc.stdout
