"""XLA flags a finding suggests, already tried: another run of the same experiment with them on.

A finding that says "turn on the latency hiding scheduler" beside a run of the same script, arguments and
policy that had it on has its answer measured: the two runs' exposed copy time and step stand side by
side under the finding, so the advice is not repeated blind (the H200 example's offload_qkv run was told
to try the flags that its offload_qkv-lhs-pipelined sibling shows change nothing on that program).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiler.analysis.compare import run_value
from profiler.analysis.findings.evidence import LHS, PIPELINED, flag_value, parse_flags
from profiler.analysis.policies import step_spread
from profiler.conventions import MANIFEST
from profiler.stored.folder import manifest_in
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


def _ran_with(name: str, flags: list[str]) -> str:
    """``RUN ran the same script, arguments and policy with the latency hiding scheduler on``."""
    return f"{name} ran the same script, arguments and policy with {' and '.join(FLAG_WORDS[f] for f in flags)} on"


def _said(run: RunSummary, sib: RunSummary, flags: list[str]) -> tuple[str, str | None]:
    """(the sibling's numbers against the run's: exposed copy time and step, and whether the steps
    differ; that outcome alone, None without both steps)."""
    text = _ran_with(_name(sib), flags)
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


def _wanted(run: RunSummary, flags: dict[str, str | None]) -> dict[str, list[str]]:
    """Rule id -> the flags its advice turns on that the run lacks, for the run's findings that advise flags."""
    ids = [f["id"] for f in ((run.findings or {}).get("findings") or []) if f["id"] in SUGGESTS]
    return {rule_id: [f for f in SUGGESTS[rule_id] if not flag_value(flags, f)] for rule_id in ids}


def _met(wanted: dict[str, list[str]], flags: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(the rules whose lacking flags a sibling with *flags* had all on, those flags)."""
    met = [r for r, fl in wanted.items() if fl and all(flag_value(flags, f) for f in fl)]
    return met, [f for f in (LHS, PIPELINED) if any(f in wanted[r] for r in met)]


def tried_items(runs: Sequence[RunSummary]) -> list[list[dict[str, Any]]]:
    """Per run, one item per sibling run (same ``experiment``) that had on the flags this run's findings
    suggest and it lacks (``SUGGESTS``): the findings (``rules``), the sibling's folder name, the outcome
    (``no measured gain``, ``1.59 ms faster with them``; None without steps) and the whole ``line``.
    Flags no sibling had say nothing."""
    keys = [experiment(r.manifest) for r in runs]
    flags = [_flags(r) for r in runs]
    out: list[list[dict[str, Any]]] = []
    for i, run in enumerate(runs):
        wanted = _wanted(run, flags[i])
        items = []
        for j, sib in enumerate(runs):
            if j == i or keys[i] is None or keys[j] != keys[i]:
                continue
            met, on = _met(wanted, flags[j])
            if met:
                text, outcome = _said(run, sib, on)
                line = f"already tried ({', '.join(met)}): {text}"
                items.append({"rules": met, "sibling": _name(sib), "outcome": outcome, "line": line})
        out.append(items)
    return out


def tried_beside(
    run: RunSummary, trace: Path, summarize: Callable[[Path], RunSummary | None] | None = None
) -> list[dict[str, Any]]:
    """``tried_items`` of a run analysed alone: the run folders beside its own (one parent) of the same
    experiment that had on the flags its findings suggest, found by their manifests; *summarize* (a run
    folder -> its analysis, None where it has none) gives each one's numbers, as ``findings`` on both
    runs would (without it, or where it gives None: no numbers, ``outcome`` None, and the line says
    which command compares them)."""
    own = Path(trace).resolve().parent
    key = experiment(run.manifest)
    wanted = _wanted(run, _flags(run))
    if key is None or not any(wanted.values()) or not (own / MANIFEST).is_file():
        return []
    items = []
    for folder in sorted(p for p in own.parent.iterdir() if p.is_dir() and p != own):
        man = manifest_in(folder)
        if man is None or experiment(man) != key:
            continue
        met, on = _met(wanted, parse_flags(((man.get("xla_flags") or {}).get("final")) or ""))
        if not met:
            continue
        sib = summarize(folder) if summarize is not None else None
        if sib is not None:
            text, outcome = _said(run, sib, on)
        else:
            text, outcome = f"{_ran_with(folder.name, on)}; profile-step findings on both runs compares them", None
        items.append(
            {
                "rules": met,
                "sibling": folder.name,
                "outcome": outcome,
                "line": f"already tried ({', '.join(met)}): {text}",
            }
        )
    return items


def try_notes(items: list[dict[str, Any]]) -> dict[str, str]:
    """Rule id -> what its advice already gave, for the finding's own try line (one run's
    ``tried_items``): "already tried in RUN: no measured gain" (without the outcome where none is known),
    several siblings joined by "; "."""
    notes: dict[str, list[str]] = {}
    for t in items:
        for rule in t["rules"]:
            said = f": {t['outcome']}" if t["outcome"] else ""
            notes.setdefault(rule, []).append(f"already tried in {t['sibling']}{said}")
    return {rule: "; ".join(said) for rule, said in notes.items()}
