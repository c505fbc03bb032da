"""Time two commands in turn as whole processes, and their ratio pair by pair.

    python benchmarks/paired.py -n 3 --vs "COMMAND B" -- COMMAND A ...

A and B run alternately (A B A B ...), each from start to exit, output discarded.  For each run:
wall seconds (a monotonic clock around the child), CPU seconds (user + system of the child and the
processes it waited for, from ``wait4``) and peak memory (the largest resident set among them, the
kernel's ``ru_maxrss``), the same figures as ``/usr/bin/time -v``.  Printed: each figure's median
(min-max) for A and B, and the A/B ratios taken pair by pair, so that a machine whose speed drifts
during the call still gives a meaningful ratio.  Without ``--vs`` only A is timed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mib: float
    code: int


def timed(command: list[str]) -> Run:
    """One whole-process run of ``command``."""
    start = time.monotonic()
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode)


def spread(values: list[float], unit: str, places: int = 2) -> str:
    """``median unit (min-max)``."""
    med = statistics.median(values)
    return f"{med:.{places}f}{unit} ({min(values):.{places}f}-{max(values):.{places}f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3, help="runs of each command (default 3)")
    parser.add_argument("--vs", help="command B, one string split as a shell would")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command A and its arguments")
    args = parser.parse_args(argv)
    a = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not a or args.n < 1:
        parser.error("give -n >= 1 and a command after --")
    b = shlex.split(args.vs) if args.vs else None
    runs: dict[str, list[Run]] = {"A": [], "B": []}
    for _ in range(args.n):
        runs["A"].append(timed(a))
        if b:
            runs["B"].append(timed(b))
    print(f"load average before the last run: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    for name, command in (("A", a), ("B", b)):
        if not command:
            continue
        got = runs[name]
        codes = sorted({r.code for r in got})
        print(f"{name}: {shlex.join(command)}")
        print(
            f"   wall {spread([r.wall_s for r in got], ' s')}  cpu {spread([r.cpu_s for r in got], ' s')}"
            f"  peak {spread([r.peak_mib for r in got], ' MiB', 0)}  exit codes {codes}"
        )
    if b:
        pairs = list(zip(runs["A"], runs["B"], strict=True))
        print(
            f"A/B: wall {spread([x.wall_s / y.wall_s for x, y in pairs], 'x')}"
            f"  cpu {spread([x.cpu_s / y.cpu_s for x, y in pairs], 'x')}"
            f"  peak {spread([x.peak_mib / y.peak_mib for x, y in pairs], 'x')}"
        )
    return 0 if all(r.code == 0 for rs in runs.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
