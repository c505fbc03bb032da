"""The schedule replay's rules as a check both the replay-invariant and the TPU recordings' tests
use (``profiler.analysis.replay_rules``, issue 42): one op at a time per stream, every cost placed
once per run of its op or listed unplaced, a loop costed as its body or as itself."""

from __future__ import annotations

from profiler.analysis import replay_rules
from profiler.predict import schedule
from profiler.predict.simulate import ALL_STREAMS, Prediction

REPLAY_GOAL = 0.05  # the replay of a recorded step with its own durations, against the measured step


def prediction_broken(sched: schedule.Schedule, cost_ns: dict[str, int], p: Prediction) -> list[str]:
    """How *p* (``simulate(sched, cost_ns, None, timeline=True)``) breaks the rules, in words."""
    out = []
    tl = p.timeline
    assert tl is not None
    # 1: on each stream every op starts after the one placed before it ends; each stream's work fits the step
    b = replay_rules.check(tl.stream, tl.start, tl.end, replay_rules.prev_on_stream(tl.stream))
    if b.rows.size:
        out.append(f"{b.rows.size} ops start before the op before them on their stream ends (by {b.excess.max()} ns)")
    for k, s in enumerate(ALL_STREAMS):
        on = int((tl.end - tl.start)[tl.stream == k].sum())
        if on != p.stream_ns[s]:
            out.append(f"stream {s}: {on} ns placed, {p.stream_ns[s]} counted")
        if p.step_ns < p.stream_ns[s]:
            out.append(f"stream {s}: {p.stream_ns[s]} ns of work in a step of {p.step_ns}")
    # 2: every cost placed once per run of its op, or listed unplaced
    runs = sched.runs
    given = sum(int(c) * runs[n] for n, c in cost_ns.items() if n in runs)
    if sum(p.stream_ns.values()) != given:
        out.append(f"{sum(p.stream_ns.values())} ns placed of {given} given for the schedule's ops")
    outside = {n: int(c) for n, c in cost_ns.items() if n not in runs and c}
    if {u["name"]: u["ns"] for u in p.unplaced} != outside:
        out.append(f"unplaced {p.unplaced} against {outside}")
    # 3: a region is its body where any op of it has a cost, else one op of its own cost
    ops = sched.ops
    whole, inside = set(), set()
    for op in reversed(ops):
        if op.kind != "region" or op.index in inside:
            continue
        lo, hi = op.body  # type: ignore[misc]
        if op.name in cost_ns and not any(o.name in cost_ns for o in ops[lo:hi]):
            whole.add(op.index)
            inside.update(range(lo, hi))
    regions = [o for o in ops if o.kind == "region" and o.index not in inside]
    got = [(r["name"], r["replayed"]) for r in p.regions]
    want = [(o.name, "whole" if o.index in whole else "body") for o in regions]
    if got != want:
        out.append(f"regions replayed {got}, the rule says {want}")
    for o, r in zip(regions, p.regions, strict=False):
        lo = o.body[0]  # type: ignore[index]
        costed = [int(cost_ns[x.name]) for x in ops[lo : o.index + 1] if x.name in cost_ns and x.index not in inside]
        if o.index in whole:
            costed = [int(cost_ns[o.name])]
        if r["ns"] != sum(costed):
            out.append(f"region {o.name}: {r['ns']} ns, its costs add up to {sum(costed)}")
    if any(r["ns"] == 0 for r in p.regions) and not any("cost nothing" in n for n in p.notes):
        out.append("a loop that costs nothing without a note")
    return out
