"""XLA's profile-guided latency estimator (PGLE) file, and where a schedule puts its copies.

The file is the text form of ``tensorflow.profiler.ProfiledInstructionsProto``
(``tsl/profiler/protobuf/profiled_instructions.proto``): ``costs { name: "..." cost_us: ... }``
per instruction (field 1: name, 2: cost_us, a double) and optional ``latencies { source target
latency_us }``.  XLA:GPU reads it with ``--xla_gpu_pgle_profile_file_or_directory_path``: the
latency-hiding scheduler then takes an instruction's cost from it by name, and for an async pair
(``copy-start``/``copy-done``, a collective's start/done) the start's cost as the time between
the two, which is what it tries to cover with independent work.

``schedule_copies`` reads, in a scheduled module's entry computation, where each copy-start
sits and what runs between it and its copy-done (that work does not depend on the copy: it is
what can hide it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from profiler.errors import InputError
from profiler.xla.hlo import Instruction, Module

PGLE_FLAG = "--xla_gpu_pgle_profile_file_or_directory_path"
NO_WORK = {
    "parameter",
    "constant",
    "get-tuple-element",
    "tuple",
    "bitcast",
    "copy-start",
    "copy-done",
    "partition-id",
    "replica-id",
    "after-all",
}
_ENTRY = re.compile(r'costs\s*\{\s*name:\s*"((?:[^"\\]|\\.)*)"\s*cost_us:\s*([-+0-9.eEinfa]+)\s*\}')


def site_costs(times: pl.DataFrame) -> pl.DataFrame:
    """Per instruction the scheduler sees (``site``: the instruction of the entry or of a loop body
    that ran the thunks), its measured time per execution in µs (``cost_us``, the sum of its thunks'
    medians over the times it runs per step, ``runs``: a loop body's trips), with ``op_class``;
    copies, collectives and compute alike."""
    runs = pl.col("runs").first() if "runs" in times.columns else pl.lit(1)
    return (
        times.group_by("site")
        .agg((pl.col("median_ns").sum() / runs / 1000.0).alias("cost_us"), pl.col("op_class").first())
        .filter(pl.col("cost_us") > 0)
        .sort("site")
    )


def _quote(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def profile_text(costs: pl.DataFrame, header: list[str] | None = None) -> str:
    """The PGLE text proto of *costs* (``site``, ``cost_us``), with ``#`` comment lines first."""
    lines = [f"# {h}" for h in header or []]
    lines += [
        f'costs {{ name: "{_quote(n)}" cost_us: {c:.3f} }}' for n, c in costs.select("site", "cost_us").iter_rows()
    ]
    return "\n".join(lines) + "\n"


def read_profile(path: Path) -> dict[str, float]:
    """The ``costs`` of a PGLE text file, name -> µs; one-line errors for what is not one."""
    if not path.is_file():
        raise InputError(path, "no such file" if not path.exists() else "is a folder, not a PGLE text profile")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot be read as a PGLE text profile ({exc})") from None
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    found = {m.group(1).replace('\\"', '"'): float(m.group(2)) for m in _ENTRY.finditer(body)}
    if not found:
        raise InputError(path, 'holds no PGLE costs (expected lines like: costs { name: "fusion.1" cost_us: 12.5 })')
    return found


def _direction(ins: Instruction) -> str | None:
    """d2h when the copy-start's destination (its tuple's first element) is in host memory,
    h2d when its source (second) is, else None (a copy inside device memory)."""
    if not ins.shape.is_tuple or len(ins.shape.tuple or ()) < 2:
        return None
    if ins.shape.element(0).on_host:
        return "d2h"
    return "h2d" if ins.shape.element(1).on_host else None


def schedule_copies(module: Module, costs: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Each copy-start of the entry computation: ``name``, ``direction``, ``position`` (of the
    start in the schedule), ``done_position``, ``between`` (instructions with work between start
    and done), ``between_us`` (their *costs*, where known) and ``work_before`` (instructions with
    work scheduled before the start)."""
    comp = module.computations.get(module.entry or "")
    if comp is None:
        return []
    ins = comp.instructions
    work = [i.opcode not in NO_WORK for i in ins]
    cum = [0]
    for w in work:
        cum.append(cum[-1] + int(w))
    done_of = {i.operands[0]: k for k, i in enumerate(ins) if i.opcode == "copy-done" and i.operands}
    out = []
    for k, i in enumerate(ins):
        if i.opcode != "copy-start":
            continue
        d = done_of.get(i.name)
        between = cum[d] - cum[k + 1] if d is not None else None
        us = None
        if costs is not None and d is not None:
            us = sum(costs.get(j.name, 0.0) for j in ins[k + 1 : d] if j.opcode not in NO_WORK)
        out.append(
            {
                "name": i.name,
                "direction": _direction(i),
                "position": k,
                "done_position": d,
                "between": between,
                "between_us": us,
                "work_before": cum[k],
            }
        )
    return out


def _place(c: dict[str, Any]) -> tuple[int, int | None]:
    return c["position"], c["done_position"]


def schedule_moves(before: Module, after: Module, costs: dict[str, float] | None = None) -> dict[str, Any]:
    """How the copies moved from *before* to *after* (the same program compiled without and with a
    profile): per copy-start (by name) both placements, and whether anything moved."""
    b = {c["name"]: c for c in schedule_copies(before, costs)}
    a = {c["name"]: c for c in schedule_copies(after, costs)}
    rows = []
    for name in list(dict.fromkeys([*b, *a])):
        x, y = b.get(name), a.get(name)
        rows.append(
            {
                "name": name,
                "direction": (x or y or {}).get("direction"),
                "before": x,
                "after": y,
                "moved": x is None or y is None or _place(x) != _place(y),
            }
        )
    order_b = [i.name for i in before.computations[before.entry].instructions] if before.entry else []
    order_a = [i.name for i in after.computations[after.entry].instructions] if after.entry else []
    return {
        "copies": rows,
        "copies_moved": sum(r["moved"] for r in rows),
        "schedule_changed": order_b != order_a,
        "instructions": len(order_a),
    }
