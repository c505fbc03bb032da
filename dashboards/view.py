"""One tab of the dashboard, as ``app.py`` shows it and wires it: its name, its label, whether it shows one
(run, GPU) picked from the runs table, its layout and its callbacks.

``app.TABS`` lists the tabs in their order; a new tab is a module with a ``TAB`` and one line there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dash
from dash import dcc

from dashboards import ids, selection
from dashboards.data import RunStore
from dashboards.rows import View


@dataclass(frozen=True)
class Page:
    """The page as it is first served, which every tab's layout is filled in from: the runs, the (run,
    GPU) views of the table's first selection, what follows from them (``runs_view.follow_rows``) and
    the (run, GPU) each per-run tab opens on."""

    store: RunStore
    views: list[View]
    sel: dict[str, Any]
    runs: dict[str, str | None]

    @property
    def options(self) -> list[dict[str, Any]]:
        """The (run, GPU) choices of the per-run tabs."""
        return self.sel["options"]


@dataclass(frozen=True)
class TabView:
    """A tab: *name* is its value (``opened-<name>`` of ``tab_gate``, and what ``Finding.view`` names);
    *label* a text, or a function of the runs and the selected views (then the tab has an id,
    ``<name>-tab``, and :meth:`wire` keeps the label in step with the ticked rows); *run_choice* the id of
    its (run, GPU) dropdown when it shows one run, which the runs table's selection fills in and a
    finding's button sets."""

    name: str
    label: str | Callable[[RunStore, list[View]], str]
    layout: Callable[[Page], list[Any]]
    register: Callable[[dash.Dash, RunStore], None]
    run_choice: str | None = None

    @property
    def per_run(self) -> bool:
        return self.run_choice is not None

    def component(self, page: Page) -> dcc.Tab:
        """The tab as the page first shows it."""
        if callable(self.label):
            return dcc.Tab(
                id=ids.tab(self.name),
                label=self.label(page.store, page.views),
                value=self.name,
                children=self.layout(page),
            )
        return dcc.Tab(label=self.label, value=self.name, children=self.layout(page))

    def wire(self, app: dash.Dash, store: RunStore) -> None:
        """The tab's callbacks, and a label that follows the ticked rows when it is a function."""
        self.register(app, store)
        if callable(self.label):
            selection.relabel(app, self.name, self.label, store)
