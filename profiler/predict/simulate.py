"""Replay a schedule through its dependencies: the predicted step and the copy time it exposes.

Streams: one compute stream runs kernels, synchronous collectives and
synchronous host copies in the schedule's order; an async start is issued
there in order and its work runs on its own stream (``d2h``, ``h2d``: one per
direction of the host link; ``collective``; ``async``: other async work) as
soon as that stream is free, one piece at a time; a ``*-done`` holds the
compute stream until its start's work has finished.

Regions (``while``, ``call``: ``schedule.Op.body``): where any op of its body has
a cost, the body is replayed (a loop's body once per trip: the schedule repeats
it), and the region op itself runs on the compute stream after it for its own
cost, if it has one (what its own range measured: a loop's condition, its
predicate copies).  Where none has and the region has a cost (the loop measured
as one range: its thunks inside were not timed, or ran as one command buffer),
the region is one op on the compute stream that starts after its inputs and
lasts that cost; its body's ops are not replayed.  Any other op that has a cost
runs for it: a ``free`` op on the compute stream, a ``done`` on the compute
stream after its wait.  These are the replay's rules of
``profiler.analysis.replay_rules`` (one op at a time per stream, every op placed
or listed unplaced, loops costed as what they are), which the tests check on
every schedule and recording they reach.

- *step*: when the last stream is done;
- *exposed copy time*: the time the compute stream waits on a copy-done, plus
  the synchronous host copies it runs itself (nothing hides those);
- per layer: the exposed copy time of the copies whose movement the plan
  attributes to that layer (``profiler.analysis.offload_plan.label``);
- *unplaced*: the costs given for names that no op of the schedule runs (an
  instruction of another module, a thunk that is no instruction, such as a
  command buffer's, or ops beyond a schedule cut at ``schedule.MAX_OPS``), each
  with its time.

Costs come in as ns per execution by instruction name (``roofline.costs`` or
measured); a host copy without a cost is its bytes over *link*.  The replay is
one pass over the unrolled schedule (each op's start depends on the ones
before it: a recurrence, not an interval operation over a frame).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.analysis.late_copies import frame, summary
from profiler.analysis.links import Link
from profiler.predict.schedule import Schedule
from profiler.units import whole_ns

STREAMS = ("d2h", "h2d", "collective", "async")
ALL_STREAMS = ("compute", *STREAMS)


@dataclass
class Timeline:
    """Where each op that took time was placed (``simulate(..., timeline=True)``): rows of the
    schedule's ops, their stream (an index into ``ALL_STREAMS``), start and end (ns)."""

    op: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray


@dataclass
class Prediction:
    step_ns: int
    exposed_ns: int  # copy time not hidden (waits on copy-dones + synchronous host copies)
    exposed_collective_ns: int  # waits on collective dones + synchronous collectives
    compute_ns: int  # compute stream busy (kernels; synchronous copies and collectives included)
    copy_ns: dict[str, int]  # busy time per direction of the host link
    copy_bytes: dict[str, int]
    collective_ns: int
    link: str | None
    layers: list[dict[str, Any]] = field(default_factory=list)  # layer, exposed_ns, copy_ns
    waits: list[dict[str, Any]] = field(default_factory=list)  # the dones that held the compute stream
    # each async host-to-device copy: start, layer, in_loop, transfer_ns, window_ns (analysis.late_copies)
    copies_back: list[dict[str, Any]] = field(default_factory=list)
    costed_by: dict[str, int] = field(default_factory=dict)  # "given", "link", "missing": how many ops
    notes: list[str] = field(default_factory=list)
    stream_ns: dict[str, int] = field(default_factory=dict)  # the work placed on each stream (its serial work)
    unplaced: list[dict[str, Any]] = field(default_factory=list)  # name, ns, why: costs no op ran
    regions: list[dict[str, Any]] = field(default_factory=list)  # name, opcode, trips, replayed, ns
    timeline: Timeline | None = None

    @property
    def unplaced_ns(self) -> int:
        return sum(u["ns"] for u in self.unplaced)

    def doc(self) -> dict[str, Any]:
        """The prediction as JSON keys (``predicted_*``)."""
        return {
            "link": self.link,
            "predicted_step_ns": self.step_ns,
            "predicted_exposed_ns": self.exposed_ns,
            "predicted_exposed_collective_ns": self.exposed_collective_ns,
            "predicted_compute_ns": self.compute_ns,
            "predicted_copy_ns": dict(self.copy_ns),
            "copy_bytes": dict(self.copy_bytes),
            "predicted_collective_ns": self.collective_ns,
            "predicted_stream_ns": dict(self.stream_ns),
            "layers": list(self.layers),
            "waits": self.waits[:50],
            "late_copies": late_copies(self),
            "costed_by": dict(self.costed_by),
            "unplaced_ns": self.unplaced_ns,
            "unplaced": self.unplaced[:50],
            "regions": self.regions[:50],
            "notes": list(self.notes),
        }


def late_copies(pred: Prediction) -> dict[str, Any]:
    """``analysis.late_copies.summary`` of *pred*'s copies back: the host-to-device copies with less compute
    between their start and their done than their transfer."""
    return summary(frame(pred.copies_back))


def link_ns(nbytes: int, link: Link) -> int:
    """A copy of *nbytes* over *link* at its per-direction bandwidth (decimal GB/s = bytes per ns)."""
    return whole_ns(nbytes / link.gbps)


def _regions_as_one(schedule: Schedule, given: list[int | None]) -> tuple[set[int], bytearray]:
    """(the regions replayed as one op, a mask of the ops inside them): a region with a cost whose
    body has no op with one."""
    ops = schedule.ops
    costed = np.zeros(len(ops) + 1, dtype=np.int64)
    costed[1:] = np.cumsum([g is not None for g in given])
    whole: set[int] = set()
    skip = bytearray(len(ops))
    for op in reversed(ops):  # outer regions first: a region inside one replayed whole is not replayed
        if op.kind != "region" or op.body is None or skip[op.index] or given[op.index] is None:
            continue
        lo, hi = op.body
        if costed[hi] - costed[lo] == 0:
            whole.add(op.index)
            skip[lo:hi] = b"\x01" * (hi - lo)
    return whole, skip


def simulate(
    schedule: Schedule, cost_ns: Mapping[str, int], link: Link | None = None, timeline: bool = False
) -> Prediction:
    """The replay described in the module docstring.  *cost_ns*: ns per execution by instruction
    name (missing compute instructions cost 0 and are counted in ``costed_by['missing']``);
    *timeline*: keep where each op was placed (``Prediction.timeline``)."""
    ops = schedule.ops
    ready = [0] * len(ops)
    free = dict.fromkeys(STREAMS, 0)
    busy = dict.fromkeys(STREAMS, 0)
    on = dict.fromkeys(ALL_STREAMS, 0)  # work placed per stream
    nbytes = {"d2h": 0, "h2d": 0}
    t = compute = exposed = exposed_coll = 0
    by: dict[str, int] = {"given": 0, "link": 0, "missing": 0}
    layer_exp: dict[str | None, int] = {}
    layer_copy: dict[str | None, int] = {}
    waits: list[dict[str, Any]] = []
    back: dict[int, dict[str, Any]] = {}  # per h2d start: its row of copies_back, the compute busy at its start
    layers = schedule.layers
    given: list[int | None] = [None if (c := cost_ns.get(o.name)) is None else int(c) for o in ops]
    whole, skip = _regions_as_one(schedule, given)
    spent = [0] * len(ops)  # the cost each op ran for
    rows: list[tuple[int, int, int, int]] = []
    sid = {s: k for k, s in enumerate(ALL_STREAMS)}

    def cost(op) -> int:
        c = given[op.index]
        if c is not None:
            by["given"] += 1
            return c
        if op.stream in ("d2h", "h2d") and link is not None:
            by["link"] += 1
            return link_ns(op.bytes, link)
        by["missing"] += 1
        return 0

    def on_compute(op, dep: int, c: int) -> int:
        """Run *op* for *c* on the compute stream after *dep*; its end."""
        nonlocal t, compute
        s = max(t, dep)
        t = s + c
        compute += c
        on["compute"] += c
        spent[op.index] = c
        if timeline and c:
            rows.append((op.index, 0, s, t))
        return t

    def given_or_through(op, dep: int) -> int:
        """A region or free op: its measured cost on the compute stream when it has one, else it passes
        its inputs' readiness through (its body's ops, or nothing, do the work)."""
        c = given[op.index]
        if c is None:
            return dep
        by["given"] += 1
        return on_compute(op, dep, c)

    for op in ops:
        i = op.index
        if skip[i]:
            continue
        kind = op.kind
        if kind == "region":
            deps = op.inputs if i in whole else (*op.deps, *op.inputs)
            ready[i] = given_or_through(op, max((ready[d] for d in deps), default=0))
            continue
        dep = max((ready[d] for d in op.deps), default=0)
        if kind == "free":
            ready[i] = given_or_through(op, dep)
        elif kind == "done":
            start = ops[op.pair]
            s = max([t, *(ready[d] for d in op.deps if d != op.pair)])
            wait = max(0, ready[op.pair] - s)
            if wait:
                if start.stream in ("d2h", "h2d"):
                    exposed += wait
                    lay = layers.get(start.name)
                    layer_exp[lay] = layer_exp.get(lay, 0) + wait
                elif start.stream == "collective":
                    exposed_coll += wait
                waits.append({"done": op.name, "start": start.name, "stream": start.stream, "wait_ns": wait,
                              "layer": layers.get(start.name), "iteration": op.iteration})  # fmt: skip
            if start.stream == "h2d" and op.pair in back:
                row = back[op.pair]
                row["window_ns"] = on["compute"] - row.pop("compute_at")
            t = s + wait
            ready[i] = t
            if given[i] is not None:
                by["given"] += 1
                ready[i] = on_compute(op, t, given[i])
        elif kind == "start":
            c = cost(op)
            s = max(t, dep, free[op.stream])
            free[op.stream] = ready[i] = s + c
            busy[op.stream] += c
            on[op.stream] += c
            spent[i] = c
            if timeline and c:
                rows.append((i, sid[op.stream], s, s + c))
            if op.stream in nbytes:
                nbytes[op.stream] += op.bytes
                lay = layers.get(op.name)
                layer_copy[lay] = layer_copy.get(lay, 0) + c
            if op.stream == "h2d":
                back[i] = {"start": op.name, "layer": layers.get(op.name), "in_loop": op.iteration is not None,
                           "transfer_ns": c, "window_ns": None, "compute_at": on["compute"]}  # fmt: skip
        else:  # compute, a synchronous copy or collective: on the compute stream
            c = cost(op)
            ready[i] = on_compute(op, dep, c)
            if kind == "copy":
                exposed += c
                busy[op.stream] += c
                nbytes[op.stream] += op.bytes
                lay = layers.get(op.name)
                layer_exp[lay] = layer_exp.get(lay, 0) + c
                layer_copy[lay] = layer_copy.get(lay, 0) + c
            elif kind == "collective":
                exposed_coll += c
                busy["collective"] += c
    step = max([t, *free.values()])
    notes = list(schedule.notes)
    if by["missing"]:
        notes.append(f"{by['missing']} executions had no cost (counted as 0 ns)")
    unplaced = _unplaced(schedule, cost_ns)
    if unplaced:
        total = sum(u["ns"] for u in unplaced)
        notes.append(f"{len(unplaced)} costed names are no op of the schedule: {total / 1e6:.3f} ms not placed")
    regions = _regions(schedule, whole, skip, spent)
    zero = [r["name"] for r in regions if r["ns"] == 0]
    if zero:
        notes.append(f"{len(zero)} loops or calls cost nothing (neither their body nor they were costed): "
                     + ", ".join(zero[:5]))  # fmt: skip
    names = sorted({*layer_exp, *layer_copy}, key=lambda x: (x is None, str(x)))
    tl = None
    if timeline:
        a = np.array(rows, dtype=np.int64).reshape(-1, 4)
        tl = Timeline(a[:, 0], a[:, 1], a[:, 2], a[:, 3])
    return Prediction(
        step_ns=step,
        exposed_ns=exposed,
        exposed_collective_ns=exposed_coll,
        compute_ns=compute,
        copy_ns={d: busy[d] for d in ("d2h", "h2d")},
        copy_bytes=nbytes,
        collective_ns=busy["collective"],
        link=link.key if link is not None else None,
        layers=[{"layer": n, "exposed_ns": layer_exp.get(n, 0), "copy_ns": layer_copy.get(n, 0)} for n in names],
        waits=sorted(waits, key=lambda w: -w["wait_ns"]),
        copies_back=[r for r in back.values() if r["window_ns"] is not None],
        costed_by=by,
        notes=notes,
        stream_ns=on,
        unplaced=unplaced,
        regions=regions,
        timeline=tl,
    )


def _unplaced(schedule: Schedule, cost_ns: Mapping[str, int]) -> list[dict[str, Any]]:
    """The costs of names no op of the schedule runs, largest first."""
    runs = schedule.runs
    cut = any("cut there" in n for n in schedule.notes)
    why = "no op of the schedule runs it" + (" (the schedule was cut)" if cut else "")
    buffer = "what of a command buffer no op was matched to (its memsets; kernels before the first match)"
    out = [
        {"name": k, "ns": int(v), "why": buffer if k.startswith("command_buffer") else why}
        for k, v in cost_ns.items()
        if k not in runs and v
    ]
    return sorted(out, key=lambda u: (-u["ns"], u["name"]))


def _regions(schedule: Schedule, whole: set[int], skip: bytearray, spent: list[int]) -> list[dict[str, Any]]:
    """Each region that was replayed: how (``body``: its body's ops; ``whole``: as one op) and the
    time placed for it (its body's and its own)."""
    total = np.zeros(len(spent) + 1, dtype=np.int64)
    total[1:] = np.cumsum(spent)
    out = []
    for op in schedule.ops:
        if op.kind != "region" or op.body is None or skip[op.index]:
            continue
        lo = op.body[0]  # the body is ops[lo:op.index]
        out.append({"name": op.name, "opcode": op.opcode, "trips": op.trips,
                    "replayed": "whole" if op.index in whole else "body",
                    "ns": int(total[op.index + 1] - total[lo])})  # fmt: skip
    return out
