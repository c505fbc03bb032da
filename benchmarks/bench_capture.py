"""What capture costs: ``profile-step run`` against the plain script and against plain
``nsys profile --trace=cuda,nvtx``, on a loop of 10,000 small jitted steps and on examples/train.py.

    .venv/bin/python benchmarks/bench_capture.py [--runs 5] [--steps 10000] [--nsys PATH]

Each command is a whole process (start-up, nsys's export and profile-step's analysis included),
timed from outside with a monotonic clock; the two commands of a pair run in turn (A B A B ...)
after one warm-up each, and the ratio is the median of the pair-by-pair ratios, so that a machine
whose speed drifts still gives a fair ratio.  Run folders and reports go to a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "benchmarks" / "capture_loop.py"
EXAMPLE = ROOT / "examples" / "train.py"
OLD_TRACE = "--nsys-arg=--trace=cuda,nvtx,osrt,cublas,cudnn"  # the default before issue 19
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def wall(cmd: list[str]) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=False)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_capture: exit {proc.returncode}: {' '.join(cmd)}")
    return took


def pair(a: list[str], b: list[str], runs: int) -> tuple[float, float, float]:
    """Median wall seconds of A and of B, and the median of the A/B ratios, over *runs* pairs."""
    wall(a), wall(b)  # warm-up: caches, compiled bytecode
    ta, tb = [], []
    for _ in range(runs):
        ta.append(wall(a))
        tb.append(wall(b))
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in zip(ta, tb, strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10_000, help="steps of the loop")
    ap.add_argument("--example-steps", type=int, default=20, help="captured steps of examples/train.py")
    ap.add_argument("--nsys", default=None, help="nsys binary (default: the one profile-step finds)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from profiler.capture import nsys_command
    from profiler.trace.nsys import find_nsys

    nsys = str(find_nsys(args.nsys))
    py = sys.executable
    out = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    ps = [py, "-m", "profiler.cli", "run", "--policy", "none", "--nsys", nsys]  # the example knows no "default"
    workloads = {
        f"loop of {args.steps} jitted steps": [str(LOOP), "--steps", str(args.steps)],
        f"examples/train.py --steps {args.example_steps}": [str(EXAMPLE), "--steps", str(args.example_steps)],
    }
    print("| workload | A | B | A median s | B median s | A/B median |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    try:
        for name, script in workloads.items():
            capture = [*ps, "--runs-dir", str(out / "runs"), *script]
            plain_nsys = [nsys, "profile", "--trace=cuda,nvtx", "--force-overwrite=true", "-o", str(out / "n"), py]
            # the nsys command profile-step runs, alone: what is left is profile-step's own cost
            its_nsys = nsys_command.build(Path(nsys), out / "m", [py, *script], ["--force-overwrite=true"])
            pairs = {
                ("profile-step run", "python script.py"): (capture, [py, *script]),
                ("profile-step run", "nsys profile --trace=cuda,nvtx"): (capture, [*plain_nsys, *script]),
                ("profile-step run", "its nsys command alone"): (capture, its_nsys),
                ("profile-step run, old trace set", "profile-step run"): (
                    [*ps, "--runs-dir", str(out / "runs"), OLD_TRACE, *script],
                    capture,
                ),
            }
            for (la, lb), (a, b) in pairs.items():
                ma, mb, ratio = pair(a, b, args.runs)
                print(f"| {name} | {la} | {lb} | {ma:.2f} | {mb:.2f} | {ratio:.2f}x |", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
