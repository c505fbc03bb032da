"""Where ``analyze --json`` spends its time and memory, pass by pass, in one process.

    python benchmarks/profile_passes.py EXPORT [--rules]

Prints, per pass, the CPU seconds, the wall seconds, the resident memory after it and the peak
so far (the kernel's VmRSS and VmHWM): reading the trace's tables; the analysis as
``analyze --json`` builds it with findings (``build``: METRICS.md devices, stalls, kernels beside
copies; then the GPU ops attributed to NVTX ranges, which ``--no-findings`` leaves out; the steps
with their copies; the rest of the JSON document); the findings' rules; the replays of their
savings and the copy-free replay, side by side as ``findings.evaluate`` runs them
(``saving.savings``; ``--serial``: one after the other, each timed).  ``--rules``: each rule's own
time too.  The
passes run through the functions ``analyze --json`` runs (``runs.result.build``, the parts of
``findings.evaluate``), one after the other.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _mem() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    got = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            got[key] = int(value.split()[0]) / 1024
    return got["VmRSS"], got["VmHWM"]


class Passes:
    def __init__(self) -> None:
        self.t, self.c = time.perf_counter(), time.process_time()
        print(f"{'pass':<44} {'cpu s':>7} {'wall s':>7} {'RSS MiB':>8} {'peak MiB':>9}")

    def done(self, name: str) -> None:
        t, c = time.perf_counter(), time.process_time()
        rss, hwm = _mem()
        print(f"{name:<44} {c - self.c:7.2f} {t - self.t:7.2f} {rss:8.0f} {hwm:9.0f}", flush=True)
        self.t, self.c = time.perf_counter(), time.process_time()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("export", type=Path)
    p.add_argument("--rules", action="store_true", help="each rule's own time")
    p.add_argument("--serial", action="store_true", help="the savings, then the copy-free replay, one after the other")
    args = p.parse_args()

    passes = Passes()
    from profiler.analysis.attribution import OP_KINDS
    from profiler.analysis.findings import RULES, CannotDecide, Evidence, FindingsConfig, by_saving, graded, rules
    from profiler.analysis.findings.saving import copy_free, savings, with_saving
    from profiler.runs.result import build
    from profiler.stored.folder import manifest_of
    from profiler.trace import load_trace

    passes.done("imports")
    trace = load_trace(args.export)
    for table in ("kernels", "kernel_ops", "copies", "memsets", "nvtx"):
        getattr(trace, table)
    passes.done("read: kernels, copies, memsets, NVTX")
    # as analyze --json builds it with findings: every GPU op attributed to the NVTX ranges
    # (``--no-findings`` attributes none: ``runs.result.analyzed``)
    result = build(trace, manifest_of(trace.path), kinds=OP_KINDS)
    passes.done("analysis: devices, stalls, kernels beside")
    _ = result.breakdown.pairs
    passes.done("ops attributed to NVTX ranges")
    result.breakdown.by_step()
    passes.done("steps with their copies")
    result.analysis_json()
    passes.done("the rest of the document")
    config = FindingsConfig()
    ev = Evidence(trace, None, result.breakdown, config, result.devices)
    found = []
    assert rules is not None  # imported for its rules
    for rule_id, fn in RULES.items():
        with contextlib.suppress(CannotDecide):  # a rule that cannot decide finds nothing
            found += fn(ev)
        if args.rules:
            passes.done(f"  rule {rule_id}")
    if not args.rules:
        passes.done("findings: rules")
    if args.serial:
        found = [graded(with_saving(f, ev), config) for f in found]
        by_saving(found, list(RULES))
        passes.done(f"findings: savings ({len(found)} findings)")
        copy_free(ev)
        passes.done("findings: copy-free replay")
    else:
        saved, _ = savings(found, ev)
        by_saving([graded(f, config) for f in saved], list(RULES))
        passes.done(f"findings: savings and copy-free replay, side by side ({len(found)} findings)")


if __name__ == "__main__":
    main()
