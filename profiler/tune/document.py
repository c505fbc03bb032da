"""The tune document (``tune.json``, what ``--json`` prints) and its ``plan.json`` form for the
dashboard's plan view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.links import HostLink
from profiler.predict.step import LABEL
from profiler.tune import explain, forms
from profiler.tune.candidate import Name
from profiler.tune.compiler import Compiler
from profiler.tune.search import Search, Tried, best_of


def row(t: Tried, names: list[Name], compiler: Compiler) -> dict[str, Any]:
    """One evaluated candidate as JSON."""
    comp = compiler.cache.get(compiler._key(t.candidate))
    o = t.outcome
    jax_form = forms.jax_form(t.candidate)
    mt, mt_why = forms.maxtext_form(t.candidate)
    return {
        "label": t.candidate.label(names),
        "preset": t.candidate.preset,
        "placements": t.candidate.place(),
        "jax_policy": t.candidate.jax_policy,
        "stage": t.stage,
        "compile_no": t.compile_no,
        "reused": compiler._key(t.candidate) in getattr(compiler, "reused_keys", ()),  # from the record: no compile
        "same_program_as": None,  # the compile that made the same program (HLO fingerprint)
        "status": "ok" if o is not None else "failed",
        "error": compiler.errors.get(compiler._key(t.candidate)),
        "predicted_step_ns": o.step_ns if o else None,
        "predicted_exposed_ns": o.exposed_ns if o else None,
        "predicted_compute_ns": o.compute_ns if o else None,
        "predicted_copy_ns": o.copy_ns if o else None,
        "late_copies": o.late_h2d if o else None,  # analysis.late_copies.summary of its copies back
        "copy_bytes": o.copy_bytes if o else None,
        "device_bytes": o.device_bytes if o else None,
        "host_bytes": o.host_bytes if o else None,
        "d2h_bytes_per_step": comp.d2h_bytes if comp else None,
        "fits": o.fits if o else None,
        "module": comp.module if comp else None,
        "fingerprint": comp.fingerprint if comp else None,
        "memory": comp.memory if comp else None,
        "compile_seconds": comp.seconds if comp else None,
        "hlo_file": comp.hlo_file if comp else None,
        "notes": list(comp.notes) if comp else [],
        "jax_form": jax_form,
        "maxtext_form": mt,
        "maxtext_form_missing": mt_why,
    }


def brief(t: Tried | None, names: list[Name]) -> dict[str, Any]:
    """A chosen candidate as the benchmarks keep it: its label, placements and predicted outcome."""
    return {
        "label": t.candidate.label(names) if t else None,
        "placements": t.candidate.place() if t else None,
        "outcome": vars(t.outcome) if t else None,
    }


def _pruned(result: Search, rows: list[dict[str, Any]], names: list[Name]) -> list[dict[str, str]]:
    """The moves pruned after trying them alone; one that compiled to the resting candidate's own program
    says so (nothing moved: no faster by construction, not by measure)."""
    if result.base is None:
        return result.pruned
    base = result.base.candidate
    programs = {r["label"]: r["fingerprint"] for r in rows if r["fingerprint"]}
    resting = programs.get(base.label(names))
    out = []
    for p in result.pruned:
        same = resting is not None and programs.get(base.with_(p["name"], p["place"]).label(names)) == resting
        out.append({**p, "why": f"the same program as {base.label(names)}"} if same else p)
    return out


def document(
    req: Any,
    names: list[Name],
    found: dict[str, Any],
    result: Search,
    presets: list[Tried],
    compiler: Compiler,
    link: HostLink,
    limit: int | None,
    limit_why: str,
    label: str,
) -> dict[str, Any]:
    """The tune document: every candidate, the presets, the choice with its reasons."""
    everything = result.tried + presets
    choice = best_of(everything)
    rows = [row(t, names, compiler) for t in result.tried]
    preset_rows = [row(t, names, compiler) for t in presets]
    first: dict[str, int] = {}
    for r in sorted(rows + preset_rows, key=lambda r: r["compile_no"] or 10**9):
        fp = r["fingerprint"]
        if fp is None:
            continue
        r["same_program_as"] = first.get(fp) if first.get(fp) != r["compile_no"] else None
        first.setdefault(fp, r["compile_no"])
    ordered = sorted(
        [r for r in rows + preset_rows if r["fits"]], key=lambda r: (r["predicted_step_ns"], r["device_bytes"] or 0)
    )
    chosen = row(choice, names, compiler) if choice is not None else None
    lines = explain.lines(choice, result, compiler, names, presets) if choice is not None else []
    # when one of JAX's own policies wins: the best placement of the names too (it has MaxText's form)
    named = best_of(result.tried + [p for p in presets if not p.candidate.jax_policy])
    best_named = (
        row(named, names, compiler)
        if named is not None and choice is not None and choice.candidate.jax_policy
        else None
    )
    return {
        "label": LABEL,
        # how far such predictions were off on real steps (the tie the verdict calls is its ``tie``)
        "accuracy": explain.accuracy_of(compiler).line(),
        "compiled_label": f"compiled for {label}, not measured",
        "script": str(req.script.resolve()),
        "script_args": req.script_args,
        "batch": req.batch,
        "target": {"label": label, "memory_bytes": compiler.device_memory},
        "link": {"key": link.link.key, "name": link.link.name, "gbps": link.link.gbps, "why": link.why},
        "limit_bytes": limit,
        "limit_why": limit_why,
        "xla_options": req.xla_options,
        "names": [
            {
                "name": n.name,
                "shape": list(n.shape),
                "dtype": n.dtype,
                "count": n.count,
                "bytes_per_step": n.bytes_per_step,
                "input": n.is_input,
            }
            for n in names
        ],
        "names_outside_checkpoints": found.get("outside") or [],
        "checkpoints": found.get("checkpoints"),
        "checkpoint_sites": found.get("checkpoint_sites"),
        "search": {
            "stop": result.stop,
            "budget_cut": result.budget_cut,
            "seeds": [t.candidate.label(names) for t in result.tried if t.stage == "seed"],
            "pruned": _pruned(result, rows, names),
            "tried": len(result.tried),
            "screen": result.screen,
            "screened": result.screened,
            "screened_out": len(result.screened),
            "known": result.known,
        },
        "candidates": rows,
        "presets": preset_rows,
        "fitting": ordered,
        "choice": chosen,
        "why": lines,
        "best_named": best_named,
        "best_named_why": explain.name_lines(named, result, compiler, names, presets, "this placement")
        if best_named
        else [],
    }


def plan_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The tune document in ``plan.json``'s shape (one result per compiled candidate), so that
    everything that reads plans (the dashboard's plan view) reads a tune folder too."""
    results = []
    for r in doc["candidates"] + doc["presets"]:
        results.append(
            {
                "policy": r["label"],
                "batch": doc.get("batch"),
                "dir": str(Path(r["hlo_file"]).parent) if r.get("hlo_file") else None,
                "status": r["status"],
                "compiled": {"module": r["module"], "memory": r["memory"], "hlo_file": "step.hlo.txt"},
                "fingerprint": r["fingerprint"],
                "notes": r["notes"],
                "prediction": {
                    "label": LABEL,
                    "predictions": [
                        {
                            "link": doc["link"]["key"],
                            "link_name": doc["link"]["name"],
                            "link_gbps": doc["link"]["gbps"],
                            "predicted_step_ns": r["predicted_step_ns"],
                            "predicted_exposed_ns": r["predicted_exposed_ns"],
                            "predicted_compute_ns": r["predicted_compute_ns"],
                            "predicted_copy_ns": r["predicted_copy_ns"] or {},
                            "copy_bytes": r["copy_bytes"] or {},
                            "layers": [],
                        }
                    ]
                    if r["status"] == "ok"
                    else [],
                    "notes": [],
                },
            }
        )
    return {
        "target": {**doc["target"]},
        "label": doc["compiled_label"],
        "script": doc["script"],
        "script_args": doc["script_args"],
        "out_dir": doc["out_dir"],
        "links": [doc["link"]],
        "results": results,
        "tune": {k: doc[k] for k in ("choice", "why", "fitting", "search", "limit_bytes", "link", "compiles")},
    }
