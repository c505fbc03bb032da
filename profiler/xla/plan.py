"""The compiler's host-offload plan, read from an optimized HLO module.

What XLA decided (see ``../shared/hlo/README.md`` for the syntax):

- *host buffers*: values in memory space ``S(5)``; those that take new host
  memory are the destinations of device-to-host copies, ``AllocateBuffer``
  custom calls and entry parameters placed in host memory;
- *movements*: ``copy-start`` (the tuple's first element in ``S(5)``: device to
  host; its second: host to device), plain ``copy`` between the spaces,
  ``dynamic-update-slice`` into a host buffer (device to host, the update's
  bytes) and ``dynamic-slice`` out of one (host to device, the slice's bytes),
  also inside async wrappers and fusions, where the movement is counted once, at
  the instruction of the scheduled computation that runs it (the one a GPU
  thunk is named after);
- how often each runs per step: once, or the trip counts of the while loops
  around it (``known_trip_count``).

Each movement carries the ``op_name`` paths that say whose data it moves
(``layer_evidence``: the host buffer's users, which XLA tags with the
checkpointed layer, then the data's producer; ``activation_evidence``: the
producer first).  Turning paths into layer and activation names is left to the
analysis, with the attribution's own conventions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from profiler.xla.hlo import Instruction, Module

HOST_OFFLOAD_TARGETS = ("MoveToHost", "MoveToDevice", "annotate_device_placement")
PASS_THROUGH = {"bitcast", "get-tuple-element", "tuple", "copy-done", "async-done", "reshape", "transpose"}


def _host_bytes(ins: Instruction) -> int:
    return sum(a.bytes for a in ins.shape.arrays() if a.on_host)


def _on_host(ins: Instruction | None) -> bool | None:
    if ins is None:
        return None
    arrays = ins.shape.arrays()
    return bool(arrays) and all(a.on_host for a in arrays)


class _Graph:
    """Name lookups, users and callers over a whole module."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.by_comp: dict[str, dict[str, Instruction]] = {
            c.name: {i.name: i for i in c.instructions} for c in module.computations.values()
        }
        self.users: dict[tuple[str, str], list[Instruction]] = defaultdict(list)
        self.callers: dict[str, list[Instruction]] = defaultdict(list)
        for c in module.computations.values():
            for i in c.instructions:
                for o in i.operands:
                    self.users[(c.name, o)].append(i)
                for callee in i.called:
                    self.callers[callee].append(i)

    def get(self, comp: str, name: str) -> Instruction | None:
        return self.by_comp.get(comp, {}).get(name)

    def operand(self, ins: Instruction, k: int) -> Instruction | None:
        return self.get(ins.computation, ins.operands[k]) if k < len(ins.operands) else None

    def users_of(self, ins: Instruction) -> list[Instruction]:
        return self.users.get((ins.computation, ins.name), [])

    def site(self, ins: Instruction) -> tuple[Instruction, int | None, list[str]]:
        """The instruction of a scheduled computation that runs *ins* (itself, or the fusion /
        async-start / call around it), its executions per step (while-loop trip counts
        multiplied; None when one is unknown), and notes."""
        notes: list[str] = []
        runs: int | None = 1
        site, comp, seen = ins, ins.computation, set()
        while comp not in seen:
            seen.add(comp)
            callers = [c for c in self.callers.get(comp, []) if c.opcode not in ("async-done", "async-update")]
            if not callers:
                break
            if len(callers) > 1:
                notes.append(f"computation {comp} is called from {len(callers)} places; counted once")
            caller = callers[0]
            if caller.opcode == "while":
                if caller.trip_count is None:
                    runs = None
                    notes.append(f"while loop {caller.name} has no known trip count")
                elif runs is not None:
                    runs *= caller.trip_count
            elif site.computation == comp and caller.opcode != "while":
                site = caller
            comp = caller.computation
        return site, runs, notes

    def top(self, ins: Instruction) -> Instruction:
        """The instruction of the entry computation that runs *ins* (itself, or the while loop, call or
        fusion around it): what a trace names when it times the loop as one range."""
        seen: set[str] = set()
        while ins.computation != self.module.entry and ins.computation not in seen:
            seen.add(ins.computation)
            callers = self.callers.get(ins.computation, [])
            callers = [c for c in callers if c.opcode not in ("async-done", "async-update")]
            if not callers:
                break
            ins = callers[0]
        return ins


def with_tops(plan: dict[str, Any], module: Module) -> dict[str, Any]:
    """*plan* (of *module*) with each movement's ``top`` (``_Graph.top``), for a plan written before
    movements carried it."""
    g = _Graph(module)

    def top(m: dict[str, Any]) -> str | None:
        ins = g.get(m["computation"], m["instruction"])
        return g.top(ins).name if ins is not None else None

    return {**plan, "movements": [{**m, "top": top(m)} for m in plan.get("movements") or []]}


def _walk_producer(g: _Graph, ins: Instruction | None, limit: int = 8) -> list[str]:
    """op_names of *ins* and up its operand chain through data-preserving instructions, out of
    fused and async computations through their parameters to the caller's operands."""
    out = []
    for _ in range(limit):
        if ins is None:
            break
        if ins.op_name:
            out.append(ins.op_name)
        if ins.opcode == "parameter" and ins.parameter_number is not None:
            callers = [c for c in g.callers.get(ins.computation, []) if c.opcode not in ("while", "async-done")]
            ins = g.operand(callers[0], ins.parameter_number) if callers else None
            continue
        if ins.opcode not in PASS_THROUGH | {"copy", "copy-start"} or not ins.operands:
            break
        ins = g.operand(ins, 0)
    return out


def _walk_users(g: _Graph, ins: Instruction, limit: int = 3) -> list[str]:
    """op_names of the users of *ins*, breadth first, through pass-through instructions."""
    out, frontier = [], [ins]
    for _ in range(limit):
        nxt = []
        for f in frontier:
            for u in g.users_of(f):
                if u.op_name:
                    out.append(u.op_name)
                if u.opcode in PASS_THROUGH:
                    nxt.append(u)
        if out:
            break
        frontier = nxt
    return out


def _origin_d2h(g: _Graph, ins: Instruction | None, limit: int = 12) -> Instruction | None:
    """The device-to-host copy-start whose host buffer *ins* is (through tuples and bitcasts)."""
    for _ in range(limit):
        if ins is None:
            return None
        if ins.opcode == "copy-done":
            start = g.operand(ins, 0)
            return start if start is not None and start.opcode == "copy-start" else None
        if ins.opcode == "get-tuple-element":
            src = g.operand(ins, 0)
            if src is not None and src.opcode == "tuple" and ins.tuple_index is not None:
                ins = g.operand(src, ins.tuple_index)
                continue
            ins = src
            continue
        if ins.opcode in ("bitcast", "copy"):
            ins = g.operand(ins, 0)
            continue
        return None
    return None


def _root(g: _Graph, comp: str) -> Instruction | None:
    instrs = g.module.computations[comp].instructions if comp in g.module.computations else []
    return next((i for i in instrs if i.is_root), instrs[-1] if instrs else None)


def _host_origin(g: _Graph, ins: Instruction | None, writers: dict[str, Any], limit: int = 60) -> str | None:
    """The device-to-host write (a key of *writers*) that filled the host buffer *ins* reads,
    through tuples, while loops (carried values, loop results), async wrappers and fusion
    parameters."""
    stack: list[int] = []  # tuple indices still to apply, innermost last
    for _ in range(limit):
        if ins is None:
            return None
        if not stack and ins.name in writers:
            return ins.name
        op = ins.opcode
        if op == "get-tuple-element" and ins.tuple_index is not None:
            stack.append(ins.tuple_index)
            ins = g.operand(ins, 0)
        elif op == "tuple" and stack:
            ins = g.operand(ins, stack.pop())
        elif op == "while" and stack:
            bodies = [c for c in ins.called if (r := _root(g, c)) is not None and r.opcode == "tuple"]
            ins = _root(g, bodies[0]) if bodies else None
        elif op == "parameter" and ins.parameter_number is not None:
            callers = [c for c in g.callers.get(ins.computation, []) if c.opcode not in ("async-done",)]
            if not callers:
                return None
            caller = callers[0]
            ins = g.operand(caller, 0 if caller.opcode == "while" else ins.parameter_number)
        elif op in ("copy-done", "async-done", "fusion-done", "dynamic-update-slice-done", "bitcast", "copy"):
            ins = g.operand(ins, 0)
        else:
            return None
    return None


def _movement(
    g: _Graph, ins: Instruction, direction: str, nbytes: int, evidence: tuple[list[str], list[str]]
) -> dict[str, Any]:
    site, runs, notes = g.site(ins)
    layer_ev, act_ev = evidence
    if site is not ins and site.op_name:
        layer_ev = [*layer_ev, site.op_name]
        act_ev = [*act_ev, site.op_name]
    return {
        "instruction": site.name,
        "opcode": site.opcode,
        "moved_by": ins.name if site is not ins else None,
        "computation": site.computation,
        "top": g.top(site).name,  # the entry's instruction around it (a scan's while loop)
        "direction": direction,
        "bytes": nbytes,
        "executions_per_step": runs,
        "bytes_per_step": nbytes * runs if runs is not None else None,
        "queue": site.queue,
        "position": site.position,
        "layer_evidence": list(dict.fromkeys(layer_ev)),
        "activation_evidence": list(dict.fromkeys(act_ev)),
        "notes": notes,
    }


def offload_plan(module: Module) -> dict[str, Any]:
    """Host buffers and the data movements to and from them (see the module docstring)."""
    g = _Graph(module)
    movements: list[dict[str, Any]] = []
    buffers: list[dict[str, Any]] = []
    requested: dict[str, int] = defaultdict(int)
    d2h_layers: dict[str, tuple[list[str], list[str]]] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.custom_call_target in HOST_OFFLOAD_TARGETS:
                requested[ins.custom_call_target] += 1
            op = ins.opcode
            if op == "copy-start" and ins.shape.is_tuple and len(ins.shape.tuple or ()) >= 2:
                dst, src = ins.shape.element(0), ins.shape.element(1)
                if dst.on_host and not src.on_host:
                    done = [u for u in g.users_of(ins) if u.opcode == "copy-done"]
                    host_users = [n for d in done for n in _walk_users(g, d)]
                    producer = _walk_producer(g, g.operand(ins, 0))
                    ev = (host_users + producer, producer + host_users)
                    d2h_layers[ins.name] = ev
                    mv = _movement(g, ins, "d2h", dst.bytes, ev)
                    mv["done"] = done[0].name if done else None
                    movements.append(mv)
                    buffers.append(_buffer(ins, dst.bytes, "copy-start destination"))
                elif src.on_host and not dst.on_host:
                    origin = _origin_d2h(g, g.operand(ins, 0))
                    done = [u for u in g.users_of(ins) if u.opcode == "copy-done"]
                    from_origin = d2h_layers.get(origin.name) if origin is not None else None
                    host_side = _walk_producer(g, g.operand(ins, 0))
                    device_users = [n for d in done for n in _walk_users(g, d)]
                    if from_origin is not None:
                        ev = (from_origin[0] + host_side + device_users, from_origin[1] + device_users)
                    else:
                        ev = (host_side + device_users, device_users + host_side)
                    mv = _movement(g, ins, "h2d", dst.bytes, ev)
                    mv["done"] = done[0].name if done else None
                    mv["brings_back"] = origin.name if origin is not None else None
                    movements.append(mv)
            elif op == "copy":
                src_ins = g.operand(ins, 0)
                to_host, from_host = _on_host(ins), _on_host(src_ins)
                if to_host and from_host is False:
                    ev = (_walk_users(g, ins) + _walk_producer(g, src_ins), _walk_producer(g, src_ins))
                    movements.append(_movement(g, ins, "d2h", ins.shape.bytes, ev))
                    buffers.append(_buffer(ins, ins.shape.bytes, "copy destination"))
                elif from_host and to_host is False:
                    ev = (_walk_producer(g, src_ins) + _walk_users(g, ins), _walk_users(g, ins))
                    movements.append(_movement(g, ins, "h2d", ins.shape.bytes, ev))
            elif op in ("dynamic-update-slice", "dynamic-update-slice-start"):
                target = ins.shape if op == "dynamic-update-slice" else ins.shape.element(1)
                update = g.operand(ins, 1)
                if target.on_host and update is not None and not _on_host(update):
                    prod = _walk_producer(g, update)
                    own = [ins.op_name] if ins.op_name else []
                    ev = ([*own, *prod], [*prod, *own])
                    movements.append(_movement(g, ins, "d2h", update.shape.bytes, ev))
            elif op in ("dynamic-slice", "dynamic-slice-start"):
                src_ins = g.operand(ins, 0)
                result = ins.shape if op == "dynamic-slice" else ins.shape.element(1)
                if src_ins is not None and _on_host(src_ins) and not result.on_host:
                    users = _walk_users(g, ins)
                    ev = ([*([ins.op_name] if ins.op_name else []), *users], users)
                    mv = _movement(g, ins, "h2d", result.bytes, ev)
                    mv["_source"] = src_ins
                    movements.append(mv)
            elif op == "custom-call" and ins.custom_call_target == "AllocateBuffer" and _host_bytes(ins):
                buffers.append(_buffer(ins, _host_bytes(ins), "AllocateBuffer"))
            elif op == "parameter" and comp.is_entry and _host_bytes(ins):
                buffers.append(_buffer(ins, _host_bytes(ins), "entry parameter in host memory"))
            elif op == "parameter" and comp.is_entry and ins.parameter_number is not None:
                # XLA:CPU prints the placement only in the header's entry_computation_layout
                layout = module.entry_parameters or ()
                if ins.parameter_number < len(layout):
                    nbytes = sum(a.bytes for a in layout[ins.parameter_number].arrays() if a.on_host)
                    if nbytes:
                        buffers.append(_buffer(ins, nbytes, "entry parameter in host memory (entry layout)"))
    # a slice brought back from a host buffer: whose buffer (the write that filled it) names it
    writers = {n: m for m in movements if m["direction"] == "d2h" for n in (m["instruction"], m["moved_by"]) if n}
    for mv in movements:
        src = mv.pop("_source", None)
        if src is None:
            continue
        origin = _host_origin(g, src, writers)
        if origin is not None:
            w = writers[origin]
            mv["brings_back"] = w["instruction"]
            mv["layer_evidence"] = list(dict.fromkeys(w["layer_evidence"] + mv["layer_evidence"]))
            mv["activation_evidence"] = list(dict.fromkeys(w["activation_evidence"] + mv["activation_evidence"]))
    # one movement per (site, direction): several slices inside one fusion add up
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for mv in movements:
        key = (mv["computation"], mv["instruction"], mv["direction"])
        if key in merged:
            m = merged[key]
            m["bytes"] += mv["bytes"]
            if m["bytes_per_step"] is not None and mv["bytes_per_step"] is not None:
                m["bytes_per_step"] += mv["bytes_per_step"]
            m["layer_evidence"] = list(dict.fromkeys(m["layer_evidence"] + mv["layer_evidence"]))
            m["activation_evidence"] = list(dict.fromkeys(m["activation_evidence"] + mv["activation_evidence"]))
        else:
            merged[key] = mv
    moves = sorted(merged.values(), key=lambda m: (m["computation"] != module.entry, m["computation"], m["position"]))
    per_step = {d: sum(m["bytes_per_step"] or 0 for m in moves if m["direction"] == d) for d in ("d2h", "h2d")}
    unknown = sum(1 for m in moves if m["bytes_per_step"] is None)
    host_values = sum(1 for i in module.instructions() if _host_bytes(i))
    return {
        "host_placements": host_placements(module),
        "host_live_peak_bytes": host_live_peak(moves, module.entry) if module.scheduled else None,
        "late_d2h": late_d2h(moves, module.entry) if module.scheduled else None,
        "module": module.name,
        "scheduled": module.scheduled,
        "host_values": host_values,
        "host_buffers": buffers,
        "host_buffer_bytes": sum(b["bytes"] for b in buffers),
        "movements": moves,
        "d2h_bytes_per_step": per_step["d2h"],
        "h2d_bytes_per_step": per_step["h2d"],
        "movements_with_unknown_repeats": unknown,
        "offload_requests": dict(requested),
        "notes": list(module.notes),
    }


def _buffer(ins: Instruction, nbytes: int, kind: str) -> dict[str, Any]:
    return {
        "instruction": ins.name,
        "computation": ins.computation,
        "opcode": ins.opcode,
        "kind": kind,
        "shape": ins.shape.text(),
        "bytes": nbytes,
    }


def host_placements(module: Module) -> dict[str, int]:
    """Where the module places values in host memory (memory space 5): entry parameters and
    outputs (from the header's entry layout when it has one, else the ENTRY's parameter
    instructions and root), instructions whose value is in host memory, and all host-space
    array layouts together (``layouts``: what a search for ``S(5)`` in the text counts, less
    the repeats of old printing's operand shapes)."""
    entry = module.computations.get(module.entry or "")
    params = list(module.entry_parameters or ())
    result = module.entry_result
    if module.entry_parameters is None and entry is not None:
        params = [
            i.shape
            for i in sorted(entry.instructions, key=lambda i: i.parameter_number or 0)
            if i.opcode == "parameter"
        ]
        root = next((i for i in entry.instructions if i.is_root), None)
        result = root.shape if root is not None else None
    host_params = [a for p in params for a in p.arrays() if a.on_host]
    host_outs = [a for a in (result.arrays() if result is not None else []) if a.on_host]
    instr = [a for i in module.instructions() for a in i.shape.arrays() if a.on_host]
    header = len(host_params) + len(host_outs) if module.entry_parameters is not None else 0
    return {
        "layouts": header + len(instr),
        "entry_parameters": len(host_params),
        "entry_parameter_bytes": sum(a.bytes for a in host_params),
        "entry_outputs": len(host_outs),
        "entry_output_bytes": sum(a.bytes for a in host_outs),
        "instructions": sum(1 for i in module.instructions() if _host_bytes(i)),
    }


def host_live_peak(moves: list[dict[str, Any]], entry: str | None) -> int | None:
    """The most bytes of offloaded data in host memory at once, in the entry computation's
    schedule: each device-to-host copy holds its bytes from its position until the last copy
    that brings it back (or the end of the step).  None when a movement runs inside a loop or
    another computation (its buffers are slices of a larger one; XLA's buffer assignment knows)."""
    d2h = [m for m in moves if m["direction"] == "d2h"]
    if not d2h or any(m["computation"] != entry for m in moves):
        return None if d2h else 0
    end = max(m["position"] for m in moves) + 1
    back: dict[str, int] = {}
    for m in moves:
        if m["direction"] == "h2d" and m.get("brings_back"):
            back[m["brings_back"]] = max(back.get(m["brings_back"], -1), m["position"])
    events = sorted(
        [(m["position"], m["bytes"]) for m in d2h] + [(back.get(m["instruction"], end), -m["bytes"]) for m in d2h],
        key=lambda e: (e[0], e[1]),  # a buffer freed at a position before one taken there
    )
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def late_d2h(moves: list[dict[str, Any]], entry: str | None) -> dict[str, int] | None:
    """Device-to-host copies of the entry computation scheduled after its first host-to-device
    copy (the backward pass has begun: until then their data stays in device memory), of all of
    them; None without both directions there."""
    d2h = [m["position"] for m in moves if m["computation"] == entry and m["direction"] == "d2h"]
    h2d = [m["position"] for m in moves if m["computation"] == entry and m["direction"] == "h2d"]
    if not d2h or not h2d:
        return None
    first_back = min(h2d)
    late = [m for m in moves if m["computation"] == entry and m["direction"] == "d2h" and m["position"] > first_back]
    return {"late": len(late), "late_bytes": sum(m["bytes"] for m in late), "of": len(d2h)}


def _size(b: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


CPU_HOST = (
    "XLA:CPU keeps host memory in the device's own memory space: memory_analysis() counts the host-placed "
    "values as device memory and reports no host memory (compiled host shows them as 'CPU: in device memory')"
)
CPU_NO_OFFLOAD = (
    "JAX lowers a device_put to pinned_host inside a step (and so checkpoint offload policies) to nothing "
    "on XLA:CPU: a CPU run cannot show whether the program offloads activations on a GPU"
)


def plan_note(plan: dict[str, Any], platform: str | None = None) -> str | None:
    """A sentence for a plan without movements (the usual CPU result), else None; *platform*
    (``cpu``, ``gpu``, None when unknown) says whether host memory is the device's own."""
    if plan["movements"]:
        return None
    if plan.get("offload_requests"):
        return (
            "offload requests are present but not yet lowered: this looks like a module before "
            "optimization, not the compiler's plan"
        )
    hp = plan.get("host_placements") or {}
    parts = []
    if hp.get("entry_parameters"):
        parts.append(f"{hp['entry_parameters']} parameters ({_size(hp['entry_parameter_bytes'])})")
    if hp.get("entry_outputs"):
        parts.append(f"{hp['entry_outputs']} outputs ({_size(hp['entry_output_bytes'])})")
    if hp.get("instructions"):
        parts.append(f"{hp['instructions']} instruction values")
    cpu = platform == "cpu"
    if parts:
        text = (
            f"{hp.get('layouts', 0)} host placements (memory space 5, S(5) in HLO text) in the step: "
            f"{', '.join(parts)} in host memory; no copy between device and host inside the step"
        )
        return f"{text}; {CPU_HOST}; {CPU_NO_OFFLOAD}" if cpu else text
    if cpu:
        return f"no host placement (memory space 5, S(5) in HLO text) in the step; {CPU_NO_OFFLOAD}"
    return "the compiler placed nothing in host memory (memory space 5): no offload in this program"
