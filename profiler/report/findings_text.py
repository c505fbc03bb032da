"""The findings as a short block for the terminal, and as Markdown for a pull request."""

from __future__ import annotations

import textwrap
from typing import Any

LABEL = {"problem": "PROBLEM", "warning": "WARNING", "info": "info"}


def _where(f: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    return ", ".join(f"{k} {value(v)}" for k, v in f["where"].items() if k not in ("policy",)) or "the run"


def render_findings(doc: dict[str, Any], width: int = 110) -> str:
    """``Findings`` block: one verdict per finding, what to try under it, skipped rules counted."""
    found, skipped = doc.get("findings") or [], doc.get("skipped") or []
    counts = {s: sum(f["severity"] == s for f in found) for s in ("problem", "warning", "info")}
    head = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "nothing to report"
    out = [f"Findings: {head}"]
    for f in found:
        out += textwrap.wrap(
            f"{f['id']}: {f['verdict']}",
            width,
            initial_indent=f"  {LABEL[f['severity']]:7s}  ",
            subsequent_indent=" " * 11,
        )
        out += textwrap.wrap(f"try: {f['try']}", width, initial_indent=" " * 11, subsequent_indent=" " * 16)
    if skipped:
        rules = ", ".join(s["rule"] for s in skipped)
        out.append(f"  ({len(skipped)} rules could not decide on this trace: {rules}; --json says why)")
    return "\n".join(out)


def findings_markdown(new: list[dict[str, Any]], gone: list[dict[str, Any]], policy: str) -> list[str]:
    """Markdown lines for the findings that are new in head (and those head no longer has)."""
    out: list[str] = []
    if new:
        out += [f"**New findings in head** (`{policy}`):", ""]
        out += [f"- **{f['severity']}** `{f['id']}` ({_where(f)}): {f['verdict']}. *Try:* {f['try']}" for f in new]
        out.append("")
    if gone:
        out += [f"Gone in head (`{policy}`): " + "; ".join(f"`{f['id']}` ({_where(f)})" for f in gone), ""]
    return out
