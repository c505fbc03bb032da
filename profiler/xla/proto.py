"""HLO protos (``*.hlo.pb`` from ``--xla_dump_hlo_as_proto``, optionally ``.xz``) read with a
small protobuf wire-format decoder: no protobuf package, no jaxlib.

Only the fields this package uses are read, by their numbers in XLA's
``hlo.proto`` / ``xla_data.proto``: HloProto{hlo_module=1, buffer_assignment=3},
HloModuleProto{name=1, computations=3, entry_computation_id=6, schedule=7},
HloComputationProto{name=1, instructions=2, id=5},
HloInstructionProto{name=1, opcode=2, shape=3, metadata=7, tuple_index=13,
custom_call_target=28, id=35, operand_ids=36, called_computation_ids=38,
backend_config=43}, OpMetadata{op_name=2}, ShapeProto{element_type=2,
dimensions=3, tuple_shapes=4, layout=5}, LayoutProto{memory_space=8},
BufferAllocationProto{size=2, is_thread_local=3, is_entry_computation_parameter=5,
parameter_number=6, maybe_live_out=7, color=8, is_constant=12}.
"""

from __future__ import annotations

import lzma
import re
from collections.abc import Iterator
from pathlib import Path

from profiler.xla.hlo import Computation, HloError, Instruction, Module
from profiler.xla.shapes import Shape

# xla.PrimitiveType numbers -> HLO text names
PRIMITIVE = {
    1: "pred",
    2: "s8",
    3: "s16",
    4: "s32",
    5: "s64",
    6: "u8",
    7: "u16",
    8: "u32",
    9: "u64",
    10: "f16",
    11: "f32",
    12: "f64",
    13: "tuple",
    14: "opaque",
    15: "c64",
    16: "bf16",
    17: "token",
    18: "c128",
    19: "f8e5m2",
    20: "f8e4m3fn",
    21: "s4",
    22: "u4",
    23: "f8e4m3b11fnuz",
    24: "f8e5m2fnuz",
    25: "f8e4m3fnuz",
    26: "s2",
    27: "u2",
    28: "f8e4m3",
    29: "f8e3m4",
    30: "s1",
    31: "u1",
    32: "f4e2m1fn",
    33: "f8e8m0fnu",
}
_QUEUE = re.compile(rb'"operation_queue_id"\s*:\s*"?(\d+)')
_TRIP = re.compile(rb'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')


class WireError(ValueError):
    """Bytes that are not a protobuf message of the expected kind."""


def _varint(b: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(b):
            raise WireError("truncated varint")
        x = b[i]
        i += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise WireError("varint too long")


def fields(b: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a message; length-delimited values as bytes."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise WireError("field number 0")
        if wire == 0:
            v, i = _varint(b, i)
            yield num, wire, v
        elif wire == 2:
            ln, i = _varint(b, i)
            if i + ln > n:
                raise WireError("truncated field")
            yield num, wire, b[i : i + ln]
            i += ln
        elif wire == 1:
            if i + 8 > n:
                raise WireError("truncated fixed64")
            yield num, wire, b[i : i + 8]
            i += 8
        elif wire == 5:
            if i + 4 > n:
                raise WireError("truncated fixed32")
            yield num, wire, b[i : i + 4]
            i += 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def _ints(wire: int, v: int | bytes) -> list[int]:
    """A repeated int64 field's values (packed or not), two's complement for negatives."""
    if wire == 0:
        vals = [v]  # type: ignore[list-item]
    else:
        vals, i = [], 0
        while i < len(v):  # type: ignore[arg-type]
            x, i = _varint(v, i)  # type: ignore[arg-type]
            vals.append(x)
    return [x - (1 << 64) if x >= 1 << 63 else x for x in vals]  # type: ignore[operator]


def _str(v: int | bytes) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def shape(b: bytes) -> Shape:
    etype, dims, tup, space = 0, [], [], 0
    for num, wire, v in fields(b):
        if num == 2 and wire == 0:
            etype = v  # type: ignore[assignment]
        elif num == 3:
            dims += _ints(wire, v)
        elif num == 4:
            tup.append(shape(v))  # type: ignore[arg-type]
        elif num == 5:
            for lnum, lwire, lv in fields(v):  # type: ignore[arg-type]
                if lnum == 8 and lwire == 0:
                    space = lv  # type: ignore[assignment]
    name = PRIMITIVE.get(etype, "opaque")
    if name == "tuple":
        return Shape(tuple=tuple(tup))
    return Shape(dtype=name, dims=tuple(dims), memory_space=space)


def _instruction(b: bytes, comp: str, position: int) -> tuple[Instruction, int, list[int], list[int]]:
    name, opcode, shp, op_name, target, backend = "", "", Shape(dtype="opaque"), None, None, b""
    iid, operands, called, tindex, pnum = -1, [], [], None, None
    dot_dims: dict[int, list[int]] = {}
    for num, wire, v in fields(b):
        if num == 1:
            name = _str(v)
        elif num == 2:
            opcode = _str(v)
        elif num == 3 and wire == 2:
            shp = shape(v)  # type: ignore[arg-type]
        elif num == 7 and wire == 2:
            for mnum, _, mv in fields(v):  # type: ignore[arg-type]
                if mnum == 2:
                    op_name = _str(mv)
        elif num == 9 and wire == 0:
            pnum = v
        elif num == 13 and wire == 0:
            tindex = v
        elif num == 28:
            target = _str(v)
        elif num == 35 and wire == 0:
            iid = v  # type: ignore[assignment]
        elif num == 36:
            operands += _ints(wire, v)
        elif num == 38:
            called += _ints(wire, v)
        elif num == 43 and wire == 2:
            backend = v  # type: ignore[assignment]
        elif num == 30 and wire == 2:  # dot_dimension_numbers: lhs_contracting (1), lhs_batch (3)
            for dnum, dwire, dv in fields(v):  # type: ignore[arg-type]
                if dnum in (1, 3):
                    dot_dims.setdefault(dnum, []).extend(_ints(dwire, dv))
    keys = {1: "lhs_contracting_dims", 3: "lhs_batch_dims"}  # as the text prints them, for profiler.predict
    attrs = {keys[k]: "{" + ",".join(map(str, d)) + "}" for k, d in dot_dims.items()}
    q = _QUEUE.search(backend) if backend else None
    t = _TRIP.search(backend) if backend else None
    ins = Instruction(
        name=name,
        opcode=opcode,
        shape=shp,
        operands=[],
        computation=comp,
        position=position,
        op_name=op_name or None,
        custom_call_target=target or None,
        queue=q.group(1).decode() if q else None,
        trip_count=int(t.group(1)) if t else None,
        tuple_index=tindex if opcode == "get-tuple-element" else None,  # type: ignore[arg-type]
        parameter_number=pnum if opcode == "parameter" else None,  # type: ignore[arg-type]
        attrs=attrs,
    )
    return ins, iid, operands, called


def module_from_proto(b: bytes, source: str = "HLO proto") -> tuple[Module, list[dict[str, int | bool]]]:
    """The module and the buffer allocations (empty when the proto holds none) in *b*:
    an ``HloProto`` (module + buffer assignment) or a bare ``HloModuleProto``."""
    try:
        top = list(fields(b))
    except WireError as exc:
        raise HloError(f"{source}: not an HLO proto ({exc})") from None
    allocations: list[dict[str, int | bool]] = []
    module_bytes = None
    if any(n == 1 and w == 2 for n, w, _ in top) and all(n in (1, 3) for n, _, _ in top):
        inner = next(v for n, w, v in top if n == 1 and w == 2)
        try:
            if any(n == 3 for n, _, _ in fields(inner)):  # type: ignore[arg-type]
                module_bytes = inner
                for n, w, v in top:
                    if n == 3 and w == 2:
                        allocations = _allocations(v)  # type: ignore[arg-type]
        except WireError:
            module_bytes = None
    return _module(module_bytes if module_bytes is not None else b, source), allocations


def _allocations(b: bytes) -> list[dict[str, int | bool]]:
    out = []
    for num, wire, v in fields(b):
        if num != 3 or wire != 2:
            continue
        a: dict[str, int | bool] = {
            "size": 0,
            "thread_local": False,
            "parameter": False,
            "parameter_number": 0,
            "live_out": False,
            "color": 0,
            "constant": False,
        }
        keys = {2: "size", 3: "thread_local", 5: "parameter", 6: "parameter_number", 7: "live_out", 8: "color"}
        for an, aw, av in fields(v):  # type: ignore[arg-type]
            if aw != 0:
                continue
            if an in keys:
                a[keys[an]] = bool(av) if isinstance(a[keys[an]], bool) else av  # type: ignore[assignment]
            elif an == 12:
                a["constant"] = bool(av)
        out.append(a)
    return out


def _module(b: bytes, source: str) -> Module:
    name, entry_id, comps_raw, schedule = "", None, [], {}
    try:
        for num, wire, v in fields(b):
            if num == 1 and wire == 2:
                name = _str(v)
            elif num == 3 and wire == 2:
                comps_raw.append(v)
            elif num == 6 and wire == 0:
                entry_id = v
            elif num == 7 and wire == 2:
                schedule = _schedule(v)  # type: ignore[arg-type]
    except WireError as exc:
        raise HloError(f"{source}: not an HLO module proto ({exc})") from None
    if not comps_raw:
        raise HloError(f"{source}: no computations in this proto")
    comps: dict[str, Computation] = {}
    by_id: dict[int, Instruction] = {}
    comp_of: dict[int, str] = {}
    pending = []
    notes = []
    entry = None
    for raw in comps_raw:
        cname, cid, root_id, instrs = "", None, None, []
        try:
            for num, wire, v in fields(raw):  # type: ignore[arg-type]
                if num == 1:
                    cname = _str(v)
                elif num == 2 and wire == 2:
                    instrs.append(v)
                elif num == 5 and wire == 0:
                    cid = v
                elif num == 6 and wire == 0:
                    root_id = v
        except WireError as exc:
            notes.append(f"{source}: computation {cname or '?'} could not be read ({exc})")
            continue
        comp = Computation(cname)
        parsed = []
        for k, ib in enumerate(instrs):
            try:
                ins, iid, ops, called = _instruction(ib, cname, k)
            except WireError as exc:
                notes.append(f"{source}: an instruction of {cname} could not be read ({exc})")
                continue
            parsed.append((ins, iid, ops, called))
            ins.is_root = iid == root_id
            by_id[iid] = ins
        order = schedule.get(cid) if cid is not None else None
        if order:
            rank = {iid: r for r, iid in enumerate(order)}
            parsed.sort(key=lambda p: rank.get(p[1], len(rank)))
        for pos, (ins, _iid, ops, called) in enumerate(parsed):
            ins.position = pos
            comp.instructions.append(ins)
            pending.append((ins, ops, called))
        if cid is not None:
            comp_of[cid] = cname
        if cid is not None and cid == entry_id:
            comp.is_entry = True
            entry = cname
        comps[cname] = comp
    for ins, ops, called in pending:
        ins.operands = [by_id[o].name for o in ops if o in by_id]
        ins.called = [comp_of[c] for c in called if c in comp_of]
    if entry is None and comps:
        entry = list(comps)[-1]  # callees come before their callers: the entry is last
        comps[entry].is_entry = True
    return Module(name=name or "unnamed", computations=comps, entry=entry, scheduled=bool(schedule), notes=notes)


def _schedule(b: bytes) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for num, wire, v in fields(b):
        if num != 1 or wire != 2:
            continue
        key, seq = None, []
        for en, ew, ev in fields(v):  # type: ignore[arg-type]
            if en == 1 and ew == 0:
                key = ev
            elif en == 2 and ew == 2:
                for sn, sw, sv in fields(ev):  # type: ignore[arg-type]
                    if sn == 1:
                        seq += _ints(sw, sv)
        if key is not None:
            out[key] = seq  # type: ignore[index]
    return out


def read_bytes(path: Path) -> bytes:
    """A dump file's bytes, decompressed when it ends in ``.xz``."""
    if path.suffix == ".xz":
        try:
            return lzma.decompress(path.read_bytes())
        except lzma.LZMAError as exc:
            raise HloError(f"{path}: not a readable .xz file ({exc})") from None
    return path.read_bytes()
