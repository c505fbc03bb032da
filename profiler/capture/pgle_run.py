"""``profile-step pgle`` (measured instruction times -> XLA's PGLE file) and ``plan --pgle``
(the step compiled without and with the file, and where its copies moved)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from profiler.analysis.links import LINKS, Link, link_of_gpu
from profiler.capture.plan import PlanRequest, run_plan
from profiler.errors import InputError
from profiler.runs import folder
from profiler.runs.measured import Measured, load
from profiler.xla import pgle
from profiler.xla.compiled import load_module
from profiler.xla.hlo import HloError, Module


def write_profile(source: Path, out: Path, module: str | None = None, hlo: Path | None = None) -> dict[str, Any]:
    """Write the PGLE text profile of what *source* measured to *out*; returns a summary."""
    if out.exists() and out.is_dir():
        raise InputError(out, "is a folder: -o takes the profile's file name (e.g. step.pbtxt)")
    m = load(source, module, hlo)
    costs = pgle.site_costs(m.times)
    if costs.height == 0:
        raise InputError(source, f"no measured instruction of {m.module_name} with a duration")
    execs = m.steps.height
    header = [
        "XLA profile-guided latency estimator profile (ProfiledInstructionsProto, text), by profile-step pgle",
        f"from {source.name}: module {m.module_name}, median of {execs} executions, cost_us per execution",
    ]
    try:
        out.write_text(pgle.profile_text(costs, header))
    except OSError as exc:
        raise InputError(out, f"cannot be written ({exc})") from None
    by = costs.group_by("op_class").agg(pl.len().alias("n"), pl.col("cost_us").sum().alias("us"))
    return {
        "source": str(source),
        "file": str(out),
        "module": m.module_name,
        "step": m.chosen_by,
        "executions": execs,
        "step_ms": m.step_ns / 1e6,
        "instructions": costs.height,
        "cost_ms": float(costs["cost_us"].sum()) / 1e3,
        "by_class": {r["op_class"]: {"instructions": r["n"], "ms": r["us"] / 1e3} for r in by.iter_rows(named=True)},
        "hlo": m.module is not None,
        "notes": m.notes,
    }


def _module_of(result: dict[str, Any]) -> Module | None:
    comp = result.get("compiled") or {}
    path = Path(result["dir"]) / (comp.get("hlo_file") or "step.hlo.txt")
    try:
        return load_module(path)[0] if path.is_file() else None
    except (HloError, OSError):
        return None


def run_pgle_plan(
    req: PlanRequest, profile: Path, echo: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the plan without the profile, the same with it); each result of the first gets ``pgle``:
    the copies' placements without and with the profile (``pgle.schedule_moves``)."""
    costs = pgle.read_profile(profile)
    kw = {"echo": echo} if echo else {}
    base = run_plan(req, **kw)
    out = Path(base["out_dir"])
    flag = f"{pgle.PGLE_FLAG}={profile.resolve()}"
    with_profile = run_plan(dataclasses.replace(req, out_dir=out / "pgle", xla_flags=[*req.xla_flags, flag]), **kw)
    for r0, r1 in zip(base["results"], with_profile["results"], strict=True):
        a, b = _module_of(r0), _module_of(r1)
        if a is None or b is None:
            r0["pgle"] = {"status": "failed", "note": "a compilation gave no module"}
            continue
        names = {i.name for i in a.computations[a.entry].instructions} if a.entry else set()
        r0["pgle"] = {
            "status": "ok",
            "dir": r1["dir"],
            "profile_names_found": len(names & set(costs)),
            **pgle.schedule_moves(a, b, costs),
        }
        r0["pgle_module"] = b  # for the prediction after; dropped before JSON
    base["pgle"] = {"profile": str(profile), "costs": len(costs), "out_dir": with_profile["out_dir"]}
    folder.write_json(out / "plan.json", strip_modules(base))
    return base, with_profile


def strip_modules(doc: dict[str, Any]) -> dict[str, Any]:
    """*doc* without the in-memory modules (for JSON)."""
    return {**doc, "results": [{k: v for k, v in r.items() if k != "pgle_module"} for r in doc["results"]]}


def _prediction_links(doc: dict[str, Any], links: list[Link] | None) -> list[Link]:
    """The links asked for, else the plan's (``plan --link``), else the host link of the target's GPU
    family (PCIe Gen5 when unknown)."""
    if links:
        return links
    if doc.get("links"):
        return [Link(k["key"], k["name"], k["gbps"]) for k in doc["links"]]
    return [link_of_gpu(doc["target"].get("label")) or LINKS["pcie5"]]


def pgle_predictions(doc: dict[str, Any], costs_us: dict[str, float], link: Link) -> None:
    """Add each copy's predicted exposed time without and with the profile to ``doc``'s ``pgle``
    rows: both schedules replayed with the profile's costs where it names an instruction, the
    roofline on the target elsewhere, copies over *link*."""
    from profiler.predict import roofline, schedule
    from profiler.predict.simulate import simulate

    spec = Path(doc["target"]["spec_file"]).read_text()
    device = roofline.device_from_spec(spec, doc["target"].get("peak_bf16_tflops"))
    for r in doc["results"]:
        g, after = r.get("pgle") or {}, r.get("pgle_module")
        before = _module_of(r)
        if g.get("status") != "ok" or after is None or before is None:
            continue
        preds = []
        for module in (before, after):
            sched = schedule.build(module)
            c = roofline.costs(sched, device)
            c.update({n: round(us * 1000) for n, us in costs_us.items() if n in sched.instructions})
            preds.append(simulate(sched, c, link))
        for c in g["copies"]:
            for key, p in (("exposed_ns_before", preds[0]), ("exposed_ns_after", preds[1])):
                c[key] = sum(w["wait_ns"] for w in p.waits if w["start"] == c["name"])
        g["predicted"] = {
            "link": link.name,
            "before": {"predicted_step_ns": preds[0].step_ns, "predicted_exposed_ns": preds[0].exposed_ns},
            "after": {"predicted_step_ns": preds[1].step_ns, "predicted_exposed_ns": preds[1].exposed_ns},
        }


def calibrated_predictions(
    doc: dict[str, Any], source: Path, links: list[Link], m: Measured | None = None
) -> dict[str, Any]:
    """``plan --calibrate``: each result's predictions with the costs a run measured (*m*: already
    read from *source*); returns the calibration's summary (also under ``doc["calibration"]``)."""
    from profiler.predict import calibrate

    m = m if m is not None else load(source)
    target_spec = Path(doc["target"]["spec_file"]).read_text()
    spec, note = calibrate.run_spec(m, target_spec)
    try:
        cal = calibrate.calibrate(m, spec)
    except ValueError as exc:
        raise InputError(source, str(exc)) from None
    if note:
        cal.notes.append(note)
    for r in doc["results"]:
        module = _module_of(r) if r.get("status") == "ok" else None
        if module is None:
            continue
        r["calibrated"] = calibrate.predict(cal, module, target_spec, links)
    doc["calibration"] = cal.doc()
    return doc["calibration"]


def plan_with_measurements(
    req: PlanRequest,
    fraction: float,
    pgle_file: str | None,
    calibrate: str | None,
    as_json: bool,
    links: list[Link] | None = None,
) -> int:
    """``plan --pgle FILE`` / ``plan --calibrate RUN_OR_TRACE``: the plan, then what the measured
    costs say about it; prints text or JSON, returns the exit code."""
    import json

    from profiler.analysis.policies import plan_table
    from profiler.report.measured_text import render_calibrated, render_pgle_moves
    from profiler.report.policies_text import render_plan

    if calibrate and not Path(calibrate).exists():
        raise InputError(Path(calibrate), "no such file or folder")
    measured = load(Path(calibrate)) if calibrate else None  # a bad source fails before any compilation
    if pgle_file:
        doc, _ = run_pgle_plan(req, Path(pgle_file))
        pgle_predictions(doc, pgle.read_profile(Path(pgle_file)), _prediction_links(doc, links)[0])
    else:
        doc = run_plan(req)
    if calibrate:
        calibrated_predictions(doc, Path(calibrate), _prediction_links(doc, links), measured)
    doc_json = strip_modules(doc)
    folder.write_json(Path(doc["out_dir"]) / "plan.json", doc_json)
    tab = plan_table(doc_json, fraction)
    if as_json:
        extra = {k: doc_json.get(k) for k in ("pgle", "calibration")}
        print(json.dumps({"plan": tab, **extra, "results": doc_json["results"], "out_dir": doc["out_dir"]},
                         indent=2, default=str))  # fmt: skip
    else:
        print(render_plan(tab))
        if pgle_file:
            print()
            print(render_pgle_moves(doc_json))
        if calibrate:
            print()
            print(render_calibrated(doc_json))
        print(f"\n(files: {doc['out_dir']})")
    return 0 if all(r["status"] == "ok" for r in tab["rows"]) else 1
