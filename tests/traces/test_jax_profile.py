"""A JAX profiler trace read as an nsys export (profiler/trace/jax_profile.py): a built trace with
known answers, and the H200 runs of sample_traces/h200-example checked against their own JSON."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from profiler.runs.result import analyzed
from profiler.trace import jax_profile, load_trace, nsys_schema
from profiler.xla.hlo import parse_text
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.sqlite_rows import rows

H200 = ROOT / "sample_traces" / "h200-example"
LAUNCH = "grid:4,2,1 block:128,1,1"
HOST_TID = 1_265_496_532  # a real host thread id of the H200 traces: above the 24 bits a GlobalId keeps
HLO = """HloModule jit_step, is_scheduled=true

ENTRY %main.1 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %fusion.3 = f32[4]{0} fusion(f32[4]{0} %p), kind=kLoop, calls=%f, metadata={op_name="jit(step)/jvp(layer_0)/mul"}
}
"""


def x(pid: int, tid: int, ts: float, dur: float, name: str, **args: object) -> dict:
    event = {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name}
    return event | ({"args": {k: str(v) for k, v in args.items()}} if args else {})


def meta(pid: int, name: str, tid: int | None = None) -> dict:
    kind = "thread_name" if tid is not None else "process_name"
    return {"ph": "M", "pid": pid, **({"tid": tid} if tid is not None else {}), "name": kind, "args": {"name": name}}


def built_events() -> list[dict]:
    """One module execution as jax.profiler writes it: two thunks (a fusion and a copy's start) that
    launch a kernel and a device-to-host copy, XLA's bookkeeping around them, and a memset."""
    host = 701
    return [
        meta(1, "/device:GPU:0"),
        meta(1, "Stream #7(Compute)", 7),
        meta(1, "Stream #20(MemcpyD2H)", 20),
        meta(host, "/host:CPU"),
        meta(host, "python3", HOST_TID),
        x(host, HOST_TID, 100.0, 50.0, "jit_step:XLA GPU module"),
        x(host, HOST_TID, 100.5, 0.25, "Thunks::Prepare"),
        x(host, HOST_TID, 101.0, 5.0, "fusion.3"),
        # the launch (CUPTI's clock) ends after its thunk (XLA's), inside the next thunk: as on the H200
        x(host, HOST_TID, 102.0, 4.3, "fusion_3", correlation_id=11, context_id="$$1", device_id=0),
        x(host, HOST_TID, 106.1, 3.9, "copy-start.1.0"),
        x(host, HOST_TID, 108.0, 1.0, "MemcpyD2H", correlation_id=12, memcpy_details="kind_src:unknown size:4"),
        x(host, HOST_TID, 110.5, 0.5, "Memset", correlation_id=13, Memset_details="kind:unknown num_bytes:4"),
        x(host, HOST_TID, 111.0, 30.0, "GetEventForComputeStreamSyncPoint", long_name="ThenExecuteCallback:Get"),
        x(host, HOST_TID, 112.0, 25.0, "cuLaunchHostFunc"),
        x(
            1,
            7,
            103.0,
            10.0,
            "fusion_3",
            correlation_id=11,
            hlo_module="jit_step",
            hlo_op="fusion.3",
            kernel_details=f"regs:32 static_shared:0 dynamic_shared:1024 {LAUNCH} occ_pct:50",
        ),
        x(
            1,
            20,
            105.5,
            20.25,
            "MemcpyD2H",
            correlation_id=12,
            hlo_op="copy-start.1.0",
            memcpy_details="kind_src:device kind_dst:pinned size:1048576 dest:0 async:1",
        ),
        x(1, 7, 113.5, 0.001, "Memset", correlation_id=13, Memset_details="kind:unknown num_bytes:4 async:1"),
    ]


def write_trace(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}).encode()))
    return path


@pytest.fixture
def built(tmp_path: Path) -> Path:
    profile = tmp_path / "t" / "plugins" / "profile" / "2026_12_04_16_59_07"
    src = write_trace(profile / "vm.trace.json.gz", built_events())
    out = tmp_path / "built.sqlite"
    jax_profile.convert(tmp_path / "t", out, module=parse_text(HLO), gpu_name="NVIDIA H200", program_id=5)
    assert src.is_file()
    return out


def test_gpu_ops_keep_their_times_streams_sizes_and_launch_shapes(built):
    kernel = "SELECT start, end, deviceId, streamId, correlationId, registersPerThread, dynamicSharedMemory, "
    kernel += "gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL"
    assert rows(built, kernel) == [(103_000, 113_000, 0, 7, 11, 32, 1024, 4, 2, 1, 128, 1, 1)]
    copy = "SELECT start, end, streamId, copyKind, srcKind, dstKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    assert rows(built, copy) == [(105_500, 125_750, 20, 2, nsys_schema.DEVICE, nsys_schema.PINNED, 1 << 20)]
    assert rows(built, "SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET") == [(113_500, 113_501, 4)]
    names = "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName"
    assert rows(built, names) == [("fusion_3",)]


def test_xla_annotations_become_its_module_and_thunk_ranges(built):
    nvtx = rows(built, "SELECT start, end, eventType, domainId, text FROM NVTX_EVENTS ORDER BY start, eventType")
    assert nvtx == [
        (0, None, 75, 1, "TSL"),
        (100_000, 150_000, 59, 1, "XlaModule:#hlo_module=jit_step,program_id=5#"),
        (101_000, 106_000, 59, 1, "Thunk:#name=jit(step)/jvp(layer_0)/mul,hlo_op=fusion.3#"),
        (106_100, 110_000, 59, 1, "Thunk:#hlo_op=copy-start.1.0#"),
    ]  # not XLA's bookkeeping (Thunks::Prepare), nor what a call with arguments encloses
    tid = nsys_schema.global_tid(701, 1)  # the host thread numbered from 1: its own id needs 31 bits
    calls = "SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start"
    assert rows(built, calls) == [(102_000, 11, tid), (108_000, 12, tid), (110_500, 13, tid)]
    names = "SELECT s.value, t.globalTid FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
    assert rows(built, names) == [("python3", tid)]
    meta = dict(rows(built, "SELECT name, value FROM META_DATA_EXPORT"))
    assert meta[jax_profile.SOURCE_KEY] == jax_profile.SOURCE and meta["PROFILE_STEP_SOURCE_FILE"] == "vm.trace.json.gz"


def test_the_analysis_reads_it_and_says_what_it_cannot_measure(built):
    run = analyzed(load_trace(built), findings=None)
    dev = run.devices["0"]
    d2h = dev["copies"]["d2h"]
    # the copy [105.5, 125.75) us beside the kernel [103, 113) us: 7.5 us hidden, 12.75 us exposed
    assert (d2h["count"], d2h["busy_ns"], d2h["exposed_ns"], d2h["overlap_compute_ns"]) == (1, 20_250, 12_750, 7_500)
    assert dev["stalls"]["recorded"] is False
    assert run.summary().stall_ns is None
    assert [s.name for s in run.steps.rows] and run.steps.rows[0].stall_ns is None
    assert load_trace(built).devices["name"].to_list() == ["NVIDIA H200"]


def test_the_cli_reads_a_jax_profiler_folder_through_a_cached_export_and_never_writes_beside_it(tmp_path):
    folder = tmp_path / "trace"
    src = write_trace(folder / "plugins" / "profile" / "2026_12_04_16_59_07" / "vm.trace.json.gz", built_events())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    env = {"PROFILE_STEP_CACHE": str(tmp_path / "cache")}
    first = run_cli("analyze", str(folder), env=env)
    assert first.returncode == 0, first.stderr
    said = " ".join(first.stdout.split())  # as read, whatever the terminal's wrapping
    assert f"{src} (a jax.profiler trace, read through " in said
    assert "stalls: not measured: a JAX profiler trace holds no stream waits" in said
    assert "cost     not modelled: a JAX profiler trace holds no stream waits" in first.stdout
    made = sorted((tmp_path / "cache" / "exports").glob("*.sqlite"))
    assert len(made) == 1
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}
    assert after == {p: v for p, v in before.items() if p.is_relative_to(folder)}  # the trace as it was, nothing beside
    stamp = made[0].stat().st_mtime_ns
    again = run_cli("analyze", "--json", str(src), env=env)
    assert again.returncode == 0 and made[0].stat().st_mtime_ns == stamp  # the same export, reused
    assert json.loads(again.stdout)["trace"]["source"] == jax_profile.SOURCE


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x1f\x8b\x08\x00 not really gzip", "cannot be read as a JAX profiler trace"),
        (gzip.compress(b"{not json", mtime=0), "cannot be read as a JAX profiler trace"),
        (gzip.compress(b'{"events": []}', mtime=0), "is JSON but not a Chrome trace (no traceEvents list)"),
    ],
    ids=["not-gzip", "not-json", "no-trace-events"],  # the same names in every process (xdist's workers)
)
def test_a_bad_trace_is_one_line_naming_the_file(tmp_path, content, problem):
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(content)
    proc = run_cli("analyze", str(bad), env={"PROFILE_STEP_CACHE": str(tmp_path / "cache")})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and problem in lines[0], proc.stderr


# --- the H200 runs, each against its own JSON ---------------------------------------------------
def union_ns(spans: list[tuple[int, int]]) -> int:
    """Total length of the union of [start, end) spans (the test's own sweep)."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def minus_ns(spans: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """Length of the union of *spans* outside the union of *cover* (on a 1 ns grid, by events)."""
    points = sorted({p for s in spans + cover for p in s})
    grid = np.array(points, dtype=np.int64)
    inside = np.zeros(len(grid) - 1, dtype=bool)
    covered = np.zeros(len(grid) - 1, dtype=bool)
    for s, e in spans:
        inside[np.searchsorted(grid, s) : np.searchsorted(grid, e)] = True
    for s, e in cover:
        covered[np.searchsorted(grid, s) : np.searchsorted(grid, e)] = True
    return int(np.diff(grid)[inside & ~covered].sum())


def from_json(run: Path) -> dict[str, list[tuple[int, int]]]:
    """Kernel and copy spans (ns, rounded as the trace's microseconds say) straight from the trace."""
    events = json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))["traceEvents"]
    gpu = {e["pid"] for e in events if e.get("ph") == "M" and e.get("args", {}).get("name") == "/device:GPU:0"}
    out: dict[str, list[tuple[int, int]]] = {"kernel": [], "h2d": [], "d2h": []}
    for e in events:
        if e.get("ph") != "X" or e["pid"] not in gpu:
            continue
        start = round(e["ts"] * 1000)
        span = (start, start + round(e["dur"] * 1000))
        if e["name"] == "MemcpyH2D":
            out["h2d"].append(span)
        elif e["name"] == "MemcpyD2H":
            out["d2h"].append(span)
        elif not e["name"].startswith(("Memcpy", "Memset")):
            out["kernel"].append(span)
    return out


H200_RUNS = sorted(p for p in H200.iterdir() if (p / "trace.json.gz").is_file()) if H200.is_dir() else []


def test_every_h200_run_is_there_with_its_trace_and_step_hlo():
    assert len(H200_RUNS) == 8
    for run in H200_RUNS:
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["capture"]["tool"] == "jax.profiler" and manifest["devices"][0]["kind"] == "NVIDIA H200"
        assert len(list((run / "xla_dump").glob("module_*.jit_step.*after_optimizations.txt.xz"))) == 1


@pytest.mark.parametrize("run", H200_RUNS, ids=[p.name.split("-", 1)[1].rsplit("-", 1)[0] for p in H200_RUNS])
def test_h200_copies_and_their_overlap_equal_the_trace_json_to_the_nanosecond(run, tmp_path, monkeypatch):
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path))
    doc = analyzed(load_trace(run / "trace.json.gz"), findings=None).devices["0"]
    spans = from_json(run)
    assert doc["compute"]["count"] == len(spans["kernel"])
    for cls in ("h2d", "d2h"):
        got = doc["copies"][cls]
        assert got["count"] == len(spans[cls])
        assert got["busy_ns"] == union_ns(spans[cls])
        assert got["exposed_ns"] == minus_ns(spans[cls], spans["kernel"])


def test_h200_steps_are_the_module_executions_and_the_thunks_carry_the_step_hlo(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path))
    run = next(p for p in H200_RUNS if re.fullmatch(r"\d{8}T\d{6}-offload_qkv-[0-9a-f]{6}", p.name))
    trace = load_trace(run / "trace.json.gz")
    res = analyzed(trace, findings=None)
    assert len(res.steps.rows) == 3 and res.steps.source.startswith("the executions of jit_step (program 392496)")
    texts = trace.nvtx["text"].drop_nulls().to_list()
    thunks = [t for t in texts if t.startswith("Thunk:#")]
    # the copies' thunks name their instruction; the fusions outside command buffers their layer too
    assert "Thunk:#hlo_op=copy-start.23.0#" in thunks
    assert any(t.startswith("Thunk:#name=jit(step)/jvp(layer_7)/") for t in thunks)


def test_h200_copies_find_their_layer_through_the_compiled_plan(tmp_path, monkeypatch):
    """A copy's thunk names no op path (XLA gives copy-start none): its layer is the plan's (the layer its
    operand or user names). offload_qkv moves q, k and v of every layer, 64 MiB each way, in each of 3 steps."""
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path))
    run = next(p for p in H200_RUNS if re.fullmatch(r"\d{8}T\d{6}-offload_qkv-[0-9a-f]{6}", p.name))
    layers = analyzed(load_trace(run / "trace.json.gz"), by="layer", findings=None).analysis_json("layer")["layers"]
    moved = {r["name"]: (r["copies"]["offload"]["count"], r["copies"]["d2h"]["bytes"], r["copies"]["h2d"]["bytes"])
             for r in layers}  # fmt: skip
    assert moved == {f"layer_{i}": (18, 9 * 64 << 20, 9 * 64 << 20) for i in range(8)}


def test_whatif_on_a_jax_trace_says_it_cannot_replay_it(built, tmp_path):
    """The what-if replays the copies through their waits: a trace without them gets one line, not numbers,
    and the line names what prices another link for it (plan --from, the compiled schedule's replay)."""
    proc = run_cli("whatif", "--link", "nvlink-c2c", str(built), env={"PROFILE_STEP_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"profile-step: error: {built}: not modelled: {jax_profile.NO_WAITS}; {jax_profile.PLAN_FROM}"
    ]
    assert "profile-step plan --from RUN --link LINK" in jax_profile.PLAN_FROM
