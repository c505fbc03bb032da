"""A second, plain replay of a compiled step without collectives, for the tests: the rules of
profiler/predict/simulate.py's docstring applied once more, written apart from it.

What it takes from profiler is checked on its own in test_predict.py: the schedule (the ops of the
real two-layer step against its HLO text) and their roofline costs (a dot by hand).  Host copies
without a given cost take their bytes over the link, rounded up to the ns.
"""

from __future__ import annotations

import math
from typing import Any

from profiler.predict import roofline, schedule
from profiler.xla.hlo import Module


def replay(ops: list, cost: dict[str, int], link_gbps: float) -> dict[str, int]:
    """The predicted step, exposed copy time and compute time of *ops* (``schedule.Op``s in order)."""
    compute_free = 0  # when the compute stream can take its next op
    link_free = {"d2h": 0, "h2d": 0}  # when each direction of the host link is free
    finished: dict[int, int] = {}  # op index -> when its result is there
    exposed = compute = 0
    for i, op in enumerate(ops):
        inputs = max((finished[d] for d in op.deps), default=0)
        if op.kind == "free":  # no kernel: its result is there with its inputs
            finished[i] = inputs
        elif op.kind == "start":  # issued on the compute stream, the copy runs on its direction
            if op.stream not in link_free:
                raise ValueError(f"{op.name}: {op.stream} work is outside this reference")
            # bytes / (GB/s) = ns, up to a whole ns (a whole quotient stays whole: rounded to 1e-6 ns first)
            took = cost[op.name] if op.name in cost else math.ceil(round(op.bytes / link_gbps, 6))
            begin = max(compute_free, inputs, link_free[op.stream])
            finished[i] = link_free[op.stream] = begin + took
        elif op.kind == "done":  # the compute stream waits for the copy; the wait is exposed copy time
            could = max([compute_free, *(finished[d] for d in op.deps if d != op.pair)])
            exposed += max(0, finished[op.pair] - could)
            finished[i] = compute_free = max(could, finished[op.pair])
        elif op.kind == "compute":
            took = cost.get(op.name, 0)
            finished[i] = compute_free = max(compute_free, inputs) + took
            compute += took
        else:
            raise ValueError(f"{op.name}: a {op.kind} op is outside this reference")
    return {
        "predicted_step_ns": max(compute_free, *link_free.values()),
        "predicted_exposed_ns": exposed,
        "predicted_compute_ns": compute,
    }


def predicted(module: Module, spec_text: str, link_gbps: float) -> dict[str, Any]:
    """The reference's prediction of *module* on the device of *spec_text* and a link of *link_gbps*."""
    sched = schedule.build(module)
    return replay(sched.ops, roofline.costs(sched, roofline.device_from_spec(spec_text)), link_gbps)
