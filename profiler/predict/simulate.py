"""Replay a schedule through its dependencies: the predicted step and the copy time it exposes.

Streams: one compute stream runs kernels, synchronous collectives and
synchronous host copies in the schedule's order; an async start is issued
there in order and its work runs on its own stream (``d2h``, ``h2d``: one per
direction of the host link; ``collective``; ``async``: other async work) as
soon as that stream is free, one piece at a time; a ``*-done`` holds the
compute stream until its start's work has finished.

- *step*: when the last stream is done;
- *exposed copy time*: the time the compute stream waits on a copy-done, plus
  the synchronous host copies it runs itself (nothing hides those);
- per layer: the exposed copy time of the copies whose movement the plan
  attributes to that layer (``profiler.analysis.offload_plan.label``).

Costs come in as ns per execution by instruction name (``roofline.costs`` or
measured); a host copy without a cost is its bytes over *link*.  The replay is
one pass over the unrolled schedule (each op's start depends on the ones
before it: a recurrence, not an interval operation over a frame).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from profiler.analysis.links import Link
from profiler.predict.schedule import Schedule

STREAMS = ("d2h", "h2d", "collective", "async")


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
    costed_by: dict[str, int] = field(default_factory=dict)  # "given", "link", "missing": how many ops
    notes: list[str] = field(default_factory=list)

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
            "layers": list(self.layers),
            "waits": self.waits[:50],
            "late_copies": late_copies(self.waits),
            "costed_by": dict(self.costed_by),
            "notes": list(self.notes),
        }


def late_copies(waits: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per direction of the host link, the copies whose done the compute stream reached before the
    copy had ended (less compute scheduled between its start and its done than the copy takes):
    ``count``, ``wait_ns`` (summed: per step) and the ``worst`` (start, layer, wait_ns)."""
    out = {}
    for d in ("h2d", "d2h"):
        mine = [w for w in waits if w["stream"] == d and w["wait_ns"] > 0]
        worst = max(mine, key=lambda w: w["wait_ns"], default=None)
        out[d] = {
            "count": len(mine),
            "wait_ns": sum(w["wait_ns"] for w in mine),
            "worst": {k: worst[k] for k in ("start", "layer", "wait_ns")} if worst else None,
        }
    return out


def link_ns(nbytes: int, link: Link) -> int:
    """A copy of *nbytes* over *link* at its per-direction bandwidth (decimal GB/s = bytes per ns)."""
    return math.ceil(nbytes / link.gbps)


def simulate(schedule: Schedule, cost_ns: Mapping[str, int], link: Link | None = None) -> Prediction:
    """The replay described in the module docstring.  *cost_ns*: ns per execution by instruction
    name (missing compute instructions cost 0 and are counted in ``costed_by['missing']``)."""
    ops = schedule.ops
    ready = [0] * len(ops)
    free = dict.fromkeys(STREAMS, 0)
    busy = dict.fromkeys(STREAMS, 0)
    nbytes = {"d2h": 0, "h2d": 0}
    t = compute = exposed = exposed_coll = 0
    by: dict[str, int] = {"given": 0, "link": 0, "missing": 0}
    layer_exp: dict[str | None, int] = {}
    layer_copy: dict[str | None, int] = {}
    waits: list[dict[str, Any]] = []
    layers = schedule.layers

    def cost(op) -> int:
        c = cost_ns.get(op.name)
        if c is not None:
            by["given"] += 1
            return int(c)
        if op.stream in ("d2h", "h2d") and link is not None:
            by["link"] += 1
            return link_ns(op.bytes, link)
        by["missing"] += 1
        return 0

    for op in ops:
        dep = max((ready[d] for d in op.deps), default=0)
        kind = op.kind
        if kind == "free":
            ready[op.index] = dep
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
            t = s + wait
            ready[op.index] = t
        elif kind == "start":
            c = cost(op)
            s = max(t, dep, free[op.stream])
            free[op.stream] = ready[op.index] = s + c
            busy[op.stream] += c
            if op.stream in nbytes:
                nbytes[op.stream] += op.bytes
                lay = layers.get(op.name)
                layer_copy[lay] = layer_copy.get(lay, 0) + c
        else:  # compute, a synchronous copy or collective: on the compute stream
            c = cost(op)
            s = max(t, dep)
            t = ready[op.index] = s + c
            compute += c
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
    names = sorted({*layer_exp, *layer_copy}, key=lambda x: (x is None, str(x)))
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
        costed_by=by,
        notes=notes,
    )
