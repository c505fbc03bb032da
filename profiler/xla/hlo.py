"""An HLO module as the other modules here need it: computations of instructions with their
shapes, operands, called computations and ``op_name`` metadata.

``parse_text`` reads the text XLA prints (``compiled.as_text()``, ``--xla_dump_to``
with ``--xla_dump_hlo_as_text``), old printing (operands with their shapes) and
new (operands by name; a tuple's element as ``%x#k``), ``%`` or not, instructions wrapped
over several lines.
It never raises on a damaged module: what cannot be read becomes a note, and a
module cut short keeps what came before the cut (``truncated``).  Text with no
HLO in it at all raises ``HloError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from profiler.xla.shapes import Shape, ShapeError, _split_top, parse_shape, shape_prefix


class HloError(ValueError):
    """Input that holds no HLO module."""


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: list[str]
    computation: str
    position: int  # index in its computation (the run order when the module is scheduled)
    op_name: str | None = None
    called: list[str] = field(default_factory=list)
    custom_call_target: str | None = None
    queue: str | None = None  # backend_config operation_queue_id ("0": compute stream)
    trip_count: int | None = None  # while loops with a known trip count
    tuple_index: int | None = None  # get-tuple-element
    parameter_number: int | None = None  # parameter
    is_root: bool = False
    literal: int | None = None  # a scalar integer constant's value (trip counts read from a loop's condition)
    direction: str | None = None  # a compare's direction (LT, GT, ...)
    trip_count_from: str | None = None  # "backend config" or "condition": where trip_count was read
    # for costs (profiler.predict): dot/convolution dimension attributes, collectives' replica_groups
    attrs: dict[str, str] = field(default_factory=dict)
    # XLA's own estimates of the instruction's time, µs by model ("sol", "indexing-cost-model", "": its
    # GpuPerformanceModel), where the module was compiled with --xla_gpu_collect_cost_model_stats
    xla_us: dict[str, float] = field(default_factory=dict)


@dataclass
class Computation:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    is_entry: bool = False


@dataclass
class Module:
    name: str
    computations: dict[str, Computation]
    entry: str | None
    scheduled: bool = False
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    # the header's entry_computation_layout: parameter shapes and the result shape (XLA:CPU
    # prints host placement, S(5), only there; the ENTRY's parameter instructions carry none)
    entry_parameters: tuple[Shape, ...] | None = None
    entry_result: Shape | None = None

    def instructions(self) -> list[Instruction]:
        return [i for c in self.computations.values() for i in c.instructions]

    @property
    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations.values())


_REMAT = re.compile(r"\.remat\d*$")


def remat_clones(module: Module) -> list[Instruction]:
    """The instructions XLA's rematerialization pass added to *module*: it recomputes a value
    instead of keeping it alive, to bring the peak under the memory limit, and names each clone
    after the original with ``.remat``, ``.remat2``, ... appended."""
    return [i for i in module.instructions() if _REMAT.search(i.name)]


_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)(.*)$")
_COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\)\s*->\s*.*)?\{\s*$")
# a statement: NAME = SHAPE opcode(...); "metadata={...}" on a continuation line is no statement
_INSTR = re.compile(r"^\s+(ROOT\s+)?%?([\w.\-]+)\s*=\s*((?:\(|[a-z][a-z0-9]*\[).*)$")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_CALLED_ONE = re.compile(r"\b(?:calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)")
_CALLED_SET = re.compile(r"\b(?:calls|branch_computations|called_computations)=\{([^}]*)\}")
_TARGET = re.compile(r'\bcustom_call_target="([^"]*)"')
_QUEUE = re.compile(r'"operation_queue_id"\s*:\s*"?(\d+)')
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_INDEX = re.compile(r"\bindex=(\d+)")
_DIRECTION = re.compile(r"\bdirection=([A-Z]+)")
_INT = re.compile(r"-?\d+")
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_COST_ATTR = re.compile(
    r"\b(lhs_contracting_dims|lhs_batch_dims|dim_labels|feature_group_count|replica_groups|window)="
    r"(\{[^=]*?\}\}|\{[^}]*\}|\[[^\]]*\][^,\s]*|[\w>-]+)"
)
COST_ATTR_OPS = {"dot", "convolution"}
# one entry of a backend config's "reification_cost" list: its time, then (the fields are printed in
# this order) its model's name
_REIFIED = re.compile(r'"exec_time_us"\s*:\s*([0-9.eE+\-]+)[^{}]*?"name"\s*:\s*"([^"]*)"')
_MASK = re.compile(r'"mask_type":\s*"(\w+)"')
# a cuBLAS GEMM's dot dimension numbers, in its backend_config JSON ("lhs_contracting_dimensions":["1"])
_GEMM_DIMS = re.compile(r'"(lhs_contracting|lhs_batch)_dimensions"\s*:\s*\[([^\]]*)\]')
GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")  # with suffixes: __cublas$lt$matmul$f8
NO_OPERANDS = {"parameter", "constant", "iota", "rng-get-and-update-state", "partition-id", "replica-id"}


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{}]')


def _depth(text: str) -> int:
    """Open (, [, { minus closed ones, outside double-quoted strings."""
    t = _STRING.sub("", text) if '"' in text else text
    return t.count("(") + t.count("[") + t.count("{") - t.count(")") - t.count("]") - t.count("}")


def _close(text: str, start: int) -> int:
    """Index of the bracket closing the one at *start* (quoted strings skipped), or -1."""
    d = 0
    for m in _TOKEN.finditer(text, start):
        c = m.group(0)
        if c[0] == '"':
            continue
        d += 1 if c in "([{" else -1
        if d == 0:
            return m.start()
    return -1


def _operand_name(text: str) -> str | None:
    t = _COMMENT.sub("", text).strip()
    if not t:
        return None
    return t.split()[-1].lstrip("%")


def entry_layout(header: str) -> tuple[tuple[Shape, ...], Shape] | None:
    """(parameter shapes, result shape) of a header's ``entry_computation_layout={(...)->...}``,
    or None when it has none or it cannot be read."""
    at = header.find("entry_computation_layout={")
    if at < 0:
        return None
    start = at + len("entry_computation_layout=")
    end = _close(header, start)
    if end < 0:
        return None
    body = header[start + 1 : end]
    arrow = body.find(")->")
    if arrow < 0:
        return None
    try:
        params = parse_shape(body[: arrow + 1])
        result = parse_shape(body[arrow + 3 :])
    except ShapeError:
        return None
    return params.tuple or (), result


def parse_instruction(line: str, computation: str, position: int) -> Instruction:
    """One instruction statement (possibly joined from several lines); raises ValueError."""
    m = _INSTR.match(line)
    if not m:
        raise ValueError("not an instruction")
    root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
    shape_text, after = shape_prefix(rest)
    shape = parse_shape(shape_text)
    om = _OPCODE.match(after)
    if not om:
        raise ValueError(f"no opcode after the shape of {name}")
    opcode = om.group(1)
    open_at = om.end() - 1
    close_at = _close(after, open_at)
    if close_at < 0:
        raise ValueError(f"unclosed operand list of {name}")
    inner = after[open_at + 1 : close_at]
    attrs = after[close_at + 1 :]
    operands = []
    if opcode not in NO_OPERANDS and inner.strip():
        operands = [n for n in (_operand_name(p) for p in _split_top(inner)) if n]
    op = _OP_NAME.search(attrs) if "op_name=" in attrs else None
    called: list[str] = []
    if "=%" in attrs or "calls=" in attrs or "_computation" in attrs or "to_apply=" in attrs:
        called = _CALLED_ONE.findall(attrs)
        for group in _CALLED_SET.findall(attrs):
            called += [c.strip().lstrip("%") for c in group.split(",") if c.strip()]
    target = _TARGET.search(attrs) if opcode == "custom-call" else None
    queue = _QUEUE.search(attrs) if "operation_queue_id" in attrs else None
    trip = _TRIP.search(attrs) if opcode == "while" else None
    index = _INDEX.search(attrs) if opcode == "get-tuple-element" else None
    cost_attrs = dict(_COST_ATTR.findall(attrs)) if opcode in COST_ATTR_OPS or "replica_groups=" in attrs else {}
    if target is not None and target.group(1).startswith(GEMM_TARGETS):  # a GEMM: as a dot prints them
        for key, dims in _GEMM_DIMS.findall(attrs):
            cost_attrs[f"{key}_dims"] = "{" + ",".join(d.strip().strip('"') for d in dims.split(",") if d.strip()) + "}"
    if target is not None and "fmha" in target.group(1):  # cuDNN attention: its mask decides its FLOPs
        mask = _MASK.search(attrs)
        cost_attrs["mask_type"] = mask.group(1) if mask else "NO_MASK"
    literal = int(inner) if opcode == "constant" and not shape.dims and _INT.fullmatch(inner.strip()) else None
    direction = _DIRECTION.search(attrs) if opcode == "compare" else None
    xla_us = {}
    if '"reification_cost":[{' in attrs:
        for us, model in _REIFIED.findall(attrs[attrs.index('"reification_cost":[{') :]):
            xla_us.setdefault(model, float(us))
    return Instruction(
        name=name,
        opcode=opcode,
        shape=shape,
        operands=operands,
        computation=computation,
        position=position,
        op_name=op.group(1).replace('\\"', '"') if op else None,
        called=list(dict.fromkeys(called)),
        custom_call_target=target.group(1) if target else None,
        queue=queue.group(1) if queue else None,
        trip_count=int(trip.group(1)) if trip else None,
        trip_count_from="backend config" if trip else None,
        literal=literal,
        direction=direction.group(1) if direction else None,
        tuple_index=int(index.group(1)) if index else None,
        parameter_number=int(inner) if opcode == "parameter" and inner.strip().isdigit() else None,
        is_root=root,
        attrs=cost_attrs,
        xla_us=xla_us,
    )


def _tuple_reads(comp: Computation) -> None:
    """Newer XLA prints a read of a tuple's element as an operand ``%x#k``: each becomes the
    explicit ``get-tuple-element`` older XLA printed (named ``x#k``, once per computation, just
    before its first reader), so that every walk through tuples sees one form."""
    if not any("#" in o for i in comp.instructions for o in i.operands):
        return
    by_name: dict[str, Instruction] = {}
    out: list[Instruction] = []
    for ins in comp.instructions:
        for o in ins.operands:
            src, sep, k = o.rpartition("#")
            if not sep or not k.isdigit() or o in by_name:
                continue
            parent = by_name.get(src)
            elems = parent.shape.tuple if parent is not None and parent.shape.tuple is not None else ()
            read = Instruction(
                name=o,
                opcode="get-tuple-element",
                shape=elems[int(k)] if int(k) < len(elems) else Shape(),
                operands=[src],
                computation=comp.name,
                position=0,
                tuple_index=int(k),
            )
            by_name[o] = read
            out.append(read)
        by_name[ins.name] = ins
        out.append(ins)
    for pos, ins in enumerate(out):
        ins.position = pos
    comp.instructions = out


def parse_text(text: str, source: str = "HLO text") -> Module:
    """The module in *text*; damage becomes notes (see the module docstring)."""
    name, scheduled, layout = None, False, None
    comps: dict[str, Computation] = {}
    entry = None
    notes: list[str] = []
    cur: Computation | None = None
    stmt: list[str] = []
    depth = 0  # of the statement being read
    bad = 0

    def flush() -> None:
        nonlocal bad
        if not stmt or cur is None:
            stmt.clear()
            return
        joined = " ".join(s.strip() if i else s for i, s in enumerate(stmt))
        stmt.clear()
        try:
            cur.instructions.append(parse_instruction(joined, cur.name, len(cur.instructions)))
        except (ValueError, ShapeError) as exc:
            bad += 1
            if bad <= 3:
                notes.append(f"{source}: an instruction could not be read ({exc}): {joined[:120]!r}")

    def close(comp: Computation) -> None:
        """*comp* ends: its last statement read, its tuple reads added, kept (the entry if it is one)."""
        nonlocal entry
        flush()
        _tuple_reads(comp)
        comps[comp.name] = comp
        if comp.is_entry:
            entry = comp.name

    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        if cur is None:
            hm = _HEADER.match(line)
            if hm and name is None:
                name = hm.group(1)
                scheduled = "is_scheduled=true" in hm.group(2)
                layout = entry_layout(hm.group(2))
                continue
            cm = _COMP.match(line)
            if cm and not line.startswith((" ", "\t")):
                cur = Computation(cm.group(2), is_entry=bool(cm.group(1)))
                continue
            continue  # stack frame tables, FileNames, ...
        starts = line.startswith("}") or _INSTR.match(line) is not None
        if stmt and not starts and (depth > 0 or stmt[-1].endswith(",")):
            stmt.append(line)  # a wrapped instruction (a new statement or the closing brace ends it)
            depth += _depth(line)
            continue
        if line.startswith("}"):
            close(cur)
            cur = None
            continue
        if _INSTR.match(line):
            flush()
            stmt.append(line)
            depth = _depth(line)
        elif stmt:
            stmt.append(line)
            depth += _depth(line)
        else:
            bad += 1
            if bad <= 3:
                notes.append(f"{source}: a line could not be read: {line.strip()[:120]!r}")
    truncated = False
    if cur is not None:
        if stmt and depth > 0:
            notes.append(f"{source}: the text ends inside an instruction (truncated?)")
            stmt.clear()
        close(cur)
        truncated = True
        notes.append(f"{source}: the text ends inside computation {cur.name} (truncated?)")
    if bad > 3:
        notes.append(f"{source}: {bad} lines or instructions could not be read in all")
    for comp in comps.values():
        for ins in comp.instructions:
            if ins.opcode == "while" and ins.trip_count is None:
                ins.trip_count = condition_trip_count(comps, ins)
                ins.trip_count_from = "condition" if ins.trip_count is not None else None
    if name is None and not comps:
        raise HloError(f"{source}: no HLO module in this text")
    if entry is None and comps:
        notes.append(f"{source}: no ENTRY computation")
    return Module(
        name=name or "unnamed",
        computations=comps,
        entry=entry,
        scheduled=scheduled,
        truncated=truncated,
        notes=notes,
        entry_parameters=layout[0] if layout else None,
        entry_result=layout[1] if layout else None,
    )


_BOUND = {"LT": 0, "LE": 1, "GT": 0, "GE": 1}  # compare(i, N): trips N - i0 (+1 for LE)
_PASS = {"copy", "bitcast", "convert"}


def _through(comp: dict[str, Instruction], name: str) -> Instruction | None:
    """The instruction *name* in *comp*, looking through copies, bitcasts and converts."""
    ins = comp.get(name)
    for _ in range(8):
        if ins is None or ins.opcode not in _PASS or not ins.operands:
            return ins
        ins = comp.get(ins.operands[0])
    return ins


def condition_trip_count(comps: dict[str, Computation], loop: Instruction) -> int | None:
    """The trips of a ``while`` whose backend config does not say (TPU modules never do): its
    condition's root is ``compare(get-tuple-element(p, k), constant N)`` (or the constant first),
    its body adds a constant step to element k, and element k of its initial tuple is a constant
    (through copies); trips = ceil((N - start) / step) (+1 for LE/GE), None when any part differs."""
    called = [comps.get(c) for c in loop.called]
    cond = next((c for c in called if c and any(i.is_root and i.opcode == "compare" for i in c.instructions)), None)
    body = next((c for c in called if c and c is not cond), None)
    caller = comps.get(loop.computation)
    if cond is None or body is None or caller is None or not loop.operands:
        return None
    by = {i.name: i for i in cond.instructions}
    root = next(i for i in cond.instructions if i.is_root)
    if len(root.operands) != 2 or root.direction not in _BOUND:
        return None
    a, b = (_through(by, o) for o in root.operands)
    flip = a is not None and a.opcode == "constant"
    var, bound = (b, a) if flip else (a, b)
    if var is None or bound is None or var.opcode != "get-tuple-element" or bound.literal is None:
        return None
    k = var.tuple_index
    up = (root.direction in ("LT", "LE")) != flip  # the counter counts up to the bound
    at = {i.name: i for i in caller.instructions}
    init = _through(at, loop.operands[0])
    start = (
        _through(at, init.operands[k])
        if init is not None and init.opcode == "tuple" and k is not None and k < len(init.operands)
        else None
    )
    step = _body_step(body, k)
    if start is None or start.literal is None or step is None or (step > 0) != up:
        return None
    span = (bound.literal - start.literal) if up else (start.literal - bound.literal)
    span += _BOUND[root.direction]
    return max(0, -(-span // abs(step)))


def _body_step(body: Computation, k: int | None) -> int | None:
    """The constant a loop body adds to element *k* of its tuple each trip (None: not a constant add)."""
    by = {i.name: i for i in body.instructions}
    root = next((i for i in body.instructions if i.is_root), None)
    if root is None or root.opcode != "tuple" or k is None or k >= len(root.operands):
        return None
    inc = _through(by, root.operands[k])
    if inc is None or inc.opcode not in ("add", "subtract") or len(inc.operands) != 2:
        return None
    x, y = (_through(by, o) for o in inc.operands)
    const = y if y is not None and y.literal is not None else (x if inc.opcode == "add" else None)
    other = x if const is y else y
    if (
        const is None
        or const.literal is None
        or other is None
        or other.opcode != "get-tuple-element"
        or other.tuple_index != k
    ):
        return None
    return const.literal if inc.opcode == "add" else -const.literal
