"""What the selected rows of the runs table stand for: (run, GPU) views, their labels, their runs.

Shared by every view module (runs, findings, policy trade, what-if, layers, timeline, ranks, streams).
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State

from dashboards import ids, rows
from dashboards.data import RunStore
from dashboards.rows import View

# a callback's last input and first state: the ticked rows of the runs table, read as
# ``selected_views(selected, data)`` (a tick fires the callback; new data alone does not)
TICKED = (Input(ids.RUNS, "selected_rows"), State(ids.RUNS, "data"))


def selected_views(selected: list[int] | None, data: list[dict[str, Any]] | None) -> list[View]:
    """The (run, GPU) views of the selected rows, in the table's order."""
    return [View.parse(data[i]["id"]) for i in (selected or []) if i < len(data or [])]


def view_label(store: RunStore, view: View) -> tuple[str, str]:
    """The short label of a (run, GPU) and its whole name (for hovers)."""
    ref = store.refs[view.rid]
    run = store.results[view.rid].run
    return rows.label(ref, run, view.device), rows.full_name(ref, run, view.device)


def run_label(store: RunStore, rid: str) -> tuple[str, str]:
    """The short label of a run (policy and short id, no GPU) and its whole name."""
    ref = store.refs[rid]
    run = store.results[rid].run
    return rows.label(ref, run), rows.full_name(ref, run)


def selected_runs(store: RunStore, views: list[View]) -> list[tuple[str, list[View]]]:
    """The analyzed runs among *views*, each once (in order), with its selected views."""
    out: dict[str, list[View]] = {}
    for v in views:
        if v.rid in store.results:
            out.setdefault(v.rid, []).append(v)
    return list(out.items())


def runs_that(store: RunStore, has: Any, views: list[View], what: str, limit: int = 3) -> str:
    """A sentence naming the analyzed runs outside the selection for which ``has(run)`` holds (the ones
    that would fill a view), or saying that none here does: ``offload_all · synthetic has layers: tick
    its rows in the table above.``"""
    chosen = {v.rid for v in views}
    found = [rid for rid, a in store.results.items() if rid not in chosen and has(a.run)]
    if not found:
        return f"No run shown here has {what}."
    names = [run_label(store, rid)[0] for rid in found[:limit]]
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    verb = "has" if len(found) == 1 else "have"
    return (
        f"{', '.join(names)}{more} {verb} {what}: tick {'its' if len(found) == 1 else 'their'} rows in the table above."
    )


def relabel(app: Any, name: str, label: Any, store: RunStore) -> None:
    """Keep tab *name*'s label, ``label(store, views)``, in step with the ticked rows (and with the table's
    rows as their analyses end); unchanged when it reads the same (a new label re-renders the tab)."""

    @app.callback(
        Output(ids.tab(name), "label"),
        Input(ids.RUNS, "selected_rows"),
        Input(ids.RUNS, "data"),
        State(ids.tab(name), "label"),
        prevent_initial_call=True,
    )
    def on_ticked(selected, data, shown):
        new = label(store, selected_views(selected, data))
        return dash.no_update if new == shown else new
