"""The schedule replay (``profiler.predict.simulate``) on small programs worked out by hand: every
field of the prediction, not only the step (found by mutation testing, docs/testing.md: the rules'
tests check where ops run, not what the prediction reports about them)."""

from __future__ import annotations

import dataclasses

from profiler.analysis.links import parse_link
from profiler.predict import schedule
from profiler.predict.simulate import simulate
from profiler.xla.hlo import parse_text
from tests.helpers.hlo_programs import SUM, program_text

T = "f32[64,64]{1,0}"  # 16384 bytes
HOST = "f32[64,64]{1,0:S(5)}"

# a copy out and back, an all-reduce, and two adds without a cost
COPIES = f"""HloModule hand, is_scheduled=true

{SUM}

ENTRY %e (x: f32[64,64]) -> f32[64,64] {{
  %x = {T} parameter(0)
  %k1 = {T} negate(%x)
  %cs1 = ({HOST}, {T}, u32[]) copy-start(%k1)
  %k2 = {T} exponential(%k1)
  %cd1 = {HOST} copy-done(%cs1)
  %cs2 = ({T}, {HOST}, u32[]) copy-start(%cd1)
  %ars = {T} all-reduce-start(%k2), replica_groups={{{{0,1}}}}, to_apply=%sum
  %k3 = {T} negate(%k2)
  %ard = {T} all-reduce-done(%ars)
  %cd2 = {T} copy-done(%cs2)
  %s = {T} add(%cd2, %ard)
  ROOT %out = {T} add(%s, %k3)
}}
"""


def test_every_field_of_a_prediction_with_copies_a_collective_and_missing_costs():
    """By hand, on the compute stream's clock t (cs1 over a 32 GB/s link: 16384 B / 32 B/ns = 512 ns):
    k1 0-100; cs1 on d2h 100-612; k2 100-400; cd1 waits 212 (exposed, layer L1), t = 612; cs2 on h2d
    612-1012 (its window opens with 400 ns of compute done); ars on the collective stream 612-1612;
    k3 612-662; ard waits 950 (exposed collective), t = 1612; cd2 does not wait (window: 450 - 400 =
    50 ns of compute); s and out have no cost (0 ns, 2 missing).  Step 1612.  Layers by name (L0, the
    copy back, before L1)."""
    sched = schedule.build(parse_text(COPIES))
    assert [(o.name, o.kind, o.stream) for o in sched.ops if o.kind == "start"] == [
        ("cs1", "start", "d2h"), ("cs2", "start", "h2d"), ("ars", "start", "collective")]  # fmt: skip
    sched = dataclasses.replace(sched, layers={"cs1": "L1", "cs2": "L0"})
    costs = {"k1": 100, "k2": 300, "k3": 50, "cs2": 400, "ars": 1000}
    p = simulate(sched, costs, parse_link("32"))
    assert (p.step_ns, p.exposed_ns, p.exposed_collective_ns, p.compute_ns) == (1612, 212, 950, 450)
    assert p.copy_ns == {"d2h": 512, "h2d": 400} and p.copy_bytes == {"d2h": 16384, "h2d": 16384}
    assert p.collective_ns == 1000 and p.link == parse_link("32").key == "32gbps"
    assert p.stream_ns == {"compute": 450, "d2h": 512, "h2d": 400, "collective": 1000, "async": 0}
    assert p.layers == [
        {"layer": "L0", "exposed_ns": 0, "copy_ns": 400},
        {"layer": "L1", "exposed_ns": 212, "copy_ns": 512},
    ]
    assert p.waits == [
        {"done": "ard", "start": "ars", "stream": "collective", "wait_ns": 950, "layer": None, "iteration": None},
        {"done": "cd1", "start": "cs1", "stream": "d2h", "wait_ns": 212, "layer": "L1", "iteration": None},
    ]
    assert p.copies_back == [{"start": "cs2", "layer": "L0", "in_loop": False, "transfer_ns": 400, "window_ns": 50}]
    assert p.costed_by == {"given": 5, "link": 1, "missing": 2}
    assert p.notes == ["2 executions had no cost (counted as 0 ns)"]
    assert p.unplaced == [] and p.regions == [] and p.timeline is None
    doc = p.doc()
    assert doc["late_copies"] == {"of": 1, "count": 1, "waited_ns": 350, "transfer_ns": 400, "window_ns": 50,
                                  "in_loop": 0, "worst": {**p.copies_back[0], "waited_ns": 350}}  # fmt: skip
    assert doc == {
        "link": "32gbps",
        "predicted_step_ns": 1612,
        "predicted_exposed_ns": 212,
        "predicted_exposed_collective_ns": 950,
        "predicted_compute_ns": 450,
        "predicted_copy_ns": {"d2h": 512, "h2d": 400},
        "copy_bytes": {"d2h": 16384, "h2d": 16384},
        "predicted_collective_ns": 1000,
        "predicted_stream_ns": {"compute": 450, "d2h": 512, "h2d": 400, "collective": 1000, "async": 0},
        "layers": p.layers,
        "waits": p.waits,
        "late_copies": doc["late_copies"],
        "costed_by": {"given": 5, "link": 1, "missing": 2},
        "unplaced_ns": 0,
        "unplaced": [],
        "regions": [],
        "notes": ["2 executions had no cost (counted as 0 ns)"],
    }


def test_synchronous_copies_are_exposed_and_counted_on_their_direction():
    """Copies into host memory without copy-start run on the compute stream (k 100, c 700, k2 50, c2
    300 ns: 1150) and are all exposed (1000); their bytes and times add up for d2h and for their
    layer."""
    text = f"""HloModule sync, is_scheduled=true

ENTRY %e (x: f32[64,64]) -> ({HOST}, {HOST}) {{
  %x = {T} parameter(0)
  %k = {T} negate(%x)
  %c = {HOST} copy(%k)
  %k2 = {T} exponential(%k)
  %c2 = {HOST} copy(%k2)
  ROOT %t = ({HOST}, {HOST}) tuple(%c, %c2)
}}
"""
    sched = schedule.build(parse_text(text))
    assert [o.kind for o in sched.ops] == ["free", "compute", "copy", "compute", "copy", "free"]
    sched = dataclasses.replace(sched, layers={"c": "L3", "c2": "L3"})
    p = simulate(sched, {"k": 100, "c": 700, "k2": 50, "c2": 300})
    assert (p.step_ns, p.exposed_ns, p.compute_ns) == (1150, 1000, 1150)
    assert p.copy_ns == {"d2h": 1000, "h2d": 0} and p.copy_bytes == {"d2h": 32768, "h2d": 0}
    assert p.layers == [{"layer": "L3", "exposed_ns": 1000, "copy_ns": 1000}]
    assert p.waits == [] and p.link is None and p.costed_by == {"given": 4, "link": 0, "missing": 0}


def test_a_call_that_returns_a_copy_in_flight_holds_what_uses_it():
    """A call whose body's root is a copy-start (no planned movement: the async stream): its result is
    ready when that copy ends (k 0-10, cs 10-910), so the copy back that reads it through the
    copy-done starts at 910 on the free h2d stream (910-1010), not at 10; the compute stream waits
    for it (1000 ns) and n runs 1010-1015."""
    text = f"""HloModule inflight, is_scheduled=true

%fn (a: f32[64,64]) -> ({HOST}, {T}, u32[]) {{
  %a = {T} parameter(0)
  ROOT %cs = ({HOST}, {T}, u32[]) copy-start(%a)
}}

ENTRY %e (x: f32[64,64]) -> {T} {{
  %x = {T} parameter(0)
  %k = {T} negate(%x)
  %c = ({HOST}, {T}, u32[]) call(%k), to_apply=%fn
  %cd = {HOST} copy-done(%c)
  %back = ({T}, {HOST}, u32[]) copy-start(%cd)
  %bd = {T} copy-done(%back)
  ROOT %n = {T} negate(%bd)
}}
"""
    sched = schedule.build(parse_text(text))
    got = [(o.name, o.kind, o.stream) for o in sched.ops][2:]
    assert got == [("a", "free", "compute"), ("cs", "start", "async"), ("c", "region", "compute"),
                   ("cd", "free", "compute"), ("back", "start", "h2d"), ("bd", "done", "compute"),
                   ("n", "compute", "compute")]  # fmt: skip
    p = simulate(sched, {"k": 10, "cs": 900, "back": 100, "n": 5}, timeline=True)
    assert (p.step_ns, p.exposed_ns) == (1015, 1000)
    assert p.timeline is not None
    assert dict(zip(p.timeline.op.tolist(), p.timeline.start.tolist(), strict=True)) == {1: 0, 3: 10, 6: 910, 8: 1010}
    # the copy back free and n without a cost: bd waits for cs (900 ns); only k and cs took time
    p = simulate(sched, {"k": 10, "cs": 900, "back": 0}, timeline=True)
    assert (p.step_ns, p.exposed_ns, p.costed_by["missing"]) == (910, 900, 1)
    assert p.timeline is not None and p.timeline.op.tolist() == [1, 3]


def test_a_done_with_its_own_time_runs_after_its_wait_and_copies_one_direction_queue():
    """Two copies to the host (one layer) issued together queue on the d2h stream (a 100-612, b
    612-1124, at 32 GB/s); a's done waits 512 ns, b's until 1124 (512 more, 1024 exposed), then b's done
    runs its own measured 30 ns on the compute stream, then n 1154-1159."""
    text = f"""HloModule queue, is_scheduled=true

ENTRY %e (x: f32[64,64]) -> {T} {{
  %x = {T} parameter(0)
  %k = {T} negate(%x)
  %a = ({HOST}, {T}, u32[]) copy-start(%k)
  %b = ({HOST}, {T}, u32[]) copy-start(%k)
  %ad = {HOST} copy-done(%a)
  %bd = {HOST} copy-done(%b)
  ROOT %n = {T} negate(%k)
}}
"""
    sched = dataclasses.replace(schedule.build(parse_text(text)), layers={"a": "L5", "b": "L5"})
    p = simulate(sched, {"k": 100, "bd": 30, "n": 5}, parse_link("32"))
    assert (p.step_ns, p.exposed_ns, p.compute_ns) == (1159, 1024, 135)
    wait = {"stream": "d2h", "wait_ns": 512, "layer": "L5", "iteration": None}
    assert p.waits == [{"done": "ad", "start": "a", **wait}, {"done": "bd", "start": "b", **wait}]
    assert p.costed_by == {"given": 3, "link": 2, "missing": 0}
    assert p.copy_ns == {"d2h": 1024, "h2d": 0} and p.copy_bytes == {"d2h": 32768, "h2d": 0}
    assert p.layers == [{"layer": "L5", "exposed_ns": 1024, "copy_ns": 1024}]


def test_unplaced_costs_are_largest_first_and_say_the_schedule_was_cut(monkeypatch):
    """Names no op runs are listed by time, largest first (then by name); where the schedule was cut
    at MAX_OPS the reason says so."""
    text = f"""HloModule cut, is_scheduled=true

ENTRY %e (x: f32[64,64]) -> {T} {{
  %x = {T} parameter(0)
  %k1 = {T} negate(%x)
  %k2 = {T} negate(%k1)
  %k3 = {T} negate(%k2)
  ROOT %k4 = {T} negate(%k3)
}}
"""
    costs = {"k1": 10, "k3": 30, "k4": 40, "other.b": 30, "other.a": 30}
    whole = simulate(schedule.build(parse_text(text)), costs)
    why = "no op of the schedule runs it"
    assert whole.unplaced == [{"name": n, "ns": 30, "why": why} for n in ("other.a", "other.b")]
    monkeypatch.setattr(schedule, "MAX_OPS", 3)  # x, k1, k2
    sched = schedule.build(parse_text(text))
    assert [o.name for o in sched.ops] == ["x", "k1", "k2"]
    p = simulate(sched, costs)
    why += " (the schedule was cut)"
    assert p.unplaced == [{"name": "k4", "ns": 40, "why": why}, *({"name": n, "ns": 30, "why": why}
                                                                  for n in ("k3", "other.a", "other.b"))]  # fmt: skip
    assert p.unplaced_ns == 130 and p.step_ns == 10


def test_layers_are_by_name_with_the_copies_of_no_layer_last():
    eight = "\n".join(f"  %c{k} = {HOST} copy(%x)" for k in range(8))
    text = f"""HloModule eight, is_scheduled=true

ENTRY %e (x: f32[64,64]) -> {HOST} {{
  %x = {T} parameter(0)
{eight}
  ROOT %t = {HOST} copy(%x)
}}
"""
    layers = {f"c{k}": f"L{7 - k}" for k in range(8)}  # issued from L7 down to L0
    sched = dataclasses.replace(schedule.build(parse_text(text)), layers=layers)
    p = simulate(sched, {f"c{k}": 10 * (k + 1) for k in range(8)})
    assert [x["layer"] for x in p.layers] == [*(f"L{k}" for k in range(8)), None]
    assert [x["copy_ns"] for x in p.layers] == [80, 70, 60, 50, 40, 30, 20, 10, 0]
    text = f"""HloModule sync, is_scheduled=true

ENTRY %e (x: f32[64,64]) -> ({HOST}, {HOST}) {{
  %x = {T} parameter(0)
  %c = {HOST} copy(%x)
  %c2 = {HOST} copy(%x)
  ROOT %t = ({HOST}, {HOST}) tuple(%c, %c2)
}}
"""
    sched = dataclasses.replace(schedule.build(parse_text(text)), layers={"c2": "L3"})
    p = simulate(sched, {"c": 700, "c2": 300})
    assert p.layers == [
        {"layer": "L3", "exposed_ns": 300, "copy_ns": 300},
        {"layer": None, "exposed_ns": 700, "copy_ns": 700},
    ]


def test_synchronous_collectives_add_up_as_exposed_collective_time():
    """Two all-reduces without start and done run on the compute stream (k 100, r1 400, r2 600) and
    are all exposed collective time (1000)."""
    text = f"""HloModule coll, is_scheduled=true

{SUM}

ENTRY %e (x: f32[64,64]) -> {T} {{
  %x = {T} parameter(0)
  %k = {T} negate(%x)
  %r1 = {T} all-reduce(%k), replica_groups={{{{0,1}}}}, to_apply=%sum
  ROOT %r2 = {T} all-reduce(%r1), replica_groups={{{{0,1}}}}, to_apply=%sum
}}
"""
    sched = schedule.build(parse_text(text))
    assert [o.kind for o in sched.ops] == ["free", "compute", "collective", "collective"]
    p = simulate(sched, {"k": 100, "r1": 400, "r2": 600})
    assert (p.step_ns, p.compute_ns, p.exposed_collective_ns, p.collective_ns, p.exposed_ns) == (
        1100,
        1100,
        1000,
        1000,
        0,
    )
    assert p.stream_ns == {"compute": 1100, "d2h": 0, "h2d": 0, "collective": 0, "async": 0}


def test_the_notes_say_the_time_not_placed_and_name_five_loops_that_cost_nothing():
    """1 s given to a name no op runs is 1000.000 ms not placed; six calls with nothing costed are
    counted, the first five named."""
    sched = schedule.build(parse_text(program_text([("call", [("k",)])] * 6)))
    calls = [o.name for o in sched.ops if o.kind == "region"]
    assert len(calls) == 6
    p = simulate(sched, {"elsewhere.1": 1_000_000_000})
    assert p.notes[1:] == [
        "1 costed names are no op of the schedule: 1000.000 ms not placed",
        "6 loops or calls cost nothing (neither their body nor they were costed): " + ", ".join(calls[:5]),
    ]


def test_collective_waits_add_up_and_a_document_lists_fifty_waits():
    """Two all-reduces issued together queue on the collective stream (k 0-100, 100-500, 500-1100):
    their dones wait 400 and 600 ns (1000 exposed collective time).  51 copies that each hold the
    compute stream: the document lists the 50 longest waits (and 50 of 51 unplaced costs and calls)."""
    text = f"""HloModule colls, is_scheduled=true

{SUM}

ENTRY %e (x: f32[64,64]) -> {T} {{
  %x = {T} parameter(0)
  %k = {T} negate(%x)
  %s1 = {T} all-reduce-start(%k), replica_groups={{{{0,1}}}}, to_apply=%sum
  %s2 = {T} all-reduce-start(%k), replica_groups={{{{0,1}}}}, to_apply=%sum
  %d1 = {T} all-reduce-done(%s1)
  %d2 = {T} all-reduce-done(%s2)
  ROOT %n = {T} add(%d1, %d2)
}}
"""
    p = simulate(schedule.build(parse_text(text)), {"k": 100, "s1": 400, "s2": 600, "n": 0})
    assert (p.step_ns, p.exposed_collective_ns, p.collective_ns, p.exposed_ns) == (1100, 1000, 1000, 0)
    assert [(w["done"], w["wait_ns"]) for w in p.waits] == [("d2", 600), ("d1", 400)]
    sched = schedule.build(parse_text(program_text([("d2h",)] * 51)))
    starts = [o.name for o in sched.ops if o.kind == "start"]
    assert len(starts) == 51
    p = simulate(sched, {s: 100 + k for k, s in enumerate(starts)})
    assert len(p.waits) == 51 and len(p.doc()["waits"]) == 50
    assert [w["wait_ns"] for w in p.doc()["waits"]] == list(range(150, 100, -1))
    # 51 costs of names no op runs and 51 calls: the document lists 50 of each
    p = simulate(schedule.build(parse_text(program_text([("call", [("k",)])] * 51))), {f"o.{k}": 1 for k in range(51)})
    assert (len(p.unplaced), len(p.regions)) == (51, 51)
    assert (len(p.doc()["unplaced"]), len(p.doc()["regions"]), p.doc()["unplaced_ns"]) == (50, 50, 51)
