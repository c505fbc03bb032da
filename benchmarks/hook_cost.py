"""What the start-up hook costs per call of a jitted function where it records executions (a CPU:
XLA:CPU writes no NVTX, so the hook turns JAX's C++ dispatch fast path off for the script's jitted
functions and writes one range per execution).

    .venv/bin/python benchmarks/hook_cost.py [--calls 10000] [--rounds 5] [--size 64]

One child process per measurement, with the environment ``profile-step run`` gives the script
(``run.run_env``: the hook first on PYTHONPATH, a run folder) but without nsys; each child runs
``capture_loop.py``'s step (imported) ``--calls`` times after 200 warm-up calls and prints the loop's
``time.perf_counter`` nanoseconds per call (start-up, imports and compilation are not in it).
Three settings, in turn, their order rotated each round:

- ``off``: ``PROFILE_STEP_HOOK=0``, JAX as the script has it (the C++ fast path);
- ``count``: the hook counting executions only (``PROFILE_STEP_HOOK=count``: the Python dispatch
  path, no NVTX);
- ``ranges``: the hook as ``profile-step run`` installs it (Python path and one NVTX range per
  call; without nsys the ranges go to no collector).

Printed: the median over rounds of each setting's ns per call, and of the per-round differences
(``count - off``: the Python path; ``ranges - count``: the NVTX calls).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
calls, size = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from capture_loop import start, train_step

w, x = start(size)
for _ in range(200):
    w, value = train_step(w, x)
value.block_until_ready()
t0 = time.perf_counter_ns()
for _ in range(calls):
    w, value = train_step(w, x)
value.block_until_ready()
print(json.dumps({"ns_per_call": (time.perf_counter_ns() - t0) / calls}))
"""

SETTINGS = {"off": "0", "count": "count", "ranges": None}


def child_env(run_dir: Path, hook: str | None) -> dict[str, str]:
    from profiler.capture import run, xla_flags
    from profiler.conventions import HOOK_ENV

    plan = xla_flags.plan(os.environ.get("XLA_FLAGS", ""), dump_to=None)
    env = run.run_env(run.RunRequest(script=Path("x.py"), xla_dump=False), "p", run_dir, plan)
    env.setdefault("JAX_PLATFORMS", "cpu")
    if hook is not None:
        env[HOOK_ENV] = hook
    return env


def measure(setting: str, calls: int, size: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = child_env(Path(tmp), SETTINGS[setting])
        argv = [sys.executable, "-c", CHILD, str(calls), str(size), str(ROOT / "benchmarks")]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"hook_cost: {setting}: exit {out.returncode}: {out.stderr[-500:]}")
        return float(json.loads(out.stdout.strip().splitlines()[-1])["ns_per_call"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    names = list(SETTINGS)
    got: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % 3 :] + names[: r % 3]:
            got[n].append(measure(n, args.calls, args.size))
    load = os.getloadavg()
    print(f"{args.calls} calls per child, {args.rounds} rounds, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for n in names:
        vals = got[n]
        print(f"{n:7s} median {statistics.median(vals) / 1e3:8.1f} us per call (min {min(vals) / 1e3:.1f}, max "
              f"{max(vals) / 1e3:.1f})")  # fmt: skip
    for a, b in (("count", "off"), ("ranges", "count"), ("ranges", "off")):
        diff = [x - y for x, y in zip(got[a], got[b], strict=True)]
        print(f"{a} - {b}: median {statistics.median(diff) / 1e3:+.1f} us per call")


if __name__ == "__main__":
    main()
