"""The per-rank task's shortcuts give the numbers of the full analysis, to the nanosecond.

The task attributes only copies, reads kernels without names or launches,
finds launches by binary search instead of a join, and reads runtime rows
without their names; each shortcut is checked here against the general path.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.analysis.attribution import _with_launches_by_join, with_launches
from profiler.runs.result import collect
from profiler.synthetic.export import ExportBuilder
from profiler.trace import load_trace
from profiler.trace.sqlite_io import estimate_rows
from tests.helpers.paths import SHARED_TRACES
from tests.helpers.training_traces import training_export

maybe_int = st.one_of(st.none(), st.integers(0, 6))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(maybe_int, maybe_int), max_size=30),
    st.lists(st.tuples(maybe_int, maybe_int, st.integers(0, 10**6), st.integers(0, 10**6)), max_size=30),
)
def test_launch_lookup_matches_a_join(ops_rows, runtime_rows):
    """Same pid and correlation id, first runtime row wins, NULL keys never match."""
    ops = pl.DataFrame(
        {
            "op_id": list(range(len(ops_rows))),
            "pid": [p for p, _ in ops_rows],
            "correlation_id": [c for _, c in ops_rows],
        },
        schema={"op_id": pl.Int64, "pid": pl.Int64, "correlation_id": pl.Int64},
    )
    runtime = pl.DataFrame(
        runtime_rows,
        schema={"pid": pl.Int64, "correlation_id": pl.Int64, "start": pl.Int64, "global_tid": pl.Int64},
        orient="row",
    )
    rt = runtime.filter(pl.col("pid").is_not_null() & pl.col("correlation_id").is_not_null())
    got = with_launches(ops, runtime).sort("op_id")
    want = _with_launches_by_join(ops, rt).sort("op_id")
    assert got.select("op_id", "launch_start", "launch_gtid").equals(
        want.select("op_id", "launch_start", "launch_gtid")
    )


def test_launch_lookup_outside_the_packed_key_falls_back():
    ops = pl.DataFrame({"op_id": [0, 1], "pid": [1, 1], "correlation_id": [1 << 40, 3]})
    runtime = pl.DataFrame({"pid": [1, 1], "correlation_id": [3, 1 << 40], "start": [30, 40], "global_tid": [7, 8]})
    got = with_launches(ops, runtime).sort("op_id")
    assert got["launch_start"].to_list() == [40, 30]
    assert got["launch_gtid"].to_list() == [8, 7]


def _without_detail(run: dict) -> dict:
    """What the per-rank task keeps of a full run summary."""
    return {
        "median_step_ns": run["median_step_ns"],
        "copies": run["copies"],
        "devices": run["devices"],
        "layers": {n: {d: v[d] for d in ("h2d", "d2h", "offload")} for n, v in run["layers"].items()},
        "policy": run["policy"],
    }


def _rank_traces(tmp_path: Path) -> list[Path]:
    paths = []
    for i, kwargs in enumerate([{}, {"exposed": {1: 60_000}, "step_jitter": (0, 400_000)}, {"layers": 5}]):
        paths.append(training_export(**kwargs).write(tmp_path / f"t{i}.sqlite"))
    if SHARED_TRACES.is_dir():  # real traces: NVTX ranges over copies and kernels from several threads
        paths += [SHARED_TRACES / n for n in ("aiprof__baseline_nvtx.sqlite", "ingp__report10__843f53a.sqlite")]
    return [p for p in paths if p.is_file()]


def test_copy_only_attribution_gives_the_full_numbers(tmp_path):
    for path in _rank_traces(tmp_path):
        fast = collect(load_trace(path), None, detail=False)
        full = collect(load_trace(path), None, detail=True)
        assert _without_detail(fast) == _without_detail(full), path


def test_kernel_spans_match_kernels(tmp_path):
    b = ExportBuilder()
    b.gpu(0)
    b.kernel(0, 10, "ncclDevKernel_AllReduce")
    b.kernel(10, 20, "void ncclKernel_x")
    b.kernel(20, 30, "fusion_1")
    unresolved = b.write(tmp_path / "ok.sqlite")
    b.kernel(30, 40, "whatever", demangled="ncclDemangledOnly", short_id=987_654)  # short id not in StringIds
    fallback = b.write(tmp_path / "fallback.sqlite")
    for path, nccl in ((unresolved, [True, True, False]), (fallback, [True, True, False, True])):
        spans = load_trace(path).kernel_spans
        full = load_trace(path).kernels
        assert spans.equals(full.select("device", "start", "end", "is_nccl"))
        assert spans["is_nccl"].to_list() == nccl
    assert load_trace(fallback).kernels["name"].to_list()[-1] == "ncclDemangledOnly"


def test_estimate_rows(tmp_path):
    db = tmp_path / "x.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("CREATE TABLE w (a INTEGER PRIMARY KEY, b) WITHOUT ROWID")
    assert estimate_rows(con, "t") == 0
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(5)])
    con.executemany("INSERT INTO w VALUES (?, 1)", [(i,) for i in range(3)])
    assert estimate_rows(con, "t") == 5
    assert estimate_rows(con, "w") == 3
    con.close()


@pytest.mark.parametrize("jobs", [2, 3])
def test_pool_sizes_agree_with_serial(tmp_path, jobs):
    """This process works alongside the spawned workers; the results do not depend on who ran a rank."""
    from profiler.parallel import map_ranks

    paths = []
    for r in range(5):
        paths.append(training_export(exposed={0: 10_000 * r}).write(tmp_path / f"report.{r}.sqlite"))
    assert map_ranks(paths, jobs=jobs) == map_ranks(paths, jobs=1)


def test_a_dying_pool_worker_fails_only_its_ranks(tmp_path):
    """Kill the spawned worker after the first result: its queued ranks are reported failed by
    name, this process analyzes the rest, and what did complete matches the serial run."""
    import multiprocessing
    import signal

    from profiler.parallel import map_ranks

    paths = [training_export(exposed={0: 1000 * r}).write(tmp_path / f"report.{r}.sqlite") for r in range(8)]
    killed = []

    def progress(done: int, total: int, res: dict) -> None:
        if not killed:
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    got = map_ranks(paths, jobs=2, progress=progress)
    serial = map_ranks(paths, jobs=1)
    assert killed
    assert [r["path"] for r in got] == [str(p) for p in paths]
    failed = [r for r in got if "error" in r]
    assert failed and all("worker died" in r["error"] for r in failed)
    assert len(failed) <= 2  # at most the ranks the worker held
    for mine, ref in zip(got, serial, strict=True):
        if "error" not in mine:
            assert mine == ref


def test_kernel_names_without_a_short_name_column(tmp_path):
    """An export whose kernels have no short name column falls back to the demangled name,
    for the NCCL flag too."""
    b = ExportBuilder()
    b.gpu(0)
    b.kernel(0, 10, "x", demangled="ncclDevKernel_AllGather")
    b.kernel(10, 20, "y", demangled="void fusion_2")
    path = b.write(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName")
    con.commit()
    con.close()
    assert load_trace(path).kernel_spans["is_nccl"].to_list() == [True, False]
    assert load_trace(path).kernels["name"].to_list() == ["ncclDevKernel_AllGather", "void fusion_2"]
