"""Small building blocks shared by the views: a graph, a run dropdown, a fixed-choice dropdown, an error card."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from dashboards import figures

RUN_PROMPT = "Select runs in the table above, then pick one here."


def choice(did: str, options: list[Any], value: Any, width: str) -> html.Div:
    """A dropdown of fixed choices, one always chosen, *width* % of its row (a ``select-<width>`` class)."""
    return html.Div(
        dcc.Dropdown(id=did, clearable=False, value=value, options=options), className=f"select select-{width}"
    )


def card(message: str) -> html.Div:
    """A run that cannot be shown, and why."""
    return html.Div(
        [html.Strong("Cannot show this run: "), html.Span(message)],
        className="error-card",
    )


def graph(gid: str, figure: dict[str, Any] | None = None, **config: Any) -> dcc.Graph:
    """A graph that says "Loading …" until its callback draws it."""
    return dcc.Graph(id=gid, figure=figure or figures.note_figure("Loading …"), config={"displaylogo": False, **config})


def dropdown(
    did: str, placeholder: str, width: str = "100", options: list[Any] | None = None, value: Any = None
) -> html.Div:
    """A dropdown that takes *width* % of its row (at least 260 px): a ``select-<width>`` class of the stylesheet."""
    return html.Div(
        dcc.Dropdown(
            id=did, clearable=False, placeholder=placeholder, optionHeight=40, options=options or [], value=value
        ),
        className="select" if width == "100" else f"select select-{width}",
    )
