"""Findings: small, independent rules that turn the numbers into verdicts and things to try.

Each rule reads the ``Evidence`` of one run and returns findings: an id, a
severity (``info``, ``warning``, ``problem``), a one-line verdict with the
numbers that prove it, where it applies (device, stream, step, layer,
policy), what to try, the evidence, and the dashboard view that shows it.
A rule whose input is missing says nothing and is listed as skipped, with
the reason.  Thresholds live in ``config.py``; every rule can be turned off.

What a finding costs is what fixing it would save (METRICS.md "Savings"): a
finding whose cause the replay can change carries that ``Change`` and the
window it is measured on, and ``evaluate`` replays it: ``saving_ns`` is the
time given back.  The time the rule attributes to the cause stays as evidence
(``attributed_ns``, with the window or steps ``attributed_share`` is of).  The
severity follows the saving's share of its window (``problem_share``,
``warning_share``), or the attributed share for a cause the replay cannot
change (``saving_basis`` says why), never above the severity the rule gave
(the most it can be); a finding with neither keeps its rule's severity.
Findings are listed by saving, highest first, then those without one (by
attributed time), then those without either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from profiler.analysis.findings.config import FindingsConfig, at_least
from profiler.analysis.findings.evidence import CannotDecide, Evidence
from profiler.analysis.links import Link
from profiler.analysis.replay import Change
from profiler.analysis.savings import Saving, Window

SEVERITIES = ("info", "warning", "problem")
NOT_MODELLED = "not modelled yet: the replay does not change this cause"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    verdict: str
    action: str  # what to try, in the user's terms
    where: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    view: str = "policies"  # the dashboard tab that shows the evidence
    attributed_ns: int | None = None  # the time the rule attributes to the cause; None: no time (a note)
    attributed_basis_ns: int | None = None  # the time attributed_share is of (a window, the windows, the steps)
    attributed_basis: str = ""  # what that time is, in words ("GPU 0's window", "the 4 steps")
    window: Window | None = None  # where the saving is measured (the window the attributed time is in)
    change: Change | None = field(default=None, compare=False, repr=False)  # the cause, changed in the replay
    no_saving: str | None = None  # why the replay cannot change the cause (with change None)
    saving: Saving | None = field(default=None, compare=False, repr=False)  # set by ``with_saving``
    saving_ns: int | None = None
    saving_basis_ns: int | None = None
    saving_basis: str = ""

    @property
    def attributed_share(self) -> float | None:
        if self.attributed_ns is None or not self.attributed_basis_ns:
            return None
        return self.attributed_ns / self.attributed_basis_ns

    @property
    def saving_share(self) -> float | None:
        if self.saving_ns is None or not self.saving_basis_ns:
            return None
        return self.saving_ns / self.saving_basis_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.rule,
            "severity": self.severity,
            "saving_ns": self.saving_ns,
            "saving_share": self.saving_share,
            "saving_basis_ns": self.saving_basis_ns,
            "saving_basis": self.saving_basis or None,
            "attributed_ns": self.attributed_ns,
            "attributed_share": self.attributed_share,
            "attributed_basis_ns": self.attributed_basis_ns,
            "attributed_basis": self.attributed_basis or None,
            "verdict": self.verdict,
            "where": self.where,
            "try": self.action,
            "evidence": self.evidence,
            "view": self.view,
            "replay": self.saving.to_json() if self.saving is not None and self.saving_ns is not None else None,
        }


def graded(f: Finding, config: FindingsConfig) -> Finding:
    """*f* with its severity from its saving's share (the attributed share when the replay cannot
    change its cause): ``problem`` from ``problem_share``, ``warning`` from ``warning_share``, else
    ``info`` (also below ``severity_min_cost_ns``); never above the rule's own severity.  A finding
    with neither keeps its severity."""
    if f.saving_ns is not None:
        ns, share = f.saving_ns, f.saving_share
    elif f.attributed_ns is not None:
        ns, share = f.attributed_ns, f.attributed_share
    else:
        return f
    if share is None or ns < config["severity_min_cost_ns"]:
        share = 0.0  # in an empty window, or too small to matter
    level = 2 if at_least(share, config["problem_share"]) else 1 if at_least(share, config["warning_share"]) else 0
    return replace(f, severity=SEVERITIES[min(level, SEVERITIES.index(f.severity))])


def by_saving(findings: list[Finding], order: list[str]) -> list[Finding]:
    """Findings with a saving by ``saving_ns``, highest first; then those whose cause the replay
    cannot change, by ``attributed_ns``; then those with neither; ties by severity, most severe
    first, then rule order."""

    def key(f: Finding) -> tuple[int, int, int, int]:
        tier = 0 if f.saving_ns is not None else 1 if f.attributed_ns is not None else 2
        ns = f.saving_ns if f.saving_ns is not None else f.attributed_ns or 0
        return (tier, -ns, -SEVERITIES.index(f.severity), order.index(f.rule))

    return sorted(findings, key=key)


Rule = Callable[[Evidence], list[Finding]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    """Register a rule under *rule_id* (the order of registration is the order of output)."""

    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn

    return register


def evaluate(ev: Evidence) -> dict[str, Any]:
    """Every enabled rule on *ev*: ``findings`` (each with its saving, by saving; see ``by_saving``),
    ``skipped`` (rule, why), ``disabled``, and ``copy_free`` (per device, the copy-free replay that
    bounds every saving of a change to copies).  The replays run side by side (``saving.savings``)."""
    from profiler.analysis.findings import rules  # noqa: F401  (registers the rules)
    from profiler.analysis.findings.saving import savings

    found: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule_id, fn in RULES.items():
        if rule_id in ev.config.disabled:
            continue
        try:
            found += fn(ev)
        except CannotDecide as why:
            skipped.append({"rule": rule_id, "why": str(why)})
    saved, bound = savings(found, ev)
    found = [graded(f, ev.config) for f in saved]
    return {
        "findings": [f.to_dict() for f in by_saving(found, list(RULES))],
        "skipped": skipped,
        "disabled": sorted(ev.config.disabled),
        "copy_free": bound,
    }


def run_findings(
    trace: Any,
    manifest: dict[str, Any] | None = None,
    config: FindingsConfig | None = None,
    breakdown: Any = None,
    devices: dict[str, Any] | None = None,
    link: Link | None = None,
) -> dict[str, Any]:
    """The findings of one trace (and its run's manifest), reusing an analysis already made; *link*:
    the host link the command was given (``--link``), else each GPU's own."""
    from profiler.analysis.breakdown import Breakdown

    bd = breakdown if breakdown is not None else Breakdown(trace)
    return evaluate(Evidence(trace, manifest, bd, config or FindingsConfig(), devices, link))


def rule_ids() -> set[str]:
    from profiler.analysis.findings import rules  # noqa: F401

    return set(RULES)


__all__ = [
    "SEVERITIES",
    "CannotDecide",
    "Evidence",
    "Finding",
    "FindingsConfig",
    "by_saving",
    "evaluate",
    "graded",
    "rule",
    "rule_ids",
    "run_findings",
]
