"""Issue 42: the predictions against the real H200 steps of sample_traces/h200-example.

    .venv/bin/python benchmarks/h200_predictions.py [--shared ../shared/traces] [--json]

For each run (a policy of examples/train.py, compiled and measured on an H200 by jaxlib 0.11.2):

- measured: the median step of the trace (its XLA module executions);
- roofline: the run's own optimized HLO replayed (``predict.simulate``) with the uncalibrated
  roofline on the H200's own target description (dumped by XLA in that process), copies over its
  PCIe Gen5 x16 link;
- calibrated on A100: the same, with each op class's roofline scaled as measured on the JAX-Toolbox
  Pax archive (FSDP on A100-SXM4-40GB, ``../shared/traces/jax-toolbox``): the cost model carried
  from one GPU to another through their descriptions (``predict.calibrate``);
- plan's own: the same step as ``profile-step plan --target h200`` compiles it on a machine without a
  GPU (jaxlib 0.10.2, no autotuning: ``benchmarks/h200_deviceless/``, compiled with XLA's own estimates
  in the module), predicted without them (``deviceless_roofline``) and with them (``xla``: what plan
  and tune print, ``roofline.with_xla``), on the built-in H200 target.

The H200 traces cannot give the replay with their own durations: their kernels ran inside XLA's
command buffers, where the trace names no instruction (sample_traces/h200-example/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from profiler.analysis.links import given_link
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.measured import load
from profiler.predict.simulate import simulate
from profiler.report.table import table
from profiler.runs.result import analyzed
from profiler.trace import load_trace
from profiler.xla.compiled import load_module
from profiler.xla.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "sample_traces" / "h200-example"
PAX = ("NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip", "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc1.zip")
A100_SPEC = ROOT / "benchmarks" / "specs" / "a100_sxm4_40gb.txtpb"
DEVICELESS = ROOT / "benchmarks" / "h200_deviceless"  # each run's step as plan compiles it: <policy>.hlo.txt.xz


def runs() -> list[Path]:
    return sorted(p for p in H200.iterdir() if (p / "trace.json.gz").is_file())


def rows(shared: Path | None) -> list[dict[str, Any]]:
    link = given_link("pcie5")
    cals = []
    for name in PAX if shared else ():
        archive = shared / "jax-toolbox" / name
        if archive.is_file():
            m = load(archive)
            cals.append((name.rsplit("_", 1)[1].removesuffix(".zip"), calibrate.calibrate(m, A100_SPEC.read_text())))
    out = []
    for run in runs():
        measured = analyzed(load_trace(run / "trace.json.gz"), findings=None).steps.median_ns
        module = load_module(next((run / "xla_dump").glob("*after_optimizations.txt.xz")))[0]
        spec = next((run / "xla_dump").glob("*gpu_target_config.pbtxt")).read_text()
        sched = schedule.build(module)
        roof = simulate(sched, roofline.costs(sched, roofline.device_from_spec(spec)), link).step_ns
        row = {"run": json.loads((run / "manifest.json").read_text())["policy"], "measured_ns": measured,
               "roofline_ns": roof, "roofline_error": roof / measured - 1}  # fmt: skip
        row.update(deviceless(row["run"], measured, link, cals))
        for tag, cal in cals:
            s, costs, _ = calibrate.calibrated_costs(cal, module, spec, link, sched)
            pred = simulate(s, costs, link).step_ns
            row[f"a100_{tag}_ns"] = pred
            row[f"a100_{tag}_error"] = pred / measured - 1
        out.append(row)
    return out


def deviceless(policy: str, measured: float, link, cals: list) -> dict[str, Any]:
    """The run's step as ``plan --target h200`` compiles it, predicted without and with XLA's estimates,
    and as ``plan --calibrate`` on each Pax archive predicts it (XLA's estimates where the module has
    them, the A100's class scales elsewhere: ``a100_<tag>_xla``)."""
    hlo = DEVICELESS / f"{policy}.hlo.txt.xz"
    if not hlo.is_file():
        return {}
    module = load_module(hlo)[0]
    sched = schedule.build(module)
    spec = TARGETS["h200"].spec_text()
    roof = roofline.costs(sched, roofline.device_from_spec(spec), xla=False)
    with_xla, taken = roofline.with_xla(sched, roof)
    runs_of = {"deviceless_roofline": roof, "xla": with_xla}
    for tag, cal in cals:
        runs_of[f"a100_{tag}_xla"] = calibrate.calibrated_costs(cal, module, spec, link, sched)[1]
    out: dict[str, Any] = {"xla_costed": len(taken)}
    for key, costs in runs_of.items():
        out[f"{key}_ns"] = simulate(sched, costs, link).step_ns
        out[f"{key}_error"] = out[f"{key}_ns"] / measured - 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PROFILE_STEP_CACHE"] = cache  # the conversions of the traces: not the user's cache
        found = rows(args.shared if args.shared.is_dir() else None)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    cals = sorted({k.split("_")[1] for r in found for k in r if k.startswith("a100_") and k.endswith("_ns")
                   and not k.endswith("_xla_ns")})  # fmt: skip
    head = ["run", "measured ms", "roofline ms", "error"] + [h for c in cals for h in (f"A100 {c} ms", "error")]
    head += ["plan's roofline ms", "error", "plan with XLA's ms", "error"]
    head += [h for c in cals for h in (f"plan, A100 {c} + XLA's ms", "error")]
    body = [
        [r["run"], f"{r['measured_ns'] / 1e6:.1f}", f"{r['roofline_ns'] / 1e6:.1f}", f"{r['roofline_error']:+.1%}"]
        + [v for c in cals for v in (f"{r[f'a100_{c}_ns'] / 1e6:.1f}", f"{r[f'a100_{c}_error']:+.1%}")]
        + [v for k in ("deviceless_roofline", "xla", *(f"a100_{c}_xla" for c in cals)) for v in
           ((f"{r[f'{k}_ns'] / 1e6:.1f}", f"{r[f'{k}_error']:+.1%}") if f"{k}_ns" in r else ("-", "-"))]
        for r in found
    ]  # fmt: skip
    print(table(head, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
