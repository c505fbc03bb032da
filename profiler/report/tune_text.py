"""``profile-step tune`` as text: the candidates that fit, best first, the presets beside them, the
choice with one line per activation, and its MaxText and JAX forms."""

from __future__ import annotations

import textwrap
from typing import Any

from profiler.report.table import table
from profiler.units import COLUMNS, count, human_bytes, readable_time_unit, scaled

LEGEND = (
    "step = predicted step time; exposed = copy time the compute stream waits for (not hidden); device = the step's "
    "device memory (memory_analysis: arguments + outputs + temporaries); host = host memory; compile = the compile "
    "that made it (=N: the same program as compile N; kept: an earlier tune's program, from the record); "
    "a candidate names what it moves from where the "
    "names rest (recomputed; a checkpoint's input kept): keep = on the device, offload = to host memory"
)


def _rows(rows: list[dict[str, Any]], div: int, chosen: str | None) -> list[list[str]]:
    out = []
    for r in rows:
        ok = r["status"] == "ok"
        out.append(
            [
                ("* " if r["label"] == chosen else "  ") + r["label"],
                r["stage"],
                scaled(r["predicted_step_ns"], div) if ok else "failed",
                scaled(r["predicted_exposed_ns"], div) if ok else "",
                human_bytes(r["device_bytes"]) if r["device_bytes"] is not None else "-",
                human_bytes(r["host_bytes"]) if r["host_bytes"] else "0",
                "-" if r["fits"] is None else ("yes" if r["fits"] else "NO"),
                f"={r['same_program_as']}"
                if r.get("same_program_as")
                else ("kept" if r.get("reused") else str(r["compile_no"] or "-")),
            ]
        )
    return out


def _jobs_text(s: dict[str, Any]) -> str:
    return f" in {s['jobs']} processes side by side" if (s.get("jobs") or 1) > 1 else ""


def _screen_text(s: dict[str, Any]) -> str:
    """What the screen kept from the compiler: the greedy path, the changes (each predicted from the names'
    effects alone), and the step they were measured against."""
    xs = s.get("screened") or []
    if not xs:
        return ""
    path = any(x.get("kind") == "path" for x in xs)
    n = sum(1 for x in xs if x.get("kind") != "path")
    what = " and ".join(w for w in ("the greedy path" if path else "", count(n, "change") if n else "") if w)
    bests = list(dict.fromkeys(x.get("incumbent") for x in xs if x.get("incumbent")))
    best = f"the best known step ({bests[0]})" if len(bests) == 1 else "the best step known then"
    return (f", {what} not compiled (predicted from the names' effects alone not to beat {best} by more than "
            f"{100 * s['screen']:g}%; --no-screen compiles {'it' if (path + n) == 1 else 'them'})")  # fmt: skip


def render_tune(doc: dict[str, Any], show_all: bool = False, wide: bool = False) -> str:
    """The terminal page of one tune document: prose in lines of at most 160 columns, unwrapped with
    *wide* (the table and the MaxText and JAX forms are never wrapped: they are copied whole)."""
    width = 10**9 if wide else COLUMNS
    fitting = doc["fitting"]
    chosen = (doc.get("choice") or {}).get("label")
    everything = doc["candidates"] + doc["presets"]
    unit, div = readable_time_unit(r["predicted_step_ns"] for r in everything if r["predicted_step_ns"] is not None)
    heads = ("candidate", "stage", f"step {unit}", f"exposed {unit}", "device", "host", "fits", "compile")
    link = doc["link"]
    limit = doc.get("limit_bytes")
    out = textwrap.wrap(
        f"{doc['label']}, {doc['target']['label']}, host link {link['name']} ({link['gbps']:g} GB/s per direction), "
        f"memory limit {human_bytes(limit) if limit else 'none'} ({doc['limit_why']}):",
        width,
        subsequent_indent="  ",
    )
    shown = everything if show_all else fitting
    if shown:
        rows = sorted(shown, key=lambda r: (r["fits"] is not True, r["predicted_step_ns"] or 0)) if show_all else shown
        out.append(table(heads, _rows(rows, div, chosen), left=(0, 1)))
    else:
        out.append("no candidate fits")
    left_out = len(everything) - len(fitting)
    if left_out and not show_all:
        out.append(f"({left_out} candidates that do not fit or failed are not shown; --all shows them)")
    out += textwrap.wrap(LEGEND, width)
    out += textwrap.wrap(doc.get("accuracy") or "", width)
    s = doc["search"]
    out.append("")
    out += textwrap.wrap(
        f"search: {count(s['compiles'], 'compile')} in {s['compile_seconds']:.0f} s{_jobs_text(s)} for "
        f"{len(doc['names'])} named activations{_screen_text(s)}; "
        f"stopped: {s['stop']}; then {count(doc['compiles'] - s['compiles'], 'compile')} for the presets "
        + (
            f"(compiled side by side with the bounds before the search, {s['batch_seconds']:.0f} s; "
            if s.get("batch_seconds") and doc["compiles"] > s["compiles"]
            else "("
        )
        + f"{doc['seconds']:.0f} s in all)"
        + _record_text(doc.get("record")),
        width,
        subsequent_indent="  ",
        break_on_hyphens=False,  # a folder's path stays whole
    )
    if s["pruned"]:
        verb = {"device": "keep", "offload": "offload", "remat": "recompute"}
        pr = ", ".join(f"{verb.get(p['place'], p['place'])} {p['name']} ({p['why']})" for p in s["pruned"][:8])
        more = f" and {len(s['pruned']) - 8} more" if len(s["pruned"]) > 8 else ""
        out += textwrap.wrap(f"pruned after trying them alone: {pr}{more}", width, subsequent_indent="  ")
    if doc.get("names_outside_checkpoints"):
        out.append(
            "named outside any jax.checkpoint (no policy reaches them): " + ", ".join(doc["names_outside_checkpoints"])
        )
    choice = doc.get("choice")
    out.append("")
    if choice is None:
        failed = [r for r in everything if r["status"] != "ok"]
        if failed and len(failed) == len(everything):
            out += textwrap.wrap(f"no choice: no candidate compiled; the first: {failed[0]['error']}", width)
        else:
            out.append("no choice: nothing that was compiled fits in the memory limit")
        return "\n".join(out)
    for i, line in enumerate(doc["why"]):
        out += textwrap.wrap(line, width, initial_indent="" if i == 0 else "  ", subsequent_indent="    ")
    out.append("")
    if choice.get("maxtext_form"):
        out.append(f"MaxText: {choice['maxtext_form']}")
    else:
        out.append(f"MaxText: none ({choice['maxtext_form_missing']})")
    out.append(f"JAX:     policy={choice['jax_form']}")
    named = doc.get("best_named")
    if named:
        slower = named["predicted_step_ns"] / choice["predicted_step_ns"] - 1
        out.append("")
        out += textwrap.wrap(
            f"the best placement of the named activations: {named['label']}, {named['predicted_step_ns'] / div:.2f} "
            f"{unit} ({100 * slower:+.1f}% against the choice)",
            width,
        )
        for line in doc.get("best_named_why") or []:
            out += textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="    ")
        if named.get("maxtext_form"):
            out.append(f"MaxText: {named['maxtext_form']}")
        out.append(f"JAX:     policy={named['jax_form']}")
    out += verify_lines(doc.get("verify"))
    out.append(f"\n(files: {doc['out_dir']})")
    return "\n".join(out)


def _record_text(rec: dict[str, Any] | None) -> str:
    """What the record of earlier tunes gave: programs reused, choices tried first."""
    if not rec:
        return ""
    launch = rec.get("launch") or {}
    if launch.get("from_record"):
        started = (
            "the script was started for the placements the record lacked"
            if launch.get("script_started")
            else "the step taken from the record without starting the script (--start-script starts it)"
        )
    else:
        started = ""
    return (
        f"; {count(rec['reused'], 'program')} reused from earlier tunes of this step, {rec['seeds']} of their "
        f"choices tried first, {rec['stored']} new {'one' if rec['stored'] == 1 else 'ones'} kept ({rec['folder']})"
        + (f"; {started}" if started else "")
    )


def verify_lines(v: dict[str, Any] | None) -> list[str]:
    """``--verify``: each run, whether both ran and compiled to different programs."""
    if not v:
        return []
    backend = v.get("backend")
    where = (
        f"programs compiled by XLA for {backend.upper()} on this machine, not for the target"
        if backend and backend != "gpu"
        else ("programs compiled by XLA for GPU" if backend else "the backend that compiled them was not recorded")
    )
    out = ["", f"verify (captured under nsys, profile-step run; {where}):"]
    for r in v["runs"]:
        fp = r["fingerprint"] or "no compiled step recorded"
        out.append(
            f"  {r['role']}: {r['label']}: {r['status']} (exit {r['exit_code']}), step program {fp} -> {r['run_dir']}"
        )
    if v["different_programs"] is True:
        out.append("  the choice and the best preset ran and compiled to different programs")
    elif v["different_programs"] is False:
        out.append("  the choice and the best preset compiled to the same program: the policy made no difference here")
    out.append(f"  on a GPU, predicted against measured per run: {v['analyze']}")
    return out
