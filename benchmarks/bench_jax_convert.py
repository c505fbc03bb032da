"""What reading a JAX profiler trace costs: the conversion into an nsys-schema export, then analyze.

    .venv/bin/python benchmarks/bench_jax_convert.py [--steps N] [--runs 3]

The input is shaped like a real capture: the H200 offload_qkv trace of sample_traces/h200-example (3
steps, 4,214 events), its steps repeated N times (each copy shifted by the span of the three, every
correlation id and graph node renumbered), so that a long capture keeps the real mix of kernels,
copies, launches and XLA annotations.  Prints the events, the JSON's size, and the median wall time of
the conversion and of ``analyze --json`` on the export (each in a fresh process).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = next((ROOT / "sample_traces" / "h200-example").glob("*-offload_qkv-??????/trace.json.gz"))


def shaped(copies: int) -> dict:
    """The source trace's events *copies* times over, one after another."""
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = data["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    corr = max(int(e["args"]["correlation_id"]) for e in timed if "correlation_id" in e.get("args", {})) + 1
    out = [e for e in events if e.get("ph") != "X"]
    for k in range(copies):
        for e in timed:
            c = dict(e, ts=e["ts"] + k * span)
            if "args" in e and "correlation_id" in e["args"]:
                c["args"] = dict(e["args"], correlation_id=str(int(e["args"]["correlation_id"]) + k * corr))
            out.append(c)
    return {**data, "traceEvents": out}


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="steps in the shaped trace (multiple of 3)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "big.trace.json.gz"
        data = shaped(max(1, args.steps // 3))
        src.write_bytes(gzip.compress(json.dumps(data).encode(), compresslevel=1))
        n = sum(1 for e in data["traceEvents"] if e.get("ph") == "X")
        del data
        code = (
            "import os; from pathlib import Path; from profiler.trace import jax_profile as j; "
            f"j.convert(Path({str(src)!r}), Path({tmp!r}) / f'x{{os.getpid()}}.sqlite')"
        )
        convert = [sys.executable, "-c", code]
        conv = [timed(convert, dict(os.environ)) for _ in range(args.runs)]
        cache = {**os.environ, "PROFILE_STEP_CACHE": str(Path(tmp) / "cache")}
        timed([sys.executable, "-m", "profiler.cli", "analyze", "--json", str(src)], cache)  # makes the export once
        cmd = [sys.executable, "-m", "profiler.cli", "analyze", "--json", str(src)]
        analyze = [timed(cmd, cache) for _ in range(args.runs)]
        print(f"{n:,} events ({args.steps} steps), {src.stat().st_size / 2**20:.1f} MiB gzipped")
        print(f"convert (whole process): median {statistics.median(conv):.2f} s of {args.runs}: "
              f"{', '.join(f'{x:.2f}' for x in conv)}")  # fmt: skip
        print(f"analyze --json on its cached export: median {statistics.median(analyze):.2f} s of {args.runs}: "
              f"{', '.join(f'{x:.2f}' for x in analyze)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
