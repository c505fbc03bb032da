"""``profile-step install-recipe``: the offload_overlap nsys recipe, installed."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared


def cmd_install_recipe(args: argparse.Namespace) -> int:
    """``install-recipe``: the offload_overlap recipe into an nsys (or a folder for $NSYS_RECIPE_PATH)."""
    from profiler.recipes.install import RECIPE, environment_bin, install, listed_by_nsys

    done = install(args.nsys, args.into)
    print(f"installed the nsys recipe {RECIPE} into {done.folder}")
    run = f"PATH={environment_bin()}:$PATH"
    if done.listed:
        listed = listed_by_nsys(done.nsys)
        print(f"`nsys recipe --help` {'lists' if listed else 'does NOT list'} it ({done.nsys})")
        if not listed:
            return 1
    else:
        run += f" NSYS_RECIPE_PATH={done.folder.parent}"
    print("run it with this environment first on PATH (nsys runs the first python3 there):")
    print(f"  {run} {done.nsys} recipe {RECIPE} --input REPORT... --output DIR")
    return 0


def add(sub: Any, shared: Shared) -> None:
    ins = sub.add_parser(
        "install-recipe",
        help="install the offload_overlap recipe where nsys finds recipes (`nsys recipe offload_overlap`)",
    )
    ins.add_argument("--nsys", default=None, help="the nsys to install into (default: the one profile-step finds)")
    ins.add_argument(
        "--into",
        default=None,
        metavar="DIR",
        help="install into DIR instead (for a read-only nsys): run nsys with NSYS_RECIPE_PATH=DIR",
    )
    ins.set_defaults(func=cmd_install_recipe)
