"""The verdict: the answer first, in a few facts that ``analyze``, ``findings`` and the dashboard open with.

One function, ``verdict(runs)``, over the runs' documents (``RunSummary``); the terminal
(``report.verdict_text``) and the dashboard only format what it returns, so the three show the same
numbers.  For one run, or the chosen one of several:

- *copies*: per direction (D2H, H2D), copy time, its hidden share and the exposed time.  With steps,
  per step and GPU as the policy table has them (the median over the included steps of the step's
  copies summed over GPUs, divided by the GPUs); without steps, over the analysis window, the GPUs
  together (the sums of ``analyze``'s devices table).
- *cost*: what the exposed copies cost in step time: the copy-free replay's saving (every h2d/d2h
  copy removed, and no op waits for them; ``findings.copy_free``, docs/metrics.md "Savings"), per
  step on the GPU where it is largest, or over that GPU's window without steps.
- *savings*: the two findings with the largest replay saving (``saving_ns``), with what to try; when
  no finding has one, the first two findings, with their attributed time, said as such.  A saving per
  step under the run's own step spread (its longest included step less its shortest) is listed as no
  measurable saving (``measurable`` false), with its value and that spread.

For several runs with a median step, *policies*: the fastest among those that fit (peak device
memory, measured or else compiled, within the device's limit where one is known) of the runs on one
kind of device (GPU runs before CPU runs, then the most common GPU model; the others are named, not
compared) and of one program (the runs the policy table compares with percentages: the others ran
another model or size, and are named, not ranked), and its margin over the next fastest against the
noise of the policy table (``policies.step_difference``: within the larger of the two spreads is not
a measured difference).  The runs' copies and savings are then those of that fastest run; without a
median step, of the run with the most exposed copy time.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from profiler.analysis.findings.tried import tried_items
from profiler.analysis.offload_vs_remat import OFFLOAD_PREFIX, REMAT
from profiler.analysis.policies import disjoint, is_cpu, policy_table, step_difference, step_spread, within_noise
from profiler.conventions import device_word as devices_word
from profiler.stored.summary import RunSummary, StepRow
from profiler.xla.same_program import parameter_count, same_program

DIRECTIONS = ("d2h", "h2d")
SAVINGS = 2  # the largest savings the verdict names


def _median(values: list[int]) -> int | None:
    return int(statistics.median(values)) if values else None


def device_word(run: RunSummary) -> str:
    """What the verdict calls the run's devices: ``TPU`` when every one is a TPU, else ``GPU``."""
    return devices_word(run.gpus or ())


def _of_step(s: StepRow, d: str, key: str) -> int:
    """A step's *key* (count, busy_ns, exposed_ns) of direction *d*, all GPUs; of ``offload`` (both as
    one), the step's own numbers, its count both directions'."""
    if d != "offload":
        return s.directions[d][key]  # type: ignore[index]
    if key == "count":
        return sum(s.directions[k]["count"] for k in DIRECTIONS)  # type: ignore[index]
    return getattr(s, key) or 0


def copies(run: RunSummary) -> dict[str, Any]:
    """Per direction, and for both as one (``offload``: their union, what the policy tables' exposed time
    counts): count, busy_ns, hidden_ns, exposed_ns and ``hidden_fraction``; ``per`` says of what (``step``:
    median per included step and GPU; ``window``: the analysis window, the GPUs together)."""
    steps = [s for s in run.included_steps if s.directions]
    gpus = run.device_count
    out: dict[str, Any] = {"per": "step" if steps else "window", "gpus": len(run.devices or {})}
    if device_word(run) == "TPU":
        out["device_word"] = "TPU"  # what the text calls a device (GPU where absent)
    for d in (*DIRECTIONS, "offload"):  # offload: the two directions as one (their union), as the tables count
        if steps:
            busy = _median([_of_step(s, d, "busy_ns") // gpus for s in steps])
            exposed = _median([_of_step(s, d, "exposed_ns") // gpus for s in steps])
            # per GPU as busy and exposed are: 28 a step on each of 2 GPUs is 28, not 56
            count = _median([_of_step(s, d, "count") // gpus for s in steps])
        else:
            per = [(run.devices or {})[dev].get(d) or {} for dev in run.device_ids]
            busy = sum(m.get("busy_ns", 0) for m in per)
            exposed = sum(m.get("exposed_ns", 0) for m in per)
            count = sum(m.get("count", 0) for m in per)
        busy, exposed = busy or 0, exposed or 0
        out[d] = {
            "count": count or 0,
            "busy_ns": busy,
            "exposed_ns": exposed,
            "hidden_ns": busy - exposed,
            "hidden_fraction": (busy - exposed) / busy if busy else None,
        }
    return out


def copy_cost(run: RunSummary) -> dict[str, Any] | None:
    """The copy-free replay's saving where it is largest: ``saving_ns``, ``per`` (step or window),
    ``device``, and ``basis_ns`` (the median step, or that GPU's window); None when not computed."""
    doc = (run.findings or {}).get("copy_free") or {}
    if doc.get("not_modelled"):
        return {"not_modelled": doc["not_modelled"]}
    free = doc.get("devices") or {}
    if not free:
        return None
    per_step = run.median_step_ns is not None and any(v.get("step_saving_ns") is not None for v in free.values())
    key = "step_saving_ns" if per_step else "saving_ns"
    dev, top = max(free.items(), key=lambda kv: (kv[1].get(key) or 0, -int(kv[0])))
    saving = top.get(key)
    if saving is None:
        return None
    basis = run.median_step_ns if per_step else top.get("window_ns")
    # over the window, that GPU's own copy time: a saving above it comes from the other GPUs' copies too
    own = None if per_step else ((run.devices or {}).get(dev) or {}).get("offload", {}).get("busy_ns")
    return {
        "saving_ns": saving,
        "per": "step" if per_step else "window",
        "device": dev,
        "basis_ns": basis,
        "own_copies_ns": own,
        "share": saving / basis if basis else None,
        "host_sync_modeled": (run.findings or {}).get("copy_free", {}).get("host_sync_modeled"),
    }


def _where(f: dict[str, Any], word: str = "GPU") -> str:
    """Where a finding applies, in a few words: ``GPU 1`` (*word*: ``TPU`` on a TPU), ``layer layer_3``,
    ``copy-start.3``."""
    w = f.get("where") or {}
    parts = []
    if w.get("device") is not None:
        parts.append(f"{word} {w['device']}")
    for key in ("layer", "op", "stream", "direction"):
        if w.get(key) is not None:
            parts.append(f"{key} {w[key]}" if key in ("layer", "stream") else str(w[key]))
    return ", ".join(parts)


def _replayed(f: dict[str, Any], per: str) -> tuple[int | None, str | None]:
    """A finding's replay saving on the verdict's basis (*per*: ``step``, each GPU's median per step;
    ``window``, each GPU's window), on the GPU where it is largest: (saving_ns, device)."""
    key = "step_saving_ns" if per == "step" else "window_saving_ns"
    devices = ((f.get("replay") or {}).get("devices")) or {}
    found = [(v.get(key), dev) for dev, v in devices.items() if v.get(key) is not None]
    if not found:
        return None, None
    return max(found, key=lambda x: (x[0], -int(x[1])))


def savings(run: RunSummary, n: int = SAVINGS) -> list[dict[str, Any]]:
    """The *n* findings whose replay saves the most, on the verdict's basis (per step and GPU with
    steps, else over a GPU's window: ``_replayed``), each with rule, where, the saving and what to try;
    without any saving, the first *n* findings that are no info (else the first *n*) with their
    ``attributed_ns``."""
    per = "step" if run.median_step_ns is not None and run.included_steps else "window"
    found = []
    for f in run.finding_list:
        saving, dev = _replayed(f, per)
        found.append((f, saving, dev))
    with_saving = sorted((x for x in found if x[1]), key=lambda x: -x[1])  # type: ignore[operator]
    # without a replayed saving, the problems and warnings first: an info (a note, no time cost to speak
    # of) is named only where nothing else was found
    ranked = [f for f in run.finding_list if f.get("severity") != "info"] or run.finding_list
    chosen = with_saving[:n] if with_saving else [(f, None, None) for f in ranked[:n]]
    noise = step_spread(run.included_steps)["step_spread_ns"] if per == "step" else None
    return [
        {
            "rule": f["id"],
            "severity": f.get("severity"),
            "where": _where(f, device_word(run)),
            "saving_ns": saving,
            "per": per if saving else None,
            # a saving per step under the run's own step spread is not a measured one (None: no spread)
            "measurable": None if not saving or not noise else saving >= noise,
            "noise_ns": noise if saving else None,
            "device": dev,
            "saving_basis": f.get("saving_basis"),
            "attributed_ns": None if saving else f.get("attributed_ns", f.get("cost_ns")),
            # what the attributed time is a part of (a GPU's whole window, not one step): said beside it
            "attributed_basis": None if saving else f.get("attributed_basis"),
            "attributed_basis_ns": None if saving else f.get("attributed_basis_ns"),
            # how many steps that window holds: the copies' line above it is per step
            "basis_steps": None if saving or not f.get("attributed_basis_ns") else len(run.included_steps) or None,
            "try": f.get("try") or "",
        }
        for f, saving, dev in chosen
    ]


def fits(row: dict[str, Any]) -> bool | None:
    """Whether a policy row's device memory (measured peak, else compiled) is within its device's limit;
    None when either is unknown."""
    memory = row["peak_device_bytes"] if row["peak_device_bytes"] is not None else row["compiled_device_bytes"]
    limit = row["device_limit_bytes"]
    return None if memory is None or limit is None else memory <= limit


def one_program(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The rows whose step is the table's reference program (those not marked ``program_differs``, the
    rows the table compares with percentages; without any, those of the first row's program), and,
    where other rows ran another program (another model or size), which program and which rows:
    ``{"policy", "name", "parameters", "others", "others_program"}``; None when all ran one program."""
    same = [r for r in rows if not r.get("program_differs")]
    if not same and rows:
        same = [r for r in rows if same_program(r, rows[0]) is not False]
    ranked = {id(r) for r in same}
    others = [r for r in rows if id(r) not in ranked]
    if not others:
        return rows, None
    ref = same[0]
    program = {
        "policy": ref["policy"],
        "name": ref.get("step_name"),
        "parameters": parameter_count(ref.get("step_signature")),
        "others": [r["policy"] for r in others],
        # what the others ran, where they all ran one program: (name, parameters), else None
        "others_program": _program_of(others),
    }
    return same, program


def _program_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The jit name and parameter count *rows* share, None when they differ."""
    said = {(r.get("step_name"), parameter_count(r.get("step_signature"))) for r in rows}
    return {"name": next(iter(said))[0], "parameters": next(iter(said))[1]} if len(said) == 1 else None


def fastest(table: dict[str, Any]) -> dict[str, Any] | None:
    """Among the policy rows with a median step, the fastest of those that fit (a row whose fit is not
    known counts as fitting, and the result says so), its margin over the next fastest and whether
    that margin is within the noise; None when no row has a median step."""
    timed = [r for r in table["rows"] if r["median_step_ns"] is not None]
    if not timed:
        return None
    # step times compare on one kind of device: GPU runs before CPU runs, then the most common GPU model
    pool = [r for r in timed if not is_cpu(r)] or timed
    kind = Counter(r.get("device_kind") for r in pool).most_common(1)[0][0]
    of_kind = [r for r in pool if r.get("device_kind") == kind]
    other = [r["policy"] for r in timed if r not in of_kind]
    rows, program = one_program(of_kind)
    known = [r for r in rows if fits(r) is not None]
    fitting = [r for r in rows if fits(r) is not False]
    if not fitting:
        too_big = [r["policy"] for r in rows]
        return {"policy": None, "fit_known": bool(known), "too_big": too_big, "other": other, "program": program}
    ordered = sorted(fitting, key=lambda r: r["median_step_ns"])
    best = ordered[0]
    out: dict[str, Any] = {
        "policy": best["policy"],
        "trace": best["trace"],
        "step_ns": best["median_step_ns"],
        "fit_known": fits(best) is not None,
        "too_big": [r["policy"] for r in rows if fits(r) is False],
        "cpu": is_cpu(best),
        "other": other,  # runs on another kind of device: not compared
        "program": program,  # the program the ranked runs ran, where the runs of that kind ran several
        "ranked": [r["trace"] for r in rows],
        "next": None,
    }
    if len(ordered) > 1:
        out["next"] = margin(best, ordered[1])
    # the plan's question on the measured runs: the fastest offload policy against remat (both fitting)
    remat = next((r for r in ordered if r["policy"] == REMAT), None)
    offload = next((r for r in ordered if r["policy"].startswith(OFFLOAD_PREFIX)), None)
    if remat is not None and offload is not None:
        first, second = sorted((offload, remat), key=lambda r: r["median_step_ns"])
        out["offload_vs_remat"] = {"policy": first["policy"], "step_ns": first["median_step_ns"],
                                   "remat_step_ns": remat["median_step_ns"], "next": margin(first, second)}  # fmt: skip
    return out


def margin(best: dict[str, Any], nxt: dict[str, Any]) -> dict[str, Any]:
    """How far policy row *nxt* is behind the faster row *best*, against the noise of their steps."""
    diff = step_difference(best, nxt)
    return {
        "policy": nxt["policy"],
        "step_ns": nxt["median_step_ns"],
        "margin_ns": nxt["median_step_ns"] - best["median_step_ns"],
        "spread_ns": diff[1] if diff else None,
        "within_noise": within_noise(best, nxt),
        "disjoint": disjoint(best, nxt),  # every step of one shorter than every step of the other
        "other_program": same_program(best, nxt) is False,  # their steps are different programs
    }


def _offload(run: RunSummary, key: str) -> int:
    return sum(((run.devices or {})[d].get("offload") or {}).get(key, 0) for d in run.device_ids)


def moved(shown: dict[str, Any]) -> bool:
    """Whether the verdict's copies (``copies(run)``) hold any h2d/d2h copy: what it would show is not
    "no copies" in both directions."""
    return any(shown[d]["count"] or shown[d]["busy_ns"] for d in DIRECTIONS)


def offloads(run: RunSummary) -> bool:
    """Whether the run offloads, as the verdict counts copies (``copies``): a stray 4-byte copy outside
    the steps, which no step's median holds, is not offloading (the one rule of the verdict and the
    dashboard's runs table)."""
    return run.gpu_ran and moved(copies(run))


def _shown(runs: list[RunSummary], table: dict[str, Any], best: dict[str, Any] | None) -> tuple[RunSummary, str]:
    """Of several runs, the one whose copies the verdict shows, and why: the fastest that fits when it
    copies (``offloads``: the copies the verdict would show are not none); else the fastest fitting
    run that copies, so that the reader learns whether offloading's copies were hidden; else (no median
    step) the one with the most exposed copy time."""
    if best and best.get("policy"):
        by_trace = {r.trace: r for r in runs}
        top = by_trace.get(best["trace"])
        if top is not None and offloads(top):
            return top, "fastest"
        kind = next((is_cpu(r), r.get("device_kind")) for r in table["rows"] if r["trace"] == best["trace"])
        ranked = set(best.get("ranked") or [r["trace"] for r in table["rows"]])
        rows = sorted(
            (
                r
                for r in table["rows"]
                if r["median_step_ns"] is not None
                and fits(r) is not False
                and (is_cpu(r), r.get("device_kind")) == kind
                and r["trace"] in ranked
            ),
            key=lambda r: r["median_step_ns"],
        )
        copying = [by_trace[r["trace"]] for r in rows if r["trace"] in by_trace and offloads(by_trace[r["trace"]])]
        if copying:
            return copying[0], "fastest with copies"
        if top is not None:
            return top, "fastest"
    return max(runs, key=lambda r: _offload(r, "exposed_ns")), "most exposed"


# what a failed run's reason says when the step did not fit the device (XLA's words on a GPU and a TPU)
_OOM = re.compile(r"RESOURCE_EXHAUSTED|out[ _]of[ _]memory|\bOOM\b", re.I)
_OOM_SIZES = re.compile(r"required for [^(]*\(([\d.]+\s*[KMGT]i?B?)\) exceeds available \w+ \(([\d.]+\s*[KMGT]i?B?)\)")


def did_not_run(policy: str | None, reason: str) -> dict[str, Any]:
    """A run folder without a trace, as the verdict names it: its policy and why, in a few words (a step
    too big for the device said as such, with XLA's sizes where it gave them)."""
    if _OOM.search(reason):
        sizes = _OOM_SIZES.search(reason)
        why = "out of memory on the device" + (f": {sizes[1]} needed, {sizes[2]} there" if sizes else "")
        return {"policy": policy, "why": why, "out_of_memory": True}
    first = reason.split(": ")[0] if len(reason) > 80 else reason
    return {"policy": policy, "why": first[:80], "out_of_memory": False}


def verdict(
    runs: Sequence[RunSummary | dict[str, Any]],
    table: dict[str, Any] | None = None,
    failed: Sequence[tuple[str | None, str]] = (),
) -> dict[str, Any]:
    """The verdict of one run or several (see the module docstring); *table*: their ``policy_table``
    when the caller has it (else made here), in the order of *runs*; *failed*: (policy, reason) of the
    run folders beside them that hold no trace (a step that did not fit the device: the reason to
    offload), named on a line of their own."""
    summaries = [RunSummary.of(r) for r in runs]
    if not summaries:
        return {"runs": 0}
    best, chosen, chosen_by = None, summaries[0], None
    if len(summaries) > 1:
        table = table if table is not None else policy_table(summaries)
        best = fastest(table)
        chosen, chosen_by = _shown(summaries, table, best)
    out: dict[str, Any] = {
        "runs": len(summaries),
        "policy": chosen.policy,
        "trace": chosen.trace,
        "chosen_by": chosen_by,
        "steps": len(chosen.included_steps) if chosen.steps else 0,
        "median_step_ns": chosen.median_step_ns,
        "window_ns": max((c.get("span_ns") or 0 for c in chosen.compute.values()), default=None) or None,
        "gpu": chosen.gpu_ran,
        "synthetic": chosen.synthetic,
        "copies": copies(chosen),
        "cost": copy_cost(chosen),
        "savings": savings(chosen),
        "fastest": best,
        "failed": [did_not_run(p, why) for p, why in failed],
    }
    if len(summaries) > 1:  # a finding whose flags a sibling run already had on: what that run measured
        mine = tried_items(summaries)[summaries.index(chosen)]
        for s in out["savings"]:
            done = next((t for t in mine if s["rule"] in t["rules"]), None)
            if done:
                s["tried"] = {"sibling": done["sibling"], "outcome": done["outcome"]}
    return out
