"""``analyze --cross-check``: our numbers against nsys's own recipes, run for real on the same export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.recipes.crosscheck import copy_checks, cross_check, render
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.recipe import fake_install, snapshot
from tests.helpers.training_traces import training_export

# reports (nsys's recipes read them through a link) and an export (through a stand-in report)
SHARED = (
    "gpubootcamp__jacobi_memcpy_nvlink_report.qdrep",  # d2h, d2d, p2p copies, 3 NVTX ranges, 2 devices
    "gpubootcamp__jacobi_memcpy_sys_report.sqlite",  # one CUDA call launches a D2H and an H2D copy
    "alcf__lineprofiling_seq_parallel_fp32-ranks8-nodes2-T1_0.sqlite",  # an NCCL kernel in an NCCL range
)


@pytest.mark.nsys
@pytest.mark.shared
@pytest.mark.parametrize("name", SHARED)
def test_cross_check_agrees_on_shared_traces(nsys, shared_traces, name):
    before = snapshot(shared_traces)
    proc = run_cli("analyze", str(shared_traces / name), "--cross-check", "--json", "--nsys", str(nsys))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["agree"] and all(r["status"] in ("ok", "no data") for r in doc["recipes"].values())
    assert Path(doc["export"]).suffix == ".sqlite"
    by = {c["number"]: c for c in doc["checks"]}
    for number in ("h2d copies", "d2h duration_sum_ns", "p2p bytes", "kernels", "NVTX ranges with GPU ops"):
        assert by[number]["agree"] is True and by[number]["ours"] == by[number]["theirs"], by[number]
    if name.startswith("gpubootcamp__jacobi_memcpy_nvlink"):
        assert by["d2h copies"]["theirs"] == 3003 and by["p2p copies"]["theirs"] == 4004
        assert by["GPU ops in NVTX ranges (summed)"]["theirs"] == 15001
        assert {e["name"]: e["theirs_ops"] for e in doc["nvtx_ranges_by_name"]} == {
            "Jacobi solve": 10000,
            "Jacobi Solve": 5000,
            "Init boundaries": 1,
        }
    if name.startswith("gpubootcamp__jacobi_memcpy_sys"):
        proj = by["GPU ops in NVTX ranges (summed)"]
        assert (proj["ours"], proj["theirs"]) == (19001, 15001)
        assert proj["note"] == "nsys counts CUDA calls: 4000 of our ops share a call with another op"
    if name.startswith("alcf"):
        assert (by["NCCL kernels"]["ours"], by["NCCL kernels"]["theirs"]) == (1, 1)
    assert snapshot(shared_traces) == before, "the cross-check wrote into the input's folder"


@pytest.mark.nsys
def test_cross_check_prints_an_agreement_table(nsys, tmp_path):
    trace = training_export().write(tmp_path / "t.sqlite")
    proc = run_cli("analyze", str(trace), "--cross-check", "--nsys", str(nsys))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].split() == ["number", "nsys", "recipe", "ours", "theirs", "agree", "why"]
    d2h = next(ln for ln in lines if ln.startswith("d2h copies")).split()
    assert d2h == ["d2h", "copies", "cuda_gpu_mem_time_sum", "12", "12", "yes"]
    assert any(ln.startswith("  GPU ops in 'layer=0'") and ln.split()[-1] == "yes" for ln in lines)
    assert "all numbers agree" in lines and lines[-1].startswith("not cross-checked: busy, overlap, exposed")


@pytest.mark.nsys
def test_cross_check_explains_invalid_ops(nsys, tmp_path):
    """nsys counts copies and kernels with end < start, METRICS.md leaves them out: agreement, said why."""
    b = training_export()
    b.copy(9_000_000, 8_999_000, "h2d", 4096)
    b.copy(9_100_000, 9_200_000, "h2d", 8192)
    b.kernel(9_300_000, 9_299_000, "ncclDevKernel_AllReduce")
    b.kernel(9_400_000, 9_500_000, "ncclDevKernel_AllReduce")
    path = b.write(tmp_path / "bad_ops.sqlite")
    doc = cross_check(str(path), str(nsys))
    by = {c["number"]: c for c in doc["checks"]}
    assert doc["agree"], render(doc)
    assert (by["h2d copies"]["ours"], by["h2d copies"]["theirs"]) == (1, 2)
    assert (by["h2d duration_sum_ns"]["ours"], by["h2d duration_sum_ns"]["theirs"]) == (100_000, 99_000)
    assert (by["h2d bytes"]["ours"], by["h2d bytes"]["theirs"]) == (8192, 8192 + 4096)
    assert (by["NCCL kernels"]["ours"], by["NCCL kernels"]["theirs"]) == (1, 2)
    assert "1 copy with end < start" in by["h2d copies"]["note"]
    assert "1 kernel with end < start" in by["kernels"]["note"]
    assert by["d2h copies"]["note"] == ""
    # the projection of the profile-step ranges, matched with nsys's "profile-step:layer=0" names
    layer0 = next(e for e in doc["nvtx_ranges_by_name"] if e["name"] == "layer=0")
    assert layer0["ours_ops"] == layer0["theirs_ops"] == 8 and layer0["unmatched"] == 0


def test_a_difference_is_shown_and_fails(tmp_path):
    """The comparison itself: a count nsys disagrees with is a NO, and the document does not agree."""
    b = training_export(steps=1, layers=1)
    trace = open_trace(b.write(tmp_path / "t.sqlite"))
    devices = {"0": {"copies": {c: {"count": 1, "bytes": 10, "duration_sum_ns": 5} for c in ("h2d", "d2h")}}}
    for c in ("d2d", "p2p", "other"):
        devices["0"]["copies"][c] = {"count": 0, "bytes": 0}
    rows = [{"Operation": "[CUDA memcpy Host-to-Device]", "Count": 2, "Total Time": 5, "Total": 10}]
    rows.append({"Operation": "[CUDA memcpy Device-to-Host]", "Count": 1, "Total Time": 5, "Total": 10})
    checks = copy_checks(trace, devices, {"status": "ok", "rows": rows}, {"status": "ok", "rows": rows})
    by = {c.number: c for c in checks}
    assert by["h2d copies"].agree is False and by["d2h copies"].agree is True and by["h2d bytes"].agree is True
    doc = {
        "trace": "t",
        "export": "t",
        "nsys_version": "x",
        "recipes": {"cuda_gpu_mem_time_sum": {"status": "ok"}},
        "checks": [c.__dict__ for c in checks],
        "agree": all(c.agree for c in checks),
        "not_checked": "-",
    }
    text = render(doc)
    assert not doc["agree"]
    assert any(ln.startswith("h2d copies") and " NO" in ln for ln in text.splitlines())
    assert "1 numbers do not agree" in text


@pytest.mark.nsys
def test_cross_check_without_recipe_framework_is_one_line(nsys, tmp_path):
    trace = training_export(steps=1).write(tmp_path / "t.sqlite")
    proc = run_cli("analyze", str(trace), "--cross-check", "--nsys", str(fake_install(tmp_path, nsys, False)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "has no recipe framework" in proc.stderr


@pytest.mark.nsys
def test_cross_check_without_recipe_packages_is_one_line(nsys, tmp_path):
    """nsys's recipes run in this environment; without psutil they cannot, and we say so first."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "psutil.py").write_text("raise ImportError('psutil is missing')\n")
    trace = training_export(steps=1).write(tmp_path / "t.sqlite")
    proc = run_cli("analyze", str(trace), "--cross-check", "--nsys", str(nsys), env={"PYTHONPATH": str(blocker)})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "lacks psutil" in proc.stderr and "[recipes]" in proc.stderr


def test_cross_check_refuses_views_and_missing_traces(tmp_path):
    trace = training_export(steps=1).write(tmp_path / "t.sqlite")
    proc = run_cli("analyze", str(trace), "--cross-check", "--by", "layer")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "without --ranks, --by or --device" in proc.stderr
    proc = run_cli("analyze", str(tmp_path / "none.sqlite"), "--cross-check")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "none.sqlite" in proc.stderr
