"""Issue 42: does a calibrated cost model carry from one accelerator to another?  The same step recorded
on an H200 and on a TPU v5e, each predicted with the per-class scales fitted on another recording.

    .venv/bin/python -m benchmarks.cross_device [--shared ../shared/traces] [--json OUT]

Sources (``calibrate.calibrate`` on one recording, on its own device's description): the TPU v5e's
d_model 2048 scanned remat run, the TPU's run of the H200 example's shape (scanned remat), the H200's
offload_qkv runs (scanned: what calibration makes of a step whose kernels ran as loops and command
buffers; unrolled: the kernels named outside command buffers), and the JAX-Toolbox Pax A100 proc0
(skipped when ../shared is absent).  Targets: every run of ``sample_traces/tpu-v5e-h200-shape`` and
``sample_traces/tpu-v5e-example`` (the TPU v5e's description and its measured host link), and of
``sample_traces/h200-example`` (the H200's own description and PCIe Gen5).  Each cell: the calibrated
step's error range over the target's runs (a run that is the source itself is left out and the cell
says so), whether the policies of each program form (unrolled, scanned, scanned 4 layers) are
ordered as measured, and the largest error of the ratio of two runs' steps of one form (the ``tie``
figure of ``profiler.analysis.accuracy``).  The uncalibrated roofline is the reference row.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from benchmarks import h200_predictions, tpu_predictions
from profiler.analysis.links import Link, given_link, host_link
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.measured import Measured, load
from profiler.predict.simulate import simulate
from profiler.xla.hlo import Module
from profiler.xla.targets import TPU_TARGETS

ROOT = Path(__file__).resolve().parents[1]
TPU_SHAPE = ROOT / "sample_traces" / "tpu-v5e-h200-shape"
TPU_D2048 = ROOT / "sample_traces" / "tpu-v5e-example"
TPU_SPEC = TPU_TARGETS["tpu-v5e"].spec_text()


@dataclass
class Run:
    """One recorded step to predict."""

    group: str
    name: str
    form: str  # unrolled | scan | scan-l4: the program shapes an order and a tie are measured within
    path: Path
    measured_ns: float
    module: Module
    spec: str
    link: Link

    @cached_property
    def sched(self) -> schedule.Schedule:
        """The module's schedule, built once for every source that predicts this run."""
        return schedule.build(self.module)


def form(name: str) -> str:
    """The program form of a run folder's name."""
    return "scan-l4" if "-scan-l4-" in name else "scan" if "-scan" in name else "unrolled"


def _h200_spec(run: Path) -> str:
    return next((run / "xla_dump").glob("*gpu_target_config.pbtxt")).read_text()


def _run(group: str, path: Path, m: Measured, spec: str, link: Link) -> Run:
    assert m.module is not None, path
    return Run(group, path.name, form(path.name), path, m.step_ns, m.module, spec, link)


def targets(loaded: dict[Path, Measured]) -> list[Run]:
    """Every recorded run of the three target groups that are here (*loaded* caches each read)."""
    out = []
    for group, root in (("TPU v5e, H200 shape", TPU_SHAPE), ("TPU v5e, d_model 2048", TPU_D2048)):
        for p in tpu_predictions.recordings(root) if root.is_dir() else []:
            m = loaded.setdefault(p, load(p))
            out.append(_run(group, p, m, TPU_SPEC, host_link([m.gpu] if m.gpu else []).link))
    pcie5 = given_link("pcie5")
    assert pcie5 is not None
    for p in h200_predictions.runs() if h200_predictions.H200.is_dir() else []:
        out.append(_run("H200", p, loaded.setdefault(p, load(p)), _h200_spec(p), pcie5))
    return out


def sources(shared: Path | None) -> list[tuple[str, Path, str]]:
    """(label, recording, its device's spec) of each calibration source that is here."""
    one = [
        ("TPU d2048 remat-scan", TPU_D2048 / "20261206T015127-remat-scan-9e629c", TPU_SPEC),
        *[("TPU H200-shape remat-scan", p, TPU_SPEC) for p in sorted(TPU_SHAPE.glob("*-remat-scan-*"))],
        *[(f"H200 {p.name.split('-', 1)[1].rsplit('-', 1)[0]}", p, "") for p in _h200_sources()],
    ]
    out = [(label, p, spec or _h200_spec(p)) for label, p, spec in one if p.is_dir()]
    pax = shared / "jax-toolbox" / h200_predictions.PAX[0] if shared else None
    if pax is not None and pax.is_file():
        out.append(("Pax A100 proc0", pax, h200_predictions.A100_SPEC.read_text()))
    return out


def _h200_sources() -> list[Path]:
    if not h200_predictions.H200.is_dir():
        return []
    return [p for p in h200_predictions.runs() if form(p.name) == "scan" and "lhs" not in p.name] + [
        p for p in h200_predictions.runs() if p.name.endswith(("-offload_qkv-b50f27",))
    ]


def source_doc(label: str, cal: calibrate.Calibration, m: Measured, spec: str) -> dict[str, Any]:
    """What a calibration was fitted on: its scales, and the measured time per step behind each (a loop
    body's instructions times their trips) against the step."""
    assert m.module is not None
    sched = m.sched
    per_step = calibrate.class_table(
        sched, cal.measured_ns, roofline.costs(sched, roofline.device_from_spec(spec)), True
    )
    named = sum(v["measured"] for v in per_step.values())
    return {
        "source": label,
        "recording": cal.source,
        "device": cal.gpu,
        "step_ns": cal.step_ns,
        "scale": cal.scale,
        "class_measured_ns": {c: v["measured"] for c, v in per_step.items()},
        "notes": cal.notes,
        "named_ns": named,
    }


def predict(run: Run, cal: calibrate.Calibration | None) -> float:
    """The step of *run* predicted by the roofline (``cal`` None) or calibrated on *cal*."""
    sched = run.sched
    if cal is None:
        return simulate(sched, roofline.costs(sched, roofline.device_from_spec(run.spec)), run.link).step_ns
    _, costs, _ = calibrate.calibrated_costs(cal, run.module, run.spec, run.link, sched)
    return simulate(sched, costs, run.link).step_ns


def cell(runs: list[Run], preds: dict[str, float], left_out: str | None) -> dict[str, Any]:
    """Error range, order and tie figure of predictions *preds* (run name -> ns) of *runs*."""
    used = [r for r in runs if r.name != left_out]
    errors = {r.name: preds[r.name] / r.measured_ns - 1 for r in used}
    pairs, swapped, tie = 0, [], 0.0
    for a, b in itertools.combinations(used, 2):
        if a.form != b.form:
            continue
        pairs += 1
        if (preds[a.name] - preds[b.name]) * (a.measured_ns - b.measured_ns) < 0:
            swapped.append((a.name, b.name))
        ratio = (preds[a.name] / preds[b.name]) / (a.measured_ns / b.measured_ns) - 1
        tie = max(tie, abs(ratio), abs(1 / (1 + ratio) - 1))
    return {
        "runs": len(used),
        "left_out": left_out,
        "error_min": min(errors.values()),
        "error_max": max(errors.values()),
        "errors": errors,
        "predicted_ns": {r.name: preds[r.name] for r in used},
        "pairs": pairs,
        "swapped": swapped,
        "tie": tie,
    }


def matrix(shared: Path | None) -> dict[str, Any]:
    """Every source x target group cell, the roofline row first, with the sources' scales."""
    loaded: dict[Path, Measured] = {}
    runs = targets(loaded)
    groups = list(dict.fromkeys(r.group for r in runs))
    cals: list[tuple[str, Path | None, calibrate.Calibration | None]] = [("roofline (uncalibrated)", None, None)]
    docs = []
    for label, path, spec in sources(shared):
        m = loaded.get(path) or load(path)
        cal = calibrate.calibrate(m, spec)
        docs.append(source_doc(label, cal, m, spec))
        cals.append((label, path, cal if cal.scale else None))
    cells = []
    for label, path, cal in cals:
        if path is not None and cal is None:
            continue  # no class got a scale: the calibrated step is the roofline's (the sources say so)
        for g in groups:
            mine = [r for r in runs if r.group == g]
            inside = next((r.name for r in mine if path is not None and r.path.resolve() == path.resolve()), None)
            preds = {r.name: predict(r, cal) for r in mine if r.name != inside}
            cells.append({"source": label, "target": g, **cell(mine, preds, inside)})
    own = {g: own_scales([r for r in runs if r.group == g], loaded) for g in groups}
    return {"sources": docs, "cells": cells, "own_scales": own,
            "measured_ns": {r.name: r.measured_ns for r in runs}}  # fmt: skip


def own_scales(runs: list[Run], loaded: dict[Path, Measured]) -> dict[str, Any]:
    """Per class, the range over *runs* of each run's own fit (measured / roofline on its own device):
    the scale a carried calibration would have needed."""
    out: dict[str, dict[str, float]] = {}
    for r in runs:
        cal = calibrate.calibrate(loaded[r.path], r.spec)
        for c, s in cal.scale.items():
            o = out.setdefault(c, {"min": s, "max": s, "runs": 0})
            o["min"], o["max"] = min(o["min"], s), max(o["max"], s)
            o["runs"] += 1
    return out


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def cells_table(doc: dict[str, Any]) -> str:
    """The README's matrix: one line per source and target group."""
    lines = ["| calibrated on | target | runs | step error | order as measured | tie |",
             "| --- | --- | ---: | ---: | --- | ---: |"]  # fmt: skip
    for c in doc["cells"]:
        runs = f"{c['runs']}" + (" (fit run left out)" if c["left_out"] else "")
        order = "yes" if not c["swapped"] else f"{c['pairs'] - len(c['swapped'])} of {c['pairs']} pairs"
        lines.append(
            f"| {c['source']} | {c['target']} | {runs} | {_pct(c['error_min'])} .. {_pct(c['error_max'])} | "
            f"{order} | {100 * c['tie']:.1f}% |"
        )
    return "\n".join(lines)


def scales_table(doc: dict[str, Any]) -> str:
    """Each source's scale per class (with the measured ms per execution behind it), and each target
    group's own range: what a carried scale would have had to be."""
    classes = ("matmul", "fusion", "reduction", "other", "collective")
    lines = [
        "| fitted on | step | named | " + " | ".join(classes) + " |",
        "| --- | ---: | ---: |" + " ---: |" * len(classes),
    ]
    for s in doc["sources"]:
        vals = [
            f"{s['scale'][c]:.2f} ({s['class_measured_ns'][c] / 1e6:.1f} ms)" if c in s["scale"] else "-"
            for c in classes
        ]
        lines.append(
            f"| {s['source']} | {s['step_ns'] / 1e6:.1f} ms | {s['named_ns'] / 1e6:.1f} ms | " + " | ".join(vals) + " |"
        )
    for g, own in doc["own_scales"].items():
        vals = [
            f"{own[c]['min']:.2f} .. {own[c]['max']:.2f} ({own[c]['runs']} runs)" if c in own else "-" for c in classes
        ]
        lines.append(f"| each {g} run on itself | | | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--json", type=Path, default=None, help="write every number as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PROFILE_STEP_CACHE"] = cache  # the conversions of the traces: not the user's cache
        doc = matrix(args.shared if args.shared.is_dir() else None)
    for s in doc["sources"]:
        if not s["scale"]:
            named = f"{s['named_ns'] / 1e6:.1f} of {s['step_ns'] / 1e6:.1f} ms named"
            print(f"{s['source']}: no op class got a scale ({named}; {s['notes'][-1]}): no row")
    print(cells_table(doc))
    print()
    print(scales_table(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
