"""Whether two policies' steps are the same program: the one test every table that compares
policies calls (the run table of ``run`` and ``analyze``, ``compare``, ``plan``'s table, the
dashboard's policy table).

A step's program is named by its jit name (``jit_train_step``: the module XLA names after the
jitted function; program ids differ from process to process and say nothing) and its parameter
shapes (the entry computation's parameters and results, as ``f32[4,256]``, with no layout or
memory space: a policy may place a parameter in host memory, which changes neither).  Two rows
whose jit names differ, or whose shapes both known differ, ran different programs: a table shows
each row's numbers but no percentage between them, and says so in the row.  Where a row's name
is not known, nothing is said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from profiler.units import count

_HEADER = re.compile(r"^HloModule\s+[^,\s]+.*?entry_computation_layout=\{", re.M)
_LAYOUT = re.compile(r"\{[^{}]*\}")  # a shape's layout: {1,0}, {1,0:T(8,128)S(5)}
_MEMORY = re.compile(r"S\(\d+\)")


def entry_signature(hlo_text: str | None) -> str | None:
    """``(f32[4,256,256], f32[64,256])->f32[]``: the parameter and result shapes of an HLO module's
    entry computation (its header's ``entry_computation_layout``), without layouts or memory spaces;
    None when the text has no such header."""
    if not hlo_text:
        return None
    m = _HEADER.search(hlo_text[:200_000])
    if m is None:
        return None
    depth, i = 1, m.end()
    text = hlo_text
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    body = text[m.end() : i - 1]
    while True:  # nested layouts: {1,0:T(8,128)} holds no braces, tuples hold shapes with layouts
        stripped = _LAYOUT.sub("", body)
        if stripped == body:
            break
        body = stripped
    return re.sub(r"\s+", " ", _MEMORY.sub("", body)).strip() or None


def same_program(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool | None:
    """Whether rows *a* and *b* (``step_name``: the jit name, ``step_signature``: ``entry_signature``)
    ran the same program; None when a name is not known."""
    na, nb = a.get("step_name"), b.get("step_name")
    if not na or not nb:
        return None
    if na != nb:
        return False
    sa, sb = a.get("step_signature"), b.get("step_signature")
    return sa is None or sb is None or _normal(sa) == _normal(sb)


_COMMENT = re.compile(r"/\*.*?\*/")  # the HLO printer's /*index=5*/ marks
_SHAPE = re.compile(r"\w+\[[\d,]*\]")


def _normal(signature: str) -> str:
    """A signature without white space and the printer's comments (``/*index=5*/`` in a long list)."""
    return re.sub(r"\s+", "", _COMMENT.sub("", signature))


def _shapes(signature: str | None) -> tuple[list[str], list[str]]:
    """(parameter shapes, result shapes) of a signature, tuples flattened."""
    if not signature:
        return [], []
    params, _, results = _COMMENT.sub("", signature).partition("->")
    return _SHAPE.findall(params), _SHAPE.findall(results)


def difference(row: Mapping[str, Any], ref: Mapping[str, Any], ref_label: str) -> str:
    """How *row*'s program differs from *ref*'s (``ref_label``: whose it is), in a few words."""
    return f"another program: {short_difference(row, ref)} as {ref_label}"


def parameter_count(signature: str | None) -> int | None:
    """The number of arrays in a signature's parameter list (before ``->``); None without one."""
    return len(_shapes(signature)[0]) if signature else None


def short_difference(row: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """How *row*'s program differs from *ref*'s, in the fewest words: ``jit_scanned, not jit_step``,
    ``jit_step with 34 parameters against 66``, or the first parameter (else result) whose shape
    differs and how many do: ``jit_step with parameter 0 bf16[1024], not bf16[4096] (44 of 66
    parameters differ)`` (a real model's whole signature runs to thousands of characters)."""
    name = row.get("step_name")
    if name != ref.get("step_name"):
        return f"{name}, not {ref.get('step_name')}"
    mine, theirs = _shapes(row.get("step_signature")), _shapes(ref.get("step_signature"))
    n, m = len(mine[0]), len(theirs[0])
    if row.get("step_signature") and ref.get("step_signature") and n != m:
        return f"{name} with {count(n, 'parameter')} against {m}"
    for kind, a, b in (("parameter", mine[0], theirs[0]), ("result", mine[1], theirs[1])):
        apart = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
        if apart:
            i = apart[0]
            more = f" ({len(apart)} of {len(a)} {kind}s differ)" if len(apart) > 1 else ""
            return f"{name} with {kind} {i} {a[i]}, not {b[i]}{more}"
    return f"{name} with parameters {row.get('step_signature')}, not {ref.get('step_signature')}"


def other_model(plan_rows: list[Mapping[str, Any]], run_rows: list[Mapping[str, Any]]) -> str | None:
    """Where no run of known program (*run_rows*) ran any program a plan compiled (*plan_rows*): how they
    differ, in the fewest words (``short_difference``); None where one did, or nothing is known."""
    runs = [r for r in run_rows if r.get("step_name")]
    plans = [p for p in plan_rows if p.get("step_name")]
    if not runs or not plans or any(same_program(p, r) for p in plans for r in runs):
        return None
    return short_difference(plans[0], runs[0])
