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
from profiler.analysis.stalls import STALL_OVER_COPY_TIME
from profiler.units import byte_unit, human_bytes, human_time, time_unit

# its layout and sizes: .bar-table in assets/dashboard.css; the bars' widths and colours are the data's


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
            # the bars take the line's first half (the same share of every cell of a column, so that bars of
            # different rows compare), the value its second half: no element around the bars
            style={"width": f"{50 * p.value / top:.4f}%" if top else "0%", "background": p.color},
        )
        for p in parts
    ]
    return html.Div([*pieces, html.Span(text, title=text, className="value")], className="bar-line")


def _missing(text: str, why: str = "") -> html.Div:
    return html.Div(text, title=why, className="missing")


def _fmt(x: float) -> str:
    """A value in its column's unit."""
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def _pair(raw_a: float, raw_b: float) -> str:
    """``exposed / hidden``, each with its own unit (``30.9 µs / 3.79 s``, ``245 ms / 3.84 s``)."""
    return f"{human_time(raw_a, nanoseconds=True)} / {human_time(raw_b, nanoseconds=True)}"


def _one(
    label: str,
    tip: str,
    part: str,
    value: float | None,
    div: float,
    color: str,
    top: float,
    missing: str,
    own: Any = None,
) -> list[Any]:
    """A cell of one bar: *value* in its column's unit (÷ *div*), or why there is none; with *own*, its
    text in its own unit."""
    if value is None:
        return [_missing(missing)]
    text = own(value) if own else _fmt(value / div)
    return [_bar(label, [Part(part, value / div, COLORS[color])], top, text, tip)]


def _over(item: Item) -> bool:
    """Whether the item's time stalled by a direction's copies exceeds that direction's copy time."""
    stalled = item.stalled or {}
    return bool(item.waits) and any((stalled.get(d) or 0) > item.copies[d]["busy_ns"] for d in ("d2h", "h2d"))


# how the bars relate to the verdict on top (per step and GPU) and to the runs table
SUMMED = (
    "Copy time, stalls and bytes: each GPU's over the whole trace, every step summed (the runs table's numbers); "
    "the verdict's copies are per step and GPU: about these divided by the steps, where the run has steps."
)


def policy_table(items: list[Item]) -> html.Div:
    """The selected (run, GPU) rows side by side: copy time hidden / exposed per direction, the time other
    work stalled waiting for those copies, median step, bytes copied with the number of copies, peak device
    memory seen."""
    if not items:
        return html.Div("Select runs in the table above to compare them.", className="note empty-note")
    labels = unique([i.label for i in items])
    stalls = [(i.stalled or {}).get(d) or 0 for i in items for d in ("d2h", "h2d") if i.waits]
    t_name, t_div = time_unit([i.copies[d]["busy_ns"] for i in items for d in ("d2h", "h2d")] + stalls)
    s_name, s_div = time_unit([i.step_ns for i in items])
    b_name, b_div = byte_unit([i.copies[d]["bytes"] for i in items for d in ("d2h", "h2d")])
    m_name, m_div = byte_unit([i.peak_bytes for i in items])
    top_t = max(i.copies[d]["busy_ns"] / t_div for i in items for d in ("d2h", "h2d"))
    top_w = max(stalls, default=0) / t_div
    top_s = max((i.step_ns / s_div for i in items if i.step_ns is not None), default=0)
    top_b = max(i.copies[d]["bytes"] / b_div for i in items for d in ("d2h", "h2d"))
    top_m = max((i.peak_bytes / m_div for i in items if i.peak_bytes is not None), default=0)
    no_copies = not any(i.copies["offload"]["count"] for i in items)
    no_waits = not any(i.waits for i in items)
    # stalls the traces cannot measure at all (a JAX profiler trace records no stream waits): said so, as
    # analyze says it, not "no stream waits", which reads as none happening
    cannot = {i.stalls_not_measured for i in items}
    no_stalls = (
        f"stalls (not measured: {cannot.pop()})"
        if len(cannot) == 1 and None not in cannot
        else "stalls (no stream waits, CUDA events, in the trace)"
    )
    # a column none of the rows can fill is left out, and the line under the title says why
    unmeasured = {
        2: no_stalls if no_waits and not no_copies else "",
        3: "median step (no step ranges: profile-step's step=N, or --step-range)" if not top_s else "",
        5: "peak device memory (no CUDA memory events in the traces; nsys records them with --cuda-memory-usage=true)"
        if not top_m
        else "",
    }
    notes = {
        1: "no host-device copies in these runs" if no_copies else "",
        2: "no host-device copies in these runs"
        if no_copies
        else (STALL_OVER_COPY_TIME if any(_over(i) for i in items) else ""),
        4: "no host-device copies in these runs" if no_copies else "",
    }
    heads = [
        "",
        "copy time per GPU, all steps summed, per direction" + ("" if no_copies else ": exposed / hidden"),
        "stalled by copies per GPU, all steps summed",
        f"median step ({s_name}, one step)",
        "bytes copied per GPU, all steps summed" + ("" if no_copies else ", and copies"),
        f"peak device memory seen per GPU ({m_name}, its highest)",
    ]
    widths = ["minmax(180px, max-content)", "minmax(0, 1.15fr)", "minmax(0, 0.8fr)", "minmax(0, 0.8fr)"]
    widths += ["minmax(0, 1.25fr)", "minmax(0, 0.8fr)"]
    shown = [k for k in range(6) if not unmeasured.get(k)]
    head_tips = {
        1: "each direction on its own: time when D2H and H2D copies ran exposed together counts in both, so "
        "D2H + H2D exposed can exceed the runs table's exposed copy time (D2H+H2D: both directions, counted once)",
        2: "time that GPU work of this GPU (compute, NCCL, other copies) waited, through a CUDA event, for a D2H "
        "or H2D copy to finish: the stalls object of analyze --json (by_blocker d2h / h2d), over the trace",
    }
    cells: list[Any] = [
        html.Div(
            [html.Strong(heads[k]), html.Div(notes.get(k, ""), className="panel-note")],
            className="bar-cell head",
            title=head_tips.get(k, ""),
        )
        for k in shown
    ]
    for item, label in zip(items, labels, strict=True):
        tip = f"{item.full}\n"
        cells.append(html.Div(label, title=item.full, className="bar-cell row-label"))
        copy_bars, stall_bars, byte_bars = [], [], []
        for d in ("d2h", "h2d"):
            c, dl = item.copies[d], DIRECTION_LABEL[d]
            if not c["count"]:
                copy_bars.append(_missing(f"{dl}: no copies"))
                stall_bars.append(_missing(f"{dl}: no copies"))
                byte_bars.append(_missing(f"{dl}: no copies"))
                continue
            exposed, hidden = c["exposed_ns"] / t_div, c["overlap_any_ns"] / t_div
            copy_bars.append(
                _bar(
                    label,
                    [Part(f"{dl} exposed", exposed, COLORS[d]), Part(f"{dl} hidden", hidden, HIDDEN_TINT[d])],
                    top_t,
                    f"{dl} {_pair(c['exposed_ns'], c['overlap_any_ns'])}",
                    tip,
                )
            )
            if item.stalls_not_measured:
                stall_bars.append(_missing(f"{dl}: not measured", item.stalls_not_measured))
            elif not item.waits:
                stall_bars.append(_missing(f"{dl}: no stream waits"))
            else:
                stalled = (item.stalled or {}).get(d) or 0
                stall_bars.append(
                    _bar(
                        label,
                        [Part(f"{dl} stalled", stalled / t_div, COLORS["stall"])],
                        top_w,
                        f"{dl} {human_time(stalled, nanoseconds=True)}",
                        tip,
                    )
                )
            size = c["bytes"] / b_div
            byte_bars.append(
                _bar(
                    label,
                    [Part(f"{dl} bytes", size, COLORS[d])],
                    top_b,
                    f"{dl} {human_bytes(c['bytes'])}, {c['count']:,} copies",
                    tip,
                )
            )
        step = _one(label, tip, "median step", item.step_ns, s_div, "step", top_s, "no step ranges")
        peak = _one(label, tip, "peak memory", item.peak_bytes, m_div, "memory", top_m, "no memory events")
        for k, content in enumerate((copy_bars, stall_bars, step, byte_bars, peak), start=1):
            if k in shown:
                cells.append(html.Div([] if notes.get(k) else content, className="bar-cell"))
    legend = html.Div(
        [
            html.Span(
                [html.Span(className="swatch", style={"background": color}), name],
                className="legend-item",
            )
            for name, color in (
                ("D2H exposed", COLORS["d2h"]),
                ("D2H hidden", HIDDEN_TINT["d2h"]),
                ("H2D exposed", COLORS["h2d"]),
                ("H2D hidden", HIDDEN_TINT["h2d"]),
                ("stalled by copies", COLORS["stall"]),
            )
            if name != "stalled by copies" or 2 in shown  # no swatch for a column left out
        ],
        className="legend",
    )
    synthetic = sum(i.synthetic for i in items)
    title = f"Selected runs, one row per GPU; bars scaled to the largest value in their column. {SUMMED}"
    if synthetic:
        title += f" ({synthetic} rows: SYNTHETIC demo runs, a model, not measurements)"
    missing = [unmeasured[k] for k in sorted(unmeasured) if unmeasured[k]]
    return html.Div(
        [
            html.Div(title, className="title"),
            html.Div("Not in these runs: " + "; ".join(missing) + ".", className="muted") if missing else None,
            html.Div(
                cells,
                className="bars",
                style={"gridTemplateColumns": " ".join(widths[k] for k in shown)},
                **{"data-time-unit": t_name, "data-size-unit": b_name},
            ),
            legend,
        ],
        className="bar-table",
    )
