"""The Copy streams tab: one (run, GPU)'s copy streams against a host link's rate (its own, or one picked).

The streams are the run summary's ``streams`` for the GPU; the default link comes from the GPU's model.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import ids, links, selection, tab_gate
from dashboards.data import RunStore
from dashboards.figures import BOTTOM_LEGEND, COLORS, TITLE, Figure, esc, figure, note_figure
from dashboards.rows import View
from dashboards.styles import MUTED_COLOR
from dashboards.view import Page, TabView
from dashboards.widgets import RUN_PROMPT, choice, dropdown, graph
from profiler.units import human_bytes, human_time

LINK_OPTIONS = [{"label": links.label(lk), "value": lk.key} for lk in links.LINKS] + [
    {"label": "custom (GB/s per direction)", "value": links.CUSTOM}
]


def link_choice(store: RunStore, vid: str | None) -> tuple[str | None, float | None, str]:
    """The link drawn by default for a (run, GPU): from its device model, and why."""
    if not vid:
        return None, None, ""
    view = View.parse(vid)
    link, why = links.run_link(store.get(view.rid).run, view.device)
    return link.key, link.gbps, f"Link drawn: {why}. Pick another, or a custom rate, to compare."


def _panels(n: int, gap: float) -> list[tuple[float, float]]:
    width = (1 - gap * (n - 1)) / n
    return [(i * (width + gap), i * (width + gap) + width) for i in range(n)]


def _axis(i: int) -> str:
    """Plotly's names: x, x2, x3 ..."""
    return "" if i == 0 else str(i + 1)


def _titles(domains: list[tuple[float, float]], titles: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "text": t,
            "showarrow": False,
            "xref": "paper",
            "yref": "paper",
            "x": (a + b) / 2,
            "y": 1.0,
            "yanchor": "bottom",
            "yshift": 6,
            "font": {"size": 14},
        }
        for (a, b), t in zip(domains, titles, strict=True)
    ]


def _panel_note(message: str, i: int) -> dict[str, Any]:
    """A note inside panel *i* of a 1 x N figure (whose x axis is then hidden)."""
    return {
        "text": esc(message).replace("; ", "<br>"),
        "showarrow": False,
        "xref": f"x{_axis(i)} domain",
        "yref": "y domain",
        "x": 0.5,
        "y": 0.5,
        "font": {"size": 12, "color": MUTED_COLOR},
    }


def _stream_color(classes: list[str]) -> str:
    if classes == ["d2h"]:
        return COLORS["d2h"]
    if classes == ["h2d"]:
        return COLORS["h2d"]
    if "d2h" in classes:  # both directions: D2H orange, striped with H2D green (_stream_marker)
        return COLORS["d2h"]
    return COLORS["h2d"] if "h2d" in classes else COLORS["memset"]


def _stream_marker(streams: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream's bar in its copies' colour: one direction plain, both directions striped in the two
    colours (never the grey of the "mixed" context, which is not a kind of copy)."""
    both = ["d2h" in s["classes"] and "h2d" in s["classes"] for s in streams]
    colors = [_stream_color(s["classes"]) for s in streams]
    if not any(both):
        return {"color": colors}
    return {
        "color": colors,
        # "replace" with the bar's colour as the pattern's background: plotly.js's "overlay" warns
        # ("Invalid color specifier: Array(n)") for each bar when the marker's colours are an array
        "pattern": {
            "shape": ["/" if b else "" for b in both],
            "fgcolor": COLORS["h2d"],
            "bgcolor": colors,
            "fillmode": "replace",
            "solidity": 0.5,
        },
    }


# achieved GB/s by what ran beside a copy (METRICS.md "Copy bandwidth by context"): blue as the compute
# kernels it shared the GPU with, yellow for other copies
CONTEXT_LABEL = {"alone": "alone", "kernels": "beside kernels", "copies": "beside other copies", "mixed": "mixed"}
CONTEXT_COLOR = {"alone": "#4D4D4D", "kernels": COLORS["compute"], "copies": "#F0E442", "mixed": "#BBBBBB"}


def streams_figure(streams: list[dict[str, Any]], link_gbps: float, link_name: str, title: str = "") -> Figure:
    """Per copy stream of one device: occupancy of the device window, and achieved GB/s against the
    link: over all the stream's copies, and by context (alone, beside kernels, beside other copies,
    mixed; copies of 1 MiB or more, ``streams[].contexts``)."""
    if not streams:
        return note_figure("No copies on this GPU: no stream carried a copy.")
    labels = [f"stream {s['stream']}<br>{'+'.join(c.upper() for c in s['classes'])}" for s in streams]
    marker = _stream_marker(streams)
    info = [
        f"{s.get('count', 0):,} copies, {human_bytes(s['bytes'])}, busy {human_time(s['busy_ns'])}" for s in streams
    ]
    domains = _panels(2, 0.1)
    contexts = [s.get("contexts") or {} for s in streams]
    ctx_gbps = [(c.get(k) or {}).get("gbps") for c in contexts for k in CONTEXT_LABEL]
    top = max([link_gbps] + [s["gbps"] or 0 for s in streams] + [g or 0 for g in ctx_gbps])
    data = [
        {
            "type": "bar",
            "x": labels,
            "y": [100 * s["occupancy"] for s in streams],
            "marker": marker,
            "customdata": info,
            "hovertemplate": "%{customdata}<br>occupancy %{y:.1f}%<extra></extra>",
            "showlegend": False,
        },
        {
            "type": "bar",
            "x": labels,
            "y": [s["gbps"] for s in streams],
            "xaxis": "x2",
            "yaxis": "y2",
            "name": "all copies",
            "offsetgroup": "all",
            "marker": marker,
            "customdata": info,
            "hovertemplate": "all copies: %{customdata}<br>%{y:.2f} GB/s<extra></extra>",
            "showlegend": False,
        },
    ]
    for key, text in CONTEXT_LABEL.items():
        entries = [c.get(key) or {"count": 0, "bytes": 0, "duration_sum_ns": 0, "gbps": None} for c in contexts]
        data.append(
            {
                "type": "bar",
                "x": labels,
                "y": [e["gbps"] for e in entries],
                "xaxis": "x2",
                "yaxis": "y2",
                "name": text,
                "offsetgroup": key,
                "marker": {"color": CONTEXT_COLOR[key], "line": {"color": "#666", "width": 0.5}},
                "customdata": [
                    f"{e['count']:,} copies of 1 MiB or more, {human_bytes(e['bytes'])}, "
                    f"{human_time(e['duration_sum_ns'])}"
                    for e in entries
                ],
                "hovertemplate": f"{text}: %{{customdata}}<br>%{{y:.2f}} GB/s<extra></extra>",
                "showlegend": True,
            }
        )
    annotations = _titles(
        domains,
        [
            "occupancy of the device window (%)",
            "achieved GB/s: all copies (stream colour), then by context",
        ],
    )
    annotations.append(
        {
            "text": f"{esc(link_name)}: {link_gbps:g} GB/s",
            "showarrow": False,
            "xref": "x2 domain",
            "yref": "y2",
            "x": 0.0,
            "xanchor": "left",
            "y": link_gbps,
            "yanchor": "bottom",
            "font": {"size": 12},
        }
    )
    if not any(g is not None for g in ctx_gbps):
        annotations.append(
            {**_panel_note("no copy of 1 MiB or more: contexts are measured on those only", 1), "yref": "y2 domain"}
        )
    return figure(
        data,
        height=440,
        barmode="group",
        bargap=0.25,
        margin={"t": 80 if title else 50, "b": 90, "l": 60},
        title={"text": title, **TITLE} if title else None,
        showlegend=True,
        legend={**BOTTOM_LEGEND, "title": {"text": "by context (copies of 1 MiB or more; none there: no bar):"}},
        xaxis={"domain": list(domains[0]), "type": "category"},
        yaxis={"rangemode": "tozero", "title": {"text": "%"}},
        xaxis2={"domain": list(domains[1]), "anchor": "y2", "type": "category"},
        yaxis2={"anchor": "x2", "range": [0, top * 1.15], "title": {"text": "GB/s (10^9 B/s)"}},
        shapes=[
            {
                "type": "line",
                "xref": "x2 domain",
                "yref": "y2",
                "x0": 0,
                "x1": 1,
                "y0": link_gbps,
                "y1": link_gbps,
                "line": {"dash": "dash", "color": "#222", "width": 2},
            }
        ],
        annotations=annotations,
    )


def layout(page: Page) -> list[Any]:
    """The tab, its run choice and that run's link filled in."""
    value = page.runs["streams"]
    link_key, link_gbps, link_note = link_choice(page.store, value)
    return [
        html.Div(
            [
                dropdown(ids.STREAMS_RUN, "run and GPU", "45", page.options, value),
                choice(ids.LINK_PRESET, LINK_OPTIONS, link_key, "35"),
                dcc.Input(
                    id=ids.LINK_GBPS,
                    type="number",
                    value=link_gbps,
                    min=0.1,
                    debounce=True,
                    disabled=True,
                    className="number",
                ),
                html.Span("GB/s"),
            ],
            className="control",
        ),
        html.Div(link_note, id=ids.LINK_NOTE, className="muted"),
        dcc.Loading(graph(ids.STREAMS_GRAPH)),
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "streams")

    @app.callback(
        Output(ids.LINK_PRESET, "value"),
        Output(ids.LINK_GBPS, "value"),
        Output(ids.LINK_NOTE, "children"),
        Input(ids.STREAMS_RUN, "value"),
        prevent_initial_call=True,
    )
    def on_streams_run(vid):
        key, gbps, note = link_choice(store, vid)
        return (key, gbps, note) if vid else (dash.no_update, dash.no_update, "")

    @app.callback(
        Output(ids.LINK_GBPS, "disabled"),
        Output(ids.LINK_GBPS, "value", allow_duplicate=True),
        Input(ids.LINK_PRESET, "value"),
        prevent_initial_call=True,
    )
    def on_preset(key):
        if key == links.CUSTOM or key is None:
            return False, dash.no_update
        return True, links.BY_KEY[key].gbps

    @gate(
        Output(ids.STREAMS_GRAPH, "figure"),
        Input(ids.STREAMS_RUN, "value"),
        Input(ids.LINK_GBPS, "value"),
        State(ids.LINK_PRESET, "value"),
    )
    def on_streams(vid, gbps, key):
        if not vid:
            return note_figure(RUN_PROMPT)
        view = View.parse(vid)
        streams = store.get(view.rid).run.streams.get(view.device, []) if view.device else []
        name = links.BY_KEY[key].name if key in links.BY_KEY else "custom link"
        short, _ = selection.view_label(store, view)
        title = esc(short)
        if store.refs[view.rid].synthetic:
            title += " (SYNTHETIC: a model, not a measurement)"
        fig = streams_figure(streams, float(gbps or links.BY_KEY[links.FALLBACK].gbps), name, title)
        return fig


TAB = TabView("streams", "Copy streams", layout, register, run_choice=ids.STREAMS_RUN)
