"""``profile-step dashboard``: the Dash web app over run folders and traces."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared


def cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dashboards.app import default_paths, serve

    root = Path(__file__).resolve().parents[1]
    paths = [Path(p) for p in args.paths] or default_paths(root)
    serve(
        paths,
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        nsys=args.nsys,
        licences=tuple(args.licence or ()) or None,
        first=[Path(p) for p in args.first or []],
    )
    return 0


def add(sub: Any, shared: Shared) -> None:
    dsh = sub.add_parser(
        "dashboard",
        parents=[shared.nsys, shared.cache],
        help="the web app: runs, policies, findings, policy trade, what-if, layers, timeline, copy streams",
    )
    dsh.add_argument(
        "paths",
        nargs="*",
        help="run folders, folders of runs, traces, profile-step plan folders or plan.json files "
        "(default: the project's sample_traces/, ./runs and ./plans)",
    )
    dsh.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    dsh.add_argument("--port", type=int, default=8050, help="port to serve on (default: 8050)")
    dsh.add_argument("--allow-remote", action="store_true", help="allow binding to a non-localhost address")
    dsh.add_argument(
        "--licence",
        action="append",
        metavar="SPDX",
        help="in a folder with a CATALOG.tsv, only the traces it lists under this licence, e.g. Apache-2.0 "
        "(repeatable)",
    )
    dsh.add_argument(
        "--first",
        action="append",
        metavar="RUN",
        help="a run folder or trace the first view selects (repeatable; default: the first policy comparison "
        "with copies): the runs whose verdict `profile-step analyze RUNS...` printed",
    )
    dsh.set_defaults(func=cmd_dashboard)
