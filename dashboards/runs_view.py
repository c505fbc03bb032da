"""The runs table (one row per run and GPU, filled in while runs are analyzed) and the Policies tab.

The table's selection drives every other view; ``follow_rows`` is what follows from it here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, State, dash_table, dcc, html

from dashboards import bars, copy_numbers, figures, ids, kernels_view, rows, selection, verdict_view, widgets
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.styles import CELL, ERROR_COLOR, HEADER_WRAP
from dashboards.view import Page, TabView
from profiler.errors import ProfilerError


def all_rows(store: RunStore) -> list[dict[str, Any]]:
    """Rows for every run analyzed so far (errors included): the first view's selection first (so that
    its ticked rows show at the top of the table's box), then the others in discovery order."""
    out = []
    for rid, ref in store.refs.items():
        if rid in store.results:
            run = store.results[rid].run
            first = store.is_first(rid)
            out += [{**rows.raw_row(ref, run, v.device), "_first": first} for v in rows.views(ref, run)]
        elif ref.no_trace:
            out.append(rows.no_trace_row(ref))
        elif rid in store.errors:
            out.append(rows.error_row(ref, store.errors[rid]))
    return rows.selected_first(out)


def table_rows(store: RunStore) -> list[dict[str, Any]]:
    """The rows as the browser gets them (units applied, private keys dropped)."""
    return rows.table(all_rows(store))[1]


def progress_text(done: int, total: int, current: str | None, plans: int = 0) -> str:
    """The line above the runs table: how many runs, or how far their analysis is."""
    if not total:
        return "No runs found. Give run folders or traces: profile-step dashboard runs/ trace.sqlite" + (
            f" ({plans} profile-step plan(s): see Policy trade)" if plans else ""
        )
    if done >= total:
        return f"{total} run(s); one row per GPU. Pick rows to compare them below."
    return f"Analyzing runs: {done}/{total} done" + (f", now {current}" if current else "") + " …"


def options(store: RunStore, view_ids: list[str]) -> list[dict[str, Any]]:
    """Dropdown choices for the analyzed (run, GPU) views among *view_ids*: short label, full name on hover."""
    out = []
    for vid in view_ids:
        view = View.parse(vid)
        if view.rid in store.results:
            short, full = selection.view_label(store, view)
            out.append({"label": html.Span(short, title=full), "value": vid, "search": full})
    return out


def follow_rows(
    store: RunStore, views: list[View], current: list[str | None], default: str | None = None
) -> dict[str, Any]:
    """Everything that follows from the selected rows: the policy figure, error cards, provenance,
    and the run choices of the per-run tabs: each one's value kept where the user picked it, the
    (run, GPU) the verdict shows (``first``) where it was the one the tab opened on (*default*) or none."""
    good, cards, items, prov, seen, with_copies = [], [], [], [], set(), set()
    jax: dict[str, dict[str, list[str]]] = {}  # jax.profiler runs with GPU activity: folder -> GPU -> labels
    for view in views:
        if store.refs[view.rid].no_trace:  # its row says why; nothing to draw
            continue
        try:
            run = store.get(view.rid).run
        except ProfilerError as exc:
            cards.append(widgets.card(str(exc)))
            continue
        ref = store.refs[view.rid]
        good.append(view.id)
        off = run.device_copies(view.device)
        if (off.get("offload") or {}).get("count"):
            with_copies.add(view.id)
        items.append(
            figures.Item(
                label=rows.label(ref, run, view.device),
                full=rows.full_name(ref, run, view.device),
                copies={d: off.get(d) or copy_numbers.ZERO for d in ("h2d", "d2h", "offload")},
                step_ns=run.median_step_ns,
                peak_bytes=run.peak_memory_bytes.get(view.device),
                synthetic=ref.synthetic,
                waits=copy_numbers.waits(run, view.device),
                stalled=copy_numbers.stalled(run, view.device),
                stalls_not_measured=copy_numbers.stalls_not_measured(run, view.device),
            )
        )
        if rows.jax_profiled(ref) and view.device is not None:
            gpu = run.device_name(view.device) or "an unnamed GPU"
            jax.setdefault(ref.group, {}).setdefault(gpu, []).append(rows.label(ref, run))
        if ref.provenance is not None and ref.id not in seen:
            seen.add(ref.id)
            p = ref.provenance
            prov.append(
                html.Li(
                    [
                        html.Strong(rows.short_id(ref)),
                        f": real trace from {p.repo} (commit {p.commit[:10]}, {p.licence}), {p.path}. {p.description}",
                    ]
                )
            )
    # a per-run view opens on the run whose copies the verdict shows (the fastest that offloads, say), else
    # on the first selected row with copies, else the first row
    found = verdict_view.of(store, [v for v in views if v.id in good])
    shown = (found or {}).get("trace")
    mine = [v.id for v in views if v.id in with_copies and store.results[v.rid].run.trace == shown]
    first = next(iter(mine), next((v for v in good if v in with_copies), good[0] if good else None))
    values = [v if v in good and v != default else first for v in current]
    failed = [widgets.card(msg) for rid, msg in list(store.errors.items()) if rid not in {v.rid for v in views}]
    provenance = jax_provenance(jax, store.paths)
    if prov:
        provenance += [html.Strong("Real traces from public repositories (not made by this project):"), html.Ul(prov)]
    return {
        "verdict": verdict_view.panel(store, [v for v in views if v.id in good], found),
        "bars": bars.policy_table(items),
        "errors": cards + failed,  # every run that cannot be read, selected or not
        "provenance": provenance,
        "options": options(store, good),
        "values": values,
        "first": first,
    }


def _folder(group: str, roots: list[Path]) -> str:
    """A folder of runs as the user named it: from the folder given to the dashboard that holds it
    (``sample_traces/h200-example``), else whole."""
    for root in roots:
        with contextlib.suppress(ValueError):
            return str(Path(group).relative_to(root.parent))
    return group


def jax_provenance(jax: dict[str, dict[str, list[str]]], roots: list[Path]) -> list[Any]:
    """What the selected jax.profiler runs are: measured on which real GPU, where, and what such a trace
    cannot say (in the words of analyze's stall line)."""
    if not jax:
        return []
    items = [
        html.Li(
            [
                html.Strong(_folder(group, roots)),
                f": {len(labels)} run(s) on {gpu}: " + ", ".join(dict.fromkeys(labels)),
            ]
        )
        for group, gpus in jax.items()
        for gpu, labels in gpus.items()
    ]
    kinds = {gpu for gpus in jax.values() for gpu in gpus}
    tpu = {k for k in kinds if "TPU" in str(k)}
    said = []
    if kinds - tpu:
        said.append(
            "Such a trace holds every kernel and copy: copy time, overlap, exposed time and steps are measured. "
            f"Stalls are not measured and the copies' cost to the step is not modelled: {copy_numbers.NO_WAITS}."
        )
    if tpu:
        said.append(
            "A TPU's trace holds every op of its one instruction stream and its host transfers: copy time, "
            "overlap, exposed time, steps and stalls (the core's waits in the transfers' dones) are measured."
        )
    device = "GPU" if not tpu else "TPU" if tpu == kinds else "accelerator"
    return [
        html.Strong(f"Measured on a real {device} with JAX's own profiler (jax.profiler, not nsys):"),
        html.Ul(items),
        *(html.Div(text) for text in said),
    ]


def table_part(store: RunStore, raw: list[dict[str, Any]], sel: dict[str, Any]) -> list[Any]:
    """The progress line, the runs table with its first selection, and the notes under it."""
    columns, data, tips = rows.table(raw)
    selected = rows.default_selection(raw)
    done, total, _ = store.progress()
    return [
        html.Div(sel["verdict"], id=ids.VERDICT, className="verdict"),
        html.Div(progress_text(done, total, None, len(store.plans)), id=ids.PROGRESS, className="muted"),
        dcc.Interval(id=ids.POLL, interval=700, n_intervals=0, disabled=done >= total),
        dash_table.DataTable(
            id=ids.RUNS,
            columns=columns,
            data=data,
            tooltip_data=tips,
            tooltip_header=rows.header_tooltips(columns),
            tooltip_delay=300,
            tooltip_duration=None,
            row_selectable="multi",
            selected_rows=selected,
            sort_action="native",
            filter_action="native",
            page_action="none",
            # eight runs and their header fit a laptop's window (340 px hid two of the example's eight); more scroll
            style_table={"overflowX": "auto", "maxHeight": "max(340px, 60vh)", "overflowY": "auto"},
            style_header=HEADER_WRAP,
            style_cell={**CELL, "maxWidth": "280px", "overflow": "hidden", "textOverflow": "ellipsis"},
            # long GPU names, policies and run names on two lines: the table fits a 1344-pixel window, date included
            style_cell_conditional=[
                {"if": {"column_id": c}, "minWidth": lo, "maxWidth": hi, "whiteSpace": "normal", "height": "auto"}
                for c, lo, hi in (("device", "150px", "190px"), ("policy", "150px", "200px"), ("run", "190px", "250px"))
            ],
            style_data_conditional=[
                {"if": {"filter_query": "{status} = error"}, "color": ERROR_COLOR},
                {"if": {"filter_query": "{source} = 'SYNTHETIC demo'"}, "fontStyle": "italic"},
            ],
        ),
        html.Div(rows.SOURCE_NOTE, id=ids.TABLE_NOTE, className="muted"),
        html.Div(sel["provenance"], id=ids.PROVENANCE, className="muted"),
    ]


def policies_layout(page: Page) -> list[Any]:
    """The Policies tab: the selected rows' copy numbers side by side, and their kernels beside copies."""
    return [
        html.Div(page.sel["bars"], id=ids.POLICY_BARS),
        html.Div(kernels_view.policy_panel(page.store, page.views), id=ids.POLICY_KERNELS),
    ]


POLICIES = TabView("policies", "Policies", policies_layout, kernels_view.register_policies)


def register(app: dash.Dash, store: RunStore, per_run: Sequence[TabView]) -> None:
    """The table's callbacks: it fills in while runs are analyzed, and its selection and rows (again when an
    analysis ends) set the verdict, the policy bars, the error cards, the provenance and the run choices of
    the *per_run* tabs."""
    choices = [t.run_choice for t in per_run]

    @app.callback(
        Output(ids.PROGRESS, "children"),
        Output(ids.RUNS, "columns"),
        Output(ids.RUNS, "data"),
        Output(ids.RUNS, "tooltip_data"),
        Output(ids.POLL, "disabled"),
        Output(ids.RUNS, "selected_rows"),
        Input(ids.POLL, "n_intervals"),
        State(ids.RUNS, "selected_rows"),
        State(ids.RUNS, "data"),
        prevent_initial_call=True,
    )
    def refresh(_n: int, selected: list[int], old: list[dict[str, Any]]):
        done, total, current = store.progress()
        raw = all_rows(store)
        finished = done >= total
        msg = progress_text(done, total, current, len(store.plans))
        if len(raw) == len(old or []):
            return msg, dash.no_update, dash.no_update, dash.no_update, finished, dash.no_update
        columns, data, tips = rows.table(raw)
        keep = {old[i]["id"] for i in (selected or []) if i < len(old or [])}
        before = [r for r in raw if r["id"] in {o["id"] for o in old or []}]
        untouched = keep == {before[i]["id"] for i in rows.default_selection(before)} if before else True
        # the first view's choice follows the runs as they come in, until the user picks rows
        new_sel = rows.default_selection(raw) if untouched else [i for i, r in enumerate(data) if r["id"] in keep]
        return msg, columns, data, tips, finished, new_sel

    @app.callback(
        Output(ids.VERDICT, "children"),
        Output(ids.POLICY_BARS, "children"),
        Output(ids.ERRORS, "children"),
        Output(ids.PROVENANCE, "children"),
        Output(ids.RUN_DEFAULT, "data"),
        *[out for c in choices for out in (Output(c, "options"), Output(c, "value"))],
        Input(ids.RUNS, "selected_rows"),
        Input(ids.RUNS, "data"),  # an analysis that ends changes the rows under the same indices: follow them
        State(ids.RUN_DEFAULT, "data"),
        *[State(c, "value") for c in choices],
        prevent_initial_call=True,
    )
    def on_select(selected, data, default, *current):
        sel = follow_rows(store, selection.selected_views(selected, data), list(current), default)
        # a value the tab already shows is not sent again: its views are not redrawn (a layer's open detail,
        # a what-if under way) when only the rows changed, as they do while runs are analyzed
        runs = [
            out
            for value, now in zip(sel["values"], current, strict=True)
            for out in (sel["options"], dash.no_update if value == now else value)
        ]
        return sel["verdict"], sel["bars"], sel["errors"], sel["provenance"], sel["first"], *runs
