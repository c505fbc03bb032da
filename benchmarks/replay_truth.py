"""Issue 42, item 1: the replay of recorded steps with their own measured durations.

    .venv/bin/python -m benchmarks.replay_truth [--shared ../shared/traces] [--aot-hlo STEP.hlo.txt] [--json]

- the JAX-Toolbox Pax archives (real A100 steps, unrolled: no loops);
- the H200 runs of sample_traces/h200-example (real; their kernels ran in XLA's command buffers,
  whose thunks name no instruction: that time is listed unplaced);
- the TPU v5e runs of sample_traces/tpu-v5e-example (real; the core's one serial line, its loops'
  bodies timed on every trip: ``profiler/predict/tpu_trace.py``), where that folder is;
- scanned ground truth (``tests/helpers/recordings.py``, synthetic): the example's two scanned programs
  as XLA compiled them on the H200 and, with ``--aot-hlo``, a step compiled without a GPU
  (``profile-step plan ... examples/train.py --scan``), recorded with their loops' body thunks
  timed on every trip (``body``, ``body+predicate``), as one range (``loop``) and as an nsys-jax
  archive (``archive``).

Per recording: the measured step (median), the replay, its error, the time listed unplaced, and
how the loops were replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from profiler.predict import calibrate
from profiler.predict.measured import Measured, load
from profiler.report.table import table
from profiler.xla.targets import TARGETS
from tests.helpers.recordings import h200_scanned_programs, record_forms

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "sample_traces" / "h200-example"
TPU = ROOT / "sample_traces" / "tpu-v5e-example"
PAX = ("proc0", "proc1")


def row(label: str, m: Measured) -> dict[str, Any]:
    p, err = calibrate.replay(m)
    return {
        "recording": label,
        "measured_ns": m.step_ns,
        "replayed_ns": p.step_ns,
        "error": err,
        "unplaced_ns": p.unplaced_ns,
        "missing": p.costed_by["missing"],
        "loops": [f"{r['name']}: {r['replayed']}" + (f" x{r['trips']}" if r["trips"] else "") for r in p.regions],
    }


def rows(shared: Path | None, aot_hlo: Path | None, work: Path) -> list[dict[str, Any]]:
    out = []
    for tag in PAX if shared else ():
        archive = shared / "jax-toolbox" / f"NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_{tag}.zip"
        if archive.is_file():
            out.append(row(f"pax {tag}", load(archive)))
    for run in sorted(H200.glob("2026*")):  # a run folder: its JAX profiler trace and its XLA dump
        out.append(row(f"h200 {run.name.split('-', 1)[1]}", load(run)))
    for run in sorted(TPU.glob("2026*")):  # the TPU's run folders that hold a trace (one OOM run has none)
        if (run / "trace.json.gz").is_file():
            out.append(row(f"tpu-v5e {run.name.split('-', 1)[1]}", load(run)))
    programs = h200_scanned_programs(H200)
    if aot_hlo is not None:
        programs["h100-aot-scan"] = (aot_hlo.read_text(), TARGETS["h100"].spec_text())
    for key, folder in record_forms(programs, work).items():
        label, form = key.split("/")
        out.append(row(f"truth {label} {form}", load(folder)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--aot-hlo", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        os.environ["PROFILE_STEP_CACHE"] = work  # the H200 traces' conversions: not the user's cache
        found = rows(args.shared if args.shared.is_dir() else None, args.aot_hlo, Path(work))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    head = ["recording", "measured ms", "replayed ms", "error", "unplaced ms", "loops"]
    body = [[r["recording"], f"{r['measured_ns'] / 1e6:.3f}", f"{r['replayed_ns'] / 1e6:.3f}", f"{r['error']:+.2%}",
             f"{r['unplaced_ns'] / 1e6:.3f}", ", ".join(r["loops"])] for r in found]  # fmt: skip
    print(table(head, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
