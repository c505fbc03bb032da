"""Plotly figures and table rows from analyzed runs.  Drawing only: every number comes
from the run summary (``run_metrics.collect``) or the cached ops; nothing is measured here."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from profiler.analysis.intervals import union

COLORS = {
    "hidden": "#2ca02c",
    "exposed": "#d62728",
    "compute": "#1f77b4",
    "nccl": "#9467bd",
    "d2h": "#ff7f0e",
    "h2d": "#17becf",
    "step": "#7f7f7f",
    "layer": "#bcbd22",
    "memset": "#8c564b",
}
LINKS = {
    "PCIe Gen5 x16 (64 GB/s)": 64.0,
    "NVLink-C2C (900 GB/s)": 900.0,
    "NVLink-C2C Vera Rubin (1800 GB/s)": 1800.0,
}


def esc(text: Any) -> str:
    """Names from traces are shown as text: plotly renders a subset of HTML, so escape it."""
    return html.escape(str(text), quote=False)


def ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def run_row(rid: str, name: str, summary: dict[str, Any], manifest: dict[str, Any] | None) -> dict[str, Any]:
    """One line of the runs table."""
    off = summary["copies"]["offload"]
    man = manifest or summary.get("manifest") or {}
    return {
        "id": rid,
        "run": name,
        "policy": summary["policy"],
        "rank": summary.get("rank"),
        "date": (man.get("started") or "")[:19].replace("T", " "),
        "device": ", ".join(summary.get("gpus") or []) or "-",
        "status": man.get("status", "trace"),
        "steps": len([s for s in summary["steps"] if not s["excluded"]]),
        "step_ms": ms(summary["median_step_ns"]),
        "offload_mib": off["bytes"] / 2**20,
        "exposed_ms": ms(off["exposed_ns"]),
        "hidden_pct": None if off["hidden_fraction"] is None else 100 * off["hidden_fraction"],
    }


def error_row(rid: str, name: str, message: str) -> dict[str, Any]:
    return {
        "id": rid,
        "run": name,
        "policy": "-",
        "status": "error",
        "date": "",
        "device": "-",
        "error": message,
    }


def hidden_exposed_bars(
    fig: go.Figure, x: list[str], copies: list[dict[str, Any]], customdata: Any = None, **where: int
) -> None:
    """Per direction, copy time hidden (green) with exposed (red) stacked on it, one group per x.

    *copies* holds, per x, the copy-class metrics by direction (``{"d2h": {...}, "h2d": {...}}``).
    """
    for direction in ("d2h", "h2d"):
        hidden = [c[direction]["overlap_any_ns"] / 1e6 for c in copies]
        exposed = [c[direction]["exposed_ns"] / 1e6 for c in copies]
        style = {
            "offsetgroup": direction,
            "marker_pattern_shape": "" if direction == "d2h" else "/",
            "customdata": customdata,
        }
        fig.add_bar(x=x, y=hidden, name=f"{direction} hidden", marker_color=COLORS["hidden"], **style, **where)
        fig.add_bar(
            x=x, y=exposed, name=f"{direction} exposed", base=hidden, marker_color=COLORS["exposed"], **style, **where
        )


def empty(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(
        text=esc(message),
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 14, "color": "#555"},
    )
    return fig


def unique_labels(labels: list[str], names: list[str]) -> list[str]:
    """Policies as labels, with the run name added where a policy appears twice."""
    return [lab if labels.count(lab) == 1 else f"{lab} ({name})" for lab, name in zip(labels, names, strict=True)]


def policy_figure(runs: list[tuple[str, dict[str, Any]]]) -> go.Figure:
    """Side by side per selected run: hidden vs exposed copy time per direction, step time, bytes."""
    fig = make_subplots(
        rows=1,
        cols=4,
        subplot_titles=(
            "copy time (ms): hidden / exposed",
            "median step (ms)",
            "offloaded (MiB)",
            "peak device memory seen (MiB)",
        ),
    )
    if not runs:
        return empty(fig, "Select runs in the table")
    labels = [esc(label) for label, _ in runs]
    hidden_exposed_bars(fig, labels, [s["copies"] for _, s in runs], row=1, col=1)
    fig.add_bar(
        x=labels,
        y=[ms(s["median_step_ns"]) for _, s in runs],
        name="step",
        marker_color=COLORS["step"],
        showlegend=False,
        row=1,
        col=2,
    )
    for direction in ("d2h", "h2d"):
        fig.add_bar(
            x=labels,
            y=[s["copies"][direction]["bytes"] / 2**20 for _, s in runs],
            name=f"{direction} MiB",
            marker_color=COLORS[direction],
            row=1,
            col=3,
        )
    peaks = [max(s.get("peak_memory_bytes", {}).values(), default=None) for _, s in runs]
    fig.add_bar(
        x=labels,
        y=[None if p is None else p / 2**20 for p in peaks],
        name="peak memory",
        marker_color=COLORS["memset"],
        showlegend=False,
        row=1,
        col=4,
    )
    if all(p is None for p in peaks):
        fig.add_annotation(
            text="no CUDA memory events in these traces",
            showarrow=False,
            row=1,
            col=4,
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
        )
    fig.update_layout(barmode="group", height=380, margin={"t": 40, "b": 40}, legend={"orientation": "h"})
    return fig


def rank_heatmap(summaries: list[dict[str, Any]], policy: str | None) -> go.Figure:
    """Rank by layer: exposed copy time (ms) of each rank's layers, for one policy."""
    runs = sorted(
        (s for s in summaries if s["policy"] == policy and s.get("rank") is not None), key=lambda s: s["rank"]
    )
    if not runs:
        return empty(go.Figure(), "Select runs that are ranks of one job (a rank in their name or manifest)")
    layers = sorted({n for s in runs for n in s["layers"]}, key=_natural)
    z = [[s["layers"][n]["offload"]["exposed_ns"] / 1e6 if n in s["layers"] else None for n in layers] for s in runs]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[esc(n) for n in layers],
            y=[f"rank {s['rank']}" for s in runs],
            colorscale="Reds",
            colorbar={"title": "exposed ms"},
            customdata=[[s["rank"]] * len(layers) for s in runs],
        )
    )
    fig.update_layout(
        height=max(300, 24 * len(runs) + 120), xaxis_title="layer", margin={"t": 20}, yaxis={"autorange": "reversed"}
    )
    return fig


def _natural(text: str) -> list[Any]:
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def layer_figure(summary: dict[str, Any]) -> go.Figure:
    """Stacked hidden and exposed copy time per layer and direction; click a bar for details."""
    layers = list(summary["layers"])
    fig = go.Figure()
    if not layers:
        return empty(fig, "No layers in this run (layer=N ranges or XLA thunks under a named scope)")
    hidden_exposed_bars(fig, [esc(n) for n in layers], [summary["layers"][n] for n in layers], customdata=layers)
    fig.update_layout(
        barmode="group",
        height=360,
        margin={"t": 30, "b": 40},
        xaxis_title="layer",
        yaxis_title="copy time (ms)",
        legend={"orientation": "h"},
    )
    return fig


def layer_copies(ops: pl.DataFrame, layer: str, limit: int = 500) -> list[dict[str, Any]]:
    """The copies of one layer, for the details table."""
    sel = ops.filter((pl.col("layer") == layer) & pl.col("cls").is_in(["h2d", "d2h"])).sort("start").head(limit)
    t0 = ops["start"].min() or 0
    return [
        {
            "direction": c,
            "device": d,
            "stream": s,
            "start_ms": (st - t0) / 1e6,
            "duration_us": (en - st) / 1e3,
            "MiB": (b or 0) / 2**20,
        }
        for c, d, s, st, en, b in sel.select("cls", "device", "stream", "start", "end", "bytes").iter_rows()
    ]


def timeline_figure(
    ops: pl.DataFrame, ranges: pl.DataFrame, window: tuple[int, int] | None, max_segments: int = 4000
) -> tuple[go.Figure, dict[str, Any]]:
    """Lanes per stream (compute, NCCL, D2H, H2D) and NVTX step/layer lanes, WebGL lines.

    A lane with more segments than *max_segments* is drawn from the union of its
    intervals snapped to the pixel-sized grid of the window: the shape of the lane
    stays, the browser gets a bounded number of points.
    """
    if ops.height == 0 and ranges.height == 0:
        return empty(go.Figure(), "Nothing to draw"), {
            "events": 0,
            "drawn_segments": 0,
            "downsampled_lanes": [],
        }
    if window is not None:
        ops = ops.filter((pl.col("end") > window[0]) & (pl.col("start") < window[1]))
        ranges = ranges.filter((pl.col("end") > window[0]) & (pl.col("start") < window[1]))
    t0 = window[0] if window else (ops["start"].min() or 0)
    span = (window[1] - window[0]) if window else max(int((ops["end"].max() or 0) - t0), 1)
    lanes = ops.with_columns(
        pl.when(pl.col("kind") == "kernel")
        .then(pl.when(pl.col("is_nccl")).then(pl.lit("NCCL")).otherwise(pl.lit("compute")))
        .when(pl.col("kind") == "memset")
        .then(pl.lit("memset"))
        .otherwise(pl.col("cls").str.to_uppercase())
        .alias("group"),
    ).with_columns(pl.format("{} d{} s{}", "group", "device", "stream").alias("lane"))
    order = {"NCCL": 0, "compute": 1, "memset": 2, "D2H": 3, "H2D": 4}
    fig = go.Figure()
    stats = {"events": ops.height, "drawn_segments": 0, "downsampled_lanes": []}
    lane_names = sorted(lanes["lane"].unique().to_list(), key=lambda n: (order.get(n.split()[0], 5), n))
    grid = max(span // 2000, 1)
    for lane in lane_names:
        part = lanes.filter(pl.col("lane") == lane)
        group = lane.split()[0]
        s, e = part["start"].to_numpy(), part["end"].to_numpy()
        names = part["name"].to_list()
        if len(s) > max_segments:
            q = union(np.zeros(len(s), dtype=np.int64), (s // grid) * grid, -((-e) // grid) * grid)
            s, e, names = q.start, q.end, [f"{lane}: merged" for _ in range(len(q))]
            stats["downsampled_lanes"].append(lane)
        stats["drawn_segments"] += len(s)
        _segments(fig, lane, s, e, names, t0, COLORS.get(group.lower(), "#444"))
    for lane in ("step", "layer"):
        part = ranges.filter(pl.col("lane") == lane)
        if part.height:
            _segments(
                fig,
                f"NVTX {lane}s",
                part["start"].to_numpy(),
                part["end"].to_numpy(),
                part["name"].to_list(),
                t0,
                COLORS[lane],
            )
    fig.update_layout(
        height=max(300, 28 * (len(lane_names) + 3)),
        margin={"t": 20, "l": 140},
        xaxis_title="ms from the start of the window",
        showlegend=False,
    )
    fig.update_yaxes(autorange="reversed", type="category")
    return fig, stats


def _segments(fig: go.Figure, lane: str, s: np.ndarray, e: np.ndarray, names: list[Any], t0: int, color: str) -> None:
    """Horizontal segments of one lane as a single WebGL line trace with gaps."""
    n = len(s)
    x = np.empty(3 * n)
    x[0::3] = (s - t0) / 1e6
    x[1::3] = (e - t0) / 1e6
    x[2::3] = np.nan
    y = [lane] * (3 * n)
    text = [esc(v) for v in names for _ in range(3)]
    fig.add_trace(
        go.Scattergl(
            x=x,
            y=y,
            mode="lines",
            line={"width": 10, "color": color},
            name=lane,
            hovertext=text,
            hoverinfo="text+x",
        )
    )


def streams_figure(summary: dict[str, Any], link_gbps: float) -> go.Figure:
    """Occupancy and achieved GB/s per copy stream, against the link bandwidth."""
    rows = [(dev, s) for dev, streams in summary["streams"].items() for s in streams]
    if not rows:
        return empty(go.Figure(), "No copies in this run (a CPU-only trace?)")
    labels = [f"d{dev} s{s['stream']} ({','.join(s['classes'])})" for dev, s in rows]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("occupancy of the device window (%)", "achieved GB/s (bytes / copy time)"),
    )
    fig.add_bar(
        x=labels,
        y=[100 * s["occupancy"] for _, s in rows],
        marker_color=COLORS["d2h"],
        row=1,
        col=1,
        name="occupancy",
    )
    fig.add_bar(x=labels, y=[s["gbps"] for _, s in rows], marker_color=COLORS["h2d"], row=1, col=2, name="GB/s")
    fig.add_hline(
        y=link_gbps,
        line_dash="dash",
        line_color="black",
        row=1,
        col=2,
        annotation_text=f"link {link_gbps:g} GB/s",
    )
    fig.update_layout(height=360, showlegend=False, margin={"t": 40, "b": 60})
    return fig
