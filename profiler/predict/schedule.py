"""The scheduled HLO as the simulator replays it: one ordered list of operations per step.

The entry computation's instructions in their scheduled order, with the bodies
of ``while`` loops repeated ``known_trip_count`` times (once, with a note, when
the count is unknown) and ``call``ed computations (XLA's command buffers among
them) expanded in place.  A fusion, custom call, conditional or async
computation stays one operation (one kernel or one async unit).  Each operation
knows the operations its operands come from, and an async ``*-done`` the
``*-start`` it waits for.

Kinds: ``compute`` (a kernel on the compute stream), ``free`` (no kernel:
parameters, bitcasts, tuples, ...), ``start`` / ``done`` (async pairs; the
start's ``stream`` is ``d2h``, ``h2d``, ``collective`` or ``async``), ``copy``
(a synchronous host transfer on the compute stream: a plain ``copy`` between
memory spaces or a fusion that slices host memory), ``collective`` (a
synchronous collective), ``region`` (a ``while`` or ``call``: emitted after its
body's ops, ``body`` = their indices, ``inputs`` = the ops of its operands; the
simulator replays either the body or the region as one op, see
``profiler.predict.simulate``).  Host transfers are found by
``profiler.xla.plan`` (the movements' sites), so the simulator and the plan
agree on what moves.

``Schedule.site(name)`` is the op that runs an instruction of the module (an
instruction inside a fusion, a loop's condition, an async computation or a
conditional's branch runs as the op around it), and ``Schedule.runs`` how many
times each op runs per step (a loop body's: its trips): what a measured time per
step is divided by to give a time per execution.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from profiler.analysis.instruction_times import ProgramOrder
from profiler.xla.hlo import Instruction, Module
from profiler.xla.plan import offload_plan

FREE = {
    "parameter",
    "constant",
    "bitcast",
    "get-tuple-element",
    "tuple",
    "after-all",
    "opt-barrier",
    "add-dependency",
    "domain",
    "async-update",
    "copy-done",  # replaced by kind "done" below; listed so a stray one costs nothing
}
COLLECTIVES = {
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
}
STARTS = {
    "copy-start",
    "async-start",
    "send",
    "recv",
    *(f"{c}-start" for c in COLLECTIVES),
}
DONES = {
    "copy-done",
    "async-done",
    "send-done",
    "recv-done",
    *(f"{c}-done" for c in COLLECTIVES),
}
# custom calls that run no kernel: a TPU's AllocateBuffer (an uninitialized buffer, the host side of
# an offload among them)
# and ConcatBitcast (a concatenation made by bitcasting buffers laid out back to back: no data moves)
FREE_TARGETS = {"AllocateBuffer", "ConcatBitcast"}
MAX_OPS = 2_000_000  # an unrolled schedule longer than this is cut (with a note)


@dataclass
class Op:
    """One operation of the unrolled schedule (``index``: its place in ``Schedule.ops``)."""

    index: int
    name: str  # the HLO instruction (the name XLA's thunk ranges carry as hlo_op)
    opcode: str
    computation: str
    kind: str  # compute, free, start, done, copy, collective
    deps: tuple[int, ...]
    stream: str = "compute"  # where a start's work runs: d2h, h2d, collective, async
    pair: int | None = None  # a done's start
    bytes: int = 0  # bytes moved over the host link (copies) or the interconnect (collectives)
    op_name: str | None = None
    iteration: int | None = None  # inside a while loop: which trip
    body: tuple[int, int] | None = None  # a region: its body's ops, [lo, hi) of Schedule.ops (hi = its own index)
    inputs: tuple[int, ...] = ()  # a region: the ops of its operands (``deps`` is its body's root)
    trips: int | None = None  # a while region: the trips replayed


@dataclass
class Schedule:
    module: str
    ops: list[Op]
    instructions: dict[str, Instruction]  # by name, over the whole module (for costs)
    module_ref: Module
    plan: dict = field(default_factory=dict)  # profiler.xla.plan.offload_plan of the module
    layers: dict[str, str | None] = field(default_factory=dict)  # movement site -> layer
    notes: list[str] = field(default_factory=list)
    expanded: set[str] = field(default_factory=set)  # computations whose instructions are ops

    def names(self) -> set[str]:
        """Every instruction name that runs (keys a cost map may have)."""
        return set(self.runs)

    @cached_property
    def runs(self) -> dict[str, int]:
        """How many times each op runs per step (by name): 1 in the entry, a loop body's trips."""
        return dict(Counter(o.name for o in self.ops))

    @cached_property
    def _callers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for ins in self.instructions.values():
            for c in ins.called:
                out.setdefault(c, ins.name)
        return out

    def site(self, name: str) -> str | None:
        """The op that runs instruction *name*: itself where its computation's instructions are ops,
        else the instruction that calls its computation, up to one that is (None: not in the module)."""
        ins = self.instructions.get(name)
        for _ in range(16):
            if ins is None:
                return None
            if ins.computation in self.expanded:
                return ins.name
            ins = self.instructions.get(self._callers.get(ins.computation, ""))
        return None


def program_order(sched: Schedule) -> ProgramOrder:
    """The schedule's ops outside loops in order, for ``instruction_times.spans_of``: which instruction
    ran the kernels of a command buffer (``launchers``: the ops that launch GPU work)."""
    names = [o.name for o in sched.ops]
    position: dict[str, int] = {}
    for o in sched.ops:
        if o.iteration is None:
            position.setdefault(o.name, o.index)
    launchers = np.array([o.index for o in sched.ops if o.kind == "compute" and o.iteration is None], dtype=np.int64)
    return ProgramOrder(names, position, launchers, frozenset(sched.instructions))


def _runs_collective(module: Module, ins: Instruction) -> bool:
    """Whether an async start runs a collective: itself, or inside the computation it wraps."""
    if ins.opcode.removesuffix("-start") in COLLECTIVES or ins.opcode in ("send", "recv"):
        return True
    for callee in ins.called:
        comp = module.computations.get(callee)
        if comp and any(sub.opcode.removesuffix("-start") in COLLECTIVES for sub in comp.instructions):
            return True
    return False


class _Builder:
    def __init__(self, module: Module) -> None:
        self.module = module
        self.ops: list[Op] = []
        self.notes: list[str] = []
        self.plan = offload_plan(module)
        self.moves: dict[str, dict] = {}
        for m in self.plan["movements"]:
            self.moves.setdefault(m["instruction"], m)
        self.cut = False
        self.expanded: set[str] = set()

    def emit(self, ins: Instruction, kind: str, deps: list[int], iteration: int | None, **kw) -> int:
        if len(self.ops) >= MAX_OPS:
            if not self.cut:
                self.notes.append(f"the unrolled schedule is longer than {MAX_OPS:,} operations: cut there")
                self.cut = True
            return deps[0] if deps else -1
        op = Op(len(self.ops), ins.name, ins.opcode, ins.computation, kind, tuple(d for d in deps if d >= 0),
                op_name=ins.op_name, iteration=iteration, **kw)  # fmt: skip
        self.ops.append(op)
        return op.index

    def computation(self, name: str, args: list[int], iteration: int | None) -> int:
        """Emit one run of computation *name* whose parameters come from *args*; returns its root's op."""
        comp = self.module.computations.get(name)
        if comp is None:
            self.notes.append(f"computation {name} is not in the module")
            return args[0] if args else -1
        self.expanded.add(name)
        at: dict[str, int] = {}
        root = -1
        for ins in comp.instructions:
            if self.cut:
                break
            deps = [at[o] for o in ins.operands if o in at]
            if ins.opcode == "parameter":
                k = ins.parameter_number or 0
                src = [args[k]] if k < len(args) else (args[:1] if len(args) == 1 else [])
                at[ins.name] = self.emit(ins, "free", src, iteration)
            elif ins.opcode == "while":
                at[ins.name] = self.loop(ins, deps, iteration)
            elif ins.opcode == "call" and ins.called:
                lo = len(self.ops)
                root = self.computation(ins.called[0], deps, iteration)
                at[ins.name] = self.region(ins, lo, root, deps, iteration, None)
            else:
                at[ins.name] = self.one(ins, deps, iteration)
            if ins.is_root:
                root = at[ins.name]
        return root if root >= 0 else (max(at.values()) if at else -1)

    def loop(self, ins: Instruction, deps: list[int], iteration: int | None) -> int:
        # the body is the called computation whose root is not the condition's pred[]; the
        # condition (a compare) is not replayed
        body = next((c for c in ins.called if not self.is_condition(c)), None)
        trips = ins.trip_count
        if trips is None:
            self.notes.append(f"while loop {ins.name} has no known trip count: its body is replayed once")
            trips = 1
        carried = deps[:1]
        lo = len(self.ops)
        for k in range(trips):
            if body is None or self.cut:
                break
            carried = [self.computation(body, carried, k if iteration is None else iteration)]
        return self.region(ins, lo, carried[0] if carried else -1, deps, iteration, trips)

    def region(self, ins: Instruction, lo: int, root: int, deps: list[int], iteration: int | None,
               trips: int | None) -> int:  # fmt: skip
        """The op of a while or call whose body's ops are ``ops[lo:]`` (emitted after them)."""
        inputs = tuple(d for d in deps if d >= 0)
        body_root = [root] if lo <= root < len(self.ops) else []
        hi = len(self.ops)
        return self.emit(ins, "region", body_root or list(inputs), iteration, body=(lo, hi), inputs=inputs,
                         trips=trips)  # fmt: skip

    def is_condition(self, name: str) -> bool:
        comp = self.module.computations.get(name)
        root = next((i for i in comp.instructions if i.is_root), None) if comp else None
        return root is not None and root.shape.dtype == "pred" and not root.shape.dims

    def one(self, ins: Instruction, deps: list[int], iteration: int | None) -> int:
        op = ins.opcode
        move = self.moves.get(ins.name)
        if op in DONES or op.endswith("-done"):  # also fusion-done and other async wrappers
            start = deps[0] if deps else None
            while start is not None and self.ops[start].kind == "free" and self.ops[start].opcode == "async-update":
                start = self.ops[start].deps[0] if self.ops[start].deps else None
            if start is None or self.ops[start].kind != "start":
                return self.emit(ins, "free", deps, iteration)
            return self.emit(ins, "done", deps, iteration, pair=start)
        if op in STARTS or op.endswith("-start"):
            if move is not None:
                return self.emit(ins, "start", deps, iteration, stream=move["direction"], bytes=move["bytes"])
            if _runs_collective(self.module, ins):
                return self.emit(ins, "start", deps, iteration, stream="collective", bytes=self.payload(ins))
            return self.emit(ins, "start", deps, iteration, stream="async")
        if move is not None:
            return self.emit(ins, "copy", deps, iteration, stream=move["direction"], bytes=move["bytes"])
        if op in COLLECTIVES:
            return self.emit(ins, "collective", deps, iteration, bytes=self.payload(ins))
        if op in FREE or (op == "custom-call" and ins.custom_call_target in FREE_TARGETS):
            return self.emit(ins, "free", deps, iteration)
        return self.emit(ins, "compute", deps, iteration)

    def payload(self, ins: Instruction) -> int:
        """Bytes a collective sends: the larger of its operands' and its result's arrays (an
        all-gather's result, an all-reduce's operand), leaving out the u32 context of async starts."""
        comp = self.module.computations.get(ins.computation)
        names = {i.name: i for i in comp.instructions} if comp else {}
        into = sum(names[o].shape.bytes for o in ins.operands if o in names)
        out = [a.bytes for a in ins.shape.arrays() if a.dtype not in ("u32", "s32") or len(a.dims)]
        return max([into, *out]) if out else into


def build(module: Module) -> Schedule:
    """The unrolled schedule of *module*'s entry computation (see the module docstring)."""
    from profiler.analysis.offload_plan import label

    b = _Builder(module)
    if not module.scheduled:
        b.notes.append("the module is not scheduled (is_scheduled=true missing): its text order is replayed")
    if module.entry is None:
        b.notes.append("no ENTRY computation: nothing to replay")
    else:
        b.computation(module.entry, [], None)
    labelled = label(b.plan)
    assert labelled is not None  # label gives None for no plan only, and offload_plan always makes one
    layers = {m["instruction"]: m.get("layer") for m in labelled["movements"]}
    return Schedule(
        module=module.name,
        ops=b.ops,
        instructions={i.name: i for i in module.instructions()},
        module_ref=module,
        plan=b.plan,
        layers=layers,
        notes=[*module.notes, *b.notes],
        expanded=b.expanded,
    )
