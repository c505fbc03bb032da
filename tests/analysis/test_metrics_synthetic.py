"""METRICS.md numbers on exports built with known answers, checked to the nanosecond.

Each test draws its timeline in a comment; the expected numbers are worked
out by hand from it, not by the code under test.
"""

from __future__ import annotations

import json

import pytest

from profiler.runs.result import analyze
from profiler.synthetic.export import PAGEABLE, PINNED, ExportBuilder
from profiler.trace import open_trace
from tests.helpers.cli import run_cli

NO_CONTEXTS = {
    c: {"count": 0, "bytes": 0, "duration_sum_ns": 0, "gbps": None} for c in ("alone", "kernels", "copies", "mixed")
}


def devices_of(path) -> dict:
    return analyze(open_trace(path))["devices"]


def test_concurrent_copies_on_two_streams(build):
    # t:      0    100  120  150  200  250
    # kernel  [=========)                       compute [0,120)
    # s20           [==========)                d2h [100,200) 1000 B
    # s21                 [==========)          d2h [150,250) 3000 B
    b = ExportBuilder()
    b.kernel(0, 120, "fusion_1", stream=7)
    b.copy(100, 200, "d2h", 1000, stream=20)
    b.copy(150, 250, "d2h", 3000, stream=21)
    dev = devices_of(build(b))["0"]
    assert dev["window_ns"] == [0, 250]
    assert dev["span_ns"] == 250
    assert dev["compute"] == {"count": 1, "busy_ns": 120}
    assert dev["nccl"] == {"count": 0, "busy_ns": 0}
    d2h = dev["copies"]["d2h"]
    assert d2h["count"] == 2
    assert d2h["bytes"] == 4000
    assert d2h["duration_sum_ns"] == 200
    assert d2h["busy_ns"] == 150  # union [100,250): concurrency is not counted twice
    assert d2h["occupancy"] == pytest.approx(150 / 250)
    assert d2h["overlap_compute_ns"] == 20
    assert d2h["overlap_nccl_ns"] == 0
    assert d2h["overlap_any_ns"] == 20
    assert d2h["exposed_ns"] == 130
    assert d2h["hidden_fraction"] == pytest.approx(20 / 150)
    assert d2h["gbps"] == pytest.approx(4000 / 200)
    assert d2h["pageable_count"] == 0
    assert dev["copies"]["offload"]["busy_ns"] == 150
    assert dev["copies"]["h2d"]["count"] == 0
    assert dev["copies"]["h2d"]["hidden_fraction"] is None
    assert dev["copies"]["h2d"]["gbps"] is None
    assert dev["streams"] == [
        {
            "stream": 20,
            "classes": ["d2h"],
            "busy_ns": 100,
            "occupancy": pytest.approx(0.4),
            "count": 1,
            "bytes": 1000,
            "duration_sum_ns": 100,
            "gbps": pytest.approx(10.0),
            "contexts": NO_CONTEXTS,  # copies under 1 MiB have no context
        },
        {
            "stream": 21,
            "classes": ["d2h"],
            "busy_ns": 100,
            "occupancy": pytest.approx(0.4),
            "count": 1,
            "bytes": 3000,
            "duration_sum_ns": 100,
            "gbps": pytest.approx(30.0),
            "contexts": NO_CONTEXTS,
        },
    ]


def test_copy_half_under_compute_half_under_nccl(build):
    # h2d      [0,100)
    # compute  [0,50)    nccl [50,100)
    b = ExportBuilder()
    b.copy(0, 100, "h2d", 800)
    b.kernel(0, 50, "fusion_2")
    b.kernel(50, 100, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", demangled="void ncclDevKernel_x(int)")
    h2d = devices_of(build(b))["0"]["copies"]["h2d"]
    assert (h2d["overlap_compute_ns"], h2d["overlap_nccl_ns"], h2d["overlap_any_ns"]) == (50, 50, 100)
    assert h2d["exposed_ns"] == 0
    assert h2d["hidden_fraction"] == 1.0


def test_compute_and_nccl_concurrent_are_one_any(build):
    # d2h [0,100); compute [0,80); nccl [20,100): any = [0,100), compute 80, nccl 80
    b = ExportBuilder()
    b.copy(0, 100, "d2h")
    b.kernel(0, 80, "gemm")
    b.kernel(20, 100, "ncclKernel_AllGather", stream=9)
    dev = devices_of(build(b))["0"]
    d2h = dev["copies"]["d2h"]
    assert (d2h["overlap_compute_ns"], d2h["overlap_nccl_ns"], d2h["overlap_any_ns"]) == (80, 80, 100)
    assert d2h["exposed_ns"] == 0
    assert dev["compute"]["busy_ns"] == 80 and dev["nccl"]["busy_ns"] == 80


def test_touching_and_identical_intervals(build):
    # kernels [0,10) [10,20) touch: compute busy 20
    # two identical d2h copies [5,15): busy 10, duration_sum 20, overlap 10
    b = ExportBuilder()
    b.kernel(0, 10, "a")
    b.kernel(10, 20, "b")
    b.copy(5, 15, "d2h", 100, stream=20)
    b.copy(5, 15, "d2h", 100, stream=21)
    dev = devices_of(build(b))["0"]
    assert dev["compute"] == {"count": 2, "busy_ns": 20}
    d2h = dev["copies"]["d2h"]
    assert (d2h["count"], d2h["duration_sum_ns"], d2h["busy_ns"]) == (2, 20, 10)
    assert d2h["overlap_any_ns"] == 10 and d2h["exposed_ns"] == 0
    assert d2h["gbps"] == pytest.approx(200 / 20)


def test_zero_length_and_invalid_ops(build):
    # zero-length h2d at 30 counts but adds no time; kernel [50,40) is invalid;
    # memset [60,70) widens the window; invalid ops never do.
    b = ExportBuilder()
    b.kernel(0, 20, "k")
    b.copy(30, 30, "h2d", 64)
    b.kernel(500, 400, "broken")
    b.copy(900, 800, "d2h", 64)
    b.memset(60, 70)
    dev = devices_of(build(b))["0"]
    assert dev["invalid_ops"] == 2
    assert dev["window_ns"] == [0, 70]
    assert dev["compute"] == {"count": 1, "busy_ns": 20}
    h2d = dev["copies"]["h2d"]
    assert (h2d["count"], h2d["bytes"], h2d["duration_sum_ns"], h2d["busy_ns"]) == (1, 64, 0, 0)
    assert h2d["hidden_fraction"] is None and h2d["gbps"] is None
    assert dev["copies"]["d2h"]["count"] == 0
    assert dev["streams"] == [
        {
            "stream": 20,
            "classes": ["h2d"],
            "busy_ns": 0,
            "occupancy": 0.0,
            "count": 1,
            "bytes": 64,
            "duration_sum_ns": 0,
            "gbps": None,
            "contexts": NO_CONTEXTS,
        }
    ]


@pytest.mark.parametrize(
    ("short", "demangled", "is_nccl"),
    [
        ("ncclDevKernel_AllReduce", "void ncclDevKernel_AllReduce(ncclDevComm*)", True),
        ("void ncclDevKernel_Generic", "x", True),
        ("NCCL_Kernel_Broadcast", "x", True),
        ("NcClSomething", "x", True),
        ("my_nccl_reduce", "void my_nccl_reduce()", False),
        ("voidncclX", "x", False),
        ("fusion_nccl", "x", False),
        (None, "void ncclKernel_SendRecv(int)", True),  # no short name: the demangled one decides
        (None, "void gemm_nccl()", False),
    ],
)
def test_nccl_kernel_names(build, short, demangled, is_nccl):
    b = ExportBuilder()
    if short is None:
        b.kernel(0, 10, "unused", demangled=demangled, short_id=999_999)  # dangling StringIds id
    else:
        b.kernel(0, 10, short, demangled=demangled)
    dev = devices_of(build(b))["0"]
    assert dev["nccl"]["count"] == int(is_nccl)
    assert dev["compute"]["count"] == int(not is_nccl)


def test_copy_classes_and_pageable(build):
    b = ExportBuilder()
    b.copy(0, 10, "h2d", 10, host=PAGEABLE)
    b.copy(10, 20, "h2d", 20, host=PINNED)
    b.copy(20, 30, "d2h", 30, host=PAGEABLE)
    b.copy(30, 40, "d2d", 40)
    b.copy(40, 50, "p2p", 50)
    b.copy(50, 60, 11, 60)  # unified memory HtoD -> other
    b.copy(60, 70, 3, 70)  # HtoA -> other
    dev = devices_of(build(b))["0"]
    c = dev["copies"]
    assert (c["h2d"]["count"], c["h2d"]["bytes"], c["h2d"]["pageable_count"]) == (2, 30, 1)
    assert (c["d2h"]["count"], c["d2h"]["pageable_count"]) == (1, 1)
    assert (c["offload"]["count"], c["offload"]["bytes"], c["offload"]["pageable_count"]) == (3, 60, 2)
    assert c["offload"]["busy_ns"] == 30
    assert c["d2d"] == {"count": 1, "bytes": 40, "busy_ns": 10}
    assert c["p2p"] == {"count": 1, "bytes": 50, "busy_ns": 10}
    assert c["other"] == {"count": 2, "bytes": 130, "busy_ns": 20}
    assert dev["window_ns"] == [0, 70]


def test_several_devices_are_separate(build):
    # device 0: copy [0,100) under kernel [0,100); device 1: copy [0,100), its kernel is on device 0 only
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H200")
    b.gpu(1, "NVIDIA H200")
    b.kernel(0, 100, "k", device=0)
    b.copy(0, 100, "d2h", device=0)
    b.copy(0, 100, "d2h", device=1)
    b.kernel(200, 300, "k", device=1)
    devs = devices_of(build(b))
    assert set(devs) == {"0", "1"}
    assert devs["0"]["copies"]["d2h"]["exposed_ns"] == 0
    assert devs["1"]["copies"]["d2h"]["exposed_ns"] == 100
    assert devs["1"]["window_ns"] == [0, 300]
    assert devs["1"]["copies"]["d2h"]["occupancy"] == pytest.approx(100 / 300)


def test_streams_list_classes_in_order(build):
    b = ExportBuilder()
    b.copy(0, 10, "d2d", stream=5)
    b.copy(5, 15, "d2h", stream=5)
    b.copy(20, 30, "h2d", stream=5)
    b.kernel(0, 40, "k")
    dev = devices_of(build(b))["0"]
    (s,) = dev["streams"]
    assert (s["stream"], s["classes"], s["busy_ns"], s["occupancy"]) == (
        5,
        ["h2d", "d2h", "d2d"],
        25,
        25 / 40,
    )


def test_missing_tables(build):
    # kernels only: copy classes are all zero; no GPU tables at all: "devices" is empty
    b = ExportBuilder()
    b.kernel(0, 10, "k")
    dev = devices_of(build(b))["0"]
    assert dev["copies"]["offload"]["count"] == 0 and dev["streams"] == []
    empty = build(ExportBuilder())
    assert devices_of(empty) == {}


def test_missing_columns_read_as_null(build):
    # An older schema without srcKind/dstKind and without globalPid: no pageable copies known.
    b = ExportBuilder(
        omit={
            "CUPTI_ACTIVITY_KIND_MEMCPY.srcKind",
            "CUPTI_ACTIVITY_KIND_MEMCPY.dstKind",
            "CUPTI_ACTIVITY_KIND_KERNEL.globalPid",
        }
    )
    b.copy(0, 10, "h2d", host=PAGEABLE)
    b.kernel(0, 5, "k")
    dev = devices_of(build(b))["0"]
    assert dev["copies"]["h2d"]["pageable_count"] == 0
    assert dev["copies"]["h2d"]["overlap_any_ns"] == 5


def test_device_filter_and_cli_json(build):
    b = ExportBuilder()
    b.kernel(0, 10, "k", device=0)
    b.kernel(0, 10, "k", device=3)
    path = build(b)
    proc = run_cli("analyze", "--json", "--device", "3", str(path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc["devices"]) == ["3"]
    assert doc["trace"]["nsys_version"] == "2023.4.4.54"


def test_cli_table_mentions_units(build):
    b = ExportBuilder()
    b.gpu(0)
    b.kernel(0, 1_000_000, "k")
    b.copy(500_000, 1_500_000, "d2h", 2**20)
    proc = run_cli("analyze", str(build(b)))
    assert proc.returncode == 0, proc.stderr
    assert "Device 0 (NVIDIA H200)" in proc.stdout
    assert "exposed ms" in proc.stdout and "GB/s" in proc.stdout
    assert "50.0%" in proc.stdout  # hidden fraction of the d2h copy


def test_peak_memory_from_cuda_memory_events(build):
    path = build(ExportBuilder())
    import sqlite3

    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER NOT NULL, "
        "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL, "
        "bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, name TEXT)"
    )
    # device 0: +100 +50 -100 +70 -> peak 150; device 1: a free of memory allocated before the capture
    rows = [(1, 0, 100, 0), (2, 0, 50, 0), (3, 0, 100, 1), (4, 0, 70, 0), (1, 1, 30, 1), (2, 1, 20, 0)]
    con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, 0, ?, 1, 0, 0, ?, 2, ?, NULL)", rows)
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
        "deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, shortName INTEGER NOT NULL, "
        "demangledName INTEGER NOT NULL)"
    )
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 10, ?, 7, 1, 1)", [(0,), (1,)])
    con.commit()
    con.close()
    devs = devices_of(path)
    assert devs["0"]["memory"] == {"peak_allocated_bytes": 150, "events": 4}
    assert devs["1"]["memory"] == {"peak_allocated_bytes": 0, "events": 2}
