"""Plotly figures from analyzed runs, as plain figure dicts (``{"data": [...], "layout": {...}}``:
what ``dcc.Graph`` takes, without plotly's object validation, which costs tenths of a second per
figure).  Drawing only: every number comes from the run summary (``runs.result.RunResult.to_json``) or the
cached ops; nothing is measured here.

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

import numpy as np
import polars as pl

from dashboards.styles import MUTED_COLOR
from profiler.analysis.intervals import union
from profiler.runs.summary import RunSummary
from profiler.units import human_bytes, human_time, time_unit

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
# each lane colour mixed 25% with black: the shade of every other op on a lane
DARKER = {"#0072B2": "#005686", "#CC79A7": "#995B7D", "#E69F00": "#AD7700", "#009E73": "#007756"}
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


def grouped_bars(data: list[dict[str, Any]], cats: list[str], title: str, x_title: str, **layout: Any) -> Figure:
    """Bars grouped by category, the legend under the chart, the category axis fitted to its labels."""
    xaxis, bottom = category_axis(cats)
    return figure(
        data,
        barmode="group",
        height=380 + bottom,
        margin={"t": 50, "b": bottom + 70, "l": 70},
        title={"text": title, **TITLE},
        showlegend=True,
        legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0},
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


def note_figure(message: str, height: int = 220, width_chars: int = 130) -> Figure:
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


def unique(labels: list[str]) -> list[str]:
    """Labels made distinct (a category axis would merge equal ones): ``a``, ``a (2)``."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


def rank_heatmap(summaries: list[RunSummary], policy: str | None) -> Figure:
    """Rank by layer: exposed copy time of each rank's layers, for one policy."""
    runs = sorted((s for s in summaries if s.policy == policy and s.rank is not None), key=lambda s: s.rank)
    if not runs:
        return note_figure("Select runs that are ranks of one job (a rank in their name or manifest).")
    layers = sorted({n for s in runs for n in s.layers}, key=_natural)
    if not layers:
        return note_figure("These ranks have no layers (layer=N ranges or XLA thunks under a named layer scope).")
    values = [[s.layers[n].offload["exposed_ns"] if n in s.layers else None for n in layers] for s in runs]
    name, div = time_unit([v for row in values for v in row])
    heat = {
        "type": "heatmap",
        "z": [[None if v is None else v / div for v in row] for row in values],
        "x": [esc(n) for n in layers],
        "y": [f"rank {s.rank}" for s in runs],
        "colorscale": "Oranges",
        "colorbar": {"title": {"text": f"exposed ({name})"}},
        "customdata": [[s.rank] * len(layers) for s in runs],
        "hovertemplate": f"%{{y}}, layer %{{x}}: exposed %{{z:.3f}} {name}<extra></extra>",
    }
    xaxis, bottom = category_axis(heat["x"])
    return figure(
        [heat],
        height=max(300, 26 * len(runs) + 100 + bottom),
        margin={"t": 20, "b": bottom + 30, "l": text_px(heat["y"]) + 16},
        xaxis={**xaxis, "title": {"text": "layer"}},
        yaxis={"autorange": "reversed", "type": "category"},
    )


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def layer_figure(layers: dict[str, dict[str, Any]], title: str, stalls: bool = False) -> Figure:
    """Per layer of one (run, device): copy time hidden and exposed, per direction, and (*stalls*: the
    trace has stream waits) the time other work waited for the layer's copies; click a bar for details.

    *layers* maps a layer name to its h2d / d2h / offload numbers (one device, with ``stall_ns``).
    """
    names = list(layers)
    if not names:
        return note_figure(
            "No layers in this run: no layer=N NVTX ranges, and no XLA thunk ranges under a named layer "
            "scope (jax.named_scope('layer_3'); --layer-pattern to match other names)."
        )
    if not any(layers[n]["offload"]["count"] for n in names):
        return note_figure(
            f"{len(names)} layers found, but none of them copied data between host and device "
            "(no D2H or H2D copy was launched inside a layer)."
        )
    stalled = [layers[n]["offload"].get("stall_ns") or 0 for n in names] if stalls else []
    name, div = time_unit([layers[n][d]["busy_ns"] for n in names for d in ("d2h", "h2d")] + stalled)
    x = [esc(n) for n in names]
    data = []
    for d in ("d2h", "h2d"):
        dl = DIRECTION_LABEL[d]
        exposed = [layers[n][d]["exposed_ns"] / div for n in names]
        hidden = [layers[n][d]["overlap_any_ns"] / div for n in names]
        custom = [
            [
                n,
                f"{layers[n][d]['count']:,} copies, {human_bytes(layers[n][d]['bytes'])}, "
                f"busy {human_time(layers[n][d]['busy_ns'])}",
            ]
            for n in names
        ]
        tip = "layer %{customdata[0]}: " + dl + " %{customdata[1]}<br>"
        common = {"type": "bar", "x": x, "offsetgroup": d, "customdata": custom, "showlegend": True}
        data.append(
            {
                **common,
                "y": exposed,
                "name": f"{dl} exposed",
                "marker": {"color": COLORS[d]},
                "hovertemplate": tip + f"exposed %{{y:.3f}} {name}<extra></extra>",
            }
        )
        data.append(
            {
                **common,
                "y": hidden,
                "base": exposed,
                "name": f"{dl} hidden",
                "marker": {"color": HIDDEN_TINT[d]},
                "hovertemplate": tip + f"hidden %{{y:.3f}} {name}<extra></extra>",
            }
        )
    if stalls:
        data.append(
            {
                "type": "bar",
                "x": x,
                "offsetgroup": "stall",
                "y": [v / div for v in stalled],
                "name": "stalled by copies",
                "marker": {"color": COLORS["stall"]},
                "showlegend": True,
                "customdata": [
                    [
                        n,
                        f"D2H {human_time(layers[n]['d2h'].get('stall_ns') or 0)}, "
                        f"H2D {human_time(layers[n]['h2d'].get('stall_ns') or 0)}",
                    ]
                    for n in names
                ],
                "hovertemplate": "layer %{customdata[0]}: other work waited "
                f"%{{y:.3f}} {name} for its copies (%{{customdata[1]}})<extra></extra>",
            }
        )
    xaxis, bottom = category_axis(x)
    return figure(
        data,
        barmode="group",
        height=400 + bottom,
        margin={"t": 50, "b": bottom + 70, "l": 70},
        title={"text": esc(title), **TITLE},
        showlegend=True,
        legend=BOTTOM_LEGEND,
        xaxis={**xaxis, "title": {"text": "layer"}},
        yaxis={
            "title": {"text": f"{'time' if stalls else 'copy time'} over the trace ({name})"},
            "rangemode": "tozero",
        },
    )


def layer_copies(ops: pl.DataFrame, layer: str, device: int | None, limit: int = 500) -> list[dict[str, Any]]:
    """The copies of one layer (on one device), for the details table."""
    sel = ops.filter((pl.col("layer") == layer) & pl.col("cls").is_in(["h2d", "d2h"]))
    if device is not None:
        sel = sel.filter(pl.col("device") == device)
    sel = sel.sort("start").head(limit)
    t0 = ops["start"].min() or 0
    return [
        {
            "direction": DIRECTION_LABEL.get(c, c),
            "stream": s,
            "start_ms": (st - t0) / 1e6,
            "duration_us": (en - st) / 1e3,
            "size": human_bytes(b or 0),
            "bytes": b or 0,
        }
        for c, s, st, en, b in sel.select("cls", "stream", "start", "end", "bytes").iter_rows()
    ]


# --- the timeline ---------------------------------------------------------------------------------
TIMELINE_SHADES = (
    "Colours: compute blue, NCCL pink, D2H orange, H2D green, steps and layers grey; neighbouring ops of a lane "
    "alternate a light and a dark shade of its colour only so that each op shows (here, unlike the other views, "
    "dark does not mean exposed)."
)
LANE_ORDER = {"compute": 0, "NCCL": 1, "D2H": 2, "H2D": 3, "memset": 4}
LANE_COLOR = {"compute": COLORS["compute"], "NCCL": COLORS["nccl"], "D2H": COLORS["d2h"], "H2D": COLORS["h2d"]}
BAND = 0.36  # half the height of a lane, in lane units


def busy_fraction(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The fraction of each bin ``[edges[k], edges[k+1])`` covered by the union of the intervals."""
    u = union(np.zeros(len(start), dtype=np.int64), start, end)
    s, e = u.start.astype(np.float64), u.end.astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    k = np.searchsorted(s, edges, side="right") - 1
    kk = np.maximum(k, 0)
    covered = np.where(k >= 0, cum[kk] + np.minimum(edges - s[kk], (e - s)[kk]), 0.0) if len(s) else 0 * edges
    return np.clip(np.diff(covered) / np.diff(edges), 0.0, 1.0)


def timeline_figure(
    ops: pl.DataFrame,
    ranges: pl.DataFrame,
    window: tuple[int, int] | None,
    device: int | None = None,
    max_segments: int = 1500,
    bins: int = 1200,
    focus: str | None = None,
) -> tuple[Figure, dict[str, Any]]:
    """Lanes per stream of one device (compute, NCCL, D2H, H2D), the NVTX steps and the layers; the ops
    a finding names (*focus*: ``kernels:NAME|NAME`` or ``layer:NAME``) marked ▼ above their lanes.

    A lane with more than *max_segments* ops in the window is drawn as its occupancy: per bin of
    the window, the height of the lane's band is the fraction of time that something runs on it.
    A lane of fewer ops, most of them narrower than a bin, gets a tick at each op.
    """
    stats: dict[str, Any] = {"events": 0, "drawn_segments": 0, "occupancy_lanes": [], "bins": bins, "marked": 0}
    if device is not None:
        ops = ops.filter(pl.col("device") == device)
    if ops.height == 0:
        return note_figure("No GPU activity in this run: no kernels, copies or memsets to draw."), stats
    if window is not None:
        ops = in_window(ops, window)
        ranges = ranges.filter((pl.col("end") > window[0]) & (pl.col("start") < window[1]))
    if ops.height == 0:
        return note_figure("No GPU op of this device runs in this step."), stats
    t0 = window[0] if window else int(ops["start"].min())
    t1 = window[1] if window else int(ops["end"].max())
    span = max(t1 - t0, 1)
    unit, div = time_unit([span])
    edges = np.linspace(t0, t1, bins + 1)
    lanes = ops.with_columns(
        pl.when(pl.col("kind") == "kernel")
        .then(pl.when(pl.col("is_nccl")).then(pl.lit("NCCL")).otherwise(pl.lit("compute")))
        .when(pl.col("kind") == "memset")
        .then(pl.lit("memset"))
        .otherwise(pl.col("cls").str.to_uppercase())
        .alias("group"),
    )
    parts = lanes.sort("start").partition_by("group", "stream", as_dict=True)
    keys = sorted(parts, key=lambda k: (LANE_ORDER.get(k[0], 5), k[0], k[1]))
    rows: list[str] = []
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    stats["events"] = ops.height

    def lane(name: str) -> int:
        rows.append(name)
        return len(rows) - 1

    steps = ranges.filter(pl.col("lane") == "step")
    if steps.height:
        y = lane("NVTX steps")
        data.append(_segments(y, steps["start"].to_numpy(), steps["end"].to_numpy(), steps["name"].to_list(), t0, div))
        stats["drawn_segments"] += steps.height
    spans = _layer_spans(lanes)
    if spans.height:
        y = lane("layers (GPU time)")
        for parity in (0, 1):
            part = spans.filter(pl.col("parity") == parity)
            if part.height:
                s, e = part["start"].to_numpy(), part["end"].to_numpy()
                data.append(_segments(y, s, e, part["layer"].to_list(), t0, div, COLORS["layer"][parity]))
        annotations += _labels(y, spans, t0, div, span)
        stats["drawn_segments"] += spans.height
    bin_ns = span / bins
    for group, stream in keys:
        part = parts[(group, stream)]
        s, e = part["start"].to_numpy(), part["end"].to_numpy()
        name = f"{group} · stream {stream}"
        y = lane(name)
        color = LANE_COLOR.get(group, COLORS["memset"])
        if len(s) > max_segments:
            frac = busy_fraction(np.maximum(s, t0), np.minimum(e, t1), edges)
            data.append(_occupancy(y, edges, frac, t0, div, color, name))
            shapes.append(
                {
                    "type": "rect",
                    "x0": 0,
                    "x1": span / div,
                    "y0": y - BAND,
                    "y1": y + BAND,
                    "line": {"width": 1, "color": color},
                    "layer": "below",
                }
            )
            stats["occupancy_lanes"].append(name)
            stats["drawn_segments"] += bins
        else:  # neighbouring ops alternate between the lane's colour and a darker shade: each op stays visible
            names = part["name"].to_list()
            for k, shade in ((0, color), (1, DARKER.get(color, color))):
                if len(s) > k:
                    data.append(_segments(y, s[k::2], e[k::2], names[k::2], t0, div, shade))
            if np.median(e - s) < bin_ns:  # ops narrower than a pixel: a tick marks each one
                data.append(_ticks(y, s, e, names, t0, div, color))
            stats["drawn_segments"] += len(s)
        if focus:
            hit = part.filter(_focus_filter(focus))
            if hit.height:
                data.append(_marks(y, hit, t0, div))
                stats["marked"] += hit.height
    return (
        figure(
            data,
            height=max(260, 34 * len(rows) + 110),
            margin={"t": 20, "l": text_px(rows) + 16, "b": 60},
            shapes=shapes,
            annotations=annotations,
            yaxis={
                "tickvals": list(range(len(rows))),
                "ticktext": [esc(r) for r in rows],
                "range": [len(rows) - 0.5, -0.5],
                "showgrid": False,
                "zeroline": False,
            },
            xaxis={
                "title": {"text": f"time from the start of the window ({unit})"},
                "range": [0, span / div],
                "zeroline": False,
            },
        ),
        stats,
    )


def in_window(ops: pl.DataFrame, window: tuple[int, int]) -> pl.DataFrame:
    """The ops that overlap *window*; a slice when the ops are sorted by start (``Analysis.device_ops``)."""
    start = ops["start"]
    if start.is_sorted():
        longest = int((ops["end"] - start).max() or 0)
        i0, i1 = (int(start.search_sorted(t, "left")) for t in (window[0] - longest, window[1]))
        ops = ops.slice(i0, i1 - i0)
    return ops.filter((pl.col("end") > window[0]) & (pl.col("start") < window[1]))


def _layer_spans(lanes: pl.DataFrame) -> pl.DataFrame:
    """Consecutive ops of the same layer (in GPU time order), one span each: where each layer ran."""
    ops = lanes.filter(pl.col("group") == "compute").sort("start")
    if ops["layer"].null_count() == ops.height:
        return pl.DataFrame(schema={"layer": pl.String, "start": pl.Int64, "end": pl.Int64, "parity": pl.Int64})
    # a new span wherever the layer changes, ops outside any layer (embedding, loss) included
    layer = pl.col("layer").fill_null("")
    run = (layer != layer.shift(1)).fill_null(True).cum_sum()
    spans = (
        ops.with_columns(run.alias("run"))
        .group_by("run", maintain_order=True)
        .agg(pl.col("layer").first(), pl.col("start").min(), pl.col("end").max())
        .filter(pl.col("layer").is_not_null())
    )
    return spans.with_columns((pl.int_range(pl.len()) % 2).cast(pl.Int64).alias("parity")).drop("run")


def _labels(y: int, spans: pl.DataFrame, t0: int, div: float, span: int) -> list[dict[str, Any]]:
    """Layer names written on the wide enough spans of the layers lane."""
    wide = spans.filter((pl.col("end") - pl.col("start")) > span / 25)
    if wide.height == 0 or wide.height > 80:
        return []
    centres = ((wide["start"] + wide["end"]) / 2 - t0).to_numpy() / div
    return [
        {"x": float(x), "y": y, "text": esc(n), "showarrow": False, "font": {"color": "white", "size": 11}}
        for x, n in zip(centres, wide["layer"].to_list(), strict=True)
    ]


def _focus_filter(focus: str) -> pl.Expr:
    """The ops a finding names: kernels by name, or the ops of a layer."""
    kind, _, value = focus.partition(":")
    if kind == "kernels":
        return (pl.col("kind") == "kernel") & pl.col("name").is_in(value.split("|"))
    return pl.col("layer") == value


def _marks(y: int, ops: pl.DataFrame, t0: int, div: float, limit: int = 3000) -> dict[str, Any]:
    """A ▼ above each marked op of a lane (the first *limit*), visible however short the op."""
    ops = ops.head(limit)
    mid = ((ops["start"].to_numpy() + ops["end"].to_numpy()) / 2 - t0) / div
    return {
        "type": "scatter",
        "x": np.round(mid, 6).tolist(),
        "y": [y - 0.42] * ops.height,
        "mode": "markers",
        "marker": {"symbol": "triangle-down", "size": 9, "color": "#222"},
        "name": "marked by the finding",
        "hovertext": [f"marked: {esc(n)}" for n in ops["name"].to_list()],
        "hoverinfo": "text",
    }


def _segments(
    y: int, s: np.ndarray, e: np.ndarray, names: list[Any], t0: int, div: float, color: str = COLORS["step"]
) -> dict[str, Any]:
    """Horizontal segments of one lane as a single line trace with gaps (SVG: with at most
    ``max_segments`` per lane it draws twice as fast as WebGL, and without a GPU context)."""
    n = len(s)
    x = np.empty(3 * n)
    x[0::3] = (s - t0) / div
    x[1::3] = (e - t0) / div
    x[2::3] = np.nan
    xs: list[float | None] = [None if v != v else float(v) for v in x]
    text = [f"{esc(v)} ({human_time(d)})" for v, d in zip(names, (e - s).tolist(), strict=True) for _ in range(3)]
    return {
        "type": "scatter",
        "x": xs,
        "y": [y] * (3 * n),
        "mode": "lines",
        "line": {"width": 18, "color": color},
        "hovertext": text,
        "hoverinfo": "text",
    }


def _ticks(y: int, s: np.ndarray, e: np.ndarray, names: list[Any], t0: int, div: float, color: str) -> dict[str, Any]:
    """A vertical tick at each op of a lane whose ops are too short to see as segments."""
    return {
        "type": "scatter",
        "x": np.round(((s + e) / 2 - t0) / div, 6).tolist(),
        "y": [y] * len(s),
        "mode": "markers",
        "marker": {"symbol": "line-ns-open", "size": 20, "color": color, "line": {"width": 2, "color": color}},
        "hovertext": [f"{esc(v)} ({human_time(d)})" for v, d in zip(names, (e - s).tolist(), strict=True)],
        "hoverinfo": "text",
    }


def _occupancy(
    y: int, edges: np.ndarray, frac: np.ndarray, t0: int, div: float, color: str, lane: str
) -> dict[str, Any]:
    """A lane drawn as its busy fraction per bin: a filled step outline (``hv``) whose height is the fraction."""
    x = np.round((edges - t0) / div, 4)
    top = np.round(y + BAND - 2 * BAND * frac, 3)
    base = y + BAND
    pct = np.round(100 * frac).astype(int).tolist()
    return {
        "type": "scatter",
        "x": [float(x[0]), *x[:-1].tolist(), float(x[-1]), float(x[-1])],
        "y": [base, *top.tolist(), float(top[-1]), base],
        "customdata": [None, *pct, pct[-1], None],
        "mode": "lines",
        "line": {"width": 0.5, "color": color, "shape": "hv"},
        "fill": "toself",
        "fillcolor": color,
        "hovertemplate": esc(lane) + ": busy %{customdata}% of this bin<extra></extra>",
        "name": lane,
    }


# --- copy streams --------------------------------------------------------------------------------
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
