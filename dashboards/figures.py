"""What the tabs' plotly figures share, as plain figure dicts (``{"data": [...], "layout": {...}}``:
what ``dcc.Graph`` takes, without plotly's object validation, which costs tenths of a second per
figure): the palette, the layout, category axes, grouped bars, a note instead of a chart.  Each tab
draws its own figure in its view (``layers_view``, ``timeline_view``, ``ranks_view``, ``streams_view``,
``trade``, ``plan_view``, ``whatif_view``).  Drawing only: every number comes from the run summary
(``runs.result.RunResult.to_json``) or the cached ops; nothing is measured here.

Conventions for every figure: one colour-blind-safe palette (Okabe and Ito's) for compute, NCCL,
D2H and H2D; hidden copy time is the pale tint of its direction's colour and exposed time the
full colour; units chosen by the magnitude shown and named in the title; a chart with nothing to
draw shows a note saying why (``layout.meta.note``) instead of empty axes.
"""

from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from dashboards.styles import MUTED_COLOR

Figure = dict[str, Any]
COLORS = {
    "compute": "#0072B2",  # blue
    "nccl": "#CC79A7",  # reddish purple
    "d2h": "#E69F00",  # orange
    "h2d": "#009E73",  # bluish green
    "memset": "#999999",
    "step": "#4D4D4D",
    "memory": "#56B4E9",  # sky blue
    "stall": "#D55E00",  # vermillion: time other work waited for copies
    "layer": ("#6E6E6E", "#A8A8A8"),  # alternating greys, so that neighbouring layers stay apart
}
HIDDEN_TINT = {"d2h": "#F4D48C", "h2d": "#8CD5B2"}  # the direction's colour mixed 55% with white
DIRECTION_LABEL = {"d2h": "D2H", "h2d": "H2D"}
FONT = {"family": "Helvetica, Arial, sans-serif", "size": 13, "color": "#222"}
ROW_PX = 34
BOTTOM_LEGEND = {"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0}
TITLE = {"x": 0, "xanchor": "left", "font": {"size": 15}}


def esc(text: Any) -> str:
    """Names from traces are shown as text: plotly renders a subset of HTML, so escape it."""
    return html.escape(str(text), quote=False)


def text_px(labels: list[str], size: int = 13) -> int:
    """About how wide the longest of *labels* is drawn, in pixels (the figures set their margins from
    this instead of plotly's automargin, which redraws a figure several times: 4x slower)."""
    longest = max((len(html.unescape(re.sub(r"<[^>]+>", " ", str(t)))) for t in labels), default=0)
    return int(longest * size * 0.6) + 4


def category_axis(labels: list[str], width_px: int = 1150, size: int = 13) -> tuple[dict[str, Any], int]:
    """A category x axis whose labels never overlap: horizontal when they fit, else vertical;
    and the bottom margin they need."""
    widest = text_px(labels, size)
    if not labels or widest * len(labels) < 0.85 * width_px:
        return {"type": "category", "tickangle": 0}, 40
    return {"type": "category", "tickangle": -90}, widest + 30


def figure(data: list[dict[str, Any]], **layout: Any) -> Figure:
    base = {
        "font": FONT,
        "plot_bgcolor": "#F7F7F7",
        "paper_bgcolor": "white",
        "hoverlabel": {"font": {"size": 13}},
        "showlegend": False,
    }
    return {"data": data, "layout": {**base, **layout}}


def grouped_bars(
    data: list[dict[str, Any]], cats: list[str], title: str, x_title: str, height: int = 380, **layout: Any
) -> Figure:
    """Bars grouped by category, the legend under the chart, the category axis fitted to its labels
    (*height*: the plot's, without them)."""
    xaxis, bottom = category_axis(cats)
    return figure(
        data,
        barmode="group",
        height=height + bottom,
        margin={"t": 50, "b": bottom + 70, "l": 70},
        title={"text": title, **TITLE},
        showlegend=True,
        legend=BOTTOM_LEGEND,
        # automargin: the axis title goes under the (possibly vertical) labels, never over them
        xaxis={**xaxis, "automargin": True, "title": {"text": x_title, "standoff": 12}},
        # bar labels ("fits", "does NOT fit") keep a readable size rather than shrink to the bar
        uniformtext={"minsize": 11, "mode": "show"},
        **layout,
    )


LIMIT_COLOR = "#D55E00"  # a memory limit drawn against bars or points


def limit_line(y: float) -> dict[str, Any]:
    """A dashed horizontal line across the plot at *y* (in the y axis' unit): a memory limit."""
    line = {"dash": "dash", "color": LIMIT_COLOR, "width": 2}
    return {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y, "line": line}


def note_figure(message: str, height: int = 110, width_chars: int = 130) -> Figure:
    """No data to draw: a figure with no axes that says why (long messages wrapped: plotly does not)."""
    lines = textwrap.wrap(message, width_chars) or [""]
    return figure(
        [],
        height=max(height, 60 + 22 * len(lines)),
        plot_bgcolor="white",
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"t": 20, "b": 20, "l": 20, "r": 20},
        meta={"note": message},
        annotations=[
            {
                "text": "<br>".join(esc(line) for line in lines),
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"size": 14, "color": MUTED_COLOR},
            }
        ],
    )


def is_note(fig: Figure) -> bool:
    return bool((fig["layout"].get("meta") or {}).get("note"))


@dataclass(frozen=True)
class Item:
    """One (run, device) as the policy figure shows it."""

    label: str  # short: policy and a short id (and the GPU)
    full: str  # the whole name, on hover
    copies: dict[str, dict[str, Any]]  # h2d / d2h / offload numbers of this device
    step_ns: int | None
    peak_bytes: int | None
    synthetic: bool = False
    waits: int = 0  # stream waits on this device: without any, stalls cannot be measured
    stalled: dict[str, int] | None = None  # d2h / h2d: GPU time on this device stalled waiting for such copies
    stalls_not_measured: str | None = None  # why the trace cannot measure stalls at all (a JAX profiler trace)


def unique(labels: list[str]) -> list[str]:
    """Labels made distinct (a category axis would merge equal ones): ``a``, ``a (2)``."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out
