"""A second, deliberately plain implementation of METRICS.md "Stalls", "Copy bandwidth by
context" and "What-if", for the tests to check the vectorized one against.

It reads the export with the sqlite3 module (not the project's loader) and
applies each rule literally with Python loops over rows: slow, obviously
right, and independent of the code under test.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.reference_kernels import merged

UNSET = 4294967295
H2D, D2H = 1, 2
MIB = 1 << 20


@dataclass
class Op:
    kind: str  # compute, nccl, h2d, d2h, other (other copies and memsets)
    pid: int
    device: int
    stream: int
    start: int
    end: int
    corr: int
    nbytes: int = 0
    table: str = "kernel"  # kernel, copy or memset
    launch: int | None = None
    gtid: int | None = None  # the thread of the launch call
    blockers: list[int] = field(default_factory=list)  # indices of ops this one waits for

    @property
    def skey(self) -> tuple[int, int, int]:
        return (self.pid, self.device, self.stream)


@dataclass
class Call:
    """A CUDA API call: (start, end, thread, process, correlationId, name)."""

    start: int
    end: int
    gtid: int
    pid: int
    corr: int | None
    name: str


@dataclass
class Model:
    ops: list[Op]
    waits: dict[int, dict[str, int]]  # per device of the wait row
    calls: list[Call] = field(default_factory=list)
    records: list = field(default_factory=list)  # ((pid, device, stream), event id, t_rec, corr)
    sync_rows: dict = field(default_factory=dict)  # (pid, corr) -> (device, stream, event id), unset as None


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _pid(gid: int | None) -> int:
    return -1 if gid is None else (gid >> 24) & 0xFFFFFF


def load(path: Path) -> Model:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = _tables(con)
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
    runtime: dict[tuple[int, int], int] = {}
    thread: dict[tuple[int, int], int] = {}
    calls: list[Call] = []
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for start, end, gtid, corr, name_id in con.execute(
            "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY rowid"
        ):
            if corr is not None and gtid is not None:
                runtime.setdefault((_pid(gtid), corr), start)
                thread.setdefault((_pid(gtid), corr), gtid)
            if start is not None and end is not None and end >= start:
                calls.append(Call(start, end, -1 if gtid is None else gtid, _pid(gtid), corr, strings.get(name_id, "")))
    ops: list[Op] = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        for s, e, dev, st, corr, gpid, short, dem in con.execute(
            "SELECT start, end, deviceId, streamId, correlationId, globalPid, shortName, demangledName "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ):
            name = strings.get(short) or strings.get(dem) or ""
            nccl = name.removeprefix("void ").lower().startswith("nccl")
            ops.append(Op("nccl" if nccl else "compute", _pid(gpid), dev, st, s, e, corr))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for s, e, dev, st, corr, gpid, kind, nbytes in con.execute(
            "SELECT start, end, deviceId, streamId, correlationId, globalPid, copyKind, bytes "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        ):
            cls = {H2D: "h2d", D2H: "d2h"}.get(kind, "other")
            ops.append(Op(cls, _pid(gpid), dev, st, s, e, corr, nbytes or 0, "copy"))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for s, e, dev, st, corr, gpid in con.execute(
            "SELECT start, end, deviceId, streamId, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET"
        ):
            ops.append(Op("other", _pid(gpid), dev, st, s, e, corr, 0, "memset"))
    ops = [o for o in ops if o.start is not None and o.end is not None and o.end >= o.start]
    for o in ops:
        o.corr = -1 if o.corr is None else o.corr
        o.launch = runtime.get((o.pid, o.corr))
        o.gtid = thread.get((o.pid, o.corr))

    # the device of a record or a sync row: the one device its context's ops ran on in its process
    ctx_devices: dict[tuple[int, int], set[int]] = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            for gpid, ctx, dev in con.execute(f"SELECT globalPid, contextId, deviceId FROM {table}"):
                if gpid is not None and ctx is not None and dev is not None:
                    ctx_devices.setdefault((_pid(gpid), ctx), set()).add(dev)

    def device_of(gpid: int | None, ctx: int | None, dev: int | None) -> int | None:
        found = ctx_devices.get((_pid(gpid), ctx), set())
        return next(iter(found)) if len(found) == 1 else dev

    records = []
    if "CUPTI_ACTIVITY_KIND_CUDA_EVENT" in tables:
        for dev, ctx, st, corr, gpid, ev in con.execute(
            "SELECT deviceId, contextId, streamId, correlationId, globalPid, eventId "
            "FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT"
        ):
            t = runtime.get((_pid(gpid), corr)) if corr is not None else None
            if ev is not None and t is not None:
                records.append(((_pid(gpid), device_of(gpid, ctx, dev), st), ev, t, corr))
    waits: dict[int, dict[str, int]] = {}
    sync_rows: dict = {}
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        rows = [
            (t_w, device_of(gpid, ctx, dev), st, gpid, ev, corr)
            for t_w, dev, ctx, st, gpid, ev, corr in con.execute(
                "SELECT start, deviceId, contextId, streamId, globalPid, eventId, correlationId "
                "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
            )
        ]
        for _, dev, st, gpid, ev, corr in rows:
            unset = (None, UNSET)
            sync_rows.setdefault((_pid(gpid), corr), (dev, None if st in unset else st, None if ev in unset else ev))
        for t_w, dev, st, gpid, ev, _ in rows:
            if st is None or ev is None or st == UNSET or ev == UNSET:
                continue  # not a stream wait
            count = waits.setdefault(dev, {"total": 0, "resolved": 0, "unresolved": 0})
            count["total"] += 1
            pid = _pid(gpid)
            blocker = _resolve(ops, records, pid, ev, t_w)
            if blocker is None:
                count["unresolved"] += 1
                continue
            count["resolved"] += 1
            if ops[blocker].skey == (pid, dev, st):
                continue  # rule 3: on the waiting stream itself
            later = [
                i for i, o in enumerate(ops) if o.skey == (pid, dev, st) and o.launch is not None and o.launch >= t_w
            ]
            if later:
                target = min(later, key=lambda i: (ops[i].launch, ops[i].corr))
                ops[target].blockers.append(blocker)
    con.close()
    return Model(ops, waits, calls, records, sync_rows)


def _resolve(ops: list[Op], records: list, pid: int, ev: int, t_w: int | None) -> int | None:
    """Rules 2 and 1: the op the wait waits for, or None."""
    if t_w is None:
        return None
    cands = [r for r in records if r[0][0] == pid and r[1] == ev and r[2] <= t_w]
    if not cands:
        return None
    skey, _, t_rec, _ = max(cands, key=lambda r: (r[2], r[3] if r[3] is not None else -1))
    before = [i for i, o in enumerate(ops) if o.skey == skey and o.launch is not None and o.launch < t_rec]
    if not before:
        return None
    return max(before, key=lambda i: (ops[i].launch, ops[i].corr))


def prev_on_stream(ops: list[Op]) -> list[int | None]:
    order = sorted(range(len(ops)), key=lambda i: (ops[i].skey, ops[i].start, ops[i].corr))
    prev: list[int | None] = [None] * len(ops)
    for a, b in itertools.pairwise(order):
        if ops[a].skey == ops[b].skey:
            prev[b] = a
    return prev


def stalls(model: Model, start: list[int] | None = None, end: list[int] | None = None) -> list[tuple[int, int | None]]:
    """Rule 4: per op, (stall, blocker index)."""
    ops = model.ops
    start = start or [o.start for o in ops]
    end = end or [o.end for o in ops]
    prev = prev_on_stream(ops)
    out: list[tuple[int, int | None]] = []
    for i, o in enumerate(ops):
        if not o.blockers:
            out.append((0, None))
            continue
        assert o.launch is not None
        ready = o.launch if prev[i] is None else max(end[prev[i]], o.launch)
        b = max(o.blockers, key=lambda j: (end[j], ops[j].corr))
        dep = end[b]
        out.append((max(0, min(start[i], dep) - ready) if dep > ready else 0, b))
    return out


def device_stalls(model: Model, per_op: list[tuple[int, int | None]]) -> dict[int, dict]:
    ops = model.ops
    out: dict[int, dict] = {}

    def entry(dev: int) -> dict:
        return out.setdefault(
            dev,
            {
                "waits": {"total": 0, "resolved": 0, "unresolved": 0},
                "by_blocker": {c: {"count": 0, "stall_ns": 0} for c in ("h2d", "d2h", "offload", "kernel", "other")},
                "compute_stalled_by_offload_ns": 0,
                "nccl_stalled_by_offload_ns": 0,
            },
        )

    for o in ops:
        entry(o.device)
    for dev, counts in model.waits.items():
        entry(dev)["waits"] = dict(counts)
    for i, (value, b) in enumerate(per_op):
        if value <= 0 or b is None:
            continue
        e = entry(ops[i].device)
        bk = ops[b].kind
        classes = {"h2d": ["h2d", "offload"], "d2h": ["d2h", "offload"], "compute": ["kernel"], "nccl": ["kernel"]}
        for c in classes.get(bk, ["other"]):
            e["by_blocker"][c]["count"] += 1
            e["by_blocker"][c]["stall_ns"] += value
        if bk in ("h2d", "d2h") and ops[i].kind == "compute":
            e["compute_stalled_by_offload_ns"] += value
        if bk in ("h2d", "d2h") and ops[i].kind == "nccl":
            e["nccl_stalled_by_offload_ns"] += value
    return out


def _overlap(a0: int, a1: int, ivs: list[tuple[int, int]]) -> int:
    """|[a0, a1) ∩ union(ivs)|, by merging the union first."""
    return sum(max(0, min(a1, e) - max(a0, s)) for s, e in merged(ivs))


def contexts(model: Model, per_stream: bool = False) -> dict:
    """Per device, per class (h2d, d2h, offload), per context: count, bytes, duration_sum_ns.  With
    *per_stream*: per (device, stream), the h2d and d2h copies together (the streams' entries)."""
    ops = model.ops
    kernels: dict[int, list[tuple[int, int]]] = {}
    copies: dict[int, list[tuple[int, tuple[int, int]]]] = {}
    for j, c in enumerate(ops):
        if c.table == "kernel":
            kernels.setdefault(c.device, []).append((c.start, c.end))
        elif c.table == "copy":
            copies.setdefault(c.device, []).append((j, (c.start, c.end)))
    out: dict[int, dict] = {}
    for i, o in enumerate(ops):
        if o.kind not in ("h2d", "d2h") or o.nbytes < MIB or o.end <= o.start:
            continue
        others = [iv for j, iv in copies.get(o.device, []) if j != i]
        dur = o.end - o.start
        ok, oc = _overlap(o.start, o.end, kernels.get(o.device, [])), _overlap(o.start, o.end, others)
        ctx = "alone" if ok == 0 and oc == 0 else "kernels" if 2 * ok >= dur else "copies" if 2 * oc >= dur else "mixed"
        if per_stream:
            c = out.setdefault((o.device, o.stream), {}).setdefault(ctx, {"count": 0, "bytes": 0, "duration_sum_ns": 0})
            c["count"] += 1
            c["bytes"] += o.nbytes
            c["duration_sum_ns"] += dur
            continue
        dev = out.setdefault(o.device, {})
        for cls in (o.kind, "offload"):
            c = dev.setdefault(cls, {}).setdefault(ctx, {"count": 0, "bytes": 0, "duration_sum_ns": 0})
            c["count"] += 1
            c["bytes"] += o.nbytes
            c["duration_sum_ns"] += dur
    return out


STREAM_SYNC = ("cudaStreamSynchronize", "cuStreamSynchronize")
EVENT_SYNC = ("cudaEventSynchronize", "cuEventSynchronize")
DEVICE_SYNC = ("cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize")


@dataclass
class HostCall:
    gtid: int
    start: int
    end: int
    waited: int | None
    blocked: bool
    lag: int
    returned: int = 0


def host_calls(model: Model) -> list[HostCall]:
    """The blocking calls (hostsync.py's rules, one call at a time), sorted by (thread, start)."""
    ops = model.ops
    out = []
    for c in model.calls:
        base = re.sub(r"_v\d+$", "", c.name or "")
        row = model.sync_rows.get((c.pid, c.corr))
        waited: int | None = None
        if base in STREAM_SYNC:
            if row and row[1] is not None:
                cand = [
                    i
                    for i, o in enumerate(ops)
                    if o.skey == (c.pid, row[0], row[1]) and o.launch is not None and o.launch < c.start
                ]
                waited = max(cand, key=lambda i: (ops[i].launch, ops[i].corr)) if cand else None
        elif base in EVENT_SYNC:
            if row and row[2] is not None:
                waited = _resolve(ops, model.records, c.pid, row[2], c.start)
        elif base in DEVICE_SYNC:
            cand = [
                i
                for i, o in enumerate(ops)
                if o.pid == c.pid
                and (row is None or row[0] is None or o.device == row[0])
                and o.launch is not None
                and o.launch < c.start
            ]
            waited = max(cand, key=lambda i: (ops[i].end, ops[i].launch, ops[i].corr)) if cand else None
        elif re.match(r"^cu(da)?Memcpy", base) and "Async" not in base:
            mine = [i for i, o in enumerate(ops) if o.pid == c.pid and o.corr == (c.corr if c.corr is not None else -2)]
            waited = mine[0] if mine else None
        else:
            continue
        blocked = waited is not None and ops[waited].end > c.start
        lag = c.end - ops[waited].end if blocked else 0
        out.append(HostCall(c.gtid, c.start, c.end, waited, blocked, lag))
    out.sort(key=lambda h: (h.gtid, h.start))
    for k, h in enumerate(out):  # a thread's calls do not overlap: a return is never before the previous one's
        before = out[k - 1].returned if k and out[k - 1].gtid == h.gtid else h.end
        h.returned = max(h.end, before)
    return out


def replay(model: Model, factor: float, host: bool = False) -> tuple[list[int], list[int]]:
    """The what-if: replayed (start, end) per op, one node at a time in dependency order; with
    *host*, blocking calls are nodes too and move their thread's later launches."""
    ops = model.ops
    calls = host_calls(model) if host else []
    prev = prev_on_stream(ops)
    epoch: list[int | None] = [None] * len(ops)
    for i, o in enumerate(ops):
        if o.launch is None:
            continue
        mine = [k for k, h in enumerate(calls) if h.gtid == o.gtid and h.returned <= o.launch]
        epoch[i] = mine[-1] if mine else None
    # nodes: ("op", i) and ("call", k)
    deps: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for i, o in enumerate(ops):
        d = [("op", j) for j in ([prev[i]] if prev[i] is not None else []) + list(o.blockers)]
        if epoch[i] is not None:
            d.append(("call", epoch[i]))
        deps[("op", i)] = d
    for k, h in enumerate(calls):
        d = [("call", k - 1)] if k and calls[k - 1].gtid == h.gtid else []
        if h.blocked:
            d.append(("op", h.waited))
        deps[("call", k)] = d
    cyclic = {n for n in deps if _reaches(deps, n, n)}
    if host and cyclic:
        return replay(model, factor, False)
    dur = [int((o.end - o.start) * factor + 0.5) if o.kind in ("h2d", "d2h") else o.end - o.start for o in ops]
    start: list[int | None] = [None] * len(ops)
    end: list[int | None] = [None] * len(ops)
    shift: list[int | None] = [None] * len(calls)
    for i, o in enumerate(ops):
        if ("op", i) in cyclic or (prev[i] is None and not o.blockers and o.launch is None):
            start[i], end[i] = o.start, o.start + dur[i]

    def value(n: tuple[str, int]) -> int | None:
        return end[n[1]] if n[0] == "op" else shift[n[1]]

    changed = True
    while changed:
        changed = False
        for k, h in enumerate(calls):
            if shift[k] is not None or any(value(n) is None for n in deps[("call", k)]):
                continue
            began = h.start + (shift[k - 1] if k and calls[k - 1].gtid == h.gtid else 0)
            back = max(began, end[h.waited] + h.lag) if h.blocked else began + h.end - h.start
            shift[k] = back - h.end
            changed = True
        for i, o in enumerate(ops):
            if start[i] is not None or any(value(n) is None for n in deps[("op", i)]):
                continue
            before = [j for kind, j in deps[("op", i)] if kind == "op"]
            moved = shift[epoch[i]] if epoch[i] is not None else 0
            rec = [ops[j].end for j in before] + ([o.launch] if o.launch is not None else [])
            new = [end[j] for j in before] + ([o.launch + moved] if o.launch is not None else [])
            start[i] = max(new) + o.start - max(rec)
            if prev[i] is not None:  # never closer to the op before it on its stream than recorded, if it overlapped
                start[i] = max(start[i], end[prev[i]] + min(0, o.start - ops[prev[i]].end))
            end[i] = start[i] + dur[i]
            changed = True
    assert all(s is not None for s in start)
    return start, end  # type: ignore[return-value]


def _reaches(deps: dict, src: object, dst: object) -> bool:
    """Whether *dst* is reachable from *src* by following dependencies (at least one step)."""
    seen: set = set()
    todo = list(deps[src])
    while todo:
        j = todo.pop()
        if j == dst:
            return True
        if j not in seen:
            seen.add(j)
            todo.extend(deps[j])
    return False
