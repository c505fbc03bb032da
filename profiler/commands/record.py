"""``profile-step record``: a trace captured elsewhere, added to the results database."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from profiler.commands.options import Shared


def cmd_record(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.errors import InputError
    from profiler.runs.discover import NoTrace
    from profiler.runs.result import load_runs
    from profiler.runs.store import record

    if not Path(args.run).exists():
        raise InputError(args.run, "no such trace or run folder")
    skipped: list[NoTrace] = []
    runs = load_runs(args.run, Path(args.db), args.nsys, skipped)
    for s in skipped:
        print(f"profile-step: not recorded: {s.line()}", file=sys.stderr)
    if not runs and skipped:
        raise InputError(args.run, "no run with a trace to record")
    for run in runs:
        rid = record(Path(args.db), run, args.label)
        print(
            f"recorded {run.policy} ({Path(run.trace or '').name}) as {rid}"
            + (f" under label {args.label}" if args.label else "")
            + f" in {args.db}"
        )
    return 0


def add(sub: Any, shared: Shared) -> None:
    rec = sub.add_parser(
        "record",
        parents=[shared.db, shared.nsys, shared.cache],
        help="store a run's analyzed metrics in the results database",
    )
    rec.add_argument("run", help="a trace, a run folder, or a folder of runs")
    rec.add_argument("--label", default=None, help="a label to compare by later (main, pr-123, ...)")
    rec.set_defaults(func=cmd_record)
