"""The Timeline tab: one step (or the whole capture) of one (run, GPU), lane by lane.

A finding's "show in timeline" button marks its ops here (``timeline-focus``).
"""

from __future__ import annotations

from typing import Any

import dash
import numpy as np
import polars as pl
from dash import Input, Output, State, dcc, html

from dashboards import ids, tab_gate
from dashboards.data import RunStore
from dashboards.figures import COLORS, Figure, esc, figure, note_figure, text_px
from dashboards.rows import View
from dashboards.view import Page, TabView
from dashboards.widgets import RUN_PROMPT, dropdown, graph
from profiler.analysis.intervals import union
from profiler.units import human_bytes, human_time, time_unit

# each lane colour mixed 25% with black: the shade of every other op on a lane
DARKER = {"#0072B2": "#005686", "#CC79A7": "#995B7D", "#E69F00": "#AD7700", "#009E73": "#007756"}


TIMELINE_SHADES = (
    "Colours: compute blue, NCCL pink, D2H orange, H2D green, steps and layers grey; neighbouring ops of a lane "
    "alternate a light and a dark shade of its colour only so that each op shows (here, unlike the other views, "
    "dark does not mean exposed)."
)
LANE_ORDER = {"compute": 0, "NCCL": 1, "D2H": 2, "H2D": 3, "memset": 4}
LANE_COLOR = {"compute": COLORS["compute"], "NCCL": COLORS["nccl"], "D2H": COLORS["d2h"], "H2D": COLORS["h2d"]}
BAND = 0.36  # half the height of a lane, in lane units
ALL = "__all__"  # the step choice that shows the whole capture


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
            names = op_labels(part)
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


def op_labels(ops: pl.DataFrame) -> list[str]:
    """What hovering an op says: a kernel's name; a copy's direction, size and layer (``D2H 64.0 MiB,
    layer_3``); a memset's size."""
    cols = [
        ops[c].to_list() if c in ops.columns else [None] * ops.height for c in ("name", "kind", "cls", "bytes", "layer")
    ]
    out = []
    for name, kind, cls, nbytes, layer in zip(*cols, strict=True):
        if name is not None:
            out.append(str(name))
            continue
        what = "memset" if kind == "memset" else (cls or "copy").upper()
        size = f" {human_bytes(nbytes)}" if nbytes is not None else ""
        out.append(f"{what}{size}" + (f", {layer}" if layer else ""))
    return out


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


def step_choices(ranges: pl.DataFrame) -> tuple[list[dict[str, str]], list[str], str]:
    """The step dropdown's options for a run (its NVTX steps, after the whole capture), the step names,
    and the step shown first (the middle one; the whole capture without steps)."""
    names = ranges.filter(ranges["lane"] == "step")["name"].to_list()
    opts = [{"label": "whole capture", "value": ALL}] + [{"label": n, "value": n} for n in names]
    return opts, names, (names[len(names) // 2] if names else ALL)


def layout(page: Page) -> list[Any]:
    """The tab, its run choice filled in, and its step when the run is analyzed already (then the tab's
    first opening draws at once: one request, not the step's and then the figure's)."""
    vid = page.runs["timeline"]
    done = page.store.results.get(View.parse(vid).rid) if vid else None
    opts, _, step = step_choices(done.ranges) if done is not None else ([], [], None)
    return [
        html.Div(
            [
                dropdown(ids.TIMELINE_RUN, "run and GPU", "60", page.options, vid),
                dropdown(ids.TIMELINE_STEP, "step", options=opts, value=step),
            ],
            className="control",
        ),
        dcc.Loading(graph(ids.TIMELINE_GRAPH, config={"scrollZoom": True, "displaylogo": False})),
        html.Div(id=ids.TIMELINE_NOTE, className="muted"),
        dcc.Store(id=ids.TIMELINE_FOCUS),  # what a finding's button asks to mark
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "timeline")

    @gate(
        Output(ids.TIMELINE_STEP, "options"),
        Output(ids.TIMELINE_STEP, "value"),
        Input(ids.TIMELINE_RUN, "value"),
        State(ids.TIMELINE_STEP, "value"),
        State(ids.TIMELINE_STEP, "options"),
    )
    def on_timeline_run(vid, current, shown):
        if not vid:
            return [], None
        opts, names, first = step_choices(store.get(View.parse(vid).rid).ranges)
        kept = current in names or current == ALL
        if dash.ctx.triggered_id == ids.opened("timeline") and kept and shown == opts:
            return dash.no_update, dash.no_update  # opened on the run and step it shows: the figure follows alone
        return opts, current if kept else first

    @gate(
        Output(ids.TIMELINE_GRAPH, "figure"),
        Output(ids.TIMELINE_NOTE, "children"),
        Input(ids.TIMELINE_STEP, "value"),
        Input(ids.TIMELINE_FOCUS, "data"),
        State(ids.TIMELINE_RUN, "value"),
    )
    def on_timeline_step(step, mark, vid):
        if not vid or step is None:
            return note_figure(RUN_PROMPT), ""
        view = View.parse(vid)
        run = store.get(view.rid)
        window = None
        if step != ALL:
            r = run.ranges.filter((run.ranges["lane"] == "step") & (run.ranges["name"] == step))
            if not r.height:  # a step of the run shown before: the run's own step follows (on_timeline_run)
                return dash.no_update, dash.no_update
            window = (int(r["start"][0]), int(r["end"][0]))
        device = int(view.device) if view.device is not None else None
        focus = mark["focus"] if isinstance(mark, dict) and mark.get("vid") == vid else None
        fig, stats = timeline_figure(run.device_ops(device), run.ranges, window, focus=focus)
        if not stats["events"]:
            return fig, ""
        note = f"{stats['events']:,} GPU ops of GPU {view.device} in the window. {TIMELINE_SHADES}"
        if focus:
            what = focus.split(":", 1)[1].replace("|", ", ")
            note += (
                f" ▼ marks the {stats['marked']:,} ops of the finding ({what}) in the window."
                if stats["marked"]
                else f" None of the finding's ops ({what}) runs in this window: pick 'whole capture'."
            )
        if stats["occupancy_lanes"]:
            note += (
                " Lanes with too many ops to draw one by one are drawn as occupancy: the filled height is the share of "
                f"each of the {stats['bins']:,} time bins during which something ran on the stream "
                f"(an empty outline is 0%, a full band 100%): {', '.join(stats['occupancy_lanes'])}."
            )
        if store.refs[view.rid].synthetic:
            note += " SYNTHETIC run: a model of a step, not a measurement."
        return fig, note


TAB = TabView("timeline", "Timeline", layout, register, run_choice=ids.TIMELINE_RUN)
