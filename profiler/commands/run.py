"""``profile-step run``: the script under nsys, once per policy, each run in a folder of its own."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from profiler.commands.options import Shared, asked_policies
from profiler.errors import ProfilerError

NO_TRACE_EXIT = 4  # run: every script exited 0, and a policy still ended without a trace


def compiled_line(module: str, agree: bool | None) -> str:
    """The run line's compiled step: the module, and whether the numbers the script handed over
    (``annotate.compiled_step``) agree with XLA's dump (the manifest's ``compiled.agree``)."""
    words = {
        True: "; its memory and FLOPs as the script gave them agree with XLA's dump",
        False: "; its memory and FLOPs as the script gave them DIFFER from XLA's dump",
    }
    return f"compiled step: {module} (memory, FLOPs and host placements from its HLO){words.get(agree, '')}"


def cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.capture.run import RunRequest, RunResult, run_all
    from profiler.stored import no_trace
    from profiler.units import fit, wrap

    try:  # capture needs no analysis packages; a bare GPU node may only have what training needs
        from profiler.report.text import (
            NO_GPU,
            render_devices,
            render_sweep_summary,
            steps_line,
            window_line,
        )
        from profiler.runs.result import run_summary
        from profiler.trace import open_trace
    except ImportError as exc:
        run_summary = None
        print(f"profile-step: runs will not be analyzed here ({exc})", file=sys.stderr)

    if args.keep_warmup and args.capture_range not in (None, "all"):
        raise ProfilerError(
            f"--keep-warmup is --capture-range all; it contradicts --capture-range {args.capture_range}"
        )
    capture_range = "all" if args.keep_warmup else (args.capture_range or "auto")
    policies = asked_policies(args)
    req = RunRequest(
        script=Path(args.script),
        script_args=list(args.script_args),
        policies=policies or [os.environ.get("PROFILE_STEP_POLICY") or "default"],
        runs_dir=Path(args.runs_dir),
        nsys=args.nsys,
        nsys_args=args.nsys_arg or [],
        capture_range=capture_range,
        lhs=args.lhs,
        pipelined_offload=args.pipelined_offload,
        async_limit=args.async_limit,
        python=args.python,
        policy_arg=args.policy_word or args.policy_arg,
        policy_word=bool(args.policy_word),
        trace_extra=args.trace_extra or [],
        xla_dump=not args.no_xla_dump,
    )
    rows: list[dict[str, Any]] = []
    said: set[str] = set()
    fingerprints: dict[str, list[str]] = {}  # HLO fingerprint of the step -> the policies that compiled it

    def say(text: str) -> None:
        print(wrap(text, indent="   "))

    def show(res: RunResult) -> None:
        row: dict[str, Any] = {
            "policy": res.policy,
            "status": res.status,
            "exit_code": res.exit_code,
            "run_dir": str(res.run_dir),
        }
        print(f"\n== policy {res.policy}: {res.status} (exit {res.exit_code}) -> {res.run_dir}")
        capture = res.manifest.get("capture", {})
        say(f"nsys records {capture.get('records')} (--capture-range {capture_range})")
        summary = None
        if res.sqlite is not None and run_summary is not None:
            try:
                summary = run_summary(open_trace(res.sqlite))
            except ProfilerError as exc:
                say(f"analysis failed: {exc}")
        # the step program as the analysis chose it (the one rule, on the trace's executions), else as
        # the capture chose it (the same rule, on the start-up hook's counts)
        comp = (summary or {}).get("compiled_step") or {}
        capture_comp = res.manifest.get("compiled") or {}
        if not comp.get("chosen_by"):
            comp = {
                "module": capture_comp.get("step_module"),
                "chosen_by": capture_comp.get("chosen_by"),
                "fingerprint": capture_comp.get("fingerprint"),
                "notes": capture_comp.get("notes"),
            }
        if comp.get("chosen_by") and (comp.get("step_program") or comp.get("module")):
            say(f"step: {comp['chosen_by']}")
        if comp.get("module"):
            say(compiled_line(comp["module"], capture_comp.get("agree")))
            fp = comp.get("fingerprint")
            same = [p for p in fingerprints.get(fp, []) if p != res.policy] if fp else []
            if same:
                say(
                    f"same step as policy {', '.join(same)} (HLO fingerprint {fp}): the policy had no effect on "
                    "the compiled program; does the script read $PROFILE_STEP_POLICY (or the flag --policy-arg passes)?"
                )
            if fp:
                fingerprints.setdefault(fp, []).append(res.policy)
        elif comp.get("notes"):
            say(f"compiled step: none recorded ({comp['notes'][-1]})")
        if summary is not None:
            row.update(summary)
            row["policy"] = res.policy  # the policy asked for (the trace's label may be absent)
            say(steps_line(summary))
            if summary["analysis"]["devices"] and not args.no_summary:  # its head says the analysis window
                print(fit(render_devices(summary["analysis"], wide=args.wide), args.wide))
            else:
                say(window_line(summary["analysis"]["trace"]["window"]))
            if not summary["analysis"]["devices"]:  # the sentence once per command, a short reminder after it
                say("no GPU activity in this trace either" if said else NO_GPU)
                said.add("no-gpu")
        elif res.sqlite is None and res.status != "interrupted":
            say(f"no trace: {res.manifest.get('no_trace_reason')}")
            raw = no_trace.raw_capture(res.run_dir)
            say(f"nsys's output: {res.run_dir / 'output.log'}" + (f"; its raw capture: {raw}" if raw else ""))
            if res.status == "no-trace" and capture_range.startswith("nvtx:"):
                say(
                    f"(nsys waited for the NVTX range {capture_range[5:]}: did the script open it? "
                    "--capture-range auto records the whole run)"
                )
            elif res.status == "no-trace" and capture_range == "cuda-profiler-api":
                why = capture.get("problem") or "did the script call cudaProfilerStart()?"
                say(f"(nsys waited for cudaProfilerStart() and it never took effect: {why})")
        rows.append(row)

    results = run_all(req, on_result=show)
    if len(rows) > 1 and run_summary is not None:
        print("\n" + render_sweep_summary(rows))
    if any(r.status == "interrupted" for r in results):
        return 130
    code = next((r.exit_code for r in results if r.exit_code != 0), 0)
    missing = [r.policy for r in results if r.sqlite is None]
    if missing:
        print(
            f"profile-step: {len(missing)} of {len(results)} policies ended without a trace ({', '.join(missing)}): "
            f"exit {code or NO_TRACE_EXIT}",
            file=sys.stderr,
        )
    return code or (NO_TRACE_EXIT if missing else 0)


def add(sub: Any, shared: Shared) -> None:
    r = sub.add_parser(
        "run",
        parents=[shared.policies, shared.nsys, shared.wide],
        help="profile a training script under nsys, once per policy",
        description="Run SCRIPT under nsys profile once per policy, export SQLite, and show the "
        "copy-overlap summary. The whole run is recorded; the analysis reads the part between "
        "annotate.capture() or cudaProfilerStart/Stop when the script marks one, and finds steps "
        "and warm-up from XLA's own ranges when it marks none. The policy reaches the script "
        "as $PROFILE_STEP_POLICY (and as `--policy-arg FLAG NAME` when asked).",
    )
    r.add_argument("--runs-dir", default="runs", help="where run folders go (default: runs/)")
    r.add_argument(
        "--nsys-arg",
        action="append",
        metavar="OPT",
        help="an nsys profile option, overriding the default of the same name (repeatable), "
        "e.g. --nsys-arg=--sample=process-tree",
    )
    r.add_argument(
        "--capture-range",
        default=None,
        metavar="MODE",
        help="what nsys records: auto (default: the whole run; analyzed from annotate.capture() or "
        "cudaProfilerStart/Stop when the script marks them), all (the whole run, all analyzed), "
        "nvtx:NAME[@DOMAIN] (only inside that NVTX range: for long jobs), cuda-profiler-api "
        "(only between cudaProfilerStart and cudaProfilerStop)",
    )
    r.add_argument(
        "--keep-warmup", action="store_true", help="the same as --capture-range all (compilation and warm-up included)"
    )
    r.add_argument("--lhs", action="store_true", help="XLA latency hiding scheduler on")
    r.add_argument("--pipelined-offload", action="store_true", help="XLA pipelined host offloading on")
    r.add_argument("--async-limit", type=int, metavar="N", help="XLA parallel async compute limit")
    r.add_argument("--python", default=None, help="interpreter for a .py script (default: this one)")
    r.add_argument(
        "--trace-extra",
        action="append",
        metavar="A,B",
        help="nsys traces to record beyond what the analysis reads (cuda,nvtx), e.g. osrt or cublas,cudnn "
        "(repeatable; --nsys-arg=--trace=... replaces the whole set)",
    )
    r.add_argument("--no-summary", action="store_true", help="only the one-line result per policy")
    r.add_argument(
        "--no-xla-dump",
        action="store_true",
        help="do not ask XLA for a dump of the step's compiled module (kept pruned in the run folder)",
    )
    r.add_argument("script", help="the training script (.py, or an executable)")
    r.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    r.set_defaults(func=cmd_run)
