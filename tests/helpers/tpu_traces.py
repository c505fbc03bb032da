"""TPU JAX profiler traces for the tests: a small built one with a known answer, and what a real
one says, read straight from its JSON (the tests' own reading, not the converter's)."""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass, field
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


# --- a real TPU trace, read straight from its JSON ------------------------------------------------
DTYPE_SIZE = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
}


def array_bytes(shape: str) -> int:
    """Bytes of one dense array as the trace prints it: ``bf16[1,8,1024,8192]{...}``."""
    m = re.match(r"(\w+)\[([\d,]*)\]", shape)
    assert m, shape
    return DTYPE_SIZE[m.group(1)] * math.prod(int(d) for d in m.group(2).split(",") if d)


def slice_to_host(start_shape: str) -> int:
    """What a transfer to the host moves, from its start's shape (its operands, result and context):
    the largest array that is not in host memory (the update of a dynamic-update-slice, the
    source of a copy)."""
    arrays = re.findall(r"\w+\[[\d,]*\]\{[^}]*\}", start_shape)
    return max(array_bytes(x) for x in arrays if "S(5)" not in x)


def ns(ts: float, dur: float) -> tuple[int, int]:
    """A span in integer nanoseconds, as the trace's microseconds round (start, start + duration)."""
    start = round(ts * 1000)
    return start, start + round(dur * 1000)


@dataclass
class RawStep:
    """One execution on the TPU's ``XLA Modules`` line and what its ``XLA Ops`` say of it."""

    start: int
    end: int
    ops: list[tuple[int, int]] = field(default_factory=list)  # every op but the whiles
    kernels: list[tuple[int, int]] = field(default_factory=list)  # and but the host transfers' dones
    waits: list[tuple[int, int]] = field(default_factory=list)  # the host transfers' dones
    copies: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {"d2h": [], "h2d": []})
    bytes: dict[str, int] = field(default_factory=lambda: {"d2h": 0, "h2d": 0})


def raw_steps(trace: Path) -> list[RawStep]:
    """The executions of *trace* with their ops, waits and host transfers: a transfer is an async
    start whose text names host memory S(5) and the done that names it; to the host when the done's
    shape is in S(5) (its bytes ``slice_to_host`` of the start's shape), else from it (its bytes the
    done's shape)."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    tpu = next(pid for pid, name in procs.items() if name == "/device:TPU:0")
    lines = {e["args"]["name"]: e["tid"] for e in events if e.get("pid") == tpu and e.get("name") == "thread_name"}
    mine = [e for e in events if e.get("ph") == "X" and e["pid"] == tpu]
    steps = [RawStep(*ns(e["ts"], e["dur"])) for e in mine if e["tid"] == lines["XLA Modules"]]
    steps.sort(key=lambda s: s.start)
    open_starts: dict[str, dict] = {}
    for e in sorted((e for e in mine if e["tid"] == lines["XLA Ops"]), key=lambda e: e["ts"]):
        a = e["args"]
        cat, span = a.get("hlo_category"), ns(e["ts"], e["dur"])
        step = next(s for s in steps if s.start <= span[0] < s.end)
        if cat == "while":
            continue
        step.ops.append(span)
        if cat in ("async-start", "copy-start") and "S(5)" in a.get("long_name", ""):
            open_starts[e["name"]] = e
        started = re.search(r"%([^\s%()]+)\)\s*$", a.get("long_name", ""))
        if cat in ("async-done", "copy-done") and started and started.group(1) in open_starts:
            begin = open_starts.pop(started.group(1))
            to_host = "S(5)" in a["shape_with_layout"]
            kind = "d2h" if to_host else "h2d"
            step.waits.append(span)
            step.copies[kind].append((ns(begin["ts"], begin["dur"])[0], span[1]))
            moved = (
                slice_to_host(begin["args"]["shape_with_layout"]) if to_host else array_bytes(a["shape_with_layout"])
            )
            step.bytes[kind] += moved
            continue
        step.kernels.append(span)
    return steps


def union_ns(spans: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) spans."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def minus_ns(spans: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """Length of the union of *spans* outside the union of *cover*."""
    cuts = sorted({p for s in spans + cover for p in s})
    inside = [False] * (len(cuts) - 1)
    covered = [False] * (len(cuts) - 1)
    index = {p: i for i, p in enumerate(cuts)}
    for marks, source in ((inside, spans), (covered, cover)):
        for s, e in source:
            for i in range(index[s], index[e]):
                marks[i] = True
    return sum(cuts[i + 1] - cuts[i] for i in range(len(cuts) - 1) if inside[i] and not covered[i])
