"""After a run: the training step's compiled module, from the XLA dump profile-step asked for
and from what the script handed over (``annotate.compiled_step``), into ``compiled.json``.

The dump is then pruned to what the analysis reads (the after-optimization
module, buffer assignment and memory report of the step and of the few
largest other modules, in case the trace shows that one of them is the step).
A dump the user asked for in their own ``XLA_FLAGS`` is read, never pruned.
Nothing here can fail the run: problems become notes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from profiler.conventions import COMPILED, COMPILED_STEP
from profiler.runs import folder
from profiler.xla import dump
from profiler.xla.compiled import NO_JAXLIB, UNPARSED, agreement, describe
from profiler.xla.cost_probe import costs_in


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


def by_executions(mods: list[dump.DumpModule], executions: dict[str, int]) -> list[dump.DumpModule]:
    """The compiled modules the start-up hook saw run, most executions first (then the larger)."""
    ran = [m for m in mods if executions.get(m.name) and ("after" in m.files or "after_proto" in m.files)]
    return sorted(ran, key=lambda m: (-executions[m.name], -m.size, -m.id))


def executions_reason(name: str, executions: dict[str, int], sizes: dict[str, int] | None = None) -> str:
    """``jit_update: ran 5 times (jit_init ran once)``: how a module was chosen by its executions
    (the others named: the most executions, then the largest in the dump, *sizes*)."""

    def times(n: int) -> str:
        return "once" if n == 1 else f"{n} times"

    size = sizes or {}
    others = sorted(((n, c) for n, c in executions.items() if n != name), key=lambda kv: (-kv[1], -size.get(kv[0], 0)))
    others = others[:2]
    tail = ", ".join(f"{n} ran {times(c)}" for n, c in others)
    return f"{name}: ran {times(executions[name])} in the run" + (f" ({tail})" if tail else "")


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


def record(run_dir: Path, dump_dir: Path | None, own_dump: bool, hook: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``compiled.json`` into *run_dir*; returns the short form for the manifest.

    *hook*: the start-up hook's facts (``startup.json``); its executions per module choose the
    step when the script handed none over (the module that ran most often, then the larger)."""
    handed = _read_json(run_dir / COMPILED_STEP)
    executions = {k: int(v) for k, v in ((hook or {}).get("executions") or {}).items()}
    notes: list[str] = []
    doc: dict[str, Any] = {
        "dump_dir": None,
        "dump_pruned": False,
        "step_module": None,
        "chosen_by": None,
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
    if dump_dir is None:
        notes.append("no XLA dump was asked for (--no-xla-dump)")
    elif not mods:
        notes.append(_no_dump(run_dir, dump_dir, hook))
    else:
        doc["dump_dir"] = str(dump_dir.relative_to(run_dir)) if dump_dir.is_relative_to(run_dir) else str(dump_dir)
        step, why = dump.choose_step(mods, declared)
        ran = by_executions(mods, executions)
        if ran and not (declared and why.startswith("handed over")):
            sizes = {m.name: m.size for m in mods}
            step, why = ran[0], executions_reason(ran[0].name, executions, sizes)
        keep = dump.candidates(mods, declared)
        for m in [step, *ran[: dump.CANDIDATES]]:  # the modules that ran: the trace may make one the step
            if m is not None and m not in keep:
                keep.append(m)
        doc["step_module"] = step.label if step else None
        doc["chosen_by"] = why
        for m in keep:
            entry = describe(m)
            entry["label"] = m.label
            doc["modules"].append(entry)
        costs_by_script_python(doc["modules"], keep, (hook or {}).get("executable"))
        if step is not None and handed and handed.get("module") == step.name:
            chosen = next(e for e in doc["modules"] if e["label"] == step.label)
            doc["agreement"] = agreement(handed, chosen)
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
    chosen = next((m for m in doc["modules"] if m.get("label") == doc["step_module"]), {})
    return {
        "fingerprint": (chosen.get("fingerprint") or {}).get("value"),
        "file": COMPILED,
        "step_module": doc["step_module"],
        "chosen_by": doc["chosen_by"],
        "handed_over": declared,
        "agree": (doc["agreement"] or {}).get("agree"),
        "notes": notes,
    }
