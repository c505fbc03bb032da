"""Findings: small, independent rules that turn the numbers into verdicts and things to try.

Each rule reads the ``Evidence`` of one run and returns findings: an id, a
severity (``info``, ``warning``, ``problem``), a one-line verdict with the
numbers that prove it, where it applies (device, stream, step, layer,
policy), what to try, the evidence, and the dashboard view that shows it.
A rule whose input is missing says nothing and is listed as skipped, with
the reason.  Thresholds live in ``config.py``; every rule can be turned off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profiler.analysis.findings.config import FindingsConfig
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.rule,
            "severity": self.severity,
            "verdict": self.verdict,
            "where": self.where,
            "try": self.action,
            "evidence": self.evidence,
            "view": self.view,
        }


Rule = Callable[[Evidence], list[Finding]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    """Register a rule under *rule_id* (the order of registration is the order of output)."""

    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn

    return register


def evaluate(ev: Evidence) -> dict[str, Any]:
    """Every enabled rule on *ev*: ``findings`` (most severe first), ``skipped`` (rule, why)
    and ``disabled``."""
    from profiler.analysis.findings import rules  # noqa: F401  (registers the rules)

    found: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule_id, fn in RULES.items():
        if rule_id in ev.config.disabled:
            continue
        try:
            found += fn(ev)
        except CannotDecide as why:
            skipped.append({"rule": rule_id, "why": str(why)})
    order = list(RULES)
    found.sort(key=lambda f: (-SEVERITIES.index(f.severity), order.index(f.rule)))
    return {
        "findings": [f.to_dict() for f in found],
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
    "evaluate",
    "rule",
    "rule_ids",
    "run_findings",
]
