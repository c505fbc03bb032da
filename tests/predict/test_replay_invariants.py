"""The replays' rules (``profiler.analysis.replay_rules``, issue 42), tested the same way on both
replays: one op at a time per stream (the step at least every stream's serial work), every op placed
or listed unplaced with its time, loops costed as what they are.

- the schedule replay (``predict.simulate``): on random scheduled HLO programs (loops with and
  without a known trip count, calls, nested, copies inside them) with random costs; on random
  programs recorded in both forms (``tests/recordings.py``) and replayed with their own measured
  durations (within 5% of the measured step); on the real Pax archives (within 3%), the H200 run
  folders of ``sample_traces/`` and the scanned ground truth of ``conftest.scanned_recordings``;
- the trace replay (``analysis.replay``, what-if and savings): on random exports (with clock skew
  and invalid ops), random exports with changes, every export of ../shared, the H200 runs'
  conversions and the scanned ground truth.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.analysis import replay_rules
from profiler.analysis.dependencies import D2H, H2D, dependencies
from profiler.analysis.hostsync import host_syncs
from profiler.analysis.replay import Change, replay
from profiler.predict import schedule
from profiler.predict.calibrate import measured_costs
from profiler.predict.calibrate import replay as measured_replay
from profiler.predict.measured import load
from profiler.predict.simulate import Prediction, simulate
from profiler.trace import open_trace
from profiler.xla.hlo import parse_text
from tests.helpers.hlo_programs import program_text
from tests.helpers.paths import ROOT
from tests.helpers.random_costs import action, build_random
from tests.helpers.recordings import Timing, record
from tests.helpers.replay_checks import REPLAY_GOAL, prediction_broken
from tests.helpers.savings_exports import exports, subset

PAX_GOAL = 0.03  # the Pax archives (unrolled, no loops) replayed within 3% (issue 42)
FACTORS = (1.0, 0.5, 0.0, 1.7)


# --- the rules on a schedule replay ----------------------------------------------------------------


# --- random scheduled programs ----------------------------------------------------------------------

statement = st.deferred(
    lambda: st.one_of(
        st.just(("k",)),
        st.just(("k",)),
        st.just(("d2h",)),
        st.tuples(st.just("while"), st.one_of(st.none(), st.integers(1, 4)), st.lists(statement, max_size=4)),
        st.tuples(st.just("call"), st.lists(statement, min_size=1, max_size=3)),
    )
)


programs = st.lists(statement, min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(stmts=programs, data=st.data())
def test_the_schedule_replay_keeps_the_rules_on_random_programs(stmts, data):
    """Any costs, on any subset of a random program's instructions (loops, calls, their bodies, names
    of no instruction): the rules hold."""
    module = parse_text(program_text(stmts))
    sched = schedule.build(module)
    names = sorted({i.name for i in module.instructions()} | {"command_buffer_1", "other_module.3"})
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    cost_ns = {n: data.draw(st.integers(0, 10_000)) for n in chosen}
    p = simulate(sched, cost_ns, None, timeline=True)
    assert prediction_broken(sched, cost_ns, p) == []


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stmts=st.lists(statement, min_size=2, max_size=6).filter(lambda s: any(x[0] in ("while", "call") for x in s)),
    form=st.sampled_from(["body", "body+predicate", "loop", "archive"]),
    seed=st.integers(0, 1000),
)
def test_a_random_recorded_program_replays_to_its_measured_step(tmp_path_factory, stmts, form, seed):
    """A random program with loops, recorded in each form (its loops' thunks timed on every trip, or
    each loop one range; an nsys export or an nsys-jax archive) and replayed with its own measured
    durations: every op placed, the rules kept, the step within 5%."""
    text = program_text(stmts)
    sched = schedule.build(parse_text(text))
    folder = tmp_path_factory.mktemp("rec") / "run"
    recorded = record(sched, {}, "loop" if form == "loop" else "body", executions=2, seed=seed,
                      predicate=form == "body+predicate", timing=Timing(min_ns=50_000))  # fmt: skip
    (recorded.write_archive if form == "archive" else recorded.write)(folder, text)
    check_recorded(load(folder))


def check_recorded(m, goal: float = REPLAY_GOAL) -> Prediction:
    """The measured replay of *m*: every measured time placed, the rules kept, the step within *goal*."""
    assert m.module is not None
    sched = schedule.build(m.module)
    costs = measured_costs(m)
    p = simulate(sched, costs, None, timeline=True)
    assert prediction_broken(sched, costs, p) == []
    assert p.unplaced == [] and p.costed_by["missing"] == 0
    assert all(r["ns"] > 0 for r in p.regions)  # no loop dropped
    err = (p.step_ns - m.step_ns) / m.step_ns
    assert abs(err) <= goal, f"replay {p.step_ns / 1e6:.3f} ms against {m.step_ns / 1e6:.3f} ms measured"
    assert (p.step_ns, err) == (measured_replay(m)[0].step_ns, measured_replay(m)[1])
    return p


# --- hand-worked: a loop measured each way -----------------------------------------------------------

LOOP = program_text([("k",), ("while", 3, [("k",), ("d2h",), ("k",)]), ("k",)])


def test_a_loop_is_its_body_times_its_trips_or_its_own_span():
    sched = schedule.build(parse_text(LOOP))
    (loop,) = [o for o in sched.ops if o.kind == "region"]
    lo = loop.body[0]  # type: ignore[index]
    body = sorted({o.name for o in sched.ops[lo : loop.index] if o.kind in ("compute", "start")})
    assert loop.trips == 3 and len(body) == 4  # the counter's add, two kernels, the copy
    outside = {o.name: 100 for o in sched.ops if o.kind == "compute" and not lo <= o.index < loop.index}
    assert len(outside) == 3
    # the body's thunks timed on every trip: 3 x their time per trip
    timed = {**outside, **dict.fromkeys(body, 10)}
    p = simulate(sched, timed, timeline=True)
    assert p.regions == [{"name": loop.name, "opcode": "while", "trips": 3, "replayed": "body", "ns": 120}]
    assert p.step_ns >= 300 + 3 * 30 and prediction_broken(sched, timed, p) == []
    # the loop as one range: one op of its span, on the compute stream, its body not replayed (before
    # issue 42 the loop and its body were dropped: 300 ns)
    span = {**outside, loop.name: 500}
    p = simulate(sched, span, timeline=True)
    assert p.regions[0]["replayed"] == "whole" and p.step_ns == 800 and p.stream_ns["compute"] == 800
    assert p.costed_by == {"given": 4, "link": 0, "missing": 0}
    # both: the body is replayed, the loop's own time (its condition, its predicate copies) after it
    both = {**timed, loop.name: 7}
    p = simulate(sched, both, timeline=True)
    assert p.regions[0] == {**p.regions[0], "replayed": "body", "ns": 127}
    assert prediction_broken(sched, both, p) == []
    # neither: the loop costs nothing, and the prediction says so
    p = simulate(sched, outside, timeline=True)
    assert p.regions[0]["ns"] == 0 and any("cost nothing" in n for n in p.notes)


def test_a_cost_no_op_runs_is_listed_with_its_time():
    sched = schedule.build(parse_text(LOOP))
    first = next(o.name for o in sched.ops if o.kind == "compute")
    p = simulate(sched, {first: 100, "command_buffer_3": 5_000, "gone.1": 0, "other.2": 700})
    buffer = "what of a command buffer no op was matched to (its memsets; kernels before the first match)"
    assert p.unplaced == [
        {"name": "command_buffer_3", "ns": 5_000, "why": buffer},
        {"name": "other.2", "ns": 700, "why": "no op of the schedule runs it"},
    ]
    assert p.unplaced_ns == 5_700 and p.doc()["unplaced_ns"] == 5_700 and p.step_ns == 100


def test_a_loop_without_a_trip_count_keeps_its_measured_time(tmp_path):
    """No known trip count: the body is replayed once, and a body instruction's measured time per
    step, divided by the one run the schedule has of it, is still all of its time."""
    text = program_text([("while", None, [("k",), ("k",)])])
    sched = schedule.build(parse_text(text))
    assert any("no known trip count" in n for n in sched.notes)
    folder = tmp_path / "run"
    record(sched, {}, "body", timing=Timing(min_ns=50_000)).write(folder, text)
    check_recorded(load(folder))


# --- the real archives and runs ----------------------------------------------------------------------


@pytest.mark.parametrize("archive", ["proc0", "proc1"])
def test_the_pax_archives_replay_within_3_percent_keeping_the_rules(shared_traces, archive):
    from tests.helpers.measured import pax

    p = check_recorded(pax(archive), PAX_GOAL)
    assert p.regions == []  # unrolled: no loops


def test_the_h200_runs_keep_the_rules(h200_measured):
    """The real H200 steps of sample_traces: their kernels ran in command buffers (``command_buffer_N``
    thunks, no instruction of the module): those are listed unplaced with their time; the scanned
    programs' loops were recorded as one range each and are placed as such."""
    for name, m in h200_measured.items():
        sched = schedule.build(m.module)
        costs = measured_costs(m)
        p = simulate(sched, costs, None, timeline=True)
        assert prediction_broken(sched, costs, p) == [], name
        assert {u["name"].rsplit("_", 1)[0] for u in p.unplaced} <= {"command_buffer"}, name
        if "scan" in name:
            assert [r["replayed"] for r in p.regions] == ["whole", "whole"] and all(r["ns"] > 0 for r in p.regions)
            # the loops are there: placed and unplaced time together is the measured step
            assert p.step_ns + p.unplaced_ns == pytest.approx(m.step_ns, rel=REPLAY_GOAL), name


def test_the_scanned_ground_truth_replays_to_its_measured_step(scanned_recordings):
    """The scanned steps (the example's scanned H200 programs; with .venv-aot, the small step under
    lax.scan compiled for an H100), recorded with the body's thunks timed on every trip (with and
    without the loop's own predicate copies), with each loop as one range, and as an nsys-jax
    archive: every op placed, the rules kept, the replay within 5% of the measured step."""
    assert len(scanned_recordings) >= 8
    for label, folder in scanned_recordings.items():
        p = check_recorded(load(folder))
        assert p.regions and all(r["replayed"] == ("body" if "body" in label else "whole") for r in p.regions), label


# --- the rules on a trace replay ---------------------------------------------------------------------


def trace_broken(path: Path, factors=FACTORS) -> list[str]:
    trace = open_trace(path)
    deps = dependencies(trace)
    host = host_syncs(trace, deps)
    out = []
    for factor, h in itertools.product(factors, (None, host)):
        b = replay_rules.check_replay(replay(deps, factor, h))
        if not b.ok:
            out.append(f"F={factor} host={h is not None}: {b}")
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(action, min_size=1, max_size=40))
def test_the_trace_replay_keeps_the_rules_on_random_exports(tmp_path_factory, actions):
    path = build_random(actions, tmp_path_factory.mktemp("rand") / "r.sqlite")
    assert trace_broken(path) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_trace_replay_keeps_the_rules_under_every_change(tmp_path_factory, data):
    path = data.draw(exports()).write(tmp_path_factory.mktemp("gen") / "trace.sqlite")
    trace = open_trace(path)
    deps = dependencies(trace)
    ops = deps.ops
    copies = np.flatnonzero((ops.kind == H2D) | (ops.kind == D2H))
    host = host_syncs(trace, deps)
    for ch in (
        Change("removed", removed=subset(data.draw, copies)),
        Change("unwaited", unwaited=subset(data.draw, copies)),
        Change("shorter", durations=(copies, (ops.end - ops.start)[copies] // 3)),
        Change("own stream", own_stream=subset(data.draw, copies)),
        Change("detached", detached=np.arange(len(host))),
    ):
        b = replay_rules.check_replay(replay(deps, 1.0, host, ch), ch)
        assert b.ok, (ch.what, b)


def test_the_trace_replay_keeps_the_rules_on_every_shared_export(shared_traces):
    broken = {p.name: trace_broken(p) for p in sorted(shared_traces.glob("*.sqlite"))}
    assert len(broken) >= 20 and {k: v for k, v in broken.items() if v} == {}


def test_the_trace_replay_keeps_the_rules_on_the_projects_traces_and_the_ground_truth(h200_exports, scanned_recordings):
    """The H200 runs' conversions, every export of sample_traces (the synthetic demo runs, the public
    ones, the CPU runs) and the ground truth's exports."""
    ours = sorted((ROOT / "sample_traces").rglob("*.sqlite"))
    paths = [*h200_exports.values(), *ours, *(f / "trace.sqlite" for f in scanned_recordings.values())]
    broken = {str(p): trace_broken(p, (1.0, 0.5, 0.0)) for p in paths if p.is_file()}
    assert len(broken) >= 27 and {k: v for k, v in broken.items() if v} == {}


def test_a_rule_check_sees_an_overlap_and_a_short_stream():
    b = replay_rules.check(np.array([0, 0, 1]), np.array([0, 50, 0]), np.array([100, 150, 10]))
    assert b.rows.tolist() == [1] and b.excess.tolist() == [50] and b.short == {0: (200, 150)} and not b.ok
    allowed = replay_rules.check(np.array([0, 0]), np.array([0, 50]), np.array([100, 150]), allowed=np.array([0, 50]))
    assert allowed.ok


def test_a_rule_check_orders_each_stream_by_start_and_sees_one_nanosecond():
    """Found by mutation testing (docs/testing.md): rows given out of their start order are put in it
    before the previous op is taken; an overlap of 1 ns breaks rule 1; a stream that starts late is
    short by its own extent, not by its end."""
    unordered = replay_rules.check(np.array([0, 0]), np.array([50, 0]), np.array([150, 100]))
    assert unordered.rows.tolist() == [0] and unordered.excess.tolist() == [50]
    one_ns = replay_rules.check(np.array([0, 0]), np.array([0, 99]), np.array([100, 199]))
    assert one_ns.rows.tolist() == [1] and one_ns.excess.tolist() == [1] and not one_ns.ok
    late = replay_rules.check(np.array([0, 0]), np.array([1000, 1050]), np.array([1100, 1150]))
    assert late.short == {0: (200, 150)}


def test_a_conditional_is_one_op_of_its_costliest_branch_or_its_measured_span():
    text = """HloModule m, is_scheduled=true
%b0 (a: f32[4096,4096]) -> f32[4096,4096] {
  %a = f32[4096,4096]{1,0} parameter(0)
  ROOT %d = f32[4096,4096]{1,0} dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%b1 (a: f32[4096,4096]) -> f32[4096,4096] {
  %a.1 = f32[4096,4096]{1,0} parameter(0)
  ROOT %n = f32[4096,4096]{1,0} negate(%a.1)
}
ENTRY %e (p: s32[], x: f32[4096,4096]) -> f32[4096,4096] {
  %p = s32[] parameter(0)
  %x = f32[4096,4096]{1,0} parameter(1)
  ROOT %c = f32[4096,4096]{1,0} conditional(%p, %x, %x), branch_computations={%b0, %b1}
}
"""
    from profiler.predict import roofline
    from profiler.xla.targets import TARGETS

    sched = schedule.build(parse_text(text))
    dev = roofline.device_from_spec(TARGETS["h100"].spec_text())
    c = roofline.Costs(sched.module_ref, dev)
    dot = c.kernel_ns(sched.instructions["d"])
    assert dot > c.kernel_ns(sched.instructions["n"]) > 0
    # the roofline: the dot's branch (before: the conditional's own bytes, 60 us against the dot's 278)
    assert roofline.costs(sched, dev) == {"c": dot}
    # measured: a branch's thunks run as the conditional
    assert (sched.site("d"), sched.site("n"), sched.site("c")) == ("c", "c", "c")
