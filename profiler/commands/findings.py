"""``profile-step findings``: the verdict, then the findings, for every trace the paths name."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.options import Shared, findings_request, json_dump


def cmd_findings(args: argparse.Namespace) -> int:
    """``findings TRACE|RUN...``: the verdict, then the findings, for every trace the paths name."""
    from profiler.analysis.findings.tried import tried_items, try_notes
    from profiler.analysis.links import given_link
    from profiler.errors import InputError
    from profiler.report.findings_text import render_findings
    from profiler.report.verdict_text import render_verdict
    from profiler.runs.discover import NoTrace, trace_paths
    from profiler.runs.result import build
    from profiler.runs.verdict import verdict
    from profiler.stored import folder
    from profiler.trace import load_trace
    from profiler.units import fit

    request = findings_request(args, given_link(args.link))
    docs, summaries = [], []
    skipped: list[NoTrace] = []
    for arg in args.paths:
        before = len(skipped)
        paths = trace_paths(arg, skipped)
        if not paths and len(skipped) == before:
            raise InputError(arg, "no such file or folder")
        for path in paths:
            trace = load_trace(path, nsys=args.nsys)
            res = build(
                trace, folder.manifest_of(path), layer_pattern=args.layer_pattern, step_range=args.step_range,
                findings=request.config, link=request.link,
            )  # fmt: skip
            summaries.append(res.brief())
            policy = (res.manifest or {}).get("policy") or res.breakdown.policy  # None: a trace that names none
            docs.append({"trace": str(path), "policy": policy, **(res.findings or {})})
    skipped = list(dict.fromkeys(skipped))
    notes = []
    for d, items in zip(docs, tried_items(summaries), strict=True):
        d["tried"] = [t["line"] for t in items]
        notes.append(try_notes(items))
    found = verdict(summaries, failed=[(s.policy, s.reason) for s in skipped]) if summaries else None
    if args.json:
        print(json_dump({"verdict": found, "runs": docs, "no_trace": [s.doc() for s in skipped]}))
        return 0 if docs else 2
    if found:
        print(render_verdict(found, wide=args.wide))
    for d, said in zip(docs, notes, strict=True):
        print()
        print(f"{d['trace']}" + (f"  (policy {d['policy']})" if d["policy"] else ""))
        print(fit(render_findings(d, tried=said), args.wide))
        for line in d["tried"]:
            print(fit(f"  {line}", args.wide))
    for s in skipped:
        print(f"\n{s.line()}")
    return 0 if docs else 2


def add(sub: Any, shared: Shared) -> None:
    fnd = sub.add_parser(
        "findings",
        parents=[shared.json, shared.findings, shared.steps, shared.nsys, shared.wide, shared.cache],
        help="what is wrong with the copies, and what to try (the rules and thresholds: docs/findings.md)",
    )
    fnd.add_argument("paths", nargs="+", help="traces, run folders, folders of runs or exports, globs")
    fnd.set_defaults(func=cmd_findings)
