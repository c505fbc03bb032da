"""Findings: small, independent rules that turn the numbers into verdicts and things to try.

Each rule reads the ``Evidence`` of one run and returns findings: an id, a
severity (``info``, ``warning``, ``problem``), a one-line verdict with the
numbers that prove it, where it applies (device, stream, step, layer,
policy), what to try, the evidence, and the dashboard view that shows it.
A rule whose input is missing says nothing and is listed as skipped, with
the reason.  Thresholds live in ``config.py``; every rule can be turned off.

A finding whose cause costs time carries ``cost_ns`` (what it costs in the
window, defined per rule) and ``cost_basis_ns`` (the window, windows or steps
its ``cost_share`` is of).  Its severity then follows that share
(``problem_share``, ``warning_share``), never above the severity the rule
gave (the most it can be); a finding without a time cost keeps its rule's
severity.  Findings are listed by cost, highest first, then those without.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from profiler.analysis.findings.config import FindingsConfig, at_least
from profiler.analysis.findings.evidence import CannotDecide, Evidence

SEVERITIES = ("info", "warning", "problem")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    verdict: str
    action: str  # what to try, in the user's terms
    where: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    view: str = "policies"  # the dashboard tab that shows the evidence
    cost_ns: int | None = None  # what the cause costs in the window; None: no time cost (a note)
    cost_basis_ns: int | None = None  # the time cost_share is of (a device's window, the windows, the steps)
    cost_basis: str = ""  # what that time is, in words ("GPU 0's window", "the 4 steps")

    @property
    def cost_share(self) -> float | None:
        if self.cost_ns is None or not self.cost_basis_ns:
            return None
        return self.cost_ns / self.cost_basis_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.rule,
            "severity": self.severity,
            "cost_ns": self.cost_ns,
            "cost_share": self.cost_share,
            "cost_basis_ns": self.cost_basis_ns,
            "cost_basis": self.cost_basis or None,
            "verdict": self.verdict,
            "where": self.where,
            "try": self.action,
            "evidence": self.evidence,
            "view": self.view,
        }


def graded(f: Finding, config: FindingsConfig) -> Finding:
    """*f* with its severity from its cost share: ``problem`` from ``problem_share``, ``warning``
    from ``warning_share``, else ``info`` (also below ``severity_min_cost_ns``); never above the
    rule's own severity.  A finding without a cost keeps its severity."""
    if f.cost_ns is None:
        return f
    share = f.cost_share
    if share is None or f.cost_ns < config["severity_min_cost_ns"]:
        share = 0.0  # a cost in an empty window, or too small to matter
    level = 2 if at_least(share, config["problem_share"]) else 1 if at_least(share, config["warning_share"]) else 0
    return replace(f, severity=SEVERITIES[min(level, SEVERITIES.index(f.severity))])


def by_cost(findings: list[Finding], order: list[str]) -> list[Finding]:
    """Costed findings by ``cost_ns``, highest first, then those without a cost; ties (and the
    uncosted) by severity, most severe first, then rule order."""

    def key(f: Finding) -> tuple[int, int, int, int]:
        costed = f.cost_ns is not None
        return (0 if costed else 1, -(f.cost_ns or 0), -SEVERITIES.index(f.severity), order.index(f.rule))

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
    """Every enabled rule on *ev*: ``findings`` (by cost, highest first; see ``by_cost``),
    ``skipped`` (rule, why) and ``disabled``."""
    from profiler.analysis.findings import rules  # noqa: F401  (registers the rules)

    found: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule_id, fn in RULES.items():
        if rule_id in ev.config.disabled:
            continue
        try:
            found += [graded(f, ev.config) for f in fn(ev)]
        except CannotDecide as why:
            skipped.append({"rule": rule_id, "why": str(why)})
    return {
        "findings": [f.to_dict() for f in by_cost(found, list(RULES))],
        "skipped": skipped,
        "disabled": sorted(ev.config.disabled),
    }


def run_findings(
    trace: Any,
    manifest: dict[str, Any] | None = None,
    config: FindingsConfig | None = None,
    breakdown: Any = None,
    devices: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The findings of one trace (and its run's manifest), reusing an analysis already made."""
    from profiler.analysis.breakdown import Breakdown

    bd = breakdown if breakdown is not None else Breakdown(trace)
    return evaluate(Evidence(trace, manifest, bd, config or FindingsConfig(), devices))


def rule_ids() -> set[str]:
    from profiler.analysis.findings import rules  # noqa: F401

    return set(RULES)


__all__ = [
    "SEVERITIES",
    "CannotDecide",
    "Evidence",
    "Finding",
    "FindingsConfig",
    "by_cost",
    "evaluate",
    "graded",
    "rule",
    "rule_ids",
    "run_findings",
]
