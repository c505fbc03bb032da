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
from pathlib import Path
from typing import Any

from profiler.capture import rundir
from profiler.conventions import COMPILED, COMPILED_STEP
from profiler.xla import dump
from profiler.xla.compiled import agreement, describe


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def record(run_dir: Path, dump_dir: Path | None, own_dump: bool) -> dict[str, Any]:
    """Write ``compiled.json`` into *run_dir*; returns the short form for the manifest."""
    handed = _read_json(run_dir / COMPILED_STEP)
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
        notes.append(f"the XLA dump {dump_dir} holds no module (did the script compile anything with XLA?)")
    else:
        doc["dump_dir"] = str(dump_dir.relative_to(run_dir)) if dump_dir.is_relative_to(run_dir) else str(dump_dir)
        step, why = dump.choose_step(mods, declared)
        keep = dump.candidates(mods, declared)
        if step is not None and step not in keep:
            keep.append(step)
        doc["step_module"] = step.label if step else None
        doc["chosen_by"] = why
        for m in keep:
            entry = describe(m)
            entry["label"] = m.label
            doc["modules"].append(entry)
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
    rundir.write_json(run_dir / COMPILED, doc)
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
