"""``profile-step whatif``: the step replayed with the copies changed."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, check_device, json_dump
from profiler.errors import ProfilerError


def cmd_whatif(args: argparse.Namespace) -> int:
    """``whatif TRACE``: the step replayed with copies on another host link."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.analysis.links import copy_scale, given_link, link_change, recorded_link
    from profiler.analysis.whatif import measured_stalls, trace_whatif
    from profiler.errors import InputError
    from profiler.report.whatif_text import render_whatif
    from profiler.runs.discover import one_trace
    from profiler.trace import load_trace
    from profiler.xla.names import DEFAULT_LAYER_PATTERN

    trace = load_trace(one_trace(args.trace), nsys=args.nsys)
    check_device(args.trace, trace, args.device)
    if not trace.waits_recorded:  # the replay follows the copies' waits: without them it would answer nothing
        from profiler.trace.jax_profile import NO_WAITS, PLAN_FROM

        raise InputError(args.trace, f"not modelled: {NO_WAITS}; {PLAN_FROM}")
    link_doc = None
    factor = args.copy_scale
    target = given_link(args.link)
    source = given_link(args.from_link, "--from-link")
    if target is not None:
        if source is None:
            try:
                source = recorded_link(trace.devices["name"].to_list())
            except ValueError as exc:
                raise InputError(args.trace, str(exc)) from None
        factor = copy_scale(source, target)
        link_doc = link_change(source, target)
    elif factor is None:
        factor = 0.0
    if not 0 <= factor < float("inf"):  # NaN fails both
        raise ProfilerError(f"--copy-scale must be a finite number >= 0, got {factor}")
    bd = Breakdown(trace, args.layer_pattern or DEFAULT_LAYER_PATTERN, args.step_range)
    doc = trace_whatif(trace, factor, model_host=not args.no_host_sync, breakdown=bd, explain=True)
    if link_doc:
        doc["link"] = link_doc
    if args.device is not None:
        doc["devices"] = {k: v for k, v in doc["devices"].items() if k == str(args.device)}
    if args.json:
        print(json_dump(doc))
        return 0
    measured = measured_stalls(bd, list(doc["devices"]))  # the analysis' stalls: not analyzed twice
    gpus = {str(d): n for d, n in trace.devices.select("id", "name").iter_rows()}
    print(render_whatif(doc, measured, gpus))
    return 0


def add(sub: Any, shared: Shared) -> None:
    from profiler.analysis.links import LINKS, add_link_option

    w = sub.add_parser(
        "whatif",
        parents=[shared.json, shared.device, shared.steps, shared.nsys, shared.cache],
        help="replay a trace with faster (or slower) host copies: predicted step time and stalls",
        description="Replays the trace with every h2d/d2h copy's duration scaled (docs/metrics.md, What-if). "
        "Default: --copy-scale 0, the most the copies can cost.",
    )
    w.add_argument("trace", help="an nsys SQLite export (.sqlite) or report (.nsys-rep), or a run folder")
    how = w.add_mutually_exclusive_group()
    how.add_argument("--copy-scale", type=float, default=None, metavar="F", help="multiply copy durations by F")
    add_link_option(how, f"the link to predict for: {', '.join(LINKS)}, or a bandwidth in GB/s")
    add_link_option(
        w, "the link the trace was recorded on (default: from the GPU's name in the export)", flag="--from-link"
    )
    w.add_argument(
        "--no-host-sync",
        action="store_true",
        help="keep every host launch time as recorded (default: move the work after a blocking call)",
    )
    w.set_defaults(func=cmd_whatif)
