"""HLO shapes as XLA prints them: ``f32[256,4096]{1,0:S(5)}``, tuples, scalars, tiles.

The memory space follows the layout's colon (after any tiles): ``S(5)`` is
host memory, ``S(1)``/``S(2)`` are device-side pools on a GPU.  Sizes are
XLA's byte sizes of dense arrays (sub-byte types count one byte each, as
``ShapeUtil::ByteSizeOfPrimitiveType`` does without an element size).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

HOST_MEMORY_SPACE = 5

# bytes per element of each XLA primitive type, by its HLO text name
DTYPE_BYTES: dict[str, int] = {
    "pred": 1,
    "s1": 1,
    "s2": 1,
    "s4": 1,
    "s8": 1,
    "s16": 2,
    "s32": 4,
    "s64": 8,
    "u1": 1,
    "u2": 1,
    "u4": 1,
    "u8": 1,
    "u16": 2,
    "u32": 4,
    "u64": 8,
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e5m2": 1,
    "f8e4m3": 1,
    "f8e4m3fn": 1,
    "f8e4m3b11fnuz": 1,
    "f8e3m4": 1,
    "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1,
    "f4e2m1fn": 1,
    "f8e8m0fnu": 1,
    "token": 0,
    "opaque": 0,
}

_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_SPACE = re.compile(r"S\((\d+)\)")


class ShapeError(ValueError):
    """Text that is not an HLO shape."""


@dataclass(frozen=True)
class Shape:
    """An array (``dtype``, ``dims``, ``memory_space``) or a tuple of shapes (``tuple`` set)."""

    dtype: str | None = None
    dims: tuple[int, ...] = ()
    memory_space: int = 0
    tuple: tuple[Shape, ...] | None = None

    @property
    def is_tuple(self) -> bool:
        return self.tuple is not None

    @property
    def bytes(self) -> int:
        """Bytes of an array; of a tuple, the sum of its leaves (not the tuple's pointer table)."""
        if self.tuple is not None:
            return sum(s.bytes for s in self.tuple)
        return DTYPE_BYTES.get(self.dtype or "", 0) * math.prod(self.dims)

    def arrays(self) -> list[Shape]:
        """The array leaves, depth first."""
        if self.tuple is None:
            return [self]
        return [a for s in self.tuple for a in s.arrays()]

    def element(self, index: int) -> Shape:
        if self.tuple is None or not 0 <= index < len(self.tuple):
            raise ShapeError(f"no tuple element {index} in {self.text()}")
        return self.tuple[index]

    @property
    def on_host(self) -> bool:
        return self.tuple is None and self.memory_space == HOST_MEMORY_SPACE

    def text(self) -> str:
        if self.tuple is not None:
            return "(" + ", ".join(s.text() for s in self.tuple) + ")"
        space = f":S({self.memory_space})" if self.memory_space else ""
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{'{' + space + '}' if space else ''}"


_SEP = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{},]')


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at commas outside (), [], {} and quotes."""
    if not any(c in text for c in '([{"'):
        return text.split(sep)
    out, depth, last = [], 0, 0
    for m in _SEP.finditer(text):
        c = m.group(0)
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(text[last : m.start()])
            last = m.end()
    out.append(text[last:])
    return out


_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def parse_shape(text: str) -> Shape:
    """One shape, array or (nested) tuple; ``/*index=5*/`` comments are ignored."""
    t = _COMMENT.sub("", text).strip()
    if t.startswith("("):
        if not t.endswith(")"):
            raise ShapeError(f"unbalanced tuple shape {text[:80]!r}")
        inner = t[1:-1].strip()
        parts = _split_top(inner) if inner else []
        return Shape(tuple=tuple(parse_shape(p) for p in parts))
    m = _ARRAY.fullmatch(t)
    if not m:
        if t in ("token[]", "token"):
            return Shape(dtype="token")
        raise ShapeError(f"not an HLO shape: {text[:80]!r}")
    dtype = m.group(1)
    if dtype not in DTYPE_BYTES:
        raise ShapeError(f"unknown element type {dtype!r} in {text[:80]!r}")
    dims = []
    for d in m.group(2).split(","):
        d = d.strip().removeprefix("<=")
        if not d:
            continue
        if not d.isdigit():
            raise ShapeError(f"bad dimension {d!r} in {text[:80]!r}")
        dims.append(int(d))
    layout = m.group(3) or ""
    space = 0
    if ":" in layout:
        sm = _SPACE.search(layout.split(":", 1)[1])
        if sm:
            space = int(sm.group(1))
    return Shape(dtype=dtype, dims=tuple(dims), memory_space=space)


def shape_prefix(text: str) -> tuple[str, str]:
    """Split ``SHAPE rest`` where SHAPE may be a tuple with spaces inside: returns (shape, rest)."""
    t = text.lstrip()
    if t.startswith("("):
        depth = 0
        for i, c in enumerate(t):
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    return t[: i + 1], t[i + 1 :]
        raise ShapeError("unbalanced tuple shape")
    m = re.match(r"[a-z][a-z0-9]*\[[^\]]*\](\{[^}]*\})?", t)
    if not m:
        raise ShapeError(f"no shape at {t[:60]!r}")
    return m.group(0), t[m.end() :]
