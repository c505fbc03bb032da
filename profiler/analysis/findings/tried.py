"""XLA flags a finding suggests, already tried: another run of the same experiment with them on.

A finding that says "turn on the latency hiding scheduler" beside a run of the same script, arguments and
policy that had it on has its answer measured: the two runs' exposed copy time and step stand side by
side under the finding, so the advice is not repeated blind (the H200 example's offload_qkv run was told
to try the flags that its offload_qkv-lhs-pipelined sibling shows change nothing on that program).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profiler.analysis.compare import run_value
from profiler.analysis.findings.evidence import LHS, PIPELINED, flag_value, parse_flags
from profiler.analysis.policies import step_spread
from profiler.stored.summary import RunSummary
from profiler.units import human_time

# rule id -> the XLA flags its advice turns on
SUGGESTS: dict[str, tuple[str, ...]] = {
    "exposed-copies": (LHS, PIPELINED),
    "lhs-off": (LHS,),
    "exposed-at-boundaries": (PIPELINED,),
}
FLAG_WORDS = {LHS: "the latency hiding scheduler", PIPELINED: "pipelined host offloading"}


def experiment(manifest: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What a run ran, less its XLA flags: the script, its arguments and the policy (the program's own
    ``--policy`` where the command line gives one, as a device capture's labelled runs do). None
    without a script."""
    m = manifest or {}
    if not m.get("script"):
        return None
    program, policy = list(m.get("program") or ()), m.get("policy")
    if "--policy" in program[:-1]:
        policy = program[program.index("--policy") + 1]
    return m["script"], tuple(m.get("script_args") or ()), policy


def _flags(run: RunSummary) -> dict[str, str | None]:
    return parse_flags(((run.manifest or {}).get("xla_flags") or {}).get("final") or "")


def _name(run: RunSummary) -> str:
    return Path(run.trace).parent.name if run.trace else run.policy


def _said(run: RunSummary, sib: RunSummary, flags: list[str]) -> tuple[str, str | None]:
    """(the sibling's numbers against the run's: exposed copy time and step, and whether the steps
    differ; that outcome alone, None without both steps)."""
    words = " and ".join(FLAG_WORDS[f] for f in flags)
    text = f"{_name(sib)} ran the same script, arguments and policy with {words} on"
    exp = run_value(sib, "exposed_ns"), run_value(run, "exposed_ns")
    step = run_value(sib, "step_ns"), run_value(run, "step_ns")
    if None not in exp:
        text += f": exposed copies {human_time(exp[0])} per step against {human_time(exp[1])} here"
    if None in step:
        return text, None
    text += f", step {human_time(step[0])} against {human_time(step[1])}"
    spreads = [s for s in (step_spread(r.included_steps)["step_spread_ns"] for r in (run, sib)) if s is not None]
    diff = step[1] - step[0]
    if spreads and abs(diff) < max(spreads):
        return text + f" (less apart than the steps' spread, {human_time(max(spreads))}: no measured gain)", (
            "no measured gain"
        )
    outcome = f"{human_time(abs(diff))} {'faster' if diff > 0 else 'slower'} with them"
    return text + f" ({outcome})", outcome


def tried_items(runs: Sequence[RunSummary]) -> list[list[dict[str, Any]]]:
    """Per run, one item per sibling run (same ``experiment``) that had on the flags this run's findings
    suggest and it lacks (``SUGGESTS``): the findings (``rules``), the sibling's folder name, the outcome
    (``no measured gain``, ``1.59 ms faster with them``; None without steps) and the whole ``line``.
    Flags no sibling had say nothing."""
    keys = [experiment(r.manifest) for r in runs]
    flags = [_flags(r) for r in runs]
    out: list[list[dict[str, Any]]] = []
    for i, run in enumerate(runs):
        ids = [f["id"] for f in ((run.findings or {}).get("findings") or []) if f["id"] in SUGGESTS]
        wanted = {rule_id: [f for f in SUGGESTS[rule_id] if not flag_value(flags[i], f)] for rule_id in ids}
        items = []
        for j, sib in enumerate(runs):
            if j == i or keys[i] is None or keys[j] != keys[i]:
                continue
            met = [r for r, fl in wanted.items() if fl and all(flag_value(flags[j], f) for f in fl)]
            if met:
                on = [f for f in (LHS, PIPELINED) if any(f in wanted[r] for r in met)]
                text, outcome = _said(run, sib, on)
                line = f"already tried ({', '.join(met)}): {text}"
                items.append({"rules": met, "sibling": _name(sib), "outcome": outcome, "line": line})
        out.append(items)
    return out


def try_notes(items: list[dict[str, Any]]) -> dict[str, str]:
    """Rule id -> what its advice already gave, for the finding's own try line (one run's
    ``tried_items``): "already tried in RUN: no measured gain", several siblings joined by "; "."""
    notes: dict[str, list[str]] = {}
    for t in items:
        for rule in t["rules"]:
            outcome = t["outcome"] or "no step to compare"
            notes.setdefault(rule, []).append(f"already tried in {t['sibling']}: {outcome}")
    return {rule: "; ".join(said) for rule, said in notes.items()}


def tried(runs: Sequence[RunSummary]) -> list[list[str]]:
    """``tried_items``' lines: per run, one line per sibling that already tried its findings' flags."""
    return [[t["line"] for t in items] for items in tried_items(runs)]
