"""Write the SYNTHETIC demonstration runs into sample_traces/demo-synthetic/ (one folder per policy).

    .venv/bin/python scripts/make_demo_traces.py [--out DIR] [--layers N] [--steps N]

The runs come from the stated model in profiler/synthetic/demo.py (and sample_traces/README.md), not from
a GPU. Existing run folders are never overwritten: remove them first to remake them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.synthetic.demo import POLICIES, StepModel, write_demo_runs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sample_traces" / "demo-synthetic")
    ap.add_argument("--layers", type=int, default=StepModel.layers)
    ap.add_argument("--steps", type=int, default=StepModel.steps)
    ap.add_argument("--policies", default=",".join(POLICIES))
    a = ap.parse_args()
    model = replace(StepModel(), layers=a.layers, steps=a.steps)
    try:
        runs = write_demo_runs(a.out, model, tuple(p for p in a.policies.split(",") if p))
    except FileExistsError as exc:
        print(f"make_demo_traces: {exc} exists; remove the old runs to remake them", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"make_demo_traces: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        print(f"wrote {run} (synthetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
