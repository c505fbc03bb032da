"""The policy comparison as an HTML bar table: one row per (run, GPU), one column per measure.

It is the dashboard's first view, so it needs no plotly.js (the page shows it before that 5 MB
script has loaded), prints every value beside its bar (no axis to read, no tick label to
overlap), and grows by a column or a series (stalls, say) without redrawing anything else.
Bars carry ``data-row``, ``data-series`` and ``data-value`` (the value in the column's stated
unit) for tests and scripts.  Colours and units as in ``figures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dash import html

from dashboards.figures import COLORS, DIRECTION_LABEL, HIDDEN_TINT, Item, unique
from profiler.report.units import byte_unit, human_bytes, human_time, time_unit

LABEL_WIDTH = "minmax(180px, max-content)"
CELL = {
    "padding": "3px 8px",
    "borderBottom": "1px solid #E4E4E4",
    "minWidth": "0",
    "display": "flex",
    "flexDirection": "column",
    "justifyContent": "center",
    "gap": "2px",
}
BAR_H = "11px"


@dataclass(frozen=True)
class Part:
    """One piece of a bar: its series name, value (in the column's unit) and colour."""

    series: str
    value: float
    color: str


def _bar(row: str, parts: list[Part], top: float, text: str, tip: str) -> html.Div:
    """A horizontal bar of stacked *parts*, scaled to *top*, with *text* written after it."""
    pieces = [
        html.Div(
            className="bar",
            title=f"{tip}{p.series}: {p.value:.3f}",
            **{"data-row": row, "data-series": p.series, "data-value": repr(p.value)},
            style={
                "width": f"{100 * p.value / top:.3f}%" if top else "0%",
                "background": p.color,
                "height": BAR_H,
                "flex": "none",
            },
        )
        for p in parts
    ]
    return html.Div(
        [
            # the same share of every cell of a column, so that bars of different rows compare
            html.Div(pieces, style={"display": "flex", "flex": "0 0 50%", "alignItems": "center"}),
            html.Span(
                text,
                title=text,
                className="value",
                style={
                    "fontSize": "12px",
                    "color": "#333",
                    "whiteSpace": "nowrap",
                    "overflow": "hidden",
                    "textOverflow": "ellipsis",
                    "flex": "1 1 0",
                    "minWidth": "0",
                    "paddingLeft": "6px",
                },
            ),
        ],
        style={"display": "flex", "alignItems": "center", "height": "15px"},
    )


def _missing(text: str) -> html.Div:
    return html.Div(
        text,
        className="missing",
        style={"fontSize": "12px", "color": "#666", "height": "15px", "whiteSpace": "nowrap", "overflow": "hidden"},
    )


def _fmt(x: float, raw: float | None = None, own: Any = None) -> str:
    """A value in its column's unit; one too small to read there (under 0.01) in its own unit."""
    if x and abs(x) < 0.01 and raw is not None and own is not None:
        return own(raw)
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def policy_table(items: list[Item]) -> html.Div:
    """The selected (run, GPU) rows side by side: copy time hidden / exposed per direction, median step,
    bytes copied with the number of copies, peak device memory seen."""
    if not items:
        return html.Div("Select runs in the table above to compare them.", className="note", style={"padding": "20px"})
    labels = unique([i.label for i in items])
    t_name, t_div = time_unit([i.copies[d]["busy_ns"] for i in items for d in ("d2h", "h2d")])
    s_name, s_div = time_unit([i.step_ns for i in items])
    b_name, b_div = byte_unit([i.copies[d]["bytes"] for i in items for d in ("d2h", "h2d")])
    m_name, m_div = byte_unit([i.peak_bytes for i in items])
    top_t = max(i.copies[d]["busy_ns"] / t_div for i in items for d in ("d2h", "h2d"))
    top_s = max((i.step_ns / s_div for i in items if i.step_ns is not None), default=0)
    top_b = max(i.copies[d]["bytes"] / b_div for i in items for d in ("d2h", "h2d"))
    top_m = max((i.peak_bytes / m_div for i in items if i.peak_bytes is not None), default=0)
    no_copies = not any(i.copies["offload"]["count"] for i in items)
    notes = {
        1: "no host-device copies in these runs" if no_copies else "",
        2: "no step ranges (profile-step's step=N, or --step-range) in these runs" if not top_s else "",
        3: "no host-device copies in these runs" if no_copies else "",
        4: "no CUDA memory events (nsys --cuda-memory-usage=true) in these runs" if not top_m else "",
    }
    heads = [
        "",
        "copy time over the trace" + ("" if no_copies else f" ({t_name}): exposed / hidden"),
        "median step" + (f" ({s_name})" if top_s else ""),
        "bytes copied over the trace" + ("" if no_copies else f" ({b_name}) and copies"),
        "peak device memory seen" + (f" ({m_name})" if top_m else ""),
    ]
    cells: list[Any] = [
        html.Div(
            [html.Strong(h), html.Div(notes.get(k, ""), className="panel-note", style={"color": "#444"})],
            className="head",
            style={**CELL, "fontSize": "13px", "borderBottom": "2px solid #999", "justifyContent": "flex-end"},
        )
        for k, h in enumerate(heads)
    ]
    for item, label in zip(items, labels, strict=True):
        tip = f"{item.full}\n"
        cells.append(
            html.Div(
                label,
                title=item.full,
                className="row-label",
                style={**CELL, "display": "block", "whiteSpace": "nowrap"},
            )
        )
        copy_bars, byte_bars = [], []
        for d in ("d2h", "h2d"):
            c, dl = item.copies[d], DIRECTION_LABEL[d]
            if not c["count"]:
                copy_bars.append(_missing(f"{dl}: no copies"))
                byte_bars.append(_missing(f"{dl}: no copies"))
                continue
            exposed, hidden = c["exposed_ns"] / t_div, c["overlap_any_ns"] / t_div
            copy_bars.append(
                _bar(
                    label,
                    [Part(f"{dl} exposed", exposed, COLORS[d]), Part(f"{dl} hidden", hidden, HIDDEN_TINT[d])],
                    top_t,
                    f"{dl} {_fmt(exposed, c['exposed_ns'], human_time)}"
                    f" / {_fmt(hidden, c['overlap_any_ns'], human_time)}",
                    tip,
                )
            )
            size = c["bytes"] / b_div
            byte_bars.append(
                _bar(
                    label,
                    [Part(f"{dl} bytes", size, COLORS[d])],
                    top_b,
                    f"{dl} {_fmt(size, c['bytes'], human_bytes)}, {c['count']:,} copies",
                    tip,
                )
            )
        step = [
            _bar(
                label,
                [Part("median step", item.step_ns / s_div, COLORS["step"])],
                top_s,
                _fmt(item.step_ns / s_div),
                tip,
            )
            if item.step_ns is not None
            else _missing("no step ranges")
        ]
        peak = [
            _bar(
                label,
                [Part("peak memory", item.peak_bytes / m_div, COLORS["memory"])],
                top_m,
                _fmt(item.peak_bytes / m_div),
                tip,
            )
            if item.peak_bytes is not None
            else _missing("no memory events")
        ]
        for k, content in enumerate((copy_bars, step, byte_bars, peak), start=1):
            cells.append(html.Div([] if notes.get(k) else content, style=CELL))
    legend = html.Div(
        [
            html.Span(
                [
                    html.Span(
                        style={
                            "display": "inline-block",
                            "width": "14px",
                            "height": "11px",
                            "background": color,
                            "marginRight": "4px",
                        }
                    ),
                    name,
                ],
                style={"marginRight": "16px", "whiteSpace": "nowrap"},
            )
            for name, color in (
                ("D2H exposed", COLORS["d2h"]),
                ("D2H hidden", HIDDEN_TINT["d2h"]),
                ("H2D exposed", COLORS["h2d"]),
                ("H2D hidden", HIDDEN_TINT["h2d"]),
            )
        ],
        className="legend",
        style={"fontSize": "13px", "margin": "8px 0 0"},
    )
    synthetic = sum(i.synthetic for i in items)
    title = "Selected runs, one row per GPU; bars scaled to the largest value in their column"
    if synthetic:
        title += f" ({synthetic} rows: SYNTHETIC demo runs, a model, not measurements)"
    return html.Div(
        [
            html.Div(title, className="title", style={"fontSize": "15px", "margin": "10px 0 6px"}),
            html.Div(
                cells,
                className="bars",
                style={
                    "display": "grid",
                    "gridTemplateColumns": f"{LABEL_WIDTH} repeat(4, minmax(0, 1fr))",
                    "fontSize": "13px",
                    "alignItems": "stretch",
                },
            ),
            legend,
        ]
    )
