"""After a run: the training step's compiled module, from the XLA dump profile-step asked for
and from what the script handed over (``annotate.compiled_step``), into ``compiled.json``.

The step is the program the one rule (``profiler.xla.step_program``) chooses from the
executions per program the start-up hook counted.  The dump is then pruned to what the
analysis reads: the after-optimization module, buffer assignment and memory report of every
program the script ran (the trace's executions choose again, by the same rule) and of the
few largest others.
A dump the user asked for in their own ``XLA_FLAGS`` is read, never pruned.
Nothing here can fail the run: problems become notes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from profiler.conventions import COMPILED, COMPILED_STEP
from profiler.stored import folder
from profiler.xla import dump
from profiler.xla.compiled import NO_JAXLIB, UNPARSED, agreement, describe, load_module
from profiler.xla.cost_probe import costs_in
from profiler.xla.hlo import GEMM_TARGETS, HloError, Module
from profiler.xla.step_program import Program, StepProgram, choose, module_flops, program_label, with_flops


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _no_dump(run_dir: Path, dump_dir: Path, hook: dict[str, Any] | None) -> str:
    """Why the dump holds no module, in one line: the script's own XLA_FLAGS, or no JAX at all."""
    where = f"{dump_dir.relative_to(run_dir)}/ in the run folder" if dump_dir.is_relative_to(run_dir) else str(dump_dir)
    flags = (hook or {}).get("xla_flags") or {}
    at_exit = (hook or {}).get("xla_flags_at_exit")
    if hook and not hook.get("jax"):
        return f"no XLA dump in {where}: the script never imported JAX"
    if flags and "--xla_dump_to" not in flags.get("in_force", ""):
        return (
            f"no XLA dump in {where}: XLA started with the script's own XLA_FLAGS ({flags.get('in_force')!r}), "
            "without profile-step's --xla_dump_to; add profile-step's flags to the script's XLA_FLAGS"
        )
    if hook and not flags and at_exit is not None and "--xla_dump_to" not in at_exit:
        return (
            f"no XLA dump in {where}: the script replaced XLA_FLAGS ({at_exit!r}), dropping profile-step's "
            "--xla_dump_to, and the start-up hook could not put it back in this JAX; keep the flags it was given"
        )
    if not hook:
        return (
            f"the XLA dump {where} holds no module: the script compiled nothing with XLA, or replaced XLA_FLAGS "
            "(the start-up hook that keeps profile-step's flags did not run: PROFILE_STEP_HOOK=0, or not Python)"
        )
    return f"the XLA dump {where} holds no module, with --xla_dump_to in force (did the script compile anything?)"


def hook_programs(hook: dict[str, Any] | None) -> list[Program]:
    """The programs whose executions the start-up hook counted (``startup.json``'s ``executions``:
    a list of module, program_id, executions; a run folder of an older hook: name -> count)."""
    runs = (hook or {}).get("executions") or []
    if isinstance(runs, dict):
        return [Program(str(n), None, int(c)) for n, c in runs.items()]
    out = []
    for r in runs:
        try:
            pid = r.get("program_id")
            out.append(Program(str(r["module"]), int(pid) if pid is not None else None, int(r["executions"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def executions_text(hook: dict[str, Any] | None) -> str:
    """``jit_step (program 6) 5x, jit_init (program 2) 1x``: the hook's counts, most first."""
    progs = sorted(hook_programs(hook), key=lambda p: -p.executions)
    return ", ".join(f"{program_label(p.name, p.program_id)} {p.executions}x" for p in progs)


def _programs(mods: list[dump.DumpModule], ran: list[Program]) -> list[Program]:
    """The hook's programs with their dump sizes, and the dump's other compiled programs (not run)."""
    by_id = {m.id: m for m in mods if "after" in m.files or "after_proto" in m.files}
    out, used = [], set()
    for p in ran:
        m = by_id.get(p.program_id) if p.program_id is not None else None
        if m is None and p.program_id is None:  # an older hook: by name, the last compiled
            m = next((x for x in reversed(list(by_id.values())) if x.name == p.name), None)
        if m is not None:
            used.add(m.id)
        out.append(Program(p.name, p.program_id, p.executions, size=m.size if m is not None else 0))
    out += [Program(m.name, m.id, 0, size=m.size) for m in by_id.values() if m.id not in used]
    return out


def _dump_module(mods: list[dump.DumpModule], step: StepProgram) -> dump.DumpModule | None:
    """The dump's module of the step program (by id; by name, the last compiled, when the id is unknown)."""
    compiled = [m for m in mods if "after" in m.files or "after_proto" in m.files]
    if step.program_id is not None:
        return next((m for m in compiled if m.id == step.program_id and m.name == step.name), None)
    return next((m for m in reversed(compiled) if m.name == step.name), None)


def costs_by_script_python(entries: list[dict[str, Any]], mods: list[dump.DumpModule], python: str | None) -> None:
    """The cost analysis of modules profile-step's jaxlib could not parse (or that it could not run:
    jax is only the ``capture`` extra), run by the script's own Python, whose XLA wrote that text;
    each entry's note says which did it.
    Paths are compared unresolved: every virtual environment links the same interpreter binary."""
    failed = [
        (e, m)
        for e, m in zip(entries, mods, strict=True)
        if "after" in m.files and any(n.startswith((UNPARSED, NO_JAXLIB)) for n in e["notes"])
    ]
    if not failed or not python or Path(python).absolute() == Path(sys.executable).absolute():
        return
    got, why = costs_in(python, [m.files["after"] for _, m in failed])
    for entry, mod in failed:
        res = got.get(str(mod.files["after"])) or {}
        old = next(n for n in entry["notes"] if n.startswith((UNPARSED, NO_JAXLIB)))
        if res.get("cost") is not None:
            entry["cost"] = res["cost"]
            entry["cost_source"] = f"XLA's cost analysis run by the script's Python ({python})"
            entry["notes"].remove(old)
        else:
            why_not = why or res.get("error")
            entry["notes"][entry["notes"].index(old)] = f"{old}; nor could the script's Python: {why_not}"


def repeated_loops(module: Module) -> int:
    """The ``while`` loops of *module* that run their body more than once per execution (trip counts
    as ``profiler.xla.hlo`` reads them: the backend config, else the loop's condition)."""
    return sum(1 for i in module.instructions() if i.opcode == "while" and (i.trip_count or 0) > 1)


def counted_flops(entries: list[dict[str, Any]], mods: list[dump.DumpModule]) -> None:
    """FLOPs counted from the HLO where XLA's cost analysis undercounts them, XLA's own figure kept
    beside (``xla_flops``) and a note saying why: a module compiled on a real GPU runs most matmuls as
    cuBLAS GEMM custom calls, which it counts as 0 FLOPs (the example's step on an H200: 4.59e12 of
    its 85.8e12); a ``while`` loop's body (a scanned layer loop) it counts once, whatever its trips (a
    TPU's 8-layer scanned step: 6.54e12 against the unrolled step's 29.71e12).  The count is the
    roofline's (``predict.roofline.totals`` over ``predict.schedule``: matmuls by their dimension
    numbers, elementwise and reductions as XLA counts them, each loop body its trips times), so the
    trips are the ones the offload plan and the predictions use."""
    from profiler.predict import roofline, schedule
    from profiler.units import si

    for entry, mod in zip(entries, mods, strict=True):
        path = mod.files.get("after") or mod.files.get("after_proto")
        if path is None:
            continue
        try:
            module = load_module(path)[0]
        except (HloError, OSError):
            continue
        gemms = sum(1 for i in module.instructions() if (i.custom_call_target or "").startswith(GEMM_TARGETS))
        loops = repeated_loops(module)
        if not gemms and not loops:
            continue
        t = roofline.totals(schedule.build(module), roofline.Device("count", 1.0, 1.0, 1.0, 1.0))
        cost = dict(entry.get("cost") or {})
        xla = cost.get("flops")
        cost.update(flops=t["matmul_flops"] + t["other_flops"], xla_flops=xla)
        entry["cost"] = cost
        said = f"it says {si(xla)}" if xla is not None else "it did not run here"
        parts = [f"leaves out its {gemms} cuBLAS GEMM custom calls" if gemms else ""]
        which = f"each of its {loops} loops" if loops > 1 else "its loop"
        parts.append(f"counts the body of {which} once" if loops else "")
        leaves = " and ".join(p for p in parts if p)
        total = si(cost["flops"])
        entry["notes"].append(f"FLOPs counted from the HLO ({total}): XLA's cost analysis {leaves} ({said})")


def record(run_dir: Path, dump_dir: Path | None, own_dump: bool, hook: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``compiled.json`` into *run_dir*; returns the short form for the manifest.

    *hook*: the start-up hook's facts (``startup.json``): its executions per program choose the step
    by the one rule (``profiler.xla.step_program``); the analysis of the trace chooses again from
    the executions it reads, by the same rule."""
    handed = _read_json(run_dir / COMPILED_STEP)
    ran = hook_programs(hook)
    notes: list[str] = []
    doc: dict[str, Any] = {
        "dump_dir": None,
        "dump_pruned": False,
        "step_module": None,
        "step_program": None,
        "chosen_by": None,
        "programs": [{"name": p.name, "program_id": p.program_id, "executions": p.executions} for p in ran],
        "modules": [],
        "handed_over": handed,
        "agreement": None,
        "notes": notes,
    }
    declared = (handed or {}).get("module")
    if handed is None:
        notes.append("the script handed no step to annotate.compiled_step()")
    elif not declared:
        notes += [f"handed-over step: {n}" for n in handed.get("notes", [])] or ["the handed-over step has no module"]
    mods = dump.scan(dump_dir) if dump_dir is not None and dump_dir.is_dir() else []
    uncounted = {u.get("program_id") for u in (hook or {}).get("programs_uncounted") or [] if isinstance(u, dict)}
    programs = _programs(mods, ran)
    if not ran and uncounted:  # a GPU: the script's programs, their executions in XLA's own ranges
        programs = [p for p in programs if p.program_id in uncounted] or programs
    if not ran and uncounted:
        notes.append("XLA records the executions in the trace on this backend: the analysis chooses the step from them")
    if dump_dir is None:
        notes.append("no XLA dump was asked for (--no-xla-dump)")
    elif not mods:
        notes.append(_no_dump(run_dir, dump_dir, hook))
    else:
        doc["dump_dir"] = str(dump_dir.relative_to(run_dir)) if dump_dir.is_relative_to(run_dir) else str(dump_dir)
        keep = dump.candidates(mods, declared)
        ids = {p.program_id for p in ran} | uncounted
        names = {p.name for p in ran if p.program_id is None}
        # every program the script ran: the trace may hold executions the hook's counts do not
        for m in (m for m in mods if m.id in ids or m.name in names):
            if m not in keep and ("after" in m.files or "after_proto" in m.files):
                keep.append(m)
        for m in keep:
            entry = describe(m)
            entry["label"] = m.label
            doc["modules"].append(entry)
        costs_by_script_python(doc["modules"], keep, (hook or {}).get("executable"))
        counted_flops(doc["modules"], keep)
    # the step by its work: the FLOPs of every program that ran, from the modules just described
    chosen = choose(with_flops(programs, module_flops(doc)), declared)
    doc["step_program"] = chosen.to_json() if chosen.name else None
    doc["chosen_by"] = chosen.sentence
    if mods and dump_dir is not None:
        step = _dump_module(mods, chosen)
        if step is not None and not any(e["label"] == step.label for e in doc["modules"]):
            entry = describe(step)
            entry["label"] = step.label
            doc["modules"].append(entry)
            costs_by_script_python(doc["modules"][-1:], [step], (hook or {}).get("executable"))
            counted_flops(doc["modules"][-1:], [step])
            keep.append(step)
        doc["step_module"] = step.label if step else None
        if chosen.name and step is None:
            notes.append(f"the XLA dump holds no module of {chosen.label}: no compiled numbers for the step")
        if step is not None and handed and handed.get("module") == step.name:
            dumped = next(e for e in doc["modules"] if e["label"] == step.label)
            doc["agreement"] = agreement(handed, dumped)
        if own_dump:
            freed = dump.prune(dump_dir, keep)
            doc["dump_pruned"] = True
            doc["dump_freed_bytes"] = freed
    hlo = run_dir / (handed or {}).get("hlo_file", "") if (handed or {}).get("hlo_file") else None
    if declared and hlo is not None and hlo.is_file() and not any(m["name"] == declared for m in doc["modules"]):
        # no dump of it: the plan from the text the script wrote, memory and cost as handed over
        entry = describe(
            dump.DumpModule(-1, declared, {"after": hlo}), with_cost=False, platform=handed.get("platform")
        )
        entry["notes"] = [n for n in entry["notes"] if "buffer assignment" not in n]
        entry.update(label=f"{declared} (handed over)", memory=handed.get("memory"), cost=handed.get("cost"))
        doc["modules"].append(entry)
        doc["step_module"], doc["chosen_by"] = entry["label"], "handed over by the script (no XLA dump)"
    folder.write_json(run_dir / COMPILED, doc)
    entry = next((m for m in doc["modules"] if m.get("label") == doc["step_module"]), {})
    return {
        "fingerprint": (entry.get("fingerprint") or {}).get("value"),
        "step_program": doc["step_program"],
        "file": COMPILED,
        "step_module": doc["step_module"],
        "chosen_by": doc["chosen_by"],
        "handed_over": declared,
        "agree": (doc["agreement"] or {}).get("agree"),
        "notes": notes,
    }
