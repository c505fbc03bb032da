"""``profile-step``: parses arguments, calls the package, prints.  No logic of its own."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from profiler.errors import ProfilerError

NO_TRACE_EXIT = 4  # run: every script exited 0, and a policy still ended without a trace


def _json_dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


def asked_policies(args: argparse.Namespace) -> list[str]:
    """``--policy A --policies B,C``: the policies in the order given, each once."""
    policies = list(args.policy or [])
    for group in args.policies or []:
        policies += [p.strip() for p in group.split(",") if p.strip()]
    return list(dict.fromkeys(policies))


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
    print(_json_dump(doc) if args.json else render_ranks(doc))
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
    runs = [r for arg in args.trace for r in load_runs(arg, Path(args.db), args.nsys, skipped)]
    skipped = list(dict.fromkeys(skipped))
    if not runs and skipped:
        if args.json:
            none = {"verdict": None, "policies": None, "planned_vs_moved": [], "no_trace": [s.doc() for s in skipped]}
            print(_json_dump(none))
        for s in skipped:
            print(f"profile-step: {s.line()}", file=sys.stderr)
        print("profile-step: error: none of these runs has a trace", file=sys.stderr)
        return 2
    tab = policy_table(runs, args.peak_tflops, predict=predicted)
    pvm = [planned_vs_moved(r) for r in runs]
    found = verdict(runs, tab)
    if args.json:
        doc = {"verdict": found, "policies": tab, "planned_vs_moved": pvm, "no_trace": [s.doc() for s in skipped]}
        print(_json_dump(doc))
        return 0
    print(render_verdict(found, wide=args.wide))
    print()
    print(fit(render_policy_comparison(tab), args.wide))
    synthetic = [r.policy for r in runs if r.synthetic]
    if synthetic:
        print(f"SYNTHETIC (a demonstration model, not a measurement): {', '.join(synthetic)}")
    if skipped:
        print(f"\nnot in the table ({len(skipped)} without a trace):")
        for s in skipped:
            print(f"  {s.line()}")
    print()
    print(fit(render_planned_vs_moved_all(pvm), args.wide))
    return 0


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
        print(
            _json_dump(
                {"runs": [{"trace": str(t), key: d.get(key), "attribution": d.get("attribution")} for t, d in views]}
            )
        )
        return 0
    cmd_policies(args)
    for t, doc in views:
        print()
        print(f"== {t.parent.name} ({t.name}) ==")
        print(render_groups(doc, args.by, all_steps=args.all_steps))
    return 0


def cmd_cross_check(args: argparse.Namespace) -> int:
    """``analyze TRACE --cross-check``: our numbers against nsys's own recipes; exit 1 if any differs."""
    from profiler.recipes.crosscheck import cross_check, render

    if args.ranks or args.by or args.device is not None or len(args.trace) != 1:
        raise ProfilerError("--cross-check takes one trace, without --ranks, --by or --device")
    doc = cross_check(args.trace[0], args.nsys)
    print(_json_dump(doc) if args.json else render(doc))
    return 0 if doc["agree"] else 1


def findings_config(args: argparse.Namespace) -> Any:
    """The findings' configuration from ``--findings-config``, ``--disable-finding`` and ``--link``."""
    from profiler.analysis.findings import rule_ids
    from profiler.analysis.findings.config import configure

    return configure(args.findings_config, args.disable_finding, args.link, rule_ids())


def cmd_analyze(args: argparse.Namespace) -> int:
    if args.cross_check:
        return cmd_cross_check(args)
    if args.ranks:
        return cmd_ranks(args)
    from pathlib import Path

    if len(args.trace) > 1 or Path(args.trace[0]).is_dir():
        from profiler.analysis.findings.config import checked_link

        checked_link(args.link)  # a bad --link is an error here too, not silently ignored
        if args.by:
            return cmd_run_views(args)
        return cmd_policies(args)
    from profiler.analysis.findings.config import checked_link
    from profiler.report.findings_text import render_findings
    from profiler.report.text import no_groups, render_devices, render_groups
    from profiler.report.verdict_text import render_verdict
    from profiler.runs.result import analyzed
    from profiler.runs.verdict import verdict
    from profiler.trace import load_trace
    from profiler.units import fit

    config = None if args.no_findings else findings_config(args)
    checked_link(args.link)  # the devices' table compares with it, findings or not
    trace = load_trace(args.trace[0], nsys=args.nsys, window=args.window)
    res = analyzed(
        trace,
        device=args.device,
        by=args.by,
        layer_pattern=args.layer_pattern,
        step_range=args.step_range,
        findings=config,
    )
    doc = res.analysis_json(args.by)
    found = verdict([res.brief()])
    if args.json:
        print(_json_dump({"verdict": found, **doc}))
        return 0
    missing = no_groups(doc, args.by) if args.by else None
    if missing:  # the view asked for has nothing: said first, and nothing else
        print(missing)
        return 0
    print(render_verdict(found, wide=args.wide))
    print()
    print(fit(render_devices(doc, link=args.link, wide=args.wide), args.wide))
    if args.by:
        print()
        print(fit(render_groups(doc, args.by, all_steps=args.all_steps, wide=args.wide), args.wide))
    if "findings" in doc:
        print()
        print(fit(render_findings(doc["findings"]), args.wide))
    return 0


def cmd_findings(args: argparse.Namespace) -> int:
    """``findings TRACE|RUN...``: the verdict, then the findings, for every trace the paths name."""
    from profiler.errors import InputError
    from profiler.report.findings_text import render_findings
    from profiler.report.verdict_text import render_verdict
    from profiler.runs import folder
    from profiler.runs.discover import NoTrace, trace_paths
    from profiler.runs.result import build
    from profiler.runs.verdict import verdict
    from profiler.trace import load_trace
    from profiler.units import fit

    config = findings_config(args)
    docs, summaries = [], []
    skipped: list[NoTrace] = []
    for arg in args.paths:
        before = len(skipped)
        paths = trace_paths(arg, skipped)
        if not paths and len(skipped) == before:
            raise InputError(arg, "no such trace, run folder or folder of runs")
        for path in paths:
            trace = load_trace(path, nsys=args.nsys)
            res = build(
                trace, folder.manifest_of(path), layer_pattern=args.layer_pattern, step_range=args.step_range,
                findings=config,
            )  # fmt: skip
            summaries.append(res.brief())
            policy = (res.manifest or {}).get("policy") or res.breakdown.policy  # None: a trace that names none
            docs.append({"trace": str(path), "policy": policy, **(res.findings or {})})
    skipped = list(dict.fromkeys(skipped))
    found = verdict(summaries) if summaries else None
    if args.json:
        print(_json_dump({"verdict": found, "runs": docs, "no_trace": [s.doc() for s in skipped]}))
        return 0 if docs else 2
    if found:
        print(render_verdict(found, wide=args.wide))
    for d in docs:
        print()
        print(f"{d['trace']}" + (f"  (policy {d['policy']})" if d["policy"] else ""))
        print(fit(render_findings(d), args.wide))
    for s in skipped:
        print(f"\n{s.line()}")
    return 0 if docs else 2


def cmd_whatif(args: argparse.Namespace) -> int:
    """``whatif TRACE``: the step replayed with copies on another host link."""
    from profiler.analysis.breakdown import Breakdown
    from profiler.analysis.links import copy_scale, link_change, parse_link, recorded_link
    from profiler.analysis.whatif import measured_stalls, trace_whatif
    from profiler.errors import InputError
    from profiler.report.whatif_text import render_whatif
    from profiler.runs.discover import one_trace
    from profiler.trace import load_trace
    from profiler.xla.names import DEFAULT_LAYER_PATTERN

    trace = load_trace(one_trace(args.trace), nsys=args.nsys)
    link_doc = None
    factor = args.copy_scale
    if args.link is not None:
        try:
            target = parse_link(args.link)
            source = parse_link(args.from_link) if args.from_link else None
        except ValueError as exc:
            raise ProfilerError(f"--link/--from-link: {exc}") from None
        if source is None:
            try:
                source = recorded_link(trace.devices["name"].to_list())
            except ValueError as exc:
                raise InputError(args.trace, str(exc)) from None
        factor = copy_scale(source, target)
        link_doc = link_change(source, target)
    elif factor is None:
        factor = 0.0
    if not factor >= 0:
        raise ProfilerError(f"--copy-scale must be >= 0, got {factor}")
    bd = Breakdown(trace, args.layer_pattern or DEFAULT_LAYER_PATTERN, args.step_range)
    doc = trace_whatif(trace, factor, model_host=not args.no_host_sync, breakdown=bd, explain=True)
    if link_doc:
        doc["link"] = link_doc
    if args.device is not None:
        doc["devices"] = {k: v for k, v in doc["devices"].items() if k == str(args.device)}
    if args.json:
        print(_json_dump(doc))
        return 0
    measured = measured_stalls(bd, list(doc["devices"]))  # the analysis' stalls: not analyzed twice
    gpus = {str(d): n for d, n in trace.devices.select("id", "name").iter_rows()}
    print(render_whatif(doc, measured, gpus))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.capture import no_trace
    from profiler.capture.run import RunRequest, RunResult, run_all
    from profiler.units import fit, wrap

    try:  # capture needs no analysis packages; a bare GPU node may only have what training needs
        from profiler.report.text import (
            NO_GPU,
            compiled_line,
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


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan SCRIPT``: the step compiled for a GPU target without a GPU, per policy and batch."""
    from pathlib import Path

    from profiler.analysis.policies import plan_table
    from profiler.capture.plan import PlanRequest, run_plan, usable_fraction
    from profiler.conventions import EXAMPLE_POLICIES
    from profiler.report.policies_text import render_plan
    from profiler.units import fit

    policies = asked_policies(args)
    if not policies:
        policies = list(EXAMPLE_POLICIES)
        print(f"plan: policies {', '.join(policies)} (the example's; --policies for your own)", file=sys.stderr)
    try:
        batches: list[int | None] = [int(b) for b in args.batch.split(",")] if args.batch else [None]
    except ValueError:
        raise ProfilerError(f"--batch: expected numbers like 1,4,8, got {args.batch!r}") from None
    req = PlanRequest(
        script=Path(args.script),
        script_args=list(args.script_args),
        policies=policies,
        batches=batches,
        target=args.target,
        python=args.python,
        batch_arg=args.batch_arg or None,
        policy_arg=args.policy_word or args.policy_arg,
        policy_word=bool(args.policy_word),
        out_dir=Path(args.out) if args.out else None,
        plans_dir=Path(args.plans_dir),
        links=[k.strip() for group in args.link or [] for k in group.split(",") if k.strip()] or None,
    )
    if args.link and not req.links:
        raise ProfilerError(f"--link: no link named in {','.join(args.link)!r}")
    if getattr(args, "pgle", None) or getattr(args, "calibrate", None):  # issue 23: measured costs
        from profiler.capture.pgle_run import plan_with_measurements

        return plan_with_measurements(req, usable_fraction(args.mem_fraction), args.pgle, args.calibrate, args.json)
    doc = run_plan(req)
    tab = plan_table(doc, usable_fraction(args.mem_fraction))
    if args.json:
        print(_json_dump({"plan": tab, "out_dir": doc["out_dir"]}))
    else:
        print(fit(render_plan(tab)))
        print(f"\n(files: {doc['out_dir']})")
    return 0 if all(r["status"] == "ok" for r in tab["rows"]) else 1


def cmd_pgle(args: argparse.Namespace) -> int:
    """``pgle RUN_OR_TRACE -o FILE``: XLA's profile-guided latency estimator file from a trace."""
    from pathlib import Path

    from profiler.capture.pgle_run import write_profile
    from profiler.report.measured_text import render_pgle_written

    s = write_profile(Path(args.source), Path(args.out), args.module, Path(args.hlo) if args.hlo else None)
    print(_json_dump(s) if args.json else render_pgle_written(s))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.errors import InputError
    from profiler.runs.discover import NoTrace
    from profiler.runs.result import load_runs
    from profiler.runs.store import record

    if not Path(args.run).exists():
        raise InputError(args.run, "no such trace or run folder")
    skipped: list[NoTrace] = []
    runs = load_runs(args.run, Path(args.db), args.nsys, skipped)
    for s in skipped:
        print(f"profile-step: not recorded: {s.line()}", file=sys.stderr)
    if not runs and skipped:
        raise InputError(args.run, "no run with a trace to record")
    for run in runs:
        rid = record(Path(args.db), run, args.label)
        print(
            f"recorded {run.policy} ({Path(run.trace or '').name}) as {rid}"
            + (f" under label {args.label}" if args.label else "")
            + f" in {args.db}"
        )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from profiler.analysis.compare import DEFAULT_THRESHOLDS, compare, parse_threshold
    from profiler.parallel import load_sides
    from profiler.report.compare_text import render_markdown, render_terminal
    from profiler.runs.discover import NoTrace

    try:
        thresholds = [parse_threshold(t) for t in (args.fail_on or DEFAULT_THRESHOLDS)]
    except ValueError as exc:
        raise ProfilerError(f"--fail-on: {exc}") from None
    from profiler.analysis.compare import finding_gate
    from profiler.analysis.findings import rule_ids

    try:
        gates = [finding_gate(g, rule_ids()) for g in args.fail_on_finding or []]
    except ValueError as exc:
        raise ProfilerError(str(exc)) from None
    skipped: list[NoTrace] = []
    base, head = load_sides([args.base, args.head], Path(args.db), args.nsys, skipped)
    for s in dict.fromkeys(skipped):
        print(f"profile-step: not compared: {s.line()}", file=sys.stderr)
    result = compare(base, head, thresholds, gates)
    if args.format == "json":
        print(_json_dump(result))
    elif args.format == "markdown":
        print(render_markdown(result), end="")
    else:
        print(render_terminal(result))
    if not result["policies"]:
        return 2
    return 0 if result["passed"] else 1


def cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dashboards.app import default_paths, serve

    root = Path(__file__).resolve().parents[1]
    paths = [Path(p) for p in args.paths] or default_paths(root)
    serve(
        paths,
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        nsys=args.nsys,
        licences=tuple(args.licence or ()) or None,
    )
    return 0


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


def _parent(*arguments: tuple[tuple[str, ...], dict[str, Any]]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for flags, kw in arguments:
        p.add_argument(*flags, **kw)
    return p


def _arg(*flags: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kw


@dataclass(frozen=True)
class Shared:
    """Options that mean the same on every subcommand that takes them, as parent parsers
    (``sub.add_parser(NAME, parents=[shared.nsys, shared.json])``)."""

    nsys: argparse.ArgumentParser
    json: argparse.ArgumentParser
    device: argparse.ArgumentParser
    steps: argparse.ArgumentParser  # how the trace is cut into layers and steps
    findings: argparse.ArgumentParser
    db: argparse.ArgumentParser
    policies: argparse.ArgumentParser
    wide: argparse.ArgumentParser


def shared_options() -> Shared:
    from profiler.analysis.links import ASSUMED, LINKS  # no polars: a capture-only machine builds the parser too

    return Shared(
        nsys=_parent(
            _arg(
                "--nsys",
                default=None,
                help="nsys binary, to record or to export a .nsys-rep (default: the one profile-step finds)",
            )
        ),
        json=_parent(_arg("--json", action="store_true", help="print the result as JSON instead of text")),
        device=_parent(_arg("--device", type=int, default=None, help="only this deviceId")),
        steps=_parent(
            _arg(
                "--layer-pattern",
                default=None,
                metavar="REGEX",
                help="regex whose first group names the layer in XLA op_name paths (default, by convention: "
                "layer_3, layers_3, x_layers_3, layers/3, block_3, h_3; a scan (while/body, layers, decoder): one "
                "family, numbered by its iterations)",
            ),
            _arg(
                "--step-range",
                default=None,
                metavar="REGEX",
                help="NVTX range names that mark steps (default: profile-step's step=N ranges, "
                "else the executions of the step program: docs/capture.md)",
            ),
        ),
        findings=_parent(
            _arg("--findings-config", default=None, metavar="FILE", help="TOML file: thresholds, disabled rules"),
            _arg("--disable-finding", action="append", metavar="ID", help="turn a finding rule off (repeatable)"),
            _arg(
                "--link",
                default=None,
                metavar="NAME",
                help="the host link the copies' GB/s are compared with, and slow-link's (default: from the GPU's "
                f"name; an unknown GPU: {LINKS[ASSUMED].name} assumed, and said)",
            ),
        ),
        db=_parent(_arg("--db", default="results.db", help="results database, for labels (default: results.db)")),
        wide=_parent(
            _arg(
                "--wide",
                action="store_true",
                help="long names (kernels, advice) in full; default: lines of at most 160 columns, names shortened",
            )
        ),
        policies=_parent(
            _arg("--policy", action="append", metavar="NAME", help="an offload policy (repeatable)"),
            _arg("--policies", action="append", metavar="A,B,C", help="several policies at once"),
            _arg(
                "--policy-arg",
                default=None,
                metavar="FLAG|TEMPLATE",
                help="also pass the policy to the script: a FLAG gives FLAG NAME (--policy-arg=--policy); a "
                "TEMPLATE with {policy} gives it filled in, split into words as a shell would (MaxText: "
                "'remat_policy={policy}'; '--remat={policy}'); attach a value that starts with '-' with '='",
            ),
            _arg(
                "--policy-word",
                default=None,
                metavar="TEMPLATE",
                help="pass the policy as one word, TEMPLATE with {policy} filled in and nothing else changed "
                '(quotes kept: a JSON value, --policy-word=\'--config_overlay={"remat_policy":"{policy}"}\')',
            ),
        ),
    )


def add_analyze(sub: Any, shared: Shared) -> None:
    a = sub.add_parser(
        "analyze",
        parents=[shared.json, shared.device, shared.nsys, shared.steps, shared.findings, shared.db, shared.wide],
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


def add_findings(sub: Any, shared: Shared) -> None:
    fnd = sub.add_parser(
        "findings",
        parents=[shared.json, shared.findings, shared.steps, shared.nsys, shared.wide],
        help="what is wrong with the copies, and what to try (the rules and thresholds: docs/findings.md)",
    )
    fnd.add_argument("paths", nargs="+", help="traces, run folders, folders of runs or exports, globs")
    fnd.set_defaults(func=cmd_findings)


def add_whatif(sub: Any, shared: Shared) -> None:
    from profiler.analysis.links import LINKS

    w = sub.add_parser(
        "whatif",
        parents=[shared.json, shared.device, shared.steps, shared.nsys],
        help="replay a trace with faster (or slower) host copies: predicted step time and stalls",
        description="Replays the trace with every h2d/d2h copy's duration scaled (docs/metrics.md, What-if). "
        "Default: --copy-scale 0, the most the copies can cost.",
    )
    w.add_argument("trace", help="an nsys SQLite export (.sqlite) or report (.nsys-rep), or a run folder")
    how = w.add_mutually_exclusive_group()
    how.add_argument("--copy-scale", type=float, default=None, metavar="F", help="multiply copy durations by F")
    how.add_argument(
        "--link",
        default=None,
        metavar="NAME",
        help=f"the link to predict for: {', '.join(LINKS)}, or a bandwidth in GB/s",
    )
    w.add_argument(
        "--from-link",
        default=None,
        metavar="NAME",
        help="the link the trace was recorded on (default: from the GPU's name in the export)",
    )
    w.add_argument(
        "--no-host-sync",
        action="store_true",
        help="keep every host launch time as recorded (default: move the work after a blocking call)",
    )
    w.set_defaults(func=cmd_whatif)


def add_run(sub: Any, shared: Shared) -> None:
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


def add_record(sub: Any, shared: Shared) -> None:
    rec = sub.add_parser(
        "record", parents=[shared.db, shared.nsys], help="store a run's analyzed metrics in the results database"
    )
    rec.add_argument("run", help="a trace, a run folder, or a folder of runs")
    rec.add_argument("--label", default=None, help="a label to compare by later (main, pr-123, ...)")
    rec.set_defaults(func=cmd_record)


def add_compare(sub: Any, shared: Shared) -> None:
    cmp = sub.add_parser(
        "compare",
        parents=[shared.db, shared.nsys],
        help="compare two runs (or labels) and gate on overlap regressions",
        description="Exit code 0: no threshold crossed; 1: a threshold crossed; 2: bad input.",
    )
    cmp.add_argument("base", help="trace, run folder, folder of runs, or a label in --db")
    cmp.add_argument("head", help="trace, run folder, folder of runs, or a label in --db")
    cmp.add_argument(
        "--format", choices=("text", "markdown", "json"), default="text", help="the report's format (default: text)"
    )
    cmp.add_argument(
        "--fail-on",
        action="append",
        metavar="METRIC:+N%",
        help="a threshold (repeatable); default: exposed_ns:+10%%, stall_ns:+10%%, step_ns:+5%%, "
        "hidden_fraction:-0.05, kernel_excess_ns:+10%%",
    )
    cmp.add_argument(
        "--fail-on-finding",
        action="append",
        metavar="ID|SEVERITY",
        help="fail when head has a finding that base has not: a rule id, or a severity (that or worse)",
    )
    cmp.set_defaults(func=cmd_compare)


def _link_names() -> list[str]:
    from profiler.analysis.links import LINKS

    return list(LINKS)


def add_plan(sub: Any, shared: Shared) -> None:
    pl = sub.add_parser(
        "plan",
        parents=[shared.policies, shared.json],
        help="compile a script's step for a GPU target without a GPU: memory, FLOPs and offload plan per policy",
        description="Run SCRIPT once per policy and micro batch under a Python with JAX's CUDA plugin "
        "(JAX_PLATFORMS=cpu, no GPU needed); annotate.compiled_step(step, *args) compiles the step for "
        "the target instead of running it. Results are labelled 'compiled for <target>, not measured'.",
    )
    pl.add_argument("--target", default="h100", help="h100, h200, b200, a100, or a GpuTargetConfigProto text file")
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
    pl.add_argument(
        "--link",
        action="append",
        metavar="NAME[,NAME...]",
        help=f"host links to predict the step on: {', '.join(_link_names())} (also pcie-gen5, ...), or a bandwidth in "
        "GB/s (default: the target's own)",
    )
    pl.add_argument("script", help="the training script (.py)")
    pl.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    pl.set_defaults(func=cmd_plan)


def add_pgle(sub: Any, shared: Shared) -> None:
    pg = sub.add_parser(
        "pgle",
        parents=[shared.json],
        help="XLA's profile-guided latency estimator file from the instruction times a run measured",
        description="Per HLO instruction of the step (XLA's thunk ranges, hlo_op=...), the median GPU time per "
        "execution, copies and collectives included, as the text ProfiledInstructionsProto that "
        "--xla_gpu_pgle_profile_file_or_directory_path reads.",
    )
    pg.add_argument("source", metavar="RUN_OR_TRACE", help="nsys SQLite export, run folder or nsys-jax archive (.zip)")
    pg.add_argument("-o", "--out", required=True, metavar="FILE", help="the profile to write (e.g. step.pbtxt)")
    pg.add_argument(
        "--module",
        default=None,
        help="only programs of this hlo_module (default: the step program, by the rule every command uses: "
        "docs/capture.md, 'The step is one compiled program')",
    )
    pg.add_argument("--hlo", default=None, metavar="FILE", help="the step's optimized HLO, when the source has none")
    pg.set_defaults(func=cmd_pgle)


def add_dashboard(sub: Any, shared: Shared) -> None:
    dsh = sub.add_parser(
        "dashboard",
        parents=[shared.nsys],
        help="the web app: runs, policies, findings, policy trade, what-if, layers, timeline, copy streams",
    )
    dsh.add_argument(
        "paths",
        nargs="*",
        help="run folders, folders of runs, traces, profile-step plan folders or plan.json files "
        "(default: the project's sample_traces/, ./runs and ./plans)",
    )
    dsh.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    dsh.add_argument("--port", type=int, default=8050, help="port to serve on (default: 8050)")
    dsh.add_argument("--allow-remote", action="store_true", help="allow binding to a non-localhost address")
    dsh.add_argument(
        "--licence",
        action="append",
        metavar="SPDX",
        help="in a folder with a CATALOG.tsv, only the traces it lists under this licence, e.g. Apache-2.0 "
        "(repeatable)",
    )
    dsh.set_defaults(func=cmd_dashboard)


def add_install_recipe(sub: Any, shared: Shared) -> None:
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


# Each subcommand's parser, in the order --help lists them; a new one is a function here and its cmd_*.
COMMANDS = {
    "analyze": add_analyze,
    "findings": add_findings,
    "whatif": add_whatif,
    "run": add_run,
    "record": add_record,
    "compare": add_compare,
    "plan": add_plan,
    "pgle": add_pgle,
    "dashboard": add_dashboard,
    "install-recipe": add_install_recipe,
}
SUBCOMMANDS = tuple(COMMANDS)


class Parser(argparse.ArgumentParser):
    """argparse, with one line of profile-step's instead of argparse's error where it has a better one
    (its subcommands' parsers are of this class too)."""

    argv: ClassVar[list[str]] = []  # the words being parsed (main sets them)

    def error(self, message: str) -> NoReturn:
        from profiler.capture.policy_arg import FLAGS, dangling

        named = [f for f in FLAGS if f"argument {f}: expected one argument" in message]
        said = dangling([w for w in self.argv if not w.startswith(tuple(FLAGS)) or w in named]) if named else None
        if said:
            self.exit(2, f"profile-step: error: {said}\n")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="profile-step",
        description="Profile JAX host offloading under Nsight Systems and measure whether "
        "device<->host copies are hidden behind compute and NCCL.",
        epilog="Shortcut: `profile-step train.py ...` is `profile-step run train.py ...`.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    shared = shared_options()
    for add in COMMANDS.values():
        add(sub, shared)
    return p


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """``profile-step [run options] train.py ...`` means ``profile-step run [run options] train.py ...``."""
    argv = list(argv)
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        return ["run", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = normalize_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    Parser.argv = argv
    args = parser.parse_args(argv)
    if getattr(args, "policy_word", None) and getattr(args, "policy_arg", None):
        print("profile-step: error: --policy-arg and --policy-word: give one of them", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except ProfilerError as exc:
        print(f"profile-step: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("profile-step: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("PROFILE_STEP_DEBUG"):
            raise
        print(
            f"profile-step: internal error: {type(exc).__name__}: {exc} (set PROFILE_STEP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
