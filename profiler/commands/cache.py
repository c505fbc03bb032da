"""``profile-step cache``: where profile-step's cache is, how big, and clearing it."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, json_dump


def usage_lines(doc: dict[str, Any], cleared: bool) -> list[str]:
    """The readable form of ``cache --json``."""
    from profiler.units import human_bytes

    verb = "cleared" if cleared else "holds"
    out = [f"{doc['folder']}: {verb} {doc['files']} file(s), {human_bytes(doc['bytes'])}"]
    out += [f"  {k}: {v['files']} file(s), {human_bytes(v['bytes'])}" for k, v in doc["kinds"].items()]
    return out


def cmd_cache(args: argparse.Namespace) -> int:
    """``cache [--clear] [--json]``: the cache folder and its size per kind; ``--clear`` empties it
    (only a folder holding profile-step's CACHEDIR.TAG)."""
    from profiler import cache_dir

    found = cache_dir.clear() if args.clear else cache_dir.usage()
    doc = {**found.doc(), "cleared": bool(args.clear)}
    print(json_dump(doc) if args.json else "\n".join(usage_lines(doc, args.clear)))
    return 0


def add(sub: Any, shared: Shared) -> None:
    cch = sub.add_parser(
        "cache",
        parents=[shared.json, shared.cache],
        help=(
            "where profile-step keeps the exports and analyses it makes from traces and tune's compiles, "
            "how big; --clear empties it"
        ),
    )
    cch.add_argument(
        "--clear", action="store_true", help="remove the cached exports, analyses and tune's compiles (remade on need)"
    )
    cch.set_defaults(func=cmd_cache)
