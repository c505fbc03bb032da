"""The findings as a short block for the terminal, and as Markdown for a pull request."""

from __future__ import annotations

import textwrap
from typing import Any

from profiler.analysis.findings.rules.text import dur, share

OVERLAP = (
    "a saving is what the replay gives back when that cause alone is fixed; findings about the same copies "
    "save the same time: do not add them"
)
ATTRIBUTED = (
    "an attributed time is the time a finding's cause is part of, not what fixing it gives back: several "
    "causes of the same exposed copies each name it: do not add them"
)
# how a finding's saving relates to the verdict's (20.3 ms per step on GPU 0 against 121 ms here, 3 steps x 2 GPUs)
UNITS = (
    "a saving here is over the analysis window, the windows of several devices summed; the verdict's are per "
    "step on one device: about this divided by the steps and the devices"
)
LABEL = {"problem": "PROBLEM", "warning": "WARNING", "info": "info"}


def _where(f: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    def part(k: str, v: Any) -> str:
        return v if k == "steps" and isinstance(v, str) else f"{k} {value(v)}"  # "the capture", "the 4 steps"

    return ", ".join(part(k, v) for k, v in f["where"].items() if k not in ("policy",)) or "the run"


def saving_text(f: dict[str, Any], said: str | None = None) -> str:
    """``saves 20.3 ms, 27% of the median step (75.0 ms); attributed 187.6 ms``; for a cause the replay
    cannot change, why (``not modelled (above)`` where it is *said*, once for several), and the
    attributed time with its share; ``no time cost`` for a note."""
    if "attributed_ns" not in f and "cost_ns" in f:  # recorded before savings: its cost was the attributed time
        f = {**f, **{k.replace("cost", "attributed"): v for k, v in f.items() if k.startswith("cost")}}
    saving, attributed = f.get("saving_ns"), f.get("attributed_ns")
    if saving is not None:
        text = f"saves {dur(saving)}"
        if f.get("saving_share") is not None:
            text += f", {share(f['saving_share'])} of {f['saving_basis']} ({dur(f['saving_basis_ns'])})"
        return text + (f"; attributed {dur(attributed)}" if attributed is not None else "")
    if attributed is None:
        return "no time cost"
    text = f"attributed {dur(attributed)}"
    if f.get("attributed_share") is not None:
        text += f", {share(f['attributed_share'])} of {f['attributed_basis']} ({dur(f['attributed_basis_ns'])})"
    why = f.get("saving_basis") or "no saving modelled"
    return text + ("; not modelled (above)" if said is not None and why == said else f"; {why}")


def shared_reason(found: list[dict[str, Any]]) -> str | None:
    """The one reason for no saving that several of *found* give, said once above them (the text and
    the dashboard's panel alike); None where no reason is shared."""
    whys = [f.get("saving_basis") for f in found if f.get("saving_ns") is None and f.get("attributed_ns") is not None]
    return next((w for w in dict.fromkeys(whys) if w and whys.count(w) > 1), None)


def render_findings(doc: dict[str, Any], width: int = 110, tried: dict[str, str] | None = None) -> str:
    """``Findings`` block, by saving: one verdict per finding with its saving (and the time its rule
    attributes), what to try under it (and what a sibling run that tried it measured: *tried*, rule id ->
    ``tried.try_notes``' words, the numbers under the block), skipped rules counted."""
    found, skipped = doc.get("findings") or [], doc.get("skipped") or []
    counts = {s: sum(f["severity"] == s for f in found) for s in ("problem", "warning", "info")}
    head = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "nothing to report"
    saved = sum(f.get("saving_ns") is not None for f in found)
    attributed = sum(f.get("saving_ns") is None and f.get("attributed_ns") is not None for f in found)
    order = ["by saving in the replay, highest first"] if saved else []
    if attributed:
        order.append("by attributed time" + ("" if saved else ", highest first"))
    out = [f"Findings: {head}" + (f"; {', then '.join(order)}" if len(found) > 1 and order else "")]
    if saved > 1:
        out.append(f"  ({OVERLAP})")
    if attributed > 1:
        out.append(f"  ({ATTRIBUTED})")
    said = shared_reason(found)
    if said is not None:
        out += textwrap.wrap(f"({said})", width, initial_indent="  ", subsequent_indent="   ")
    if any(f.get("saving_ns") for f in found):
        out += textwrap.wrap(f"({UNITS})", width, initial_indent="  ", subsequent_indent="   ")
    for f in found:
        out += textwrap.wrap(
            f"{f['id']} ({saving_text(f, said)}): {f['verdict']}",
            width,
            initial_indent=f"  {LABEL[f['severity']]:7s}  ",
            subsequent_indent=" " * 11,
        )
        done = (tried or {}).get(f["id"])
        advice = f"try: {f['try']}" + (f" ({done}; see below)" if done else "")
        out += textwrap.wrap(  # not within a flag or a run folder's name
            advice, width, initial_indent=" " * 11, subsequent_indent=" " * 16, break_on_hyphens=False
        )
    if skipped:
        rules = ", ".join(s["rule"] for s in skipped)
        out.append(f"  ({len(skipped)} rules could not decide on this trace: {rules}; --json says why)")
    return "\n".join(out)


def by_saving(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings (as dictionaries) by ``saving_ns``, highest first, then those the replay cannot model
    by ``attributed_ns``, then the rest (a stable sort: ties keep their order).  A document recorded
    before savings existed (``cost_ns``) is read as attributed time."""

    def key(f: dict[str, Any]) -> tuple[int, int]:
        attributed = f.get("attributed_ns", f.get("cost_ns"))
        if f.get("saving_ns") is not None:
            return 0, -f["saving_ns"]
        return (1, -attributed) if attributed is not None else (2, 0)

    return sorted(found, key=key)


def findings_markdown(new: list[dict[str, Any]], gone: list[dict[str, Any]], policy: str) -> list[str]:
    """Markdown lines for the findings that are new in head (and those head no longer has)."""
    out: list[str] = []
    if new:
        out += [f"**New findings in head** (`{policy}`):", ""]
        out += [
            f"- **{f['severity']}** `{f['id']}` ({_where(f)}; {saving_text(f)}): {f['verdict']}. *Try:* {f['try']}"
            for f in by_saving(new)
        ]
        out.append("")
    if gone:
        out += [f"Gone in head (`{policy}`): " + "; ".join(f"`{f['id']}` ({_where(f)})" for f in gone), ""]
    return out
