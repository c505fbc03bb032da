"""What costs a run measured say about a plan's compiled results: the PGLE file written from a run
(``profile-step pgle``), and each result predicted with the profile's costs (``plan --pgle``) or
with a calibration from the run (``plan --calibrate``).  The plan itself is run by
``profiler.capture.plan`` and ``capture.pgle_run``, which call these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from profiler.analysis.links import Link, host_link
from profiler.errors import InputError
from profiler.predict.measured import Measured, load
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


def module_of(result: dict[str, Any]) -> Module | None:
    """The compiled module of one plan result, when its HLO file is there and reads."""
    comp = result.get("compiled") or {}
    path = Path(result["dir"]) / (comp.get("hlo_file") or "step.hlo.txt")
    try:
        return load_module(path)[0] if path.is_file() else None
    except (HloError, OSError):
        return None


def prediction_links(doc: dict[str, Any], links: list[Link] | None) -> list[Link]:
    """The links asked for, else the plan's (``plan --link``), else the host link of the target's GPU
    family (``host_link``'s rule: the assumed link when unknown)."""
    if links:
        return links
    if doc.get("links"):
        return [Link.from_doc(k) for k in doc["links"]]
    label = doc["target"].get("label")
    return [host_link([label] if label else []).link]


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
        before = module_of(r)
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
        module = module_of(r) if r.get("status") == "ok" else None
        if module is None:
            continue
        r["calibrated"] = calibrate.predict(cal, module, target_spec, links)
    doc["calibration"] = cal.doc()
    return doc["calibration"]
