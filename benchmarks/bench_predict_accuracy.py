"""Issue 23, item 4: how good the prediction is, on real data, without a GPU.

    .venv/bin/python benchmarks/bench_predict_accuracy.py [--shared ../shared/traces] [--json]

(a) the JAX-Toolbox Pax archives (A100): the compiled schedule replayed through its dependencies
    with the measured per-instruction durations, against the measured step (XlaModule range);
(b) the same schedule with the uncalibrated roofline (benchmarks/specs/a100_sxm4_40gb.txtpb)
    against the measured durations, per op class;
(c) the FlexGen traces: the link model (bytes over the GPU's host link) against the measured copy
    durations by size, and the link calibrated on one trace against another trace of the same GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis import instruction_times as it
from profiler.analysis.links import link_of_gpu
from profiler.predict import calibrate, roofline
from profiler.predict.measured import copies_of_export, load
from profiler.report.table import table

ROOT = Path(__file__).resolve().parents[1]
A100_SPEC = ROOT / "benchmarks" / "specs" / "a100_sxm4_40gb.txtpb"
PAX = ("NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip", "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc1.zip")
FLEXGEN = ("flexgen__nsight_report3.sqlite", "flexgen__nsight_report7.sqlite", "flexgen__profile_name.sqlite")
HELD_OUT = ("flexgen__nsight_report7.sqlite", "flexgen__nsight_report3.sqlite")  # calibrate on, predict


def replay_rows(shared: Path) -> list[dict[str, Any]]:
    """(a) per archive: measured median step, replayed step, error."""
    rows = []
    for name in PAX:
        m = load(shared / "jax-toolbox" / name)
        p, err = calibrate.replay(m)
        rows.append({"archive": name, "executions": m.steps.height, "measured_step_ns": m.step_ns,
                     "replayed_step_ns": p.step_ns, "error": err, "instructions": len(calibrate.measured_costs(m)),
                     "costed_by": p.costed_by})  # fmt: skip
    return rows


def roofline_rows(shared: Path) -> list[dict[str, Any]]:
    """(b) per archive and op class: measured and roofline time, and their error."""
    spec = A100_SPEC.read_text()
    device = roofline.device_from_spec(spec)
    rows = []
    for name in PAX:
        m = load(shared / "jax-toolbox" / name)
        sched = m.sched
        roof = roofline.costs(sched, device)
        for cls, v in sorted(calibrate.class_table(sched, calibrate.measured_costs(m), roof).items()):
            rows.append({"archive": name, "class": cls, **v, "error": (v["roofline"] - v["measured"]) / v["measured"]})
        pred = calibrate.simulate(sched, roof, None)
        rows.append({"archive": name, "class": "step (replayed)", "measured": m.step_ns, "roofline": pred.step_ns,
                     "instructions": len(roof), "median_ratio": float("nan"),
                     "error": (pred.step_ns - m.step_ns) / m.step_ns})  # fmt: skip
    return rows


def link_rows(shared: Path) -> list[dict[str, Any]]:
    """(c) per FlexGen trace, direction and size class: measured median copy vs the link model."""
    from profiler.trace.loader import open_trace

    rows = []
    for name in FLEXGEN:
        gpus = open_trace(shared / name, "all").devices["name"].drop_nulls().to_list()
        link = link_of_gpu(gpus[0] if gpus else None)
        copies = copies_of_export(shared / name)
        kinds = dict(copies.group_by("cls").agg(pl.col("host_kind").first()).iter_rows())
        for r in it.copy_bandwidth(copies).iter_rows(named=True):
            model = r["median_bytes"] / link.gbps
            rows.append({"trace": name, "gpu": gpus[0] if gpus else None, "link": link.name, "link_gbps": link.gbps,
                         "host": kinds.get(r["cls"]), **r, "model_ns": model,
                         "error": (model - r["median_ns"]) / r["median_ns"]})  # fmt: skip
    return rows


def held_out(shared: Path) -> dict[str, Any]:
    """(c) the copy rates by size of one trace predicting another's copies (same GPU model)."""
    fit_on, test_on = HELD_OUT
    table_ = it.copy_bandwidth(copies_of_export(shared / fit_on))
    test = copies_of_export(shared / test_on).filter(pl.col("bytes") > 0)
    out = {"calibrated_on": fit_on, "predicted": test_on, "by_direction": {}}
    for cls in sorted(test["cls"].unique().to_list()):
        d = test.filter(pl.col("cls") == cls)
        pred = it.copy_ns(d["bytes"].to_numpy(), table_, cls, 31.5)
        meas = (d["end"] - d["start"]).to_numpy().astype(float)
        err = (pred - meas) / meas
        out["by_direction"][cls] = {"copies": d.height, "median_abs_error": float(np.median(np.abs(err))),
                                    "total_error": float(pred.sum() / meas.sum() - 1)}  # fmt: skip
    return out


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:+.1f}%"


def render(doc: dict[str, Any]) -> str:
    ms = lambda ns: f"{ns / 1e6:.3f}"  # noqa: E731
    out = ["(a) replay with measured durations (Pax FSDP, A100-SXM4-40GB; median of the executions)"]
    out.append(table(["archive", "executions", "measured ms", "replayed ms", "error"],
                     [[r["archive"], str(r["executions"]), ms(r["measured_step_ns"]), ms(r["replayed_step_ns"]),
                       _pct(r["error"])] for r in doc["replay"]]))  # fmt: skip
    out.append("\n(b) uncalibrated roofline against the measured durations, per op class")
    heads = ["archive", "class", "instructions", "measured ms", "roofline ms", "error", "measured/roofline (median)"]
    out.append(table(heads,
                     [[r["archive"][-9:-4], r["class"], str(r["instructions"]), ms(r["measured"]), ms(r["roofline"]),
                       _pct(r["error"]), "-" if r["median_ratio"] != r["median_ratio"] else f"{r['median_ratio']:.2f}"]
                      for r in doc["roofline"]], left=(0, 1)))  # fmt: skip
    out.append("\n(c) link model (bytes / host link) against measured copies, by size class (median copy)")
    out.append(table(["trace", "link", "dir", "host", "size from", "copies", "measured", "model", "GB/s", "error"],
                     [[r["trace"].removeprefix("flexgen__").removesuffix(".sqlite"), f"{r['link_gbps']:g} GB/s",
                       r["cls"], r["host"] or "-", _size(r["size_lo"]), str(r["copies"]), _t(r["median_ns"]),
                       _t(r["model_ns"]), f"{r['gbps']:.2f}", _pct(r["error"])] for r in doc["link"]],
                     left=(0, 1, 2, 3)))  # fmt: skip
    h = doc["held_out"]
    out.append(f"\n(c) copy rates by size calibrated on {h['calibrated_on']}, predicting {h['predicted']}:")
    for cls, v in h["by_direction"].items():
        out.append(f"  {cls}: {v['copies']} copies, median |error| {100 * v['median_abs_error']:.1f}%, "
                   f"total copy time {_pct(v['total_error'])}")  # fmt: skip
    return "\n".join(out)


def _size(b: int) -> str:
    for unit, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= s:
            return f"{b / s:g} {unit}"
    return f"{b} B"


def _t(ns: float) -> str:
    if ns < 1e3:
        return f"{ns:.1f} ns"
    return f"{ns / 1e3:.1f} µs" if ns < 1e6 else f"{ns / 1e6:.2f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "traces"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    shared = Path(args.shared)
    if not (shared / "jax-toolbox").is_dir():
        print(f"{shared}: no jax-toolbox/ folder (the shared traces are needed)", file=sys.stderr)
        return 2
    doc = {"replay": replay_rows(shared), "roofline": roofline_rows(shared), "link": link_rows(shared),
           "held_out": held_out(shared)}  # fmt: skip
    print(json.dumps(doc, indent=2, default=str) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
