"""``profile-step analyze``: a trace, a run, runs (the verdict and the policy table), --by, --ranks, --cross-check."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from profiler.commands.options import Shared, check_device, findings_request, json_dump
from profiler.errors import ProfilerError


def cmd_ranks(args: argparse.Namespace) -> int:
    """``analyze DIR --ranks``: every rank's export, then the cross-rank view."""
    from profiler.analysis.ranks import cross_rank
    from profiler.conventions import DEFAULT_RANK_PATTERN
    from profiler.parallel import map_ranks, usable_cores
    from profiler.report.text import render_ranks
    from profiler.runs.discover import rank_inputs

    if len(args.trace) != 1:
        raise ProfilerError("--ranks takes one folder or glob")
    paths = rank_inputs(args.trace[0])

    def progress(done: int, total: int, res: dict[str, Any]) -> None:
        state = f"FAILED: {res['error']}" if "error" in res else "ok"
        print(f"[{done}/{total}] rank {res['rank']} ({res['path']}): {state}", file=sys.stderr, flush=True)

    results = map_ranks(
        paths,
        jobs=args.jobs if args.jobs is not None else usable_cores(),
        dask=args.dask,
        scheduler_file=args.dask_scheduler_file,
        nsys=args.nsys,
        pattern=args.rank_pattern or DEFAULT_RANK_PATTERN,
        progress=progress,
    )
    doc = cross_rank(results)
    print(json_dump(doc) if args.json else render_ranks(doc))
    if doc["failed"]:
        return 2 if not doc["analyzed"] else 1
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    """``analyze RUNS...``: the per-policy table and planned vs moved over several runs."""
    from pathlib import Path

    from profiler.analysis.policies import planned_vs_moved, policy_table
    from profiler.predict.recorded import predicted
    from profiler.report.policies_text import render_planned_vs_moved_all, render_policy_comparison
    from profiler.report.verdict_text import render_verdict
    from profiler.runs.discover import NoTrace
    from profiler.runs.result import load_runs
    from profiler.runs.verdict import verdict
    from profiler.units import fit

    skipped: list[NoTrace] = []  # run folders without a trace: listed once, never in the way of the others
    runs = [r for arg in args.trace for r in load_runs(arg, Path(args.db), args.nsys, skipped, args.window)]
    skipped = list(dict.fromkeys(skipped))
    if not runs and skipped:
        if args.json:
            none = {"verdict": None, "policies": None, "planned_vs_moved": [], "no_trace": [s.doc() for s in skipped]}
            print(json_dump(none))
        for s in skipped:
            print(f"profile-step: {s.line()}", file=sys.stderr)
        print("profile-step: error: none of these runs has a trace", file=sys.stderr)
        return 2
    tab = policy_table(runs, args.peak_tflops, predict=predicted)
    pvm = [planned_vs_moved(r) for r in runs]
    found = verdict(runs, tab, [(s.policy, s.reason) for s in skipped])
    if args.json:
        doc = {"verdict": found, "policies": tab, "planned_vs_moved": pvm, "no_trace": [s.doc() for s in skipped]}
        print(json_dump(doc))
        return 0
    if _verdict_block(render_verdict(found, wide=args.wide), args):
        return 0
    print(fit(render_policy_comparison(tab), args.wide))
    if args.window:  # asked for: each run's window said (one line where they agree)
        from profiler.report.text import window_line

        said = dict.fromkeys(window_line(r.window) for r in runs if r.window)
        for line in said:
            every = " (every run)" if len(said) == 1 and len(runs) > 1 else ""
            print(fit(f"--window {args.window}: {line}{every}", args.wide))
    synthetic = [r.policy for r in runs if r.synthetic]
    if synthetic:
        print(f"SYNTHETIC (a demonstration model, not a measurement): {', '.join(synthetic)}")
    if skipped:
        print(f"\nnot in the table ({len(skipped)} without a trace):")
        for s in skipped:
            print(f"  {s.line()}")
    print()
    print(fit(render_planned_vs_moved_all(pvm, args.wide), args.wide))
    return 0


def _verdict_block(text: str, args: argparse.Namespace) -> bool:
    """Print the verdict (and the blank line under it) unless ``--no-verdict``; True when that was all
    to print (``--verdict-only``)."""
    if not args.no_verdict:
        print(text)
        if args.verdict_only:
            return True
        print()
    return False


def cmd_run_views(args: argparse.Namespace) -> int:
    """``analyze RUNS... --by VIEW``: the asked view of each run's trace (after the per-policy table
    when there are several)."""
    from profiler.report.text import render_groups
    from profiler.runs.discover import trace_paths
    from profiler.runs.result import analyze
    from profiler.trace import load_trace

    traces = []
    for arg in args.trace:
        found = trace_paths(arg)
        if not found:
            raise ProfilerError(f"{arg}: no run folder or trace here")
        traces += found
    if len(traces) == 1:  # one run: the trace's own view, devices and findings included
        args.trace = [str(traces[0])]
        return cmd_analyze(args)
    views = []
    for t in traces:
        doc = analyze(
            load_trace(t, nsys=args.nsys, window=args.window),
            device=args.device,
            by=args.by,
            layer_pattern=args.layer_pattern,
            step_range=args.step_range,
            findings=None,
        )
        views.append((t, doc))
    if args.json:
        key = {"step": "steps", "layer": "layers", "range": "ranges", "op": "ops"}[args.by]
        runs_doc = [{"trace": str(t), key: d.get(key), "attribution": d.get("attribution")} for t, d in views]
        print(json_dump({"verdict": _runs_verdict(args), "runs": runs_doc}))
        return 0
    cmd_policies(args)
    if args.verdict_only:
        return 0
    for t, doc in views:
        print()
        print(f"== {t.parent.name} ({t.name}) ==")
        print(render_groups(doc, args.by, all_steps=args.all_steps))
    return 0


def _runs_verdict(args: argparse.Namespace) -> dict[str, Any] | None:
    """The verdict over the runs *args* name, as ``analyze RUNS... --json`` gives it (None without a run)."""
    from pathlib import Path

    from profiler.analysis.policies import policy_table
    from profiler.predict.recorded import predicted
    from profiler.runs.result import load_runs
    from profiler.runs.verdict import verdict

    skipped: list = []
    runs = [r for arg in args.trace for r in load_runs(arg, Path(args.db), args.nsys, skipped, args.window)]
    failed = [(s.policy, s.reason) for s in dict.fromkeys(skipped)]
    return verdict(runs, policy_table(runs, args.peak_tflops, predict=predicted), failed) if runs else None


def cmd_cross_check(args: argparse.Namespace) -> int:
    """``analyze TRACE --cross-check``: our numbers against nsys's own recipes; exit 1 if any differs."""
    from profiler.recipes.crosscheck import cross_check, render

    if args.ranks or args.by or args.device is not None or len(args.trace) != 1:
        raise ProfilerError("--cross-check takes one trace, without --ranks, --by or --device")
    doc = cross_check(args.trace[0], args.nsys)
    print(json_dump(doc) if args.json else render(doc))
    return 0 if doc["agree"] else 1


def cmd_analyze(args: argparse.Namespace) -> int:
    if args.cross_check:
        return cmd_cross_check(args)
    if args.ranks:
        return cmd_ranks(args)
    from pathlib import Path

    from profiler.analysis.links import given_link

    link = given_link(args.link)  # a bad --link is an error on every path, not silently ignored
    from profiler.trace.jax_profile import is_jax_trace

    one = Path(args.trace[0])
    if len(args.trace) > 1 or (one.is_dir() and not is_jax_trace(one)):  # a jax.profiler folder is one trace
        if args.by:
            return cmd_run_views(args)
        if args.device is None:
            return cmd_policies(args)
        from profiler.runs.discover import trace_paths

        found = [t for arg in args.trace for t in trace_paths(arg)]
        if len(found) != 1:
            raise ProfilerError("--device picks a GPU of one trace (or of each run, with --by); the per-policy "
                                "table covers every device")  # fmt: skip
        args.trace = [str(found[0])]
    from profiler.report.findings_text import render_findings
    from profiler.report.text import no_groups, render_devices, render_groups
    from profiler.report.verdict_text import render_verdict
    from profiler.runs.result import analyzed
    from profiler.runs.verdict import verdict
    from profiler.trace import load_trace
    from profiler.units import fit

    request = None if args.no_findings else findings_request(args, link)
    trace = load_trace(args.trace[0], nsys=args.nsys, window=args.window)
    check_device(args.trace[0], trace, args.device)
    res = analyzed(
        trace,
        device=args.device,
        by=args.by,
        layer_pattern=args.layer_pattern,
        step_range=args.step_range,
        findings=request.config if request else None,
        link=request.link if request else None,
    )
    doc = res.analysis_json(args.by)
    found = verdict([res.brief()])
    beside = []
    if "findings" in doc:  # the run folders beside this run's that already tried its flag advice
        from profiler.analysis.findings.tried import tried_beside

        def summarize(run_dir: Path) -> Any:  # a sibling's numbers: its analysis, without findings
            from profiler.errors import ProfilerError
            from profiler.runs.discover import trace_paths
            from profiler.runs.result import build
            from profiler.stored.folder import manifest_of

            paths = trace_paths(str(run_dir), [])
            if len(paths) != 1:
                return None
            try:
                sib = load_trace(paths[0], nsys=args.nsys, window=args.window)
                return build(
                    sib, manifest_of(paths[0]), layer_pattern=args.layer_pattern, step_range=args.step_range
                ).brief()
            except ProfilerError:
                return None

        beside = tried_beside(res.brief(), Path(args.trace[0]), summarize)
        doc["findings"] = {**doc["findings"], "tried": [t["line"] for t in beside]}
    if args.json:
        print(json_dump({"verdict": found, **doc}))
        return 0
    missing = no_groups(doc, args.by) if args.by else None
    if missing:  # the view asked for has nothing: said first, and nothing else
        print(missing)
        return 0
    if _verdict_block(render_verdict(found, wide=args.wide), args):
        return 0
    print(fit(render_devices(doc, link=link, wide=args.wide), args.wide))
    if args.by:
        print()
        print(fit(render_groups(doc, args.by, all_steps=args.all_steps, wide=args.wide), args.wide))
    if "findings" in doc:
        from profiler.analysis.findings.tried import try_notes

        print()
        print(fit(render_findings(doc["findings"], tried=try_notes(beside)), args.wide))
        for t in beside:
            print(fit(f"  {t['line']}", args.wide))
    return 0


def add(sub: Any, shared: Shared) -> None:
    a = sub.add_parser(
        "analyze",
        parents=[
            shared.json,
            shared.device,
            shared.nsys,
            shared.steps,
            shared.findings,
            shared.db,
            shared.wide,
            shared.cache,
        ],
        help="copy overlap metrics of an nsys export or report",
    )
    a.add_argument(
        "trace",
        nargs="+",
        metavar="TRACE_OR_RUNS",
        help="an nsys SQLite export (.sqlite) or report (.nsys-rep); several traces, run folders or "
        "folders of runs: the per-policy table (memory, FLOPs, speed) and planned vs moved per layer",
    )
    a.add_argument(
        "--by",
        choices=("step", "layer", "range", "op"),
        default=None,
        help="also break copies down per step, layer, NVTX range name or XLA operation",
    )
    a.add_argument(
        "--all-steps",
        action="store_true",
        help="with --by step: list every step (default: a list longer than 20 shows its first and last 5)",
    )
    a.add_argument("--no-findings", action="store_true", help="leave out the findings (faster on big traces)")
    said = a.add_mutually_exclusive_group()
    said.add_argument(
        "--verdict-only", action="store_true", help="print the verdict (the answer, a few lines) and nothing else"
    )
    said.add_argument(
        "--no-verdict", action="store_true", help="everything but the verdict (printed first elsewhere: --verdict-only)"
    )
    a.add_argument(
        "--window",
        default=None,
        metavar="auto|all|nvtx:NAME|cuda-profiler-api",
        help="the part of the recording to analyze (default: what the run's --capture-range chose, else auto: "
        "the profile-step:capture range, else the cudaProfilerStart/Stop span, else everything)",
    )
    a.add_argument(
        "--ranks",
        action="store_true",
        help="TRACE is a folder (or glob) of per-rank exports: per-rank numbers and the cross-rank view",
    )
    a.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="with --ranks: local workers, one rank each at a time (default: the usable cores; 1: serial)",
    )
    a.add_argument("--dask", default=None, metavar="tcp://HOST:PORT", help="with --ranks: a Dask scheduler")
    a.add_argument("--dask-scheduler-file", default=None, metavar="FILE", help="with --ranks: a Dask scheduler file")
    a.add_argument(
        "--rank-pattern",
        default=None,
        metavar="REGEX",
        help="with --ranks: regex whose first group is the rank in file or run folder names",
    )
    a.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="per-policy table: the device's peak TFLOP/s for MFU (default: a table of NVIDIA datasheet numbers)",
    )
    a.add_argument(
        "--cross-check",
        action="store_true",
        help="run nsys's own recipes on the trace and print, per number they share with ours, both and "
        "whether they agree (exit 1 if not)",
    )
    a.set_defaults(func=cmd_analyze)
