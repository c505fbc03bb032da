"""``profile-step tune``'s command line: its options and the request they make."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from profiler.errors import ProfilerError
from profiler.units import parse_bytes


def add_arguments(p: argparse.ArgumentParser) -> None:
    from profiler.analysis.links import add_link_option

    p.add_argument("--target", default="h100", help="h100, h200, b200, a100, or a GpuTargetConfigProto text file")
    add_link_option(
        p, "the host link to predict on: pcie3..pcie6, pcie-gen5, nvlink-c2c, or GB/s (default: the target's own)"
    )
    p.add_argument("--batch", type=int, default=None, metavar="N", help="micro batch, passed as --batch N")
    p.add_argument("--batch-arg", default="--batch", metavar="FLAG", help="how the script takes the batch ('' none)")
    p.add_argument(
        "--memory-limit",
        default=None,
        metavar="SIZE",
        help="device memory a step may use, e.g. 60GiB (default: the target's memory x --mem-fraction)",
    )
    p.add_argument(
        "--mem-fraction", type=float, default=None, metavar="F", help="usable share of device memory (default 0.75)"
    )
    p.add_argument(
        "--policy",
        default=None,
        metavar="NAME",
        help="the script's own policy to start from ($PROFILE_STEP_POLICY, or --policy-arg): one whose layers "
        "are in jax.checkpoint",
    )
    p.add_argument("--policy-arg", default=None, metavar="FLAG|TEMPLATE", help="how the script takes --policy")
    p.add_argument(
        "--step",
        default=None,
        metavar="NAME|NAME@LINE|FILE:LINE",
        help="the jitted function that is the step, for a script that does not call annotate.compiled_step(): by "
        "name, NAME@LINE (the later of two functions of one name) or FILE:LINE (a line of it) (default: the first "
        "function with a jax.checkpoint the script runs twice)",
    )
    p.add_argument(
        "--xla-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an XLA debug option for every compile (repeatable), e.g. xla_gpu_enable_pipelined_host_offloading=true",
    )
    p.add_argument(
        "--names",
        default=None,
        metavar="A,B,...",
        help="search only these activations (the others stay recomputed; a checkpoint's input kept)",
    )
    p.add_argument("--max-compiles", type=int, default=48, metavar="N", help="the search's compile budget (default 48)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="compile a search round's candidates side by side in N processes of the script (default: the cores); "
        "the result is the one of --jobs 1",
    )
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="compile every change of the search, also those that the names' effects alone predict to be no "
        "faster than the best known step (the search's, or a preset an earlier tune compiled)",
    )
    p.add_argument("--no-presets", action="store_true", help="do not compile JAX's and MaxText's presets beside")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="neither reuse nor keep compiles in the record of earlier tunes ($PROFILE_STEP_CACHE, default "
        "~/.cache/profile-step/tune) and start the search from nothing",
    )
    p.add_argument(
        "--start-script",
        action="store_true",
        help="start the script even when the record of an earlier tune of the same command, files, Python and "
        "environment holds its step (by default tune then starts it only for a placement the record lacks)",
    )
    p.add_argument(
        "--calibrate",
        default=None,
        metavar="RUN_OR_TRACE",
        help="costs measured by a run (nsys export, run folder, nsys-jax archive) instead of the roofline",
    )
    p.add_argument("--python", default=None, help="a Python with jax[cuda12] (default: .venv-aot, then this one)")
    p.add_argument("--out", default=None, help="an empty or new folder for the results (default: plans/...)")
    p.add_argument("--plans-dir", default="plans", help="where tune folders go (default: plans/)")
    p.add_argument("--all", action="store_true", help="also list the candidates that do not fit")
    p.add_argument(
        "--verify",
        action="store_true",
        help="then run the choice and the best preset under nsys (profile-step run): do they run, and compile to "
        "different programs; profile-step analyze of the two runs sets what tune predicted against the measured step "
        "(on a GPU)",
    )
    p.add_argument("script", help="the training script (.py)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def xla_options(given: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` words as XLA's compile options (true/false as booleans, numbers as numbers)."""
    out: dict[str, Any] = {}
    for word in given:
        name, sep, value = word.partition("=")
        name = name.strip().removeprefix("--")
        if not sep or not name:
            raise ProfilerError(f"--xla-option: expected NAME=VALUE, got {word!r}")
        low = value.strip().lower()
        if low in ("true", "false"):
            out[name] = low == "true"
        else:
            try:
                out[name] = int(low)
            except ValueError:
                try:
                    out[name] = float(low)
                except ValueError:
                    out[name] = value.strip()
    return out


def default_jobs() -> int:
    """``--jobs`` by default: the cores this process may use, at least 1."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def request_from(args: Any) -> Any:
    """The ``TuneRequest`` the parsed options make (imported here: building the parser stays light)."""
    from profiler.analysis.links import given_link
    from profiler.tune.run import TuneRequest

    try:
        limit = parse_bytes(args.memory_limit) if args.memory_limit else None
    except ValueError as exc:
        raise ProfilerError(f"--memory-limit: {exc}") from None
    from profiler.capture.step_catch import checked_step

    checked_step(args.step)
    if args.max_compiles < 1:
        raise ProfilerError("--max-compiles: at least 1")
    if args.jobs is not None and args.jobs < 1:
        raise ProfilerError("--jobs: at least 1")
    return TuneRequest(
        script=Path(args.script),
        script_args=list(args.script_args),
        target=args.target,
        link=given_link(args.link),
        batch=args.batch,
        batch_arg=args.batch_arg or None,
        memory_limit=limit,
        mem_fraction=args.mem_fraction,
        python=args.python,
        policy=args.policy,
        policy_arg=args.policy_arg,
        out_dir=Path(args.out) if args.out else None,
        plans_dir=Path(args.plans_dir),
        max_compiles=args.max_compiles,
        jobs=args.jobs if args.jobs is not None else default_jobs(),
        presets=not args.no_presets,
        screen=not args.no_screen,
        cache=not args.no_cache,
        start_script=args.start_script,
        calibrate=Path(args.calibrate) if args.calibrate else None,
        step=args.step,
        verify=args.verify,
        xla_options=xla_options(args.xla_option),
        only=[n.strip() for n in args.names.split(",") if n.strip()] if args.names else None,
    )
