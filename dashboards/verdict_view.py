"""The verdict on top of the first view: the runs of the selected rows in a few lines, the same as
``profile-step analyze`` and ``findings`` open with (``runs.verdict``, worded by ``report.verdict_text``)."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.selection import selected_runs
from profiler.report.verdict_text import verdict_lines
from profiler.runs.verdict import verdict


def panel(store: RunStore, views: list[View]) -> list[Any]:
    """The verdict's lines for the runs of the selected rows (all their GPUs), or what to do first."""
    runs = [store.results[rid].run for rid, _ in selected_runs(store, views)]
    if not runs:
        return [html.Div("Select runs in the table below: the verdict on their copies comes here.", className="muted")]
    lines = verdict_lines(verdict(runs))
    out, keyed = [], False
    for key, text in lines:
        keyed = keyed or bool(key)  # the head lines (before copies) flush left, the rest under their key
        out.append(
            html.Div(
                [html.Span(key, className="verdict-key"), html.Span(text)] if keyed else [html.Span(text)],
                className="verdict-line" + ("" if keyed else " verdict-head"),
            )
        )
    covered = {v.rid for v in views}
    gpus = " (all their GPUs)" if any(v.device is not None for v in views) else ""
    note = f"For the {len(covered)} run(s) of the selected rows{gpus}; the tabs below have the details."
    return [*out, html.Div(note, className="muted")]
