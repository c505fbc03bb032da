"""XLA's own estimates of each kernel against the kernels an H200 ran: which of them to take (issue 42).

    .venv/bin/python benchmarks/xla_estimates.py [--run POLICY] [--json]

The H200 example's run (``sample_traces/h200-example``, jaxlib 0.11.2, autotuned on the GPU) names the
measured time of every instruction; the same step compiled as ``plan --target h200`` compiles it
(``benchmarks/h200_deviceless/POLICY.hlo.txt.xz``: jaxlib 0.10.2, no GPU, ``--xla_gpu_collect_cost_model_stats``)
carries XLA's estimates in each instruction's backend config (``reification_cost``: its GpuPerformanceModel
``""``, the latency estimator's ``sol``, ``indexing-cost-model``, ``experimental-gemm-cost-model``).  The
two modules' instruction names differ (two XLA versions): an instruction is matched by its ``op_name``
and its first result's shape, in order.  Per op class: the matched instructions' measured time per step,
the roofline's and each model's, and the median of estimate / measured over the instructions.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

import numpy as np

from benchmarks.h200_predictions import DEVICELESS, H200
from profiler.predict import roofline, schedule
from profiler.predict.measured import load
from profiler.report.table import table
from profiler.xla.compiled import load_module
from profiler.xla.hlo import Instruction
from profiler.xla.targets import TARGETS

CLASSES = ("matmul", "reduction", "fusion")


def _key(ins: Instruction) -> tuple[str | None, str]:
    shape = ins.shape.tuple[0] if ins.shape.tuple else ins.shape  # a cuBLAS GEMM's (result, workspace)
    return ins.op_name, shape.text()


def rows(policy: str) -> list[dict[str, Any]]:
    run = next(p for p in sorted(H200.iterdir()) if p.name.split("-", 1)[-1].rsplit("-", 1)[0] == policy)
    rec = load(run)
    sched = schedule.build(load_module(DEVICELESS / f"{policy}.hlo.txt.xz")[0])
    roof = roofline.costs(sched, roofline.device_from_spec(TARGETS["h200"].spec_text()), xla=False)
    ours: dict[tuple, list[str]] = defaultdict(list)
    for name in dict.fromkeys(op.name for op in sched.ops):
        if name in roof and sched.instructions.get(name) is not None:
            ours[_key(sched.instructions[name])].append(name)
    theirs = {i.name: i for i in rec.module.instructions()} if rec.module else {}
    used: dict[tuple, int] = defaultdict(int)
    pairs: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for r in rec.times.iter_rows(named=True):
        ins = theirs.get(r["hlo_op"])
        if ins is None or r["op_class"] not in CLASSES:
            continue
        k = _key(ins)
        if ours.get(k) and used[k] < len(ours[k]):
            pairs[r["op_class"]].append((r["median_ns"] * r["runs"], ours[k][used[k]]))
            used[k] += 1
    out = []
    for cls in CLASSES:
        got = pairs.get(cls, [])
        runs = {n: max(sched.runs.get(n, 1), 1) for _, n in got}
        row: dict[str, Any] = {"class": cls, "matched": len(got), "measured_ns": sum(m for m, _ in got),
                               "roofline_ns": sum(roof[n] * runs[n] for _, n in got)}  # fmt: skip
        row["roofline_ratio"] = float(np.median([roof[n] * runs[n] / m for m, n in got if m])) if got else None
        models = sorted({k for _, n in got for k in sched.instructions[n].xla_us})
        for model in models:
            est = [(sched.instructions[n].xla_us[model] * 1e3 * runs[n], m) for m, n in got
                   if model in sched.instructions[n].xla_us]  # fmt: skip
            row[f"{model or 'default'}_ns"] = sum(e for e, _ in est)
            row[f"{model or 'default'}_n"] = len(est)
            row[f"{model or 'default'}_ratio"] = float(np.median([e / m for e, m in est if m]))
        taken, ids = roofline.with_xla(sched, roof)
        row["with_xla_ns"] = sum(taken[n] * runs[n] for _, n in got)
        row["with_xla_taken"] = sum(1 for _, n in got if n in ids)
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="offload_qkv", help="the H200 run's policy (default offload_qkv)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    found = rows(args.run)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    models = ("sol", "indexing-cost-model", "default", "experimental-gemm-cost-model")
    head = ["class", "matched", "measured ms", "roofline ms (median ratio)", "with XLA's ms (taken)",
            *[f"{m} ms (median ratio, n)" for m in models]]  # fmt: skip
    body = []
    for r in found:
        cells = [r["class"], str(r["matched"]), f"{r['measured_ns'] / 1e6:.1f}",
                 f"{r['roofline_ns'] / 1e6:.1f} ({r['roofline_ratio']:.2f})",
                 f"{r['with_xla_ns'] / 1e6:.1f} ({r['with_xla_taken']})"]  # fmt: skip
        for m in models:
            cells.append(f"{r[m + '_ns'] / 1e6:.1f} ({r[m + '_ratio']:.2f}, {r[m + '_n']})" if m + "_ns" in r else "-")
        body.append(cells)
    print(table(head, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
