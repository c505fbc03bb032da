"""Which tab's callbacks a tab switch runs: only the shown tab's.

Every view draws its figure only while its tab is shown.  Were each view's callback an input of the
tabs' value, a switch would send the server one request per view, all but one answering "nothing to
do" (ten requests per switch).  Instead one callback in the browser gives ``opened-<tab>`` (a store)
a new value each time that tab is opened, and a view's callbacks take that store as input and the
tabs' value as state: ``callback`` writes that once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Dash, Input, Output, State, dcc

from dashboards import ids

SHOWN = State(ids.TABS, "value")  # the tab shown, read by the views' callbacks when another input fires


def opened(tab: str) -> Input:
    """The input that fires when *tab* is opened."""
    return Input(ids.opened(tab), "data")


def callback(
    app: Dash, tab: str, *deps: Output | Input | State, hidden: Callable[..., Any] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: the function becomes a callback of *tab* (its outputs, inputs and states in *deps*,
    in that order), run when the tab is opened or an input fires while it is shown.  The function
    takes the values of *deps*' inputs and states; while another tab is shown, the answer is
    ``hidden`` of the same values, else nothing changes."""
    outputs = [d for d in deps if isinstance(d, Output)]
    rest = [d for d in deps if not isinstance(d, Output)]
    unchanged = dash.no_update if len(outputs) == 1 else (dash.no_update,) * len(outputs)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        def gated(_opened: Any, *args: Any) -> Any:
            *values, shown = args
            if shown != tab:
                return unchanged if hidden is None else hidden(*values)
            return fn(*values)

        app.callback(*outputs, opened(tab), *rest, SHOWN, prevent_initial_call=True)(gated)
        return fn

    return decorate


def on(app: Dash, tab: str) -> Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """``callback`` of *app* and *tab* given once, for a view's callbacks: ``gate = on(app, "layers")``,
    then ``@gate(Output(...), Input(...))``."""

    def gate(*deps: Output | Input | State, hidden: Callable[..., Any] | None = None) -> Any:
        return callback(app, tab, *deps, hidden=hidden)

    return gate


def stores(tabs: tuple[str, ...]) -> list[dcc.Store]:
    return [dcc.Store(id=ids.opened(t)) for t in tabs]


def register(app: Dash, tabs: tuple[str, ...]) -> None:
    """In the browser: the opened tab's store gets a new value (the time), the others are left alone."""
    names = ", ".join(f'"{t}"' for t in tabs)
    app.clientside_callback(
        f"function(tab) {{ const skip = window.dash_clientside.no_update, now = Date.now();"
        f" return [{names}].map(t => t === tab ? now : skip); }}",
        [Output(ids.opened(t), "data") for t in tabs],
        Input(ids.TABS, "value"),
        prevent_initial_call=True,
    )
