"""The verdict on top of the first view: the runs of the selected rows in a few lines, the same as
``profile-step analyze`` and ``findings`` open with (``runs.verdict``, worded by ``report.verdict_text``),
labelled with the runs it covers and, on a selection of runs from different sources or folders, what it
mixes.  It follows the table: its selection, and its rows as their analyses end (``runs_view.register``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from dash import html

from dashboards.data import RunStore
from dashboards.rows import View, label, source_text
from dashboards.selection import selected_runs
from profiler.report.verdict_text import SYNTHETIC_FLAG, verdict_lines
from profiler.runs.verdict import verdict

NAMED = 8  # the runs named in the label; more are counted


def _line(key: str, text: str, keyed: bool) -> html.Div:
    """One verdict line: flush left (a head line) or under its key; a flag as one unbreakable piece."""
    body = text.removesuffix(f" {SYNTHETIC_FLAG}")
    spans = [html.Span(body)] + ([" ", html.Span(SYNTHETIC_FLAG, className="verdict-flag")] if body != text else [])
    return html.Div(
        [html.Span(key, className="verdict-key"), *spans] if keyed else spans,
        className="verdict-line" + ("" if keyed else " verdict-head"),
    )


def covers(store: RunStore, rids: list[str], gpus: bool) -> str:
    """Which runs the verdict is over: ``Over the 3 runs of the selected rows: none · 53ee5a, ...``."""
    names = [label(store.refs[r], store.results[r].run) for r in rids]
    shown = ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")
    whose = "run" if len(rids) == 1 else f"{len(rids)} runs"
    return f"Over the {whose} of the selected rows{' (all their GPUs)' if gpus else ''}: {shown}."


def mixes(store: RunStore, rids: list[str]) -> str | None:
    """What a selection of runs from more than one source or folder mixes (None when it does not)."""
    kinds = Counter((source_text(store.refs[r]), Path(store.refs[r].group).name or "?") for r in rids)
    if len(kinds) < 2:
        return None
    parts = ", ".join(f"{n} {source} ({folder})" for (source, folder), n in kinds.items())
    return (
        f"Mixed selection: {parts}. The verdict treats them as one set of policies; tick the runs of one "
        "folder for a policy decision."
    )


def of(store: RunStore, views: list[View]) -> dict[str, Any] | None:
    """The verdict (``runs.verdict``) of the runs of the selected rows, all their GPUs; None without any."""
    rids = [rid for rid, _ in selected_runs(store, views)]
    if not rids:
        return None
    # the run folders beside the selected runs that hold no trace (a step too big for the device): named
    groups = {store.refs[r].group for r in rids}
    failed = [((ref.manifest or {}).get("policy") or ref.name, ref.no_trace) for ref in store.refs.values()
              if ref.no_trace and ref.group in groups]  # fmt: skip
    return verdict([store.results[r].run for r in rids], failed=failed)


def panel(store: RunStore, views: list[View], found: dict[str, Any] | None = None) -> list[Any]:
    """The verdict's lines for the runs of the selected rows (all their GPUs; *found*: their verdict, ``of``,
    when the caller has it), the runs it covers and what they mix; or what to do first."""
    found = found if found is not None else of(store, views)
    if found is None:
        return [html.Div("Select runs in the table below: the verdict on their copies comes here.", className="muted")]
    rids = [rid for rid, _ in selected_runs(store, views)]
    out, keyed = [], False
    for key, text in verdict_lines(found):
        keyed = keyed or bool(key)  # the head lines (before copies) flush left, the rest under their key
        out.append(_line(key, text, keyed))
    mixed = mixes(store, rids)
    if mixed:
        out.insert(0, html.Div([html.Span("mixed", className="verdict-flag"), " ", mixed], className="verdict-mixed"))
    gpus = any(v.device is not None for v in views)
    note = covers(store, rids, gpus) + " The tabs below have the details."
    return [*out, html.Div(note, className="muted verdict-covers")]
