"""``profile-step compare``: two runs as a pull-request comment and a verdict."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from profiler.commands.options import Shared, json_dump
from profiler.errors import ProfilerError


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.analysis.compare import DEFAULT_THRESHOLDS, compare, parse_threshold
    from profiler.parallel import load_sides
    from profiler.report.compare_text import render_markdown, render_terminal
    from profiler.runs.discover import NoTrace

    try:
        thresholds = [parse_threshold(t) for t in (args.fail_on or DEFAULT_THRESHOLDS)]
    except ValueError as exc:
        raise ProfilerError(f"--fail-on: {exc}") from None
    from profiler.analysis.compare import finding_gate
    from profiler.analysis.findings import rule_ids

    try:
        gates = [finding_gate(g, rule_ids()) for g in args.fail_on_finding or []]
    except ValueError as exc:
        raise ProfilerError(str(exc)) from None
    skipped: list[NoTrace] = []
    base, head = load_sides([args.base, args.head], Path(args.db), args.nsys, skipped)
    for s in dict.fromkeys(skipped):
        print(f"profile-step: not compared: {s.line()}", file=sys.stderr)
    # one run on each side, of two policies: the pair is what was meant (said on stderr, as --pair asks it)
    pair = args.pair or (len(base) == len(head) == 1 and base[0].policy != head[0].policy)
    if pair and not args.pair:
        print(
            f"profile-step: one run on each side, of two policies ({base[0].policy}, "
            f"{head[0].policy}): compared as a pair (--pair)",
            file=sys.stderr,
        )
    result = compare(base, head, thresholds, gates, pair=pair)
    if args.format == "json":
        print(json_dump(result))
    elif args.format == "markdown":
        print(render_markdown(result), end="")
    else:
        print(render_terminal(result))
    if not result["policies"]:
        return 2
    return 0 if result["passed"] else 1


def add(sub: Any, shared: Shared) -> None:
    from profiler.analysis.compare import DEFAULT_THRESHOLDS  # no polars: the parser stays light

    cmp = sub.add_parser(
        "compare",
        parents=[shared.db, shared.nsys, shared.cache],
        help="compare two runs (or labels) and gate on overlap regressions",
        description="Exit code 0: no threshold crossed; 1: a threshold crossed; 2: bad input.",
    )
    cmp.add_argument("base", help="trace, run folder, folder of runs, or a label in --db")
    cmp.add_argument("head", help="trace, run folder, folder of runs, or a label in --db")
    cmp.add_argument(
        "--format", choices=("text", "markdown", "json"), default="text", help="the report's format (default: text)"
    )
    cmp.add_argument(
        "--fail-on",
        action="append",
        metavar="METRIC:+N%",
        help="a threshold (repeatable); default: " + ", ".join(DEFAULT_THRESHOLDS).replace("%", "%%"),
    )
    cmp.add_argument(
        "--fail-on-finding",
        action="append",
        metavar="ID|SEVERITY",
        help="fail when head has a finding that base has not: a rule id, or a severity (that or worse)",
    )
    cmp.add_argument(
        "--pair",
        action="store_true",
        help="one policy on each side, two different ones (two forms of a step): compare them as one pair, "
        "base → head, instead of per policy (one run on each side is a pair without it)",
    )
    cmp.set_defaults(func=cmd_compare)
