"""One fingerprint per compiled program: two runs whose step modules have the same fingerprint ran
the same program, whatever the policy they were given.

The optimized HLO text is hashed with what does not change the program taken out:
``metadata={...}`` (op names, source lines, scheduling names), the module's name,
the stack-frame tables printed after the module, and the names of computations and
instructions, which are renumbered in the order they are defined (``%fusion.12`` and
``%fusion.31`` are the same instruction in two compilations that numbered them
differently).  A proto (no text) is hashed from its parsed structure instead: per
instruction the opcode, shape, operands and called computations by position, and
the custom-call target.
"""

from __future__ import annotations

import hashlib
import re

from profiler.xla.hlo import Module

_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_DEF = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=|^(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\)\s*->\s*.*)?\{\s*$")
_META = re.compile(r',?\s*metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')
DIGITS = 16


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:DIGITS]


def normalized_text(text: str) -> str:
    """The module text as it is hashed (see the module docstring)."""
    lines, names = [], {}
    inside = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        if line.startswith("HloModule"):
            rest = line.partition(",")[2]
            lines.append("HloModule," + rest)
            continue
        if not inside and not line.endswith("{"):
            continue  # FileNames, FunctionNames, StackFrames tables and anything else outside computations
        inside = not line.startswith("}")
        if "metadata={" in line:
            line = _META.sub("", line)
        m = _DEF.match(line)
        if m:
            name = m.group(1) or m.group(2)
            names.setdefault(name, f"n{len(names)}")
        lines.append(line)
    joined = "\n".join(lines)
    return _NAME.sub(lambda m: names.get(m.group(1), m.group(0)), joined)


def text_fingerprint(text: str) -> dict[str, str]:
    return {"value": _hash(normalized_text(text)), "method": "optimized HLO text, names and metadata normalized"}


def module_fingerprint(module: Module) -> dict[str, str]:
    """A fingerprint of a parsed module (for protos, which have no text)."""
    comp_index = {name: k for k, name in enumerate(module.computations)}
    parts = []
    for comp in module.computations.values():
        index = {i.name: k for k, i in enumerate(comp.instructions)}
        parts.append(f"C{comp_index[comp.name]}{'E' if comp.is_entry else ''}")
        for i in comp.instructions:
            ops = ",".join(str(index.get(o, "?")) for o in i.operands)
            called = ",".join(str(comp_index.get(c, "?")) for c in i.called)
            parts.append(f"{i.opcode}|{i.shape.text()}|{ops}|{called}|{i.custom_call_target or ''}|{i.trip_count}")
    return {"value": _hash("\n".join(parts)), "method": "HLO proto structure (opcodes, shapes, operands)"}
