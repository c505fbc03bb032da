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


class RunPrinter:
    """What ``profile-step run`` prints after each policy: its status, the step program and the compiled
    step, then the analysis of its trace (where the analysis packages are installed) or why it has
    none; ``rows`` collect what the sweep summary compares."""

    def __init__(self, args: argparse.Namespace, capture_range: str) -> None:
        self.args = args
        self.capture_range = capture_range
        self.rows: list[dict[str, Any]] = []
        self.said: set[str] = set()
        self.fingerprints: dict[str, list[str]] = {}  # HLO fingerprint of the step -> the policies that compiled it
        try:  # capture needs no analysis packages; a bare GPU node may only have what training needs
            from profiler.runs.result import run_summary

            self.run_summary: Any = run_summary
        except ImportError as exc:
            self.run_summary = None
            print(f"profile-step: runs will not be analyzed here ({exc})", file=sys.stderr)

    @staticmethod
    def say(text: str) -> None:
        from profiler.units import wrap

        print(wrap(text, indent="   "))

    def show(self, res: Any) -> None:
        """Everything about one finished policy (``capture.run.RunResult``)."""
        row: dict[str, Any] = {"policy": res.policy, "status": res.status, "exit_code": res.exit_code,
                               "run_dir": str(res.run_dir)}  # fmt: skip
        print(f"\n== policy {res.policy}: {res.status} (exit {res.exit_code}) -> {res.run_dir}")
        capture = res.manifest.get("capture", {})
        self.say(f"nsys records {capture.get('records')} (--capture-range {self.capture_range})")
        summary = self._summary(res)
        self._compiled_lines(res, summary)
        if summary is not None:
            row.update(summary)
            row["policy"] = res.policy  # the policy asked for (the trace's label may be absent)
            self._analysis_lines(summary)
        elif res.sqlite is None and res.status != "interrupted":
            self._no_trace_lines(res, capture)
        self.rows.append(row)

    def _summary(self, res: Any) -> dict[str, Any] | None:
        if res.sqlite is None or self.run_summary is None:
            return None
        from profiler.trace import open_trace

        try:
            return self.run_summary(open_trace(res.sqlite))
        except ProfilerError as exc:
            self.say(f"analysis failed: {exc}")
            return None

    def _compiled_lines(self, res: Any, summary: dict[str, Any] | None) -> None:
        """The step program as the analysis chose it (the one rule, on the trace's executions), else as
        the capture chose it (the same rule, on the start-up hook's counts); a step the policy left
        unchanged is said."""
        comp = (summary or {}).get("compiled_step") or {}
        capture_comp = res.manifest.get("compiled") or {}
        if not comp.get("chosen_by"):
            keys = {"module": "step_module", "chosen_by": "chosen_by", "fingerprint": "fingerprint", "notes": "notes"}
            comp = {k: capture_comp.get(c) for k, c in keys.items()}
        if comp.get("chosen_by") and (comp.get("step_program") or comp.get("module")):
            self.say(f"step: {comp['chosen_by']}")
        if not comp.get("module"):
            if comp.get("notes"):
                self.say(f"compiled step: none recorded ({comp['notes'][-1]})")
            return
        self.say(compiled_line(comp["module"], capture_comp.get("agree")))
        fp = comp.get("fingerprint")
        same = [p for p in self.fingerprints.get(fp, []) if p != res.policy] if fp else []
        if same:
            self.say(
                f"same step as policy {', '.join(same)} (HLO fingerprint {fp}): the policy had no effect on "
                "the compiled program; does the script read $PROFILE_STEP_POLICY (or the flag --policy-arg passes)?"
            )
        if fp:
            self.fingerprints.setdefault(fp, []).append(res.policy)

    def _analysis_lines(self, summary: dict[str, Any]) -> None:
        from profiler.report.text import NO_GPU, render_devices, steps_line, window_line
        from profiler.units import fit

        self.say(steps_line(summary))
        if summary["analysis"]["devices"] and not self.args.no_summary:  # its head says the analysis window
            print(fit(render_devices(summary["analysis"], wide=self.args.wide), self.args.wide))
        else:
            self.say(window_line(summary["analysis"]["trace"]["window"]))
        if not summary["analysis"]["devices"]:  # the sentence once per command, a short reminder after it
            self.say("no GPU activity in this trace either" if self.said else NO_GPU)
            self.said.add("no-gpu")

    def _no_trace_lines(self, res: Any, capture: dict[str, Any]) -> None:
        from profiler.stored import no_trace

        self.say(f"no trace: {res.manifest.get('no_trace_reason')}")
        raw = no_trace.raw_capture(res.run_dir)
        self.say(f"nsys's output: {res.run_dir / 'output.log'}" + (f"; its raw capture: {raw}" if raw else ""))
        if res.status == "no-trace" and self.capture_range.startswith("nvtx:"):
            self.say(
                f"(nsys waited for the NVTX range {self.capture_range[5:]}: did the script open it? "
                "--capture-range auto records the whole run)"
            )
        elif res.status == "no-trace" and self.capture_range == "cuda-profiler-api":
            why = capture.get("problem") or "did the script call cudaProfilerStart()?"
            self.say(f"(nsys waited for cudaProfilerStart() and it never took effect: {why})")


def _request(args: argparse.Namespace, capture_range: str) -> Any:
    from pathlib import Path

    from profiler.capture.run import RunRequest

    return RunRequest(
        script=Path(args.script),
        script_args=list(args.script_args),
        policies=asked_policies(args) or [os.environ.get("PROFILE_STEP_POLICY") or "default"],
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


def cmd_run(args: argparse.Namespace) -> int:
    from profiler.capture.run import run_all

    if args.keep_warmup and args.capture_range not in (None, "all"):
        raise ProfilerError(
            f"--keep-warmup is --capture-range all; it contradicts --capture-range {args.capture_range}"
        )
    capture_range = "all" if args.keep_warmup else (args.capture_range or "auto")
    printer = RunPrinter(args, capture_range)
    results = run_all(_request(args, capture_range), on_result=printer.show)
    if len(printer.rows) > 1 and printer.run_summary is not None:
        from profiler.report.text import render_sweep_summary

        print("\n" + render_sweep_summary(printer.rows))
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
        parents=[shared.policies, shared.nsys, shared.wide, shared.cache],
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
