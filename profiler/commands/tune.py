"""``profile-step tune``: which activations to keep, recompute or offload, searched and predicted."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, json_dump


def cmd_tune(args: argparse.Namespace) -> int:
    """``tune SCRIPT``: where each named activation goes (device, remat, offload), compiled and predicted."""
    from profiler.report.tune_text import render_tune
    from profiler.tune.request import request_from
    from profiler.tune.run import run_tune

    doc = run_tune(request_from(args))
    print(json_dump(doc) if args.json else render_tune(doc, show_all=args.all, wide=args.wide))
    return 0 if doc["choice"] is not None else 1


def add(sub: Any, shared: Shared) -> None:
    from profiler.tune.request import add_arguments

    tu = sub.add_parser(
        "tune",
        parents=[shared.json, shared.wide],
        help="choose which named activations to keep, recompute or offload: compiled for a GPU target, predicted",
        description="Run SCRIPT once under a Python with JAX's CUDA plugin (no GPU needed); its step (handed to "
        "annotate.compiled_step(), else the first jitted function it calls twice) is compiled for the target under "
        "each candidate policy (the policy of the script's jax.checkpoint calls substituted), its step and exposed "
        "copy time predicted on the host link (docs/tune.md).",
    )
    add_arguments(tu)
    tu.set_defaults(func=cmd_tune)
