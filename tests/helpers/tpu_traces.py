"""TPU JAX profiler traces for the tests: a small built one with a known answer, and what a real
one says, read straight from its JSON (the tests' own reading, not the converter's)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TPU_PID, HOST_PID = 3, 701
MODULES_TID, OPS_TID, HOST_TID = 2, 3, 2605
HOST_BUF = "bf16[8,2,1024]{2,1,0:T(8,128)(2,1)S(5)}"
SLICE = "bf16[2,1024]{1,0:T(8,128)(2,1)}"  # 4096 bytes: the slice each transfer moves
SLICE_BYTES = 2 * 1024 * 2


def x(tid: int, ts: float, dur: float, name: str, category: str, long_name: str = "", pid: int = TPU_PID) -> dict:
    """One complete event of a TPU's line, with the arguments libtpu writes that the converter reads."""
    args = {"hlo_category": category, "long_name": long_name or f"%{name} = f32[] {category}()"}
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name, "args": args}


def meta(pid: int, name: str, tid: int | None = None) -> dict:
    kind = "thread_name" if tid is not None else "process_name"
    return {"ph": "M", "pid": pid, **({"tid": tid} if tid is not None else {}), "name": kind, "args": {"name": name}}


def built_events() -> list[dict]:
    """One step (module execution, 0..100 us) of a TPU core, ops tiling it: a device-to-host offload
    (dynamic-update-slice-start at 10, its done waiting 51..60), a while of two trips (11..51) around
    a fusion, a host-to-device fetch (dynamic-slice-start at 60, its done waiting 80..100) and a
    VMEM prefetch (copy-start/done in S(1): not a host transfer, its done a kernel)."""
    dus_start = (
        f"%dynamic-update-slice-start = (({HOST_BUF}, {SLICE}, s32[]{{:T(128)}}), {HOST_BUF}, u32[]{{:S(2)}}) "
        f"async-start({HOST_BUF} %p.1, {SLICE} %fusion.1, s32[]{{:T(128)}} %c), calls=%async_computation.1"
    )
    dus_done = (
        f"%dynamic-update-slice-done = {HOST_BUF} async-done((({HOST_BUF}, {SLICE}, s32[]{{:T(128)}}), "
        f"{HOST_BUF}, u32[]{{:S(2)}}) %dynamic-update-slice-start)"
    )
    ds_start = (
        f"%dynamic-slice-start = (({HOST_BUF}, s32[]{{:T(128)}}), {SLICE}, u32[]{{:S(2)}}) "
        f"async-start({HOST_BUF} %p.1, s32[]{{:T(128)}} %c), calls=%async_computation"
    )
    ds_done = (
        f"%dynamic-slice-done = {SLICE} async-done((({HOST_BUF}, s32[]{{:T(128)}}), {SLICE}, u32[]{{:S(2)}}) "
        "%dynamic-slice-start)"
    )
    vmem = "f32[128]{0:S(1)}"
    cp_start = f"%copy-start.5 = ({vmem}, f32[128]{{0}}, u32[]{{:S(2)}}) copy-start(f32[128]{{0}} %p.2)"
    cp_done = f"%copy-done.5 = {vmem} copy-done(({vmem}, f32[128]{{0}}, u32[]{{:S(2)}}) %copy-start.5)"
    loop = "%while.1 = (s32[]) while((s32[]) %t), condition=%cond, body=%body"
    return [
        meta(TPU_PID, "/device:TPU:0"),
        meta(TPU_PID, "XLA Modules", MODULES_TID),
        meta(TPU_PID, "XLA Ops", OPS_TID),
        meta(HOST_PID, "/host:CPU"),
        meta(HOST_PID, "main/2605", HOST_TID),
        x(MODULES_TID, 0.0, 100.0, "jit_step(14849092608010141164)", ""),
        x(OPS_TID, 0.0, 10.0, "fusion.1", "loop fusion"),
        x(OPS_TID, 10.0, 1.0, "dynamic-update-slice-start", "async-start", dus_start),
        x(OPS_TID, 11.0, 40.0, "while.1", "while", loop),
        x(OPS_TID, 11.0, 20.0, "fusion.2", "convolution fusion"),
        x(OPS_TID, 31.0, 20.0, "fusion.2", "convolution fusion"),
        x(OPS_TID, 51.0, 9.0, "dynamic-update-slice-done", "async-done", dus_done),
        x(OPS_TID, 60.0, 1.0, "dynamic-slice-start", "async-start", ds_start),
        x(OPS_TID, 61.0, 9.0, "fusion.3", "loop fusion"),
        x(OPS_TID, 70.0, 1.0, "copy-start.5", "copy-start", cp_start),
        x(OPS_TID, 71.0, 9.0, "copy-done.5", "copy-done", cp_done),
        x(OPS_TID, 80.0, 20.0, "dynamic-slice-done", "async-done", ds_done),
        x(HOST_TID, 0.0, 2.0, "PJRT_LoadedExecutable_Execute", "", pid=HOST_PID),
    ]


def write_trace(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}).encode()))
    return path
