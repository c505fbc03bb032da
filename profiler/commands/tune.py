"""``profile-step tune``: which activations to keep, recompute or offload, searched and predicted.

With ``--json`` every exit prints one JSON object on stdout: the tune document, or on a failing
exit the CLI's error object (``error``, ``exit_code``, ``choice`` null) beside the one line on stderr."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, json_dump

NO_CHOICE = "no candidate that compiled fits in the memory limit"


def cmd_tune(args: argparse.Namespace) -> int:
    """``tune SCRIPT``: where each named activation goes (device, remat, offload), compiled and predicted."""
    from profiler.report.tune_text import render_tune
    from profiler.tune.request import request_from
    from profiler.tune.run import run_tune

    doc = run_tune(request_from(args))
    if doc["choice"] is None:
        doc = {**doc, "error": NO_CHOICE, "exit_code": 1}
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
