"""Kernels slowed by copies (METRICS.md), in the Policies and Per layer tabs.

Nothing is computed here: every number is the run summary's ``kernels_beside_copies`` (one entry
per GPU, made by ``profiler.analysis.kernels_slowed``), shown as it is.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dash_table, html

from dashboards import ids, rows, selection, tab_gate
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.styles import CELL, HEADER
from profiler.analysis.kernels_slowed import MIN_CALLS, SIZE_BIAS_NOTE, no_baseline, persistent, persistent_excess
from profiler.conventions import device_word
from profiler.errors import ProfilerError
from profiler.stored.summary import RunSummary
from profiler.units import human_time
from profiler.xla.targets import sm_count

CAVEAT = (
    f"Kernels alone: no copy overlaps them; beside: at least half of each under h2d/d2h copies. {SIZE_BIAS_NOTE}; "
    "a group of persistent kernels (as many blocks as the GPU has SMs, e.g. cuBLAS's nvjet GEMMs on Hopper) has one "
    "launch shape for every size, so its slowdown may be size alone: the findings leave such groups out."
)


def entry(run: RunSummary, device: str | None) -> dict[str, Any] | None:
    """The GPU's ``kernels_beside_copies``, or None (no GPU, or a run analyzed before the metric)."""
    return run.kernels_beside_copies.get(device) if device is not None else None


def kernel_count(run: RunSummary, device: str | None) -> int | None:
    """The GPU's kernels in the window (the runs table's and analyze's count), None where not known."""
    return ((run.compute.get(device) or {}).get("compute") or {}).get("count") if device is not None else None


def of_all(kb: dict[str, Any], total: int | None) -> str:
    """How the kernels counted alone and beside copies relate to all the GPU's kernels: ``of its 80 kernels,
    40 beside copies, none alone; the other 40 partly beside copies or of zero length``."""
    alone, beside = kb["calls_alone"], kb["calls_beside"]
    if total is None:
        return ""
    rest = total - alone - beside
    other = (
        f"; the other {rest:,} partly beside copies, of zero length or an async start or done, in neither count"
        if rest > 0
        else ""
    )
    return f" (of the device's {total:,} kernels in the window{other})"


def status(kb: dict[str, Any] | None, total: int | None = None) -> str:
    """One sentence on what the GPU's kernels show; *total*: its kernels in the window, said beside them."""
    if kb is None:
        return "not measured for this run"
    return _status(kb) + of_all(kb, total)


def _status(kb: dict[str, Any]) -> str:
    alone, beside = kb["calls_alone"], kb["calls_beside"]
    if not alone and not beside:
        return "no kernels alone or beside copies"
    if not beside:
        return f"no kernel ran beside h2d/d2h copies ({alone:,} alone): nothing to measure"
    if no_baseline(kb):
        return f"{beside:,} kernels ran beside copies, none alone: no baseline, 0 groups"
    if not kb["groups"]:
        return f"{alone:,} alone, {beside:,} beside, but no (name, grid, block) has {MIN_CALLS} of each: 0 groups"
    return (
        f"{kb['groups']} group(s) of {MIN_CALLS}+ alone and beside: {human_time(kb['excess_ns'])} of kernel time "
        f"lost ({alone:,} kernels alone, {beside:,} beside)"
    )


def group_rows(kb: dict[str, Any], sms: int | None = None) -> list[dict[str, Any]]:
    """The ``top`` groups as table rows (*sms*: the GPU's, to mark the groups of persistent kernels)."""
    return [
        {
            "kernel": g["name"] or "?",
            "grid": "x".join(map(str, g["grid"])),
            "block": "x".join(map(str, g["block"])),
            "alone (n)": f"{human_time(g['alone']['median_ns'])} ({g['alone']['count']:,})",
            "beside copies (n)": f"{human_time(g['beside']['median_ns'])} ({g['beside']['count']:,})",
            "slowdown": f"{g['slowdown']:.2f}x" + (" (persistent: sizes mixed)" if persistent(g["grid"], sms) else ""),
            "excess": human_time(g["excess_ns"]),
        }
        for g in kb["top"]
    ]


def _table(tid: str, data: list[dict[str, Any]]) -> dash_table.DataTable:
    """A plain table; a long cell (a kernel's name, the groups' summary) wraps within its column, so that the
    table fits a 1344-pixel window; a cell longer than 50 characters is also whole on hover."""
    cols = list(data[0]) if data else []
    return dash_table.DataTable(
        id=tid,
        data=data,
        columns=[{"id": c, "name": c} for c in cols],
        style_cell={**CELL, "maxWidth": "300px", "whiteSpace": "normal", "height": "auto", "wordBreak": "break-word"},
        style_header=HEADER,
        style_table={"overflowX": "auto"},
        tooltip_data=[
            {c: {"value": str(v), "type": "text"} for c, v in row.items() if len(str(v)) > 50} for row in data
        ],
        tooltip_delay=300,
        tooltip_duration=None,
    )


def layer_panel(run: RunSummary, device: str | None) -> list[Any]:
    """Per layer tab: the GPU's kernels beside copies (a per-GPU number: kernels are not split by layer)."""
    kb = entry(run, device)
    which = f"{device_word([run.device_name(device)])} {device}" if device is not None else "no GPU recorded"
    out: list[Any] = [
        html.Strong(f"Kernels slowed by copies, {which} (the whole window, not per layer)"),
        html.Div(status(kb, kernel_count(run, device)), id=ids.LAYER_KERNELS_STATUS, className="muted"),
    ]
    if kb and kb["top"]:
        out.append(_table(ids.LAYER_KERNELS_TABLE, group_rows(kb, sm_count(run.device_name(device)))))
        out.append(
            html.Div(
                CAVEAT + " Of an even number of durations, the median is the lower of the two middle ones.",
                className="muted",
            )
        )
    return out


def policy_rows(store: RunStore, views: list[View]) -> list[dict[str, Any]]:
    """Policies tab: one row per selected (run, GPU), with its group of most excess."""
    out = []
    for view in views:
        if view.device is None:
            continue
        try:
            run = store.get(view.rid).run
        except ProfilerError:
            continue  # the policy table's error card says why
        kb = entry(run, view.device)
        worst = kb["top"][0] if kb and kb["top"] else None
        sms = sm_count(run.device_name(view.device))
        mixed = persistent_excess(run, view.device)
        # no group of kernels both alone and beside copies: nothing measured, not 0 ns lost
        lost = human_time(kb["excess_ns"], nanoseconds=True) if kb and kb["groups"] else "-"
        if mixed:  # the findings leave these groups out (kernels-slowed-by-copies): say how much of it they are
            aside = human_time(kb["excess_ns"] - mixed, nanoseconds=True)
            lost += (
                f" ({human_time(mixed, nanoseconds=True)} of it in persistent kernels, sizes mixed: see below; "
                f"{aside} aside from them, as compare counts it)"
            )
        out.append(
            {
                "run and GPU": rows.label(store.refs[view.rid], run, view.device),
                "groups": kb["groups"] if kb else "-",
                "kernel time lost": lost,
                "most excess": f"{worst['name']} {worst['slowdown']:.2f}x"
                + (" (persistent)" if persistent(worst["grid"], sms) else "")
                if worst
                else "-",
                "what the kernels show": status(kb, kernel_count(run, view.device)),
            }
        )
    return out


def policy_panel(store: RunStore, views: list[View]) -> list[Any]:
    data = policy_rows(store, views)
    if not data:
        return []
    return [
        html.H4("Kernels slowed by copies (hidden is not free)", className="kernels-title"),
        _table(ids.POLICY_KERNELS_TABLE, data),
        html.Div(CAVEAT, className="muted"),
    ]


def register_policies(app: dash.Dash, store: RunStore) -> None:
    """The Policies tab's panel follows the selected rows."""

    @app.callback(
        Output(ids.POLICY_KERNELS, "children"),
        *selection.TICKED,
        prevent_initial_call=True,  # the first view comes with the panel drawn (runs_view.POLICIES)
    )
    def on_policy_kernels(selected, data):
        return policy_panel(store, selection.selected_views(selected, data))


def register_layers(app: dash.Dash, store: RunStore) -> None:
    """The Per layer tab's panel follows its run."""
    gate = tab_gate.on(app, "layers")

    @gate(Output(ids.LAYER_KERNELS, "children"), Input(ids.LAYER_RUN, "value"))
    def on_layer_kernels(vid):
        if not vid:
            return []
        view = View.parse(vid)
        try:
            run = store.get(view.rid).run
        except ProfilerError:
            return []
        return layer_panel(run, view.device)
