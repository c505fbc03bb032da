"""Plans compiled for a GPU target (``profile-step plan``, its ``plan.json`` given to the dashboard):
device and host memory per policy and batch against the usable device memory, and the plan's table
(``analysis.policies.plan_table``, as the terminal prints it)."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dash_table, dcc, html

from dashboards import ids, tab_gate
from dashboards.data import RunStore, read_plan
from dashboards.figures import COLORS, LIMIT_COLOR, Figure, esc, grouped_bars, limit_line, note_figure
from dashboards.styles import CELL, ERROR_COLOR, HEADER_WRAP
from dashboards.widgets import graph
from profiler.analysis.policies import plan_table
from profiler.errors import ProfilerError
from profiler.predict.step import COSTED
from profiler.report.policies_text import PLAN_LEGEND, plan_notes
from profiler.report.predict_text import LEGEND as PREDICTED_LEGEND
from profiler.report.predict_text import verdict_lines
from profiler.units import byte_unit, human_bytes, human_time, si, time_unit
from profiler.xla.same_program import other_model

FAR_BELOW = 0.05  # bars under this fraction of the usable memory: the limit is written, not drawn


def plan_figure(tab: dict[str, Any]) -> Figure:
    """A plan compiled for a target (``plan_table``): device and host memory per policy and batch
    against the usable device memory."""
    rows = tab["rows"]
    ok = [r for r in rows if r["device_bytes"] is not None]
    if not ok:
        why = "; ".join(dict.fromkeys(n for r in rows for n in r["notes"])) or "no policy compiled"
        return note_figure(f"Nothing compiled in this plan: {why.rstrip('.')}.")
    cats = [esc(f"{r['policy']}" + ("" if r["batch"] is None else f" · batch {r['batch']}")) for r in ok]
    lim = tab["limit_bytes"]
    biggest = max([r["device_bytes"] for r in ok] + [r["host_bytes"] or 0 for r in ok])
    # a limit far above every bar would flatten them to nothing: then it is said, not drawn
    far = bool(lim) and biggest < FAR_BELOW * lim
    name, div = byte_unit([biggest] + ([] if far else [lim or 0]))
    data = [
        {
            "type": "bar",
            "x": cats,
            "y": [r["device_bytes"] / div for r in ok],
            "name": "device memory",
            "marker": {"color": COLORS["compute"]},
            "text": ["" if r["fits"] is None else ("fits" if r["fits"] else "does NOT fit") for r in ok],
            "textposition": "outside",
            "cliponaxis": False,
            "hovertemplate": f"%{{x}}: device %{{y:.4g}} {name}, %{{text}}<extra></extra>",
        },
        {
            "type": "bar",
            "x": cats,
            "y": [(r["host_bytes"] or 0) / div for r in ok],
            "name": "host memory (offloaded)",
            "marker": {"color": COLORS["memory"]},
            "hovertemplate": f"%{{x}}: host %{{y:.4g}} {name}<extra></extra>",
        },
    ]
    shapes, annotations = [], []
    if lim:
        usable = (
            f"usable device memory {human_bytes(lim)} ({tab['mem_fraction']:g} of "
            f"{human_bytes(tab['target'].get('memory_bytes'))})"
        )
        if far:
            share = 100 * biggest / lim
            shown = "under 0.01" if share < 0.01 else f"{share:.2g}"
            usable += f": far above the chart, the largest bar is {shown}% of it"
        else:
            shapes.append(limit_line(lim / div))
        annotations.append(
            {
                "text": usable,
                "showarrow": False,
                "xref": "paper",
                "yref": "paper" if far else "y",
                "x": 1,
                "xanchor": "right",
                "y": 1 if far else lim / div,
                "yanchor": "bottom",
                "font": {"size": 12, "color": LIMIT_COLOR},
            }
        )
    top = max(biggest, 0 if far else lim or 0) / div
    return grouped_bars(
        data,
        cats,
        esc(f"Memory per policy and batch, {tab['label']}"),
        "policy · batch",
        yaxis={"title": {"text": f"bytes ({name})"}, "range": [0, top * 1.15]},
        shapes=shapes,
        annotations=annotations,
    )


def plan_datatable(tab: dict[str, Any]) -> dash_table.DataTable:
    """The plan's rows (``plan_table``), as ``profile-step plan`` prints them."""
    rows = tab["rows"]
    name, div = byte_unit([v for r in rows for v in (r["device_bytes"], r["host_bytes"])])
    p_name, p_div = byte_unit(
        [v for r in rows for v in (r["planned_d2h_bytes_per_step"], r["planned_h2d_bytes_per_step"])]
    )
    lim = tab["limit_bytes"]

    def d(v: float | None, by: float) -> float | None:
        return None if v is None else v / by

    sig = {"specifier": ".4~r", "nully": "-"}
    data = [
        {
            "policy": r["policy"],
            "batch": r["batch"],
            "status": r["status"],
            "device": d(r["device_bytes"], div),
            "usable": None if r["device_bytes"] is None or not lim else 100 * r["device_bytes"] / lim,
            "fits": "-" if r["fits"] is None else ("yes" if r["fits"] else "NO"),
            "host": d(r["host_bytes"], div),
            "d2h": d(r["planned_d2h_bytes_per_step"], p_div),
            "h2d": d(r["planned_h2d_bytes_per_step"], p_div),
            "flops": si(r["flops_per_step"]),
            "recompute": None if r["recompute_overhead"] is None else 100 * r["recompute_overhead"],
        }
        for r in rows
    ]
    columns = [
        {"id": "policy", "name": "policy", "type": "text"},
        {"id": "batch", "name": "batch", "type": "text"},
        {"id": "status", "name": "compile", "type": "text"},
        {"id": "device", "name": f"device ({name})", "type": "numeric", "format": sig},
        {"id": "usable", "name": "of usable (%)", "type": "numeric", "format": {"specifier": ".1f", "nully": "-"}},
        {"id": "fits", "name": "fits", "type": "text"},
        {"id": "host", "name": f"host ({name})", "type": "numeric", "format": sig},
        {"id": "d2h", "name": f"D2H / step ({p_name})", "type": "numeric", "format": sig},
        {"id": "h2d", "name": f"H2D / step ({p_name})", "type": "numeric", "format": sig},
        {"id": "flops", "name": "FLOPs / step", "type": "text"},
        {"id": "recompute", "name": "recompute (%)", "type": "numeric", "format": {"specifier": "+.1f", "nully": "-"}},
    ]
    return dash_table.DataTable(
        id=ids.PLAN_TABLE,
        columns=columns,
        data=data,
        style_table={"overflowX": "auto"},
        style_header=HEADER_WRAP,
        style_cell=CELL,
        style_data_conditional=[{"if": {"filter_query": "{fits} = NO"}, "color": ERROR_COLOR}],
    )


def predicted_datatable(tab: dict[str, Any], key: str = "predictions") -> dash_table.DataTable | None:
    """Predicted step and exposed copy time per policy, batch and host link (``plan_table``'s
    ``predictions``, as ``profile-step plan`` prints them, or with *key* ``calibrated`` those of
    ``plan --calibrate``); None without predictions."""
    preds = tab.get(key) or []
    if not preds:
        return None
    unit, div = time_unit(p["predicted_step_ns"] for p in preds)

    def t(v: float | None) -> float | None:
        return None if v is None else v / div

    data = [
        {
            "policy": p["policy"],
            "batch": p["batch"],
            "link": p["link_name"] or p["link"],
            "step": t(p["predicted_step_ns"]),
            "exposed": t(p["predicted_exposed_ns"]),
            "compute": t(p["predicted_compute_ns"]),
            "d2h": t((p.get("predicted_copy_ns") or {}).get("d2h")),
            "h2d": t((p.get("predicted_copy_ns") or {}).get("h2d")),
            "fits": "-" if p["fits"] is None else ("yes" if p["fits"] else "NO"),
        }
        for p in preds
    ]
    sig = {"specifier": ".2f", "nully": "-"}  # the decimals of the verdict lines under the table
    columns = [
        {"id": "policy", "name": "policy", "type": "text"},
        {"id": "batch", "name": "batch", "type": "text"},
        {"id": "link", "name": "host link", "type": "text"},
        *(
            {"id": k, "name": f"{label} ({unit})", "type": "numeric", "format": sig}
            for k, label in (
                ("step", "predicted step"),
                ("exposed", "predicted exposed"),
                ("compute", "compute"),
                ("d2h", "D2H"),
                ("h2d", "H2D"),
            )
        ),
        {"id": "fits", "name": "fits", "type": "text"},
    ]
    return dash_table.DataTable(
        id=ids.plan_predicted_table(key),
        columns=columns,
        data=data,
        style_table={"overflowX": "auto", "marginTop": "8px"},
        style_header=HEADER_WRAP,
        style_cell=CELL,
        style_data_conditional=[{"if": {"filter_query": "{fits} = NO"}, "color": ERROR_COLOR}],
    )


def tune_fraction(doc: dict[str, Any]) -> float:
    """The usable share of device memory a plan document was judged by: a tune folder's own limit
    (``--memory-limit``) over the target's memory, else JAX's default 0.75."""
    tune, memory = doc.get("tune") or {}, (doc.get("target") or {}).get("memory_bytes")
    if tune.get("limit_bytes") and memory:
        return (tune["limit_bytes"] + 0.5) / memory  # plan_table's int(memory x fraction) gives the limit back
    return 0.75


def tune_datatable(tune: dict[str, Any]) -> dash_table.DataTable | None:
    """``profile-step tune``'s candidates that fit, best first, as the terminal prints them."""
    rows = tune.get("fitting") or []
    if not rows:
        return None
    unit, div = time_unit(r["predicted_step_ns"] for r in rows)
    name, bdiv = byte_unit([v for r in rows for v in (r["device_bytes"], r["host_bytes"])])
    chosen = (tune.get("choice") or {}).get("label")

    def same(r: dict[str, Any]) -> str:
        return f"={r['same_program_as']}" if r.get("same_program_as") else str(r.get("compile_no") or "-")

    data = [
        {
            "candidate": ("* " if r["label"] == chosen else "") + r["label"],
            "stage": r["stage"],
            "step": r["predicted_step_ns"] / div,
            "exposed": r["predicted_exposed_ns"] / div,
            "device": None if r["device_bytes"] is None else r["device_bytes"] / bdiv,
            "host": (r["host_bytes"] or 0) / bdiv,
            "compile": same(r),
        }
        for r in rows
    ]
    sig = {"specifier": ".4~r", "nully": "-"}
    columns = [
        {"id": "candidate", "name": "candidate", "type": "text"},
        {"id": "stage", "name": "stage", "type": "text"},
        {"id": "step", "name": f"predicted step ({unit})", "type": "numeric", "format": {"specifier": ".2f"}},
        {"id": "exposed", "name": f"predicted exposed ({unit})", "type": "numeric", "format": {"specifier": ".2f"}},
        {"id": "device", "name": f"device ({name})", "type": "numeric", "format": sig},
        {"id": "host", "name": f"host ({name})", "type": "numeric", "format": sig},
        {"id": "compile", "name": "compile", "type": "text"},
    ]
    return dash_table.DataTable(
        id=ids.PLAN_TUNE_TABLE,
        columns=columns,
        data=data,
        style_table={"overflowX": "auto", "marginTop": "8px"},
        style_header=HEADER_WRAP,
        style_cell=CELL,
        style_data_conditional=[{"if": {"filter_query": '{candidate} contains "* "'}, "fontWeight": "bold"}],
    )


def tune_lines(tune: dict[str, Any]) -> list[str]:
    """The choice, why per activation, its MaxText and JAX forms, and how the search stopped."""
    choice = tune.get("choice")
    search = tune.get("search") or {}
    out = [f"Search: {search.get('compiles')} compiles; stopped: {search.get('stop')}."]
    if choice is None:
        return [*out, "No choice: nothing that was compiled fits."]
    out += list(tune.get("why") or [])
    out.append(f"MaxText: {choice.get('maxtext_form') or 'none (' + str(choice.get('maxtext_form_missing')) + ')'}")
    out.append(f"JAX: policy={choice.get('jax_form')}")
    return out


def caption(text: str) -> html.Div:
    """A table's title, above it."""
    return html.Div(text, className="bold-line")


def _sentence(text: str | None) -> str:
    """*text* as a sentence of the view (capital first, a full stop last); nothing without a text."""
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def calibration_line(cal: dict[str, Any] | None) -> str:
    """What the calibrated table is: whose measurement set its costs."""
    if not cal:
        return "Calibrated: predicted with measured costs, not measured."
    return (
        f"Calibrated by {cal['source']} ({cal['module']} on {cal['gpu'] or 'an unnamed GPU'}, "
        f"measured step {human_time(cal['measured_step_ns'])}): predicted with its measured costs, not measured."
    )


def fit_sentences(rows: list[dict[str, Any]]) -> list[str]:
    """Per batch: the policies that fit; a failed compile is said to be one, not to not fit."""
    out = []
    for b in dict.fromkeys(r["batch"] for r in rows):
        at = "" if b is None else f"at batch {b}: "
        of_b = [r for r in rows if r["batch"] == b]
        failed = [r["policy"] for r in of_b if r["status"] != "ok"]
        if len(failed) == len(of_b):
            out.append(f"{at}no policy compiled ({', '.join(failed)}): nothing known about memory")
            continue
        names = [r["policy"] for r in of_b if r["fits"]]
        out.append(
            f"{at}{', '.join(names) or 'no policy'} fit{'s' if len(names) <= 1 else ''}"
            + (f" ({', '.join(failed)} not compiled)" if failed else "")
        )
    return out


def layout(plans: list[Any]) -> list[Any]:
    if plans:
        return [
            html.Div(
                dcc.Dropdown(
                    id=ids.PLAN_CHOICE,
                    clearable=False,
                    options=[{"label": p.name, "value": p.id} for p in plans],
                    value=plans[0].id,
                ),
                className="select-narrow",
            ),
            dcc.Loading(graph(ids.PLAN_GRAPH)),
            html.Div(id=ids.PLAN_TABLE_BOX),
            html.Div(id=ids.PLAN_NOTE, className="muted"),
        ]
    return [
        html.Div(
            "No profile-step plan among the dashboard's inputs. profile-step plan --target h100 SCRIPT writes "
            "plans/<time>-<target>-<id>/plan.json; give that folder (or the plan.json) to profile-step dashboard "
            "to see, before any GPU time is spent, the device memory each policy and batch needs on that GPU.",
            className="note muted",
        )
    ]


def model_note(store: RunStore, rows: list[dict[str, Any]]) -> str | None:
    """Where the plan's rows (*rows*) compiled another model than every run analysed so far: how they
    differ (``same_program.other_model``); None where a run ran one of its programs, or none is known."""
    runs = [{"step_name": c.get("step_name"), "step_signature": c.get("signature")}
            for c in (res.run.compiled or {} for res in list(store.results.values()))]  # fmt: skip
    other = other_model(rows, runs)
    if not other:
        return None
    return (
        f"Another model than the runs loaded beside it: {other}. The plan's pick is for the model it compiled, "
        "not theirs."
    )


def register(app: dash.Dash, store: RunStore) -> None:
    if not store.plans:
        return
    gate = tab_gate.on(app, "trade")

    @gate(
        Output(ids.PLAN_GRAPH, "figure"),
        Output(ids.PLAN_TABLE_BOX, "children"),
        Output(ids.PLAN_NOTE, "children"),
        Input(ids.PLAN_CHOICE, "value"),
    )
    def on_plan(pid):
        ref = store.plans.get(pid)
        if ref is None:
            return note_figure("Pick a plan."), [], ""
        try:
            doc = read_plan(ref)
            tab_doc = plan_table(doc, tune_fraction(doc))
        except (ProfilerError, KeyError, TypeError) as exc:
            why = str(exc) if isinstance(exc, ProfilerError) else f"{ref.path}: not a plan document ({exc})"
            return note_figure(f"Cannot show this plan: {why}"), [], ""
        said = fit_sentences(tab_doc["rows"])
        usable = f"device memory x {tab_doc['mem_fraction']:g} (XLA_PYTHON_CLIENT_MEM_FRACTION)"
        if (doc.get("tune") or {}).get("limit_bytes"):
            usable = f"tune's memory limit, {human_bytes(doc['tune']['limit_bytes'])}"
        text = (
            f"{tab_doc['label'][:1].upper()}{tab_doc['label'][1:]}. Usable device memory = {usable}. "
            + "; ".join(said)
            + f". From {ref.path}."
        )
        notes = [
            f"{r['policy']}{'' if r['batch'] is None else ' batch ' + str(r['batch'])}: {n}"
            for r in tab_doc["rows"]
            for n in plan_notes(r)
        ]
        other = model_note(store, tab_doc["rows"])
        if other:
            notes.insert(0, other)
        predicted = predicted_datatable(tab_doc)
        said_predicted = []
        if predicted is not None:
            said_predicted = [
                f"Predicted ({COSTED}; not measured): {PREDICTED_LEGEND}.",
                _sentence(tab_doc.get("accuracy")),
                *verdict_lines(tab_doc.get("offload_vs_remat") or [], width=None),
            ]
        calibrated = predicted_datatable(tab_doc, "calibrated")
        if calibrated is not None:
            said_predicted += [
                calibration_line(tab_doc["calibration"]),
                _sentence(tab_doc.get("calibrated_accuracy")),
                *verdict_lines(tab_doc.get("calibrated_vs_remat") or [], width=None),
            ]
        tables = [plan_datatable(tab_doc)]
        if predicted is not None:
            tables += [caption(f"Predicted: {COSTED} (not measured)"), predicted]
        if calibrated is not None:
            cal = tab_doc.get("calibration") or {}
            tables += [caption(f"Predicted with the costs {cal.get('source') or 'a run'} measured (not measured)"),
                       calibrated]  # fmt: skip
        tune = doc.get("tune") or {}
        tuned = tune_datatable(tune) if tune else None
        if tuned is not None:
            link = (tune.get("link") or {}).get("name") or "its link"
            tables = [caption(f"profile-step tune: the candidates that fit on {link}, best first (predicted, not "
                              "measured)"), tuned, *map(html.Div, tune_lines(tune)), *tables]  # fmt: skip
        return (
            plan_figure(tab_doc),
            tables,
            [html.Div(text + " " + PLAN_LEGEND + "."), *map(html.Div, notes), *map(html.Div, said_predicted)],
        )
