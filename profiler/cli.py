"""``profile-step``: parses arguments, calls the package, prints.  No logic of its own."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from profiler.errors import ProfilerError

SUBCOMMANDS = ("analyze",)


def _json_dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


def cmd_analyze(args: argparse.Namespace) -> int:
    from profiler.analysis.summary import analyze
    from profiler.report.text import render_devices
    from profiler.trace import load_trace

    trace = load_trace(args.trace, nsys=args.nsys)
    doc = analyze(trace, device=args.device)
    print(_json_dump(doc) if args.json else render_devices(doc))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="profile-step",
        description="Profile JAX host offloading under Nsight Systems and measure whether "
        "device<->host copies are hidden behind compute and NCCL.",
        epilog="Shortcut: `profile-step train.py ...` is `profile-step run train.py ...`.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    a = sub.add_parser("analyze", help="copy overlap metrics of an nsys export or report")
    a.add_argument("trace", help="an nsys SQLite export (.sqlite) or report (.nsys-rep)")
    a.add_argument("--json", action="store_true", help="print the METRICS.md JSON")
    a.add_argument("--device", type=int, default=None, help="only this deviceId")
    a.add_argument("--nsys", default=None, help="nsys binary (to export a .nsys-rep)")
    a.set_defaults(func=cmd_analyze)
    return p


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """``profile-step train.py ...`` means ``profile-step run train.py ...``."""
    argv = list(argv)
    for i, tok in enumerate(argv):
        if tok.startswith("-"):
            if tok in ("-h", "--help"):
                return argv
            continue
        if tok not in SUBCOMMANDS:
            return [*argv[:i], "run", *argv[i:]] if "run" in SUBCOMMANDS else argv
        return argv
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = normalize_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except ProfilerError as exc:
        print(f"profile-step: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("profile-step: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("PROFILE_STEP_DEBUG"):
            raise
        print(f"profile-step: internal error: {type(exc).__name__}: {exc} "
              "(set PROFILE_STEP_DEBUG=1 for a traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
