"""The findings as a short block for the terminal, and as Markdown for a pull request."""

from __future__ import annotations

import textwrap
from typing import Any

from profiler.analysis.findings.rules.text import dur, share

OVERLAP = "a cost is the time its cause explains; findings that explain the same time each show it: do not add them"
LABEL = {"problem": "PROBLEM", "warning": "WARNING", "info": "info"}


def _where(f: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    def part(k: str, v: Any) -> str:
        return v if k == "steps" and isinstance(v, str) else f"{k} {value(v)}"  # "the capture", "the 4 steps"

    return ", ".join(part(k, v) for k, v in f["where"].items() if k not in ("policy",)) or "the run"


def cost_text(f: dict[str, Any]) -> str:
    """``costs 54.9 ms, 33% of GPU 0's window (165 ms)``, or ``no time cost``."""
    cost = f.get("cost_ns")
    if cost is None:
        return "no time cost"
    if f.get("cost_share") is None:
        return f"costs {dur(cost)}"
    return f"costs {dur(cost)}, {share(f['cost_share'])} of {f['cost_basis']} ({dur(f['cost_basis_ns'])})"


def render_findings(doc: dict[str, Any], width: int = 110) -> str:
    """``Findings`` block, by cost: one verdict per finding with its cost, what to try under it,
    skipped rules counted."""
    found, skipped = doc.get("findings") or [], doc.get("skipped") or []
    counts = {s: sum(f["severity"] == s for f in found) for s in ("problem", "warning", "info")}
    head = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "nothing to report"
    out = [f"Findings: {head}" + ("; by cost, highest first" if len(found) > 1 else "")]
    if sum(f.get("cost_ns") is not None for f in found) > 1:
        out.append(f"  ({OVERLAP})")
    for f in found:
        out += textwrap.wrap(
            f"{f['id']} ({cost_text(f)}): {f['verdict']}",
            width,
            initial_indent=f"  {LABEL[f['severity']]:7s}  ",
            subsequent_indent=" " * 11,
        )
        out += textwrap.wrap(f"try: {f['try']}", width, initial_indent=" " * 11, subsequent_indent=" " * 16)
    if skipped:
        rules = ", ".join(s["rule"] for s in skipped)
        out.append(f"  ({len(skipped)} rules could not decide on this trace: {rules}; --json says why)")
    return "\n".join(out)


def by_cost(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings (as dictionaries) by ``cost_ns``, highest first, then those without a cost (a stable
    sort: those of equal cost keep their order)."""
    return sorted(found, key=lambda f: (f.get("cost_ns") is None, -(f.get("cost_ns") or 0)))


def findings_markdown(new: list[dict[str, Any]], gone: list[dict[str, Any]], policy: str) -> list[str]:
    """Markdown lines for the findings that are new in head (and those head no longer has)."""
    out: list[str] = []
    if new:
        out += [f"**New findings in head** (`{policy}`):", ""]
        out += [
            f"- **{f['severity']}** `{f['id']}` ({_where(f)}; {cost_text(f)}): {f['verdict']}. *Try:* {f['try']}"
            for f in by_cost(new)
        ]
        out.append("")
    if gone:
        out += [f"Gone in head (`{policy}`): " + "; ".join(f"`{f['id']}` ({_where(f)})" for f in gone), ""]
    return out
