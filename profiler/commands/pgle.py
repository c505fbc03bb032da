"""``profile-step pgle``: a run's measured costs as XLA's profile-guided latency estimator file."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, json_dump


def cmd_pgle(args: argparse.Namespace) -> int:
    """``pgle RUN_OR_TRACE -o FILE``: XLA's profile-guided latency estimator file from a trace."""
    from pathlib import Path

    from profiler.predict.plan_costs import write_profile
    from profiler.report.measured_text import render_pgle_written

    s = write_profile(Path(args.source), Path(args.out), args.module, Path(args.hlo) if args.hlo else None)
    print(json_dump(s) if args.json else render_pgle_written(s))
    return 0


def add(sub: Any, shared: Shared) -> None:
    pg = sub.add_parser(
        "pgle",
        parents=[shared.json],
        help="XLA's profile-guided latency estimator file from the instruction times a run measured",
        description="Per HLO instruction of the step (XLA's thunk ranges, hlo_op=...), the median GPU time per "
        "execution, copies and collectives included, as the text ProfiledInstructionsProto that "
        "--xla_gpu_pgle_profile_file_or_directory_path reads.",
    )
    pg.add_argument("source", metavar="RUN_OR_TRACE", help="nsys SQLite export, run folder or nsys-jax archive (.zip)")
    pg.add_argument("-o", "--out", required=True, metavar="FILE", help="the profile to write (e.g. step.pbtxt)")
    pg.add_argument(
        "--module",
        default=None,
        help="only programs of this hlo_module (default: the step program, by the rule every command uses: "
        "docs/capture.md, 'The step is one compiled program')",
    )
    pg.add_argument("--hlo", default=None, metavar="FILE", help="the step's optimized HLO, when the source has none")
    pg.set_defaults(func=cmd_pgle)
