"""``plan --pgle`` (the step compiled without and with XLA's PGLE file, and where its copies moved)
and ``plan --calibrate``: the plan run, then what the measured costs say about it
(``profiler.predict.plan_costs``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link
from profiler.capture.plan import PlanRequest, run_plan
from profiler.errors import InputError
from profiler.predict.measured import load
from profiler.predict.plan_costs import calibrated_predictions, module_of, pgle_predictions, prediction_links
from profiler.stored import folder
from profiler.xla import pgle


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
        a, b = module_of(r0), module_of(r1)
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
        pgle_predictions(doc, pgle.read_profile(Path(pgle_file)), prediction_links(doc, links)[0])
    else:
        doc = run_plan(req)
    if calibrate:
        calibrated_predictions(doc, Path(calibrate), prediction_links(doc, links), measured)
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
