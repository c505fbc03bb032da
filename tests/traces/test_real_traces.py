"""analyze on every real export of ../shared/traces, checked against plain SQL and nsys itself."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from profiler.runs.result import analyze
from profiler.trace import open_trace
from tests.helpers.cli import nsys_stats_csv, run_cli
from tests.helpers.device_checks import check_devices
from tests.helpers.paths import SHARED_TRACES

pytestmark = pytest.mark.shared


def _exports() -> list[str]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p.name for p in SHARED_TRACES.glob("*.sqlite"))


EXPORTS = _exports()


def sql_totals(path: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """(deviceId, copyKind) -> (count, bytes) of valid copies, by plain SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        has = con.execute("SELECT 1 FROM sqlite_master WHERE name='CUPTI_ACTIVITY_KIND_MEMCPY'").fetchone()
        if not has:
            return {}
        rows = con.execute(
            "SELECT deviceId, copyKind, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
            "WHERE end >= start GROUP BY deviceId, copyKind"
        ).fetchall()
    finally:
        con.close()
    return {(d, k): (n, b) for d, k, n, b in rows}


@pytest.mark.skipif(not EXPORTS, reason="../shared/traces is absent")
@pytest.mark.parametrize("name", EXPORTS)
def test_analyze_json_on_real_export(shared_traces, name):
    path = shared_traces / name
    before = path.stat().st_mtime_ns, path.stat().st_size
    proc = run_cli("analyze", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    totals = sql_totals(path)
    for dev, d in doc["devices"].items():
        for cls, kinds in (("h2d", [1]), ("d2h", [2]), ("offload", [1, 2]), ("d2d", [8]), ("p2p", [10])):
            want_n = sum(totals.get((int(dev), k), (0, 0))[0] for k in kinds)
            want_b = sum(totals.get((int(dev), k), (0, 0))[1] or 0 for k in kinds)
            assert (d["copies"][cls]["count"], d["copies"][cls]["bytes"]) == (want_n, want_b), (dev, cls)
        for cls in ("h2d", "d2h", "offload"):
            m = d["copies"][cls]
            assert 0 <= m["overlap_any_ns"] <= m["busy_ns"] <= max(m["duration_sum_ns"], 0) or m["count"] == 0
            assert m["exposed_ns"] == m["busy_ns"] - m["overlap_any_ns"]
            assert m["overlap_compute_ns"] <= m["overlap_any_ns"]
            assert m["overlap_nccl_ns"] <= m["overlap_any_ns"]
            assert m["busy_ns"] <= d["span_ns"]
    copies_sql = sum(n for n, _ in totals.values())
    copies_doc = sum(
        sum(d["copies"][c]["count"] for c in ("h2d", "d2h", "d2d", "p2p", "other")) for d in doc["devices"].values()
    )
    assert copies_doc == copies_sql
    check_devices(path, doc["devices"])  # every per-device and per-stream number, to the ns
    assert (path.stat().st_mtime_ns, path.stat().st_size) == before, "the input must never change"


def _catalog() -> dict[str, dict[str, str]]:
    with (SHARED_TRACES / "CATALOG.tsv").open() as fh:
        return {row["file"]: row for row in csv.DictReader(fh, delimiter="\t")}


@pytest.mark.skipif(not EXPORTS, reason="../shared/traces is absent")
def test_catalog_counts_agree(shared_traces):
    """The catalog's kernel and copy counts per trace equal what the loader reads."""
    for name, row in _catalog().items():
        trace = open_trace(shared_traces / name)
        assert trace.kernels.height == int(row["kernels"]), name
        assert trace.copies.height == int(row["memcpys"]), name
        assert int(trace.kernels["is_nccl"].sum()) == int(row["nccl_kernels"]), name


@pytest.mark.skipif(not EXPORTS, reason="../shared/traces is absent")
def test_overlapping_streams_trace_has_hidden_copies(shared_traces):
    """apma_hzy__report4: the catalog describes ~50% of copy time overlapping kernels."""
    doc = analyze(open_trace(shared_traces / "apma_hzy__report4.sqlite"))
    off = doc["devices"]["0"]["copies"]["offload"]
    assert 0.45 < off["hidden_fraction"] < 0.55
    # and a negative control: the single-stream finch run never overlaps
    doc = analyze(open_trace(shared_traces / "finch__bte2dgpu-gpu-grid20.sqlite"))
    assert doc["devices"]["0"]["copies"]["offload"]["overlap_any_ns"] == 0


def nsys_stats_mem_time(nsys: Path, path: Path, tmp: Path) -> dict[str, tuple[int, int]]:
    """Operation -> (total ns, count) from ``nsys stats --report cuda_gpu_mem_time_sum``."""
    rows = nsys_stats_csv(nsys, "cuda_gpu_mem_time_sum", path, cwd=tmp)
    return {r["Operation"]: (int(r["Total Time (ns)"]), int(r["Count"])) for r in rows}


@pytest.mark.nsys
@pytest.mark.skipif(not EXPORTS, reason="../shared/traces is absent")
@pytest.mark.parametrize(
    "name",
    [
        n
        for n in EXPORTS
        if n.startswith(
            ("apma_hzy", "gpu4__nsys_vectorAdd_streams", "gpubootcamp__jacobi_memcpy_sys", "finch__bte2dgpu")
        )
    ],
)
def test_duration_sums_equal_nsys_stats(nsys, shared_traces, name, tmp_path):
    """Our duration_sum_ns and count per direction equal nsys's own cuda_gpu_mem_time_sum."""
    stats = nsys_stats_mem_time(nsys, shared_traces / name, tmp_path)
    doc = analyze(open_trace(shared_traces / name))
    for cls, op in (("h2d", "[CUDA memcpy Host-to-Device]"), ("d2h", "[CUDA memcpy Device-to-Host]")):
        dur = sum(d["copies"][cls]["duration_sum_ns"] for d in doc["devices"].values())
        cnt = sum(d["copies"][cls]["count"] for d in doc["devices"].values())
        assert (dur, cnt) == stats.get(op, (0, 0)), (cls, op)


@pytest.mark.skipif(not EXPORTS, reason="../shared/traces is absent")
@pytest.mark.parametrize("name", EXPORTS)
def test_runtime_calls_named_is_a_filter_of_every_call(shared_traces, name):
    """Calls picked by matching each distinct name are the calls picked by matching every row."""
    import polars as pl

    from profiler.analysis.hostsync import BLOCKING_NAMES
    from profiler.trace.loader import RUNTIME_TABLE

    trace = open_trace(shared_traces / name)
    if not trace.has(RUNTIME_TABLE):
        pytest.skip("no CUDA API rows")
    every = trace.runtime_calls
    for pattern in (BLOCKING_NAMES, r"^cu(?:da)?Memcpy", r"^cudaLaunchKernel"):
        want = every.filter(pl.col("name").fill_null("").str.contains(pattern))
        fresh = open_trace(shared_traces / name)  # reads only the matching calls (none read before)
        assert fresh.runtime_calls_named(pattern).equals(want), pattern
        assert trace.runtime_calls_named(pattern).equals(want), pattern  # filters the calls read
