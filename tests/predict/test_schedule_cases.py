"""The schedule the simulator replays (``profiler.predict.schedule``), on small programs worked out by
hand: every field of every op (kind, dependencies, stream, pair, bytes, iteration, a region's body and
inputs and trips), the notes, the runs, which instruction runs where (``site``) and the program order
for command buffers.  Written from the mutation run of ``schedule.py`` (docs/testing.md): the replay's
tests check what a step costs, not how the schedule was put together."""

from __future__ import annotations

from unittest import mock

from profiler.predict import schedule
from profiler.xla.hlo import parse_text
from tests.helpers.hlo_programs import COND, SUM

T = "f32[8]{0}"  # 32 bytes
HOST = "f32[8]{0:S(5)}"

# a loop of two trips offloading a value of layer 2 on each, a call, send and recv, an all-gather wrapped in an
# async computation, a synchronous all-reduce, a copy-done of no copy-start, a buffer that runs nothing
LOOPED = f"""HloModule hand, is_scheduled=true

{SUM}

%gather (g: f32[8]) -> f32[16] {{
  %g = {T} parameter(0)
  ROOT %ag = f32[16]{{0}} all-gather(%g), dimensions={{0}}, replica_groups={{{{0,1}}}}
}}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %p = (s32[], {T}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %bx = {T} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %inc = s32[] add(%i, %one)
  %bk = {T} negate(%bx), metadata={{op_name="jit(train)/layers_2/mlp/neg"}}
  %cs = ({HOST}, {T}, u32[]) copy-start(%bk)
  %cd = {HOST} copy-done(%cs)
  ROOT %bt = (s32[], {T}) tuple(%inc, %bk)
}}

%cond (c: (s32[], f32[8])) -> pred[] {{
  %c = (s32[], {T}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(2)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}}

%fn (q: f32[8]) -> f32[8] {{
  %q = {T} parameter(0)
  ROOT %qk = {T} exponential(%q)
}}

ENTRY %main (x: f32[8]) -> f32[8] {{
  %x = {T} parameter(0)
  %zero = s32[] constant(0)
  %k = {T} negate(%x)
  %in = (s32[], {T}) tuple(%zero, %k)
  %w = (s32[], {T}) while(%in), condition=%cond, body=%body, backend_config={{"known_trip_count":{{"n":"2"}}}}
  %wx = {T} get-tuple-element(%w), index=1
  %call = {T} call(%wx), to_apply=%fn
  %tok = token[] after-all()
  %snd = ({T}, u32[], token[]) send(%call, %tok), channel_id=1
  %rcv = ({T}, u32[], token[]) recv(%tok), channel_id=2
  %sd = token[] send-done(%snd), channel_id=1
  %rd = ({T}, token[]) recv-done(%rcv), channel_id=2
  %rx = {T} get-tuple-element(%rd), index=0
  %ags = (({T}), f32[16]{{0}}) async-start(%rx), calls=%gather
  %ar = {T} all-reduce(%rx), replica_groups={{{{0,1}}}}, to_apply=%sum
  %agd = f32[16]{{0}} async-done(%ags)
  %stray = {T} copy-done(%ar)
  %buf = {T} custom-call(), custom_call_target="AllocateBuffer"
  ROOT %out = {T} add(%stray, %buf)
}}
"""

# not scheduled; a loop whose computations are both conditions and with no trip count; calls with
# two operands, with one operand for two parameters, and to a computation the module lacks; a
# synchronous copy to the host; an async computation that runs no collective, with an update between
# its start and done; a copy-start that stays on the device
EDGES = f"""HloModule edges

{COND}

%two (u: f32[8], v: f32[8]) -> f32[8] {{
  %u = {T} parameter(0)
  %v = {T} parameter(1)
  ROOT %s = {T} subtract(%u, %v)
}}

%neg (a: f32[8]) -> f32[8] {{
  %a = {T} parameter(0)
  ROOT %na = {T} negate(%a)
}}

%sum (a: f32[], b: f32[]) -> f32[] {{
  %sa = f32[] parameter(0)
  %sb = f32[] parameter(1)
  ROOT %sr = f32[] add(%sa, %sb)
}}

%reduce (r: f32[8]) -> f32[8] {{
  %r = {T} parameter(0)
  %rs = {T} all-reduce-start(%r), replica_groups={{{{0,1}}}}, to_apply=%sum
  ROOT %rd = {T} all-reduce-done(%rs)
}}

ENTRY %main (x: f32[8], y: f32[8]) -> f32[8] {{
  %x = {T} parameter(0)
  %y = {T} parameter(1)
  %zero = s32[] constant(0)
  %in = (s32[], {T}) tuple(%zero, %x)
  %w = (s32[], {T}) while(%in), condition=%cond, body=%cond
  %c2 = {T} call(%x, %y), to_apply=%two
  %c1 = {T} call(%x), to_apply=%two
  %gone = {T} call(%y, %x), to_apply=%missing
  %h = {HOST} copy(%c2)
  %as = (({T}), {T}, s32[]) async-start(%c1), calls=%neg
  %au = (({T}), {T}, s32[]) async-update(%as)
  %ad = {T} async-done(%au)
  %ds = ({T}, {T}, u32[]) copy-start(%ad)
  %dd = {T} copy-done(%ds)
  %ms = (({T}), {T}, s32[]) async-start(%x), calls=%nowhere
  %md = {T} async-done(%ms)
  %rrs = (({T}), {T}, s32[]) async-start(%y), calls=%reduce
  %rrd = {T} async-done(%rrs)
  ROOT %out = {T} add(%dd, %gone)
}}
"""

# a call that is the entry's first instruction, of a computation whose ROOT comes first; a call of
# two operands into three parameters; a loop of two trips whose body calls a computation without a
# ROOT and runs a loop of one trip; loops whose body the module lacks, or has no ROOT
NESTED = f"""HloModule nested, is_scheduled=true

%first () -> f32[8] {{
  ROOT %z = {T} constant({{1, 2, 3, 4, 5, 6, 7, 8}})
  %later = {T} negate(%z)
}}

%three (a: f32[8], b: f32[8], c: f32[8]) -> f32[8] {{
  %a3 = {T} parameter(0)
  %b3 = {T} parameter(1)
  %c3p = {T} parameter(2)
  ROOT %s3 = {T} add(%a3, %b3)
}}

%noroot (a: f32[8]) -> f32[8] {{
  %na = {T} parameter(0)
  %nr = {T} negate(%na)
}}

{COND}

%inner (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %ip = (s32[], {T}) parameter(0)
  ROOT %ik = (s32[], {T}) negate(%ip)
}}

%outer (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %op = (s32[], {T}) parameter(0)
  %ox = {T} get-tuple-element(%op), index=1
  %oc = {T} call(%ox), to_apply=%noroot
  %iw = (s32[], {T}) while(%op), condition=%cond, body=%inner, backend_config={{"known_trip_count":{{"n":"1"}}}}
  ROOT %ot = (s32[], {T}) tuple(%iw)
}}

ENTRY %main (x: f32[8], y: f32[8]) -> f32[8] {{
  %c0 = {T} call(), to_apply=%first
  %x = {T} parameter(0)
  %y = {T} parameter(1)
  %c3 = {T} call(%x, %y), to_apply=%three
  %zero = s32[] constant(0)
  %in = (s32[], {T}) tuple(%zero, %c0)
  %ow = (s32[], {T}) while(%in), condition=%cond, body=%outer, backend_config={{"known_trip_count":{{"n":"2"}}}}
  %mw = (s32[], {T}) while(%in), condition=%cond, body=%nobody
  %nw = (s32[], {T}) while(%in), condition=%cond, body=%noroot
  ROOT %out = {T} add(%c3, %c0)
}}
"""

# a loop of two trips whose body runs one op of each kind: a synchronous copy to the host, an async
# computation, a collective's start and done, a synchronous collective, a done of no start, and an
# async pair known only by its opcodes' -start and -done
KINDS = f"""HloModule kinds, is_scheduled=true

{SUM}

%neg (n: f32[8]) -> f32[8] {{
  %n = {T} parameter(0)
  ROOT %nn = {T} negate(%n)
}}

{COND}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %kp = (s32[], {T}) parameter(0)
  %ki = s32[] get-tuple-element(%kp), index=0
  %kx = {T} get-tuple-element(%kp), index=1
  %kh = {HOST} copy(%kx)
  %ks = (({T}), {T}, s32[]) async-start(%kx), calls=%neg
  %kd = {T} async-done(%ks)
  %krs = {T} all-reduce-start(%kx), replica_groups={{{{0,1}}}}, to_apply=%sum
  %krd = {T} all-reduce-done(%krs)
  %kar = {T} all-reduce(%kd), replica_groups={{{{0,1}}}}, to_apply=%sum
  %kst = {T} copy-done(%kar)
  %kfs = (({T}), {T}) fusion-start(%kx), calls=%neg
  %kfd = {T} fusion-done(%kfs)
  ROOT %kt = (s32[], {T}) tuple(%ki, %kst)
}}

ENTRY %main (x: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %x = (s32[], {T}) parameter(0)
  ROOT %w = (s32[], {T}) while(%x), condition=%cond, body=%body, backend_config={{"known_trip_count":{{"n":"2"}}}}
}}
"""

FIELDS = ("index", "name", "kind", "deps", "stream", "pair", "bytes", "iteration", "body", "inputs", "trips")


def rows(sched: schedule.Schedule) -> list[tuple]:
    return [tuple(getattr(o, f) for f in FIELDS) for o in sched.ops]


def trip(first: int, it: int) -> list[tuple]:
    """One trip of LOOPED's body, its ops from index *first*, its parameter from op *first* - 1."""
    f = first
    return [
        (f, "p", "free", (f - 1,), "compute", None, 0, it, None, (), None),
        (f + 1, "i", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 2, "bx", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 3, "one", "free", (), "compute", None, 0, it, None, (), None),
        (f + 4, "inc", "compute", (f + 1, f + 3), "compute", None, 0, it, None, (), None),
        (f + 5, "bk", "compute", (f + 2,), "compute", None, 0, it, None, (), None),
        (f + 6, "cs", "start", (f + 5,), "d2h", None, 32, it, None, (), None),  # the plan's movement
        (f + 7, "cd", "done", (f + 6,), "compute", f + 6, 0, it, None, (), None),
        (f + 8, "bt", "free", (f + 4, f + 5), "compute", None, 0, it, None, (), None),
    ]


def test_every_op_of_a_loop_a_call_point_to_point_and_collectives():
    """The loop's body twice (trips 0 and 1, the second's parameter the first's root), then the loop
    as a region over ops 4 to 21 with the loop's input; the call's body then its region; send and
    recv start on the collective stream (32 bytes: the f32[8] sent or received; a token and the u32
    context count nothing) and their dones wait on them; the async all-gather starts on the
    collective stream with its result's 64 bytes; the all-reduce is synchronous (32 bytes); a
    copy-done whose operand is no start, and the AllocateBuffer, run nothing."""
    sched = schedule.build(parse_text(LOOPED))
    assert rows(sched) == [
        (0, "x", "free", (), "compute", None, 0, None, None, (), None),  # the entry has no arguments
        (1, "zero", "free", (), "compute", None, 0, None, None, (), None),
        (2, "k", "compute", (0,), "compute", None, 0, None, None, (), None),
        (3, "in", "free", (1, 2), "compute", None, 0, None, None, (), None),
        *trip(4, 0),
        *trip(13, 1),
        (22, "w", "region", (21,), "compute", None, 0, None, (4, 22), (3,), 2),
        (23, "wx", "free", (22,), "compute", None, 0, None, None, (), None),
        (24, "q", "free", (23,), "compute", None, 0, None, None, (), None),
        (25, "qk", "compute", (24,), "compute", None, 0, None, None, (), None),
        (26, "call", "region", (25,), "compute", None, 0, None, (24, 26), (23,), None),
        (27, "tok", "free", (), "compute", None, 0, None, None, (), None),
        (28, "snd", "start", (26, 27), "collective", None, 32, None, None, (), None),
        (29, "rcv", "start", (27,), "collective", None, 32, None, None, (), None),
        (30, "sd", "done", (28,), "compute", 28, 0, None, None, (), None),
        (31, "rd", "done", (29,), "compute", 29, 0, None, None, (), None),
        (32, "rx", "free", (31,), "compute", None, 0, None, None, (), None),
        (33, "ags", "start", (32,), "collective", None, 64, None, None, (), None),
        (34, "ar", "collective", (32,), "compute", None, 32, None, None, (), None),
        (35, "agd", "done", (33,), "compute", 33, 0, None, None, (), None),
        (36, "stray", "free", (34,), "compute", None, 0, None, None, (), None),
        (37, "buf", "free", (), "compute", None, 0, None, None, (), None),
        (38, "out", "compute", (36, 37), "compute", None, 0, None, None, (), None),
    ]
    opcodes = [(o.opcode, o.computation) for o in sched.ops[26:29]]
    assert opcodes == [("call", "main"), ("after-all", "main"), ("send", "main")]
    assert {o.computation for o in sched.ops[4:22]} == {"body"} and sched.ops[24].computation == "fn"
    assert sched.module == "hand" and sched.notes == []
    assert sched.expanded == {"main", "body", "fn"}  # not the condition, the async computation, the reduction
    assert sched.runs == {n: 2 for n in ("p", "i", "bx", "one", "inc", "bk", "cs", "cd", "bt")} | {
        o.name: 1 for o in sched.ops if o.computation != "body"}  # fmt: skip
    assert sched.names() == set(sched.runs)
    assert set(sched.instructions) == {i.name for i in parse_text(LOOPED).instructions()}
    assert sched.layers == {"cs": "layers_2"}  # from the offloaded value's producer
    assert (
        sched.ops[9].op_name == sched.ops[18].op_name == "jit(train)/layers_2/mlp/neg" and sched.ops[10].op_name is None
    )
    assert [(m["instruction"], m["direction"], m["bytes"]) for m in sched.plan["movements"]] == [("cs", "d2h", 32)]
    # the op that runs each instruction: itself, or up the callers to an op
    assert [sched.site(n) for n in ("qk", "cs", "ag", "g", "lt", "n", "a", "nope")] == [
        "qk", "cs", "ags", "ags", "w", "w", "ar", None]  # fmt: skip


def test_program_order_is_the_ops_outside_loops():
    """Names of every op in order; each instruction's first op outside a loop (a body's ops have
    none); the ops that launch a kernel outside loops (compute kinds only: not the loop's kernels,
    nor starts, collectives or regions); every instruction of the module."""
    sched = schedule.build(parse_text(LOOPED))
    order = schedule.program_order(sched)
    assert order.names == [o.name for o in sched.ops] and len(order.names) == 39
    outside = [o for o in sched.ops if not 4 <= o.index < 22]
    assert order.position == {o.name: o.index for o in outside}
    assert order.launchers.tolist() == [2, 25, 38] and order.launchers.dtype.name == "int64"
    assert order.instructions == frozenset(sched.instructions)


def test_the_edges_of_loops_calls_and_async_work():
    """The loop has no body (both its computations are conditions) and no trip count: a note, one
    trip replayed, a region of no ops over its input; a call's parameters take its operands in order,
    and a call of one operand gives it to every parameter; a call of a computation the module lacks
    is a note and an empty region over its operands; a synchronous copy to the host is a copy on the d2h stream; an
    async computation without a collective, one the module lacks, and a copy-start that stays on the
    device, run on the async stream (no bytes); an async computation that starts a collective inside
    runs on the collective stream; a done waits on its start through an async-update."""
    sched = schedule.build(parse_text(EDGES))
    assert rows(sched) == [
        (0, "x", "free", (), "compute", None, 0, None, None, (), None),
        (1, "y", "free", (), "compute", None, 0, None, None, (), None),
        (2, "zero", "free", (), "compute", None, 0, None, None, (), None),
        (3, "in", "free", (2, 0), "compute", None, 0, None, None, (), None),
        (4, "w", "region", (3,), "compute", None, 0, None, (4, 4), (3,), 1),
        (5, "u", "free", (0,), "compute", None, 0, None, None, (), None),
        (6, "v", "free", (1,), "compute", None, 0, None, None, (), None),
        (7, "s", "compute", (5, 6), "compute", None, 0, None, None, (), None),
        (8, "c2", "region", (7,), "compute", None, 0, None, (5, 8), (0, 1), None),
        (9, "u", "free", (0,), "compute", None, 0, None, None, (), None),
        (10, "v", "free", (0,), "compute", None, 0, None, None, (), None),
        (11, "s", "compute", (9, 10), "compute", None, 0, None, None, (), None),
        (12, "c1", "region", (11,), "compute", None, 0, None, (9, 12), (0,), None),
        (13, "gone", "region", (1, 0), "compute", None, 0, None, (13, 13), (1, 0), None),
        (14, "h", "copy", (8,), "d2h", None, 32, None, None, (), None),
        (15, "as", "start", (12,), "async", None, 0, None, None, (), None),
        (16, "au", "free", (15,), "compute", None, 0, None, None, (), None),
        (17, "ad", "done", (16,), "compute", 15, 0, None, None, (), None),
        (18, "ds", "start", (17,), "async", None, 0, None, None, (), None),
        (19, "dd", "done", (18,), "compute", 18, 0, None, None, (), None),
        (20, "ms", "start", (0,), "async", None, 0, None, None, (), None),
        (21, "md", "done", (20,), "compute", 20, 0, None, None, (), None),
        (22, "rrs", "start", (1,), "collective", None, 32, None, None, (), None),
        (23, "rrd", "done", (22,), "compute", 22, 0, None, None, (), None),
        (24, "out", "compute", (19, 13), "compute", None, 0, None, None, (), None),
    ]
    assert sched.notes == [
        "the module is not scheduled (is_scheduled=true missing): its text order is replayed",
        "while loop w has no known trip count: its body is replayed once",
        "computation missing is not in the module",
    ]
    assert sched.expanded == {"main", "two"}
    assert sched.runs["u"] == 2 and sched.runs["w"] == 1
    assert sched.site("na") == "as" and sched.site("lt") == "w" and sched.site("rs") == "rrs"


def test_a_schedule_longer_than_the_limit_is_cut_with_one_note():
    """At 5 ops: x, zero, k, in and the loop's first parameter; the next op is not emitted, the
    note is written once, and nothing after it (not the rest of the trip, the second trip, the
    loop's region or the entry's other instructions) is added."""
    with mock.patch.object(schedule, "MAX_OPS", 5):
        sched = schedule.build(parse_text(LOOPED))
    assert [o.name for o in sched.ops] == ["x", "zero", "k", "in", "p"]
    assert sched.notes == ["the unrolled schedule is longer than 5 operations: cut there"]
    with mock.patch.object(schedule, "MAX_OPS", 1):  # cut at an op of no operand (the constant)
        sched = schedule.build(parse_text(LOOPED))
    assert [o.name for o in sched.ops] == ["x"] and len(sched.notes) == 1


def test_no_entry_is_a_note_and_nothing_to_replay():
    text = LOOPED.replace("ENTRY %main", "%main")
    sched = schedule.build(parse_text(text))
    assert sched.ops == [] and sched.expanded == set()
    assert sched.notes[-1] == "no ENTRY computation: nothing to replay"


def outer_trip(f: int, it: int) -> list[tuple]:
    """One trip of NESTED's outer loop from op *f*, its parameter from op *f* - 1: every op of the
    trip, those of the call and the inner loop too, carries the outer loop's trip."""
    return [
        (f, "op", "free", (f - 1,), "compute", None, 0, it, None, (), None),
        (f + 1, "ox", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 2, "na", "free", (f + 1,), "compute", None, 0, it, None, (), None),
        (f + 3, "nr", "compute", (f + 2,), "compute", None, 0, it, None, (), None),
        (f + 4, "oc", "region", (f + 3,), "compute", None, 0, it, (f + 2, f + 4), (f + 1,), None),
        (f + 5, "ip", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 6, "ik", "compute", (f + 5,), "compute", None, 0, it, None, (), None),
        (f + 7, "iw", "region", (f + 6,), "compute", None, 0, it, (f + 5, f + 7), (f,), 1),
        (f + 8, "ot", "free", (f + 7,), "compute", None, 0, it, None, (), None),
    ]


def test_roots_parameters_nested_loops_and_missing_bodies():
    """A computation's root is its ROOT wherever it stands (``z``, op 0, not ``later``), else its last
    op (``nr``); a parameter past the call's operands has none; a call and a loop inside a loop's
    trip carry that trip (the inner loop's own trip is 0 on both); a loop whose body the module
    lacks is two notes and an empty region over its input; one whose body has no ROOT is replayed
    once from its input, its region depending on the body's last op."""
    sched = schedule.build(parse_text(NESTED))
    assert rows(sched) == [
        (0, "z", "free", (), "compute", None, 0, None, None, (), None),
        (1, "later", "compute", (0,), "compute", None, 0, None, None, (), None),
        (2, "c0", "region", (0,), "compute", None, 0, None, (0, 2), (), None),
        (3, "x", "free", (), "compute", None, 0, None, None, (), None),
        (4, "y", "free", (), "compute", None, 0, None, None, (), None),
        (5, "a3", "free", (3,), "compute", None, 0, None, None, (), None),
        (6, "b3", "free", (4,), "compute", None, 0, None, None, (), None),
        (7, "c3p", "free", (), "compute", None, 0, None, None, (), None),
        (8, "s3", "compute", (5, 6), "compute", None, 0, None, None, (), None),
        (9, "c3", "region", (8,), "compute", None, 0, None, (5, 9), (3, 4), None),
        (10, "zero", "free", (), "compute", None, 0, None, None, (), None),
        (11, "in", "free", (10, 2), "compute", None, 0, None, None, (), None),
        *outer_trip(12, 0),
        *outer_trip(21, 1),
        (30, "ow", "region", (29,), "compute", None, 0, None, (12, 30), (11,), 2),
        (31, "mw", "region", (11,), "compute", None, 0, None, (31, 31), (11,), 1),
        (32, "na", "free", (11,), "compute", None, 0, 0, None, (), None),
        (33, "nr", "compute", (32,), "compute", None, 0, 0, None, (), None),
        (34, "nw", "region", (33,), "compute", None, 0, None, (32, 34), (11,), 1),
        (35, "out", "compute", (9, 2), "compute", None, 0, None, None, (), None),
    ]
    assert sched.notes == [
        "while loop mw has no known trip count: its body is replayed once",
        "computation nobody is not in the module",
        "while loop nw has no known trip count: its body is replayed once",
    ]
    assert sched.expanded == {"main", "first", "three", "outer", "noroot", "inner"}


def test_program_order_without_a_kernel_outside_loops_is_an_empty_int64_array():
    order = schedule.program_order(schedule.build(parse_text(LOOPED.replace("ENTRY %main", "%main"))))
    assert (
        order.names == []
        and order.position == {}
        and order.instructions == frozenset(i.name for i in parse_text(LOOPED).instructions())
    )
    assert order.launchers.shape == (0,) and order.launchers.dtype.name == "int64"


def kinds_trip(f: int, it: int) -> list[tuple]:
    return [
        (f, "kp", "free", (f - 1,), "compute", None, 0, it, None, (), None),
        (f + 1, "ki", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 2, "kx", "free", (f,), "compute", None, 0, it, None, (), None),
        (f + 3, "kh", "copy", (f + 2,), "d2h", None, 32, it, None, (), None),
        (f + 4, "ks", "start", (f + 2,), "async", None, 0, it, None, (), None),
        (f + 5, "kd", "done", (f + 4,), "compute", f + 4, 0, it, None, (), None),
        (f + 6, "krs", "start", (f + 2,), "collective", None, 32, it, None, (), None),
        (f + 7, "krd", "done", (f + 6,), "compute", f + 6, 0, it, None, (), None),
        (f + 8, "kar", "collective", (f + 5,), "compute", None, 32, it, None, (), None),
        (f + 9, "kst", "free", (f + 8,), "compute", None, 0, it, None, (), None),
        (f + 10, "kfs", "start", (f + 2,), "async", None, 0, it, None, (), None),
        (f + 11, "kfd", "done", (f + 10,), "compute", f + 10, 0, it, None, (), None),
        (f + 12, "kt", "free", (f + 1, f + 9), "compute", None, 0, it, None, (), None),
    ]


def test_each_kind_of_op_inside_a_loop_carries_its_trip():
    """Every kind of op the schedule knows, run on each of the loop's two trips: a copy to the host
    (the plan's movement, 32 bytes), async starts (a computation without a collective, and one known
    by its opcode ending in -start) and their dones, a collective's start (32 bytes), a synchronous
    collective, and a done of no start (it runs nothing)."""
    sched = schedule.build(parse_text(KINDS))
    assert rows(sched) == [
        (0, "x", "free", (), "compute", None, 0, None, None, (), None),
        *kinds_trip(1, 0),
        *kinds_trip(14, 1),
        (27, "w", "region", (26,), "compute", None, 0, None, (1, 27), (0,), 2),
    ]
    assert [(m["instruction"], m["executions_per_step"]) for m in sched.plan["movements"]] == [("kh", 2)]


PAYLOADS = (
    f"HloModule payloads, is_scheduled=true\n\n{SUM}\n"
    + """
%small (s: f16[1]) -> f16[1] {
  %s = f16[1]{0} parameter(0)
  ROOT %sar = f16[1]{0} all-reduce(%s), replica_groups={{0,1}}, to_apply=%hsum
}

%hsum (a: f16[], b: f16[]) -> f16[] {
  %ha = f16[] parameter(0)
  %hb = f16[] parameter(1)
  ROOT %hr = f16[] add(%ha, %hb)
}

ENTRY %main (p: f32[16], h: f16[1]) -> f32[8] {
  %p = f32[16]{0} parameter(0)
  %h = f16[1]{0} parameter(1)
  %rs = f32[8]{0} reduce-scatter(%p), dimensions={0}, replica_groups={{0,1}}, to_apply=%sum
  %ag = f32[32]{0} all-gather(%p), dimensions={0}, replica_groups={{0,1}}
  %cps = (f16[1]{0}, f16[1]{0}, u32[], u32[]) collective-permute-start(%h), source_target_pairs={{0,1}}
  %cpd = f16[1]{0} collective-permute-done(%cps)
  %ars = ((f16[1]{0}), f16[1]{0}, s32[]) async-start(%h), calls=%small
  %ard = f16[1]{0} async-done(%ars)
  ROOT %out = f32[8]{0} add(%rs, %rs)
}
"""
)


def test_a_collectives_bytes_are_the_larger_of_its_operands_and_its_result():
    """A reduce-scatter sends its operand (64 bytes, not its 32-byte result), an all-gather its result
    (128, not 64); a collective-permute of 2 bytes is 2, its start's two u32 contexts left out, and so
    is an async wrapper's s32 context."""
    sched = schedule.build(parse_text(PAYLOADS))
    assert [(o.name, o.kind, o.stream, o.bytes) for o in sched.ops if o.kind in ("collective", "start")] == [
        ("rs", "collective", "compute", 64),
        ("ag", "collective", "compute", 128),
        ("cps", "start", "collective", 2),
        ("ars", "start", "collective", 2),
    ]
