"""``profile-step plan``: each policy compiled for a GPU target without a GPU, its step predicted."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from profiler.commands.options import Shared, asked_policies, check_step, json_dump, link_names
from profiler.errors import ProfilerError


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan SCRIPT``: the step compiled for a GPU target without a GPU, per policy and batch."""
    from pathlib import Path

    from profiler.analysis.links import given_links
    from profiler.analysis.policies import plan_table
    from profiler.capture.plan import PlanRequest, checked, run_plan, usable_fraction
    from profiler.conventions import EXAMPLE_POLICIES
    from profiler.report.policies_text import render_plan
    from profiler.report.predict_text import plan_line
    from profiler.units import fit

    if args.from_recording:
        return cmd_plan_from(args)
    if not args.script:
        raise ProfilerError("plan: give a training script (or --from RECORDING)")
    policies = asked_policies(args)
    example = not policies
    if example:
        policies = list(EXAMPLE_POLICIES)
    try:
        batches: list[int | None] = [int(b) for b in args.batch.split(",")] if args.batch else [None]
    except ValueError:
        raise ProfilerError(f"--batch: expected numbers like 1,4,8, got {args.batch!r}") from None
    check_step(args)
    req = PlanRequest(
        script=Path(args.script),
        script_args=list(args.script_args),
        policies=policies,
        batches=batches,
        target=args.target or "h100",
        python=args.python,
        step=args.step,
        batch_arg=args.batch_arg or None,
        policy_arg=args.policy_word or args.policy_arg,
        policy_word=bool(args.policy_word),
        out_dir=Path(args.out) if args.out else None,
        plans_dir=Path(args.plans_dir),
        links=given_links(args.link),
    )
    if example:  # said once the inputs are known good: a bad one's error stands alone
        checked(req)
        print(f"plan: policies {', '.join(policies)} (the example's; --policies for your own)", file=sys.stderr)
    if getattr(args, "pgle", None) or getattr(args, "calibrate", None):  # issue 23: measured costs
        from profiler.capture.pgle_run import plan_with_measurements

        return plan_with_measurements(req, usable_fraction(args.mem_fraction), args.pgle, args.calibrate, args.json)
    doc = run_plan(req)
    tab = plan_table(doc, usable_fraction(args.mem_fraction))
    if args.json:
        print(json_dump({"plan": tab, "out_dir": doc["out_dir"]}))
    else:
        answer = plan_line(tab)
        if answer:  # the answer first, then the blank line the quickstart takes it apart at
            print(fit(answer) + "\n")
        print(fit(render_plan(tab)))
        print(f"\n(files: {doc['out_dir']})")
    return 0 if all(r["status"] == "ok" for r in tab["rows"]) else 1


def cmd_plan_from(args: argparse.Namespace) -> int:
    """``plan --from RECORDING``: the recorded step against its own replay, roofline and predictions."""
    from pathlib import Path

    from profiler.analysis.links import given_links
    from profiler.predict.from_recording import from_recording
    from profiler.report.measured_text import render_from_recording
    from profiler.units import fit

    if args.script:
        raise ProfilerError(f"plan --from reads a recording, not a script: {args.script} was given too")
    links = given_links(args.link)
    targets = [t.strip() for t in args.target.split(",")] if args.target else None
    doc = from_recording(Path(args.from_recording), targets, links)
    print(json_dump(doc) if args.json else fit(render_from_recording(doc)))
    return 0


def add(sub: Any, shared: Shared) -> None:
    from profiler.analysis.links import add_link_option  # no polars: the parser stays light

    pl = sub.add_parser(
        "plan",
        parents=[shared.policies, shared.json, shared.cache],
        help="compile a script's step for a GPU target without a GPU: memory, FLOPs and offload plan per policy",
        description="Run SCRIPT once per policy and micro batch under a Python with JAX's CUDA plugin "
        "(JAX_PLATFORMS=cpu, no GPU needed); annotate.compiled_step(step, *args) compiles the step for "
        "the target instead of running it. Results are labelled 'compiled for <target>, not measured'.",
    )
    pl.add_argument(
        "--target",
        default=None,
        help="h100 (default for a script), h200, b200, a100, or a GpuTargetConfigProto text file; with --from, "
        "comma-separated, and by default the recording's own device only",
    )
    pl.add_argument(
        "--from",
        dest="from_recording",
        default=None,
        metavar="RECORDING",
        help="a recorded run instead of a script (run folder, nsys export or report beside an XLA dump, nsys-jax "
        "archive): its step replayed with its own durations, its roofline, and predicted on --target/--link",
    )
    pl.add_argument(
        "--step",
        default=None,
        metavar="NAME|NAME@LINE|FILE:LINE",
        help="for a script that hands no step to annotate.compiled_step(): the jitted function to take (default: the "
        "first with a jax.checkpoint it runs twice, as tune takes it)",
    )
    pl.add_argument("--batch", default=None, metavar="N[,N...]", help="micro batch sizes, passed as --batch N")
    pl.add_argument("--batch-arg", default="--batch", metavar="FLAG", help="how the script takes the batch ('' none)")
    pl.add_argument("--python", default=None, help="a Python with jax[cuda12] (default: .venv-aot, then this one)")
    pl.add_argument("--mem-fraction", type=float, default=None, help="usable share of device memory (default 0.75)")
    pl.add_argument("--out", default=None, help="an empty or new folder for the results (default: plans/<time>-...)")
    pl.add_argument("--plans-dir", default="plans", help="where plan folders go (default: plans/)")
    pl.add_argument(
        "--pgle",
        default=None,
        metavar="FILE",
        help="also compile with this PGLE profile (profile-step pgle) and show where the copies moved",
    )
    pl.add_argument(
        "--calibrate",
        default=None,
        metavar="RUN_OR_TRACE",
        help="per-instruction costs and copy bandwidth measured by a run (nsys export, run folder, nsys-jax archive)",
    )
    # predicted step per host link (profiler.predict): kept in one block
    add_link_option(
        pl,
        f"host links to predict the step on: {', '.join(link_names())} (also pcie-gen5, ...), or a bandwidth in "
        "GB/s (default: the target's own)",
        many=True,
    )
    pl.add_argument("script", nargs="?", help="the training script (.py)")
    pl.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    pl.set_defaults(func=cmd_plan)
