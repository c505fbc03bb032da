"""Whether a run's step offloads, from what the run recorded, never from its policy's name.

In order:

1. the step program's compiled HLO (``analysis.policies.step_compiled``): movements to or from
   host memory, or values placed in it (memory space 5: entry parameters, outputs, instructions);
2. the offload names the run declares: the script's own (``annotate.capture(offload_names=[...])``,
   in the manifest's runtime facts), or MaxText's config overrides on its command line
   (``remat_policy=qkv_proj_offloaded`` / ``minimal_offloaded``, which offload the names
   MaxText's ``get_save_and_offload_names`` gives them, or ``remat_policy=custom`` with
   ``NAME=offload``);
3. a compiled step with neither, and nothing declared: the step does not offload;
4. nothing known: undecided.

XLA:CPU lowers activation offloading to nothing, so on a CPU run only 2 can say that the
policy offloads.
"""

from __future__ import annotations

from typing import Any

# MaxText e591f30, src/maxtext/utils/maxtext_utils.py get_save_and_offload_names: the presets that offload
MAXTEXT_OFFLOADED = {
    "qkv_proj_offloaded": ("query_proj", "value_proj", "key_proj", "kv_proj"),
    "minimal_offloaded": (
        "query_proj",
        "value_proj",
        "key_proj",
        "kv_proj",
        "qkv_proj",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwi",
        "mlpwo",
    ),
}


def declared_offloads(manifest: dict[str, Any] | None) -> tuple[list[str], str] | None:
    """(the names the run declares it offloads, who declares them), or None when it declares none."""
    runtime = (manifest or {}).get("runtime") or {}
    names = runtime.get("offload_names")
    if isinstance(names, list) and names:
        return [str(n) for n in names], "the script (annotate.capture(offload_names=...))"
    words = [str(w) for w in ((manifest or {}).get("program") or [])]
    overrides = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    policy = overrides.get("remat_policy")
    if policy in MAXTEXT_OFFLOADED:
        return list(MAXTEXT_OFFLOADED[policy]), f"MaxText's remat_policy={policy}"
    if policy == "custom":
        custom = [k for k, v in overrides.items() if v == "offload"]
        if custom:
            return custom, "MaxText's remat_policy=custom"
    return None


def _placed(plan: dict[str, Any]) -> int:
    hp = plan.get("host_placements") or {}
    return int(hp.get("entry_parameters") or 0) + int(hp.get("entry_outputs") or 0) + int(hp.get("instructions") or 0)


def expected_offload(compiled: dict[str, Any] | None, manifest: dict[str, Any] | None) -> tuple[bool | None, str]:
    """(whether the run's step offloads, why, in a few words) by the order of the module docstring;
    *compiled*: the step program's compiled module (``step_compiled``), None when unknown."""
    plan = (compiled or {}).get("plan") or {}
    program = (compiled or {}).get("step_program") or (compiled or {}).get("module") or "the step"
    moves, placed = len(plan.get("movements") or []), _placed(plan) if plan else 0
    if moves:
        return True, f"its compiled step program {program} moves {moves} values to or from host memory"
    if placed:
        return True, f"its compiled step program {program} places {placed} values in host memory (S(5))"
    declared = declared_offloads(manifest)
    if declared:
        names, who = declared
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return True, f"{who} offloads {shown}"
    if plan:
        return False, f"its compiled step program {program} has no host placement and the run declares no offload"
    return None, (
        "whether the step offloads is unknown: no compiled step program (compiled.json) and no offload names "
        "declared (annotate.capture(offload_names=...), MaxText's remat_policy)"
    )


def recorded_backend(manifest: dict[str, Any] | None, gpu_activity: bool) -> str | None:
    """The backend the run recorded: its devices' platform (``cpu``, ``gpu``), else ``gpu`` where
    the trace has GPU activity, else None."""
    devices = (manifest or {}).get("devices") or []
    platforms = [str(d.get("platform")).lower() for d in devices if isinstance(d, dict) and d.get("platform")]
    if platforms:
        return "cpu" if all(p == "cpu" for p in platforms) else next(p for p in platforms if p != "cpu")
    backend = ((manifest or {}).get("runtime") or {}).get("backend")
    if backend:
        return str(backend)
    return "gpu" if gpu_activity else None
