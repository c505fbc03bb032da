"""The findings panel: per selected run, what is wrong and what to try (``analysis.findings``, in the
run summary), by saving, highest first (the summary's order), each with what fixing it saves, and a button
that opens the view showing its evidence with that run and GPU selected; the rules that could not
decide in a muted line."""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, html

from dashboards import ids, layers_view, runs_view, selection, streams_view, tab_gate, timeline_view
from dashboards.data import RunStore
from dashboards.rows import View
from dashboards.view import Page, TabView
from profiler.analysis.findings.tried import tried_items, try_notes
from profiler.report.findings_text import UNITS, by_saving, saving_text, shared_reason

SEVERITY_COLOR = {"problem": "#D55E00", "warning": "#E69F00", "info": "#0072B2"}  # Okabe and Ito's
SEVERITY_ORDER = ("problem", "warning", "info")
EVIDENCE_TABS = (runs_view.POLICIES, layers_view.TAB, timeline_view.TAB, streams_view.TAB)  # what Finding.view names
VIEW_LABEL = {t.name: t.label for t in EVIDENCE_TABS}
RUN_CHOICE = {t.name: t.run_choice for t in EVIDENCE_TABS if t.run_choice}


def where_text(where: dict[str, Any]) -> str:
    """``{"device": "0", "stream": 14}`` -> ``GPU 0, stream 14``."""
    parts = []
    for key, value in where.items():
        if key == "device":
            parts.append(f"GPU {value}")
        elif key == "direction":
            parts.append(str(value).upper())
        elif key in ("steps", "layers", "kernels") and isinstance(value, list):
            shown = ", ".join(map(str, value[:4])) + (f" (+{len(value) - 4})" if len(value) > 4 else "")
            parts.append(f"{key} {shown}")
        elif key == "steps":
            parts.append(f"{value} steps")
        elif key == "op":
            parts.append(f"XLA operation {value}")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def target(finding: dict[str, Any], rid: str, views: list[View]) -> tuple[str, str | None]:
    """The (run, GPU) view id that shows a finding's evidence, and the step to show (timeline).

    The finding's own GPU when its row is selected, else the run's first selected row.
    """
    device = (finding.get("where") or {}).get("device")
    ids = [v.id for v in views]
    vid = f"{rid}@{device}" if device is not None and f"{rid}@{device}" in ids else ids[0]
    steps = (finding.get("where") or {}).get("steps")
    step = steps[0] if isinstance(steps, list) and steps and isinstance(steps[0], str) else None
    return vid, step


def focus(finding: dict[str, Any]) -> str:
    """What the timeline marks for a finding, as ``kernels:NAME|NAME`` or ``layer:NAME`` ("": nothing
    that the timeline's ops carry: an XLA operation, a scope)."""
    where = finding.get("where") or {}
    kernels = where.get("kernels")
    if isinstance(kernels, list) and kernels:
        return "kernels:" + "|".join(map(str, kernels))
    if isinstance(where.get("layer"), str):
        return "layer:" + where["layer"]
    return ""


def evidence_items(evidence: dict[str, Any]) -> list[html.Li]:
    """A finding's evidence, a line per item."""
    return [html.Li(f"{k}: {v}") for k, v in evidence.items()]


def _finding(
    f: dict[str, Any], rid: str, views: list[View], n: int, i: int, said: str | None = None, done: str | None = None
) -> html.Div:
    """One finding (*n*: its place in the panel; *i*: in its run's findings, by saving; *said*: the
    reason for no saving said once above the run's findings, ``shared_reason``; *done*: what a sibling
    run that tried its advice measured, ``tried.try_notes``) with its
    evidence folded: sent when first unfolded (``on_evidence``), since it can be tens of kB of text
    (the kernel groups of kernels-slowed-by-copies), which the page took half a second to take in."""
    sev = f["severity"]
    vid, step = target(f, rid, views)
    view = f.get("view") or "policies"
    gpu = View.parse(vid).device
    summed = (f.get("where") or {}).get("device") is None and len(views) > 1  # a run-wide finding, several GPUs
    mark = focus(f) if view == "timeline" else ""
    marks = ", the ops it names marked ▼" if mark else (", at the step it names" if step else "")
    label = VIEW_LABEL.get(view, view)
    button = f"Show in {label}"
    if gpu is not None and view != "policies":
        button = f"Show GPU {gpu} in the {label} tab{marks if view == 'timeline' else ''}"
        button += " (the finding is over all GPUs)" if summed else ""
    evidence = f.get("evidence") or {}
    return html.Div(
        className="finding",
        **{"data-rule": f["id"], "data-severity": sev, "data-view": view, "data-target": vid},
        style={"borderLeftColor": SEVERITY_COLOR.get(sev, "var(--rule-strong)")},
        children=[
            html.Div(
                [
                    html.Span(
                        sev,
                        className=f"severity severity-{sev}",
                        style={"background": SEVERITY_COLOR.get(sev, "var(--rule-strong)")},
                    ),
                    html.Code(f["id"], className="rule-id"),
                    html.Span(where_text(f.get("where") or {}), className="where"),
                    html.Span(
                        saving_text(f, said),
                        className="cost",
                        **{
                            "data-saving": "" if f.get("saving_ns") is None else str(f["saving_ns"]),
                            "data-attributed": "" if f.get("attributed_ns") is None else str(f["attributed_ns"]),
                        },
                    ),
                ]
            ),
            html.Div(f["verdict"], className="verdict"),
            html.Div(
                [html.Strong("Try: "), f["try"]]
                + ([" ", html.Span(f"({done}; see below)", className="tried-note")] if done else []),
                className="try",
            ),
            html.Div(
                [
                    html.Button(
                        button,
                        id={
                            "type": ids.FINDING_OPEN,
                            "view": view,
                            "target": vid,
                            "step": step or "",
                            "focus": mark,
                            "n": n,
                        },
                        className="finding-open",
                    ),
                    html.Details(
                        [
                            html.Summary("evidence", id={"type": ids.FINDING_EVIDENCE_OPEN, "run": rid, "i": i}),
                            html.Ul(id={"type": ids.FINDING_EVIDENCE, "run": rid, "i": i}),
                        ],
                        className="evidence",
                    )
                    if evidence
                    else None,
                ]
            ),
        ],
    )


def split_by_gpu(found: list[dict[str, Any]], views: list[View]) -> tuple[list[dict[str, Any]], list[str]]:
    """The findings of a run that its selected rows show (run-wide, or on a selected GPU), and the GPUs
    of those left out (their rows are not selected)."""
    selected = {str(v.device) for v in views if v.device is not None}

    def on(f: dict[str, Any]) -> str | None:
        d = (f.get("where") or {}).get("device")
        return None if d is None else str(d)

    shown = [f for f in found if on(f) is None or on(f) in selected]
    left = sorted({on(f) for f in found if f not in shown}, key=lambda d: (len(d), d))
    return shown, left


def _tried(line: str) -> html.Div:
    """An 'already tried (rules): ...' line (``findings.tried``), its head in bold, boxed as a finding is."""
    head, _, rest = line.partition(": ")
    return html.Div([html.Strong(head[0].upper() + head[1:] + ":"), " " + rest], className="tried")


def panel(store: RunStore, views: list[View]) -> list[Any]:
    """The findings of the selected runs: runs with findings first (the most severe first, then the
    largest saving), one section each, its findings by saving; then one line per run without any."""
    runs = selection.selected_runs(store, views)
    if not runs:
        return [html.Div("Select runs in the table above to see their findings.", className="note muted")]

    def rank(item: tuple[str, list[View]]) -> tuple[int, float]:
        found = store.results[item[0]].run.finding_list
        worst = min((SEVERITY_ORDER.index(f["severity"]) for f in found), default=len(SEVERITY_ORDER))
        return worst, -max((f.get("saving_share") or 0 for f in found), default=0)

    out: list[Any] = []
    quiet: list[Any] = []
    n = 0
    loaded = list(store.results)  # a flag's sibling run may be loaded and not selected
    already = dict(zip(loaded, tried_items([store.results[r].run for r in loaded]), strict=True))
    for rid, run_views in sorted(runs, key=rank):
        short, full = selection.run_label(store, rid)
        doc = store.results[rid].run.findings
        skipped = (doc or {}).get("skipped") or []
        undecided = "Could not decide: " + "; ".join(f"{s['rule']} ({s['why']})" for s in skipped) + "."
        ranked = by_saving((doc or {}).get("findings") or [])  # as the summary lists them; older summaries too
        order = {id(f): i for i, f in enumerate(ranked)}  # a finding's place, as ``on_evidence`` finds it
        found, left = split_by_gpu(ranked, run_views)
        elsewhere = (
            f"Findings on GPUs whose rows are not selected ({', '.join('GPU ' + d for d in left)}): "
            "select those rows to see them. "
            if left
            else ""
        )
        if not found:
            said = "no findings computed" if not doc else "no finding (every rule that could decide found nothing)"
            quiet.append(
                html.Li(
                    [
                        html.Strong(short, title=full),
                        f": {said}. " if not left else ": ",
                        html.Span(elsewhere + (undecided if skipped else ""), className="muted"),
                    ],
                    className="run-findings",
                    **{"data-run": rid},
                )
            )
            continue
        said = shared_reason(found)
        body: list[Any] = [html.Div(f"({said})", className="findings-reason muted")] if said else []
        notes = try_notes(already.get(rid, []))
        for f in found:
            body.append(_finding(f, rid, run_views, n, order[id(f)], said, notes.get(f["id"])))
            n += 1
        body += [_tried(t["line"]) for t in already.get(rid, [])]
        if any(f.get("saving_ns") for f in found):
            body.append(html.Div(f"Units: {UNITS}.", className="findings-units muted"))
        if left:
            body.append(html.Div(elsewhere, className="elsewhere muted"))
        if skipped:  # folded: one line, a rule and its reason per line when opened
            body.append(
                html.Details(
                    [
                        html.Summary(f"{len(skipped)} rule(s) could not decide on this run (why)"),
                        html.Ul([html.Li(f"{s['rule']}: {s['why']}") for s in skipped], className="tight-list"),
                    ],
                    className="skipped muted",
                )
            )
        if doc.get("disabled"):
            body.append(html.Div("Turned off: " + ", ".join(doc["disabled"]) + ".", className="muted"))
        out += [
            html.H4(short, title=full, className="findings-run-title"),
            html.Div(body, className="run-findings", **{"data-run": rid}),
        ]
    if quiet:
        out.append(html.Ul(quiet, className="quiet-runs"))
    if any(store.refs[rid].synthetic for rid, _ in runs):
        out.append(html.Div("SYNTHETIC runs: findings on a model of a step, not on a measurement.", className="muted"))
    return out


def count_label(store: RunStore, views: list[View]) -> str:
    """The tab's label: ``Findings (3)``."""
    total = 0
    for rid, run_views in selection.selected_runs(store, views):
        found = store.results[rid].run.finding_list
        total += len(split_by_gpu(found, run_views)[0])
    return f"Findings ({total})"


def layout(page: Page) -> list[Any]:
    return [
        html.Div(
            "What each selected run's numbers say is wrong, and what to try (the same rules as "
            "profile-step findings); a button opens the view that shows the evidence.",
            className="muted",
        ),
        html.Div(id=ids.FINDINGS_PANEL),
    ]


def register(app: dash.Dash, store: RunStore) -> None:
    gate = tab_gate.on(app, "findings")

    @gate(Output(ids.FINDINGS_PANEL, "children"), *selection.TICKED)
    def on_findings(selected, data):
        return panel(store, selection.selected_views(selected, data))

    @app.callback(
        Output({"type": ids.FINDING_EVIDENCE, "run": MATCH, "i": MATCH}, "children"),
        Input({"type": ids.FINDING_EVIDENCE_OPEN, "run": MATCH, "i": MATCH}, "n_clicks"),
        State({"type": ids.FINDING_EVIDENCE, "run": MATCH, "i": MATCH}, "children"),
        prevent_initial_call=True,
    )
    def on_evidence(clicks, shown):
        """A finding's evidence, the first time it is unfolded."""
        if not clicks or shown:
            return dash.no_update
        rid, i = dash.ctx.triggered_id["run"], dash.ctx.triggered_id["i"]
        if rid not in store.refs:
            return dash.no_update
        found = by_saving((store.get(rid).run.findings or {}).get("findings") or [])
        return evidence_items(found[i].get("evidence") or {}) if 0 <= i < len(found) else dash.no_update

    choices = list(RUN_CHOICE.items())

    @app.callback(
        Output(ids.TABS, "value", allow_duplicate=True),
        *[Output(choice, "value", allow_duplicate=True) for _, choice in choices],
        Output(ids.TIMELINE_STEP, "value", allow_duplicate=True),
        Output(ids.TIMELINE_FOCUS, "data"),
        Input({"type": ids.FINDING_OPEN, "view": ALL, "target": ALL, "step": ALL, "focus": ALL, "n": ALL}, "n_clicks"),
        prevent_initial_call=True,
    )
    def on_open(_clicks):
        trig = dash.ctx.triggered_id
        if not trig or not dash.ctx.triggered[0].get("value"):
            return (dash.no_update,) * (len(choices) + 3)  # the panel was drawn, nothing clicked
        view, vid, step = trig["view"], trig["target"], trig["step"] or dash.no_update
        runs = [vid if view == name else dash.no_update for name, _ in choices]
        mark = {"vid": vid, "focus": trig["focus"]} if view == "timeline" and trig["focus"] else None
        timeline_step = dash.no_update
        if view == "timeline":
            timeline_step = step if step is not dash.no_update else timeline_view.ALL
        return view, *runs, timeline_step, mark


TAB = TabView("findings", count_label, layout, register)
