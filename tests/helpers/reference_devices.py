"""A second, plain implementation of METRICS.md "Per device" (and its ``streams``), for the tests.

It reads the export with the sqlite3 module (not the project's loader) and
applies the definitions literally with Python lists: each union is a sort and a
merge, each intersection a walk over two merged lists.  Slow, obviously right,
and independent of the code under test (nothing from ``profiler`` is imported).

Scope: the keys of METRICS.md "Per device" and the per-stream list (the copy
contexts, stalls and kernels beside copies have their own references), read
through the analysis window of a cudaProfilerStart/Stop span when the recording
has one (docs/capture.md: the ops whose CUDA call, same process and correlation
id, started in it; an op without a call: its own start).  profile-step's own
NVTX capture range is not read here: the caller checks that there is none.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.helpers.reference_kernels import merged  # the same sort-and-merge union, written once for the references

KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
CLASS_OF_KIND = {1: "h2d", 2: "d2h", 8: "d2d", 10: "p2p"}  # anything else: other
CLASS_ORDER = ["h2d", "d2h", "d2d", "p2p", "other"]
PAGEABLE = 0  # ENUM_CUDA_MEM_KIND


def length(u: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in u)


def common(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """``|A ∩ B|`` of two merged lists: walk both, always stepping past the piece that ends first."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _col(have: set[str], name: str) -> str:
    return name if name in have else "NULL"


def is_nccl(name: str | None) -> bool:
    """METRICS.md: the name, less a leading ``void ``, starts with nccl (any case)."""
    if name is None:
        return False
    if name.startswith("void "):
        name = name[len("void ") :]
    return name.lower().startswith("nccl")


def profiler_span(con: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> tuple[int, int] | None:
    """``[t0, t1)``: the first cudaProfilerStart (or driver cuProfilerStart) call's start to the end of
    the next Stop call (none: to the end of time); None without a Start call."""
    if RUNTIME not in tables:
        return None
    calls = sorted((s, e, strings.get(n) or "") for s, e, n in con.execute(f"SELECT start, end, nameId FROM {RUNTIME}"))
    starts = [s for s, _, name in calls if name.startswith(("cudaProfilerStart", "cuProfilerStart"))]
    if not starts:
        return None
    stops = [e for s, e, name in calls if name.startswith(("cudaProfilerStop", "cuProfilerStop")) and s >= starts[0]]
    return starts[0], stops[0] if stops else 1 << 62


def read_ops(path: Path) -> tuple[list[tuple], list[tuple], list[tuple], tuple[int, int] | None]:
    """Kernels ``(device, start, end, nccl)``, copies ``(device, stream, start, end, kind, bytes, src, dst)``,
    memsets ``(device, start, end)`` of the window (an absent table or column reads as none / NULL),
    and the window (None: the whole recording)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        window = profiler_span(con, tables, strings)
        calls: dict[tuple[int, int], int] = {}  # (pid, correlationId) -> start of the CUDA call
        if window is not None:
            q = f"SELECT globalTid, correlationId, start FROM {RUNTIME}"
            for gtid, corr, start in con.execute(q):
                if gtid is not None and corr is not None:
                    calls[((gtid >> 24) & 0xFFFFFF, corr)] = start

        def rows(table: str, names: tuple[str, ...]) -> list[tuple]:
            """Columns *names* of the rows of *table* that the window keeps (an absent column: NULL)."""
            have = _columns(con, table)
            cols = ", ".join(_col(have, c) for c in (*names, "globalPid", "correlationId", "start"))
            out = []
            for row in con.execute(f"SELECT {cols} FROM {table}"):
                *keep, gpid, corr, start = row
                if window is not None:
                    key = ((gpid >> 24) & 0xFFFFFF, corr) if gpid is not None and corr is not None else None
                    t = calls.get(key, start)
                    if t is None or not window[0] <= t < window[1]:
                        continue
                out.append(tuple(keep))
            return out

        kernels, copies, memsets = [], [], []
        if KERNEL in tables:
            for dev, s, e, short, dem in rows(KERNEL, ("deviceId", "start", "end", "shortName", "demangledName")):
                name = strings.get(short) if strings.get(short) is not None else strings.get(dem)
                kernels.append((dev, s, e, is_nccl(name)))
        if MEMCPY in tables:
            cols = ("deviceId", "streamId", "start", "end", "copyKind", "bytes", "srcKind", "dstKind")
            copies = rows(MEMCPY, cols)
        if MEMSET in tables:
            memsets = rows(MEMSET, ("deviceId", "start", "end"))
    finally:
        con.close()
    return kernels, copies, memsets, window


def ok(s: int | None, e: int | None) -> bool:
    """Valid: both times known and ``end >= start`` (zero-length ops are valid)."""
    return s is not None and e is not None and e >= s


def copy_class(kind: int | None) -> str:
    return CLASS_OF_KIND.get(kind, "other")


def pageable(kind: int | None, src: int | None, dst: int | None) -> bool:
    """The host side (source of an h2d, destination of a d2h) is pageable memory."""
    return (kind == 1 and src == PAGEABLE) or (kind == 2 and dst == PAGEABLE)


def class_entry(mine: list[tuple], span: int, kernels: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    """The full METRICS.md copy-class entry of the valid copies *mine* (tuples as ``read_ops`` gives)."""
    n = len(mine)
    nbytes = sum(c[5] or 0 for c in mine)
    dur = sum(c[3] - c[2] for c in mine)
    u = merged([(c[2], c[3]) for c in mine])
    busy = length(u)
    ov_any = common(u, kernels["any"])
    return {
        "count": n,
        "bytes": nbytes,
        "duration_sum_ns": dur,
        "busy_ns": busy,
        "occupancy": busy / span if span else 0,
        "overlap_compute_ns": common(u, kernels["compute"]),
        "overlap_nccl_ns": common(u, kernels["nccl"]),
        "overlap_any_ns": ov_any,
        "exposed_ns": busy - ov_any,
        "hidden_fraction": ov_any / busy if busy else None,
        "gbps": nbytes / dur if dur else None,
        "pageable_count": sum(1 for c in mine if pageable(c[4], c[6], c[7])),
    }


def devices(path: Path) -> dict[str, dict[str, Any]]:
    """The ``devices`` object of ``analyze --json``, restricted to the keys of METRICS.md "Per device"
    (copy classes without ``contexts``) and the per-stream entries' numbers."""
    kernels, copies, memsets, _ = read_ops(path)
    every = [(k[0], k[1], k[2]) for k in kernels] + [(c[0], c[2], c[3]) for c in copies] + list(memsets)
    found = sorted({d for d, _, _ in every})
    out: dict[str, dict[str, Any]] = {}
    for d in found:
        times = [(s, e) for dev, s, e in every if dev == d]
        good = [(s, e) for s, e in times if ok(s, e)]
        window = [min(s for s, _ in good), max(e for _, e in good)] if good else None
        span = window[1] - window[0] if window else 0
        ks = [k for k in kernels if k[0] == d and ok(k[1], k[2])]
        unions = {
            "compute": merged([(s, e) for _, s, e, nccl in ks if not nccl]),
            "nccl": merged([(s, e) for _, s, e, nccl in ks if nccl]),
            "any": merged([(s, e) for _, s, e, _ in ks]),
        }
        cs = [c for c in copies if c[0] == d and ok(c[2], c[3])]
        by_class = {name: [c for c in cs if copy_class(c[4]) == name] for name in CLASS_ORDER}
        entry = {
            "window_ns": window,
            "span_ns": span,
            "invalid_ops": len(times) - len(good),
            "compute": {"count": sum(1 for k in ks if not k[3]), "busy_ns": length(unions["compute"])},
            "nccl": {"count": sum(1 for k in ks if k[3]), "busy_ns": length(unions["nccl"])},
            "copies": {
                "h2d": class_entry(by_class["h2d"], span, unions),
                "d2h": class_entry(by_class["d2h"], span, unions),
                "offload": class_entry(by_class["h2d"] + by_class["d2h"], span, unions),
            },
        }
        for name in ("d2d", "p2p", "other"):
            mine = by_class[name]
            busy = length(merged([(c[2], c[3]) for c in mine]))
            entry["copies"][name] = {"count": len(mine), "bytes": sum(c[5] or 0 for c in mine), "busy_ns": busy}
        streams = []
        for stream in sorted({c[1] for c in cs}):
            mine = [c for c in cs if c[1] == stream]
            busy = length(merged([(c[2], c[3]) for c in mine]))
            nbytes, dur = sum(c[5] or 0 for c in mine), sum(c[3] - c[2] for c in mine)
            streams.append(
                {
                    "stream": stream,
                    "classes": [k for k in CLASS_ORDER if any(copy_class(c[4]) == k for c in mine)],
                    "busy_ns": busy,
                    "occupancy": busy / span if span else 0,
                    "count": len(mine),
                    "bytes": nbytes,
                    "duration_sum_ns": dur,
                    "gbps": nbytes / dur if dur else None,
                }
            )
        entry["streams"] = streams
        out[str(d)] = entry
    return out


def project(doc: Any, like: Any) -> Any:
    """*doc* cut down to the keys *like* has (dicts recursively, lists element by element): the part of
    an ``analyze --json`` document that this reference computes."""
    if isinstance(like, dict) and isinstance(doc, dict):
        return {k: project(doc.get(k, "<missing>"), v) for k, v in like.items()}
    if isinstance(like, list) and isinstance(doc, list) and len(like) == len(doc):
        return [project(a, b) for a, b in zip(doc, like, strict=True)]
    return doc
