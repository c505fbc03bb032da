"""Options and helpers every subcommand shares: the parent parsers, JSON output, the policies asked."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def json_dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


# what a command's document holds where it has no result (tune's readers look at ``choice``)
EMPTY_RESULT: dict[str, dict[str, Any]] = {"tune": {"choice": None}}


def wants_json(args: argparse.Namespace | None, argv: Sequence[str] = ()) -> bool:
    """Whether the command was asked for JSON: ``--json``, or ``compare --format json`` (from the
    parsed *args*, else, before they parse, from the words *argv*)."""
    if args is not None:
        return bool(getattr(args, "json", False)) or getattr(args, "format", None) == "json"
    pairs = zip(argv, [*argv[1:], ""], strict=True)
    return "--json" in argv or "--format=json" in argv or ("--format", "json") in set(pairs)


def json_error(command: str | None, message: str, exit_code: int) -> None:
    """The object every ``--json`` command prints on stdout on a failing exit (a bad file or value, a
    usage error, Ctrl-C, a bug), beside the one line on stderr: ``error`` and ``exit_code``."""
    doc = {"error": message, "exit_code": exit_code, **EMPTY_RESULT.get(command or "", {})}
    print(json_dump(doc), flush=True)


def asked_policies(args: argparse.Namespace) -> list[str]:
    """``--policy A --policies B,C``: the policies in the order given, each once."""
    policies = list(args.policy or [])
    for group in args.policies or []:
        policies += [p.strip() for p in group.split(",") if p.strip()]
    return list(dict.fromkeys(policies))


def check_step(args: argparse.Namespace) -> None:
    """``--step``'s form, checked before any work: a bad one is a one-line ``ProfilerError``."""
    from profiler.capture.step_catch import checked_step

    checked_step(args.step)


def findings_request(args: argparse.Namespace, link: Any) -> Any:
    """The findings' request (``FindingsRequest``: configuration and host link) from ``--findings-config``,
    ``--disable-finding`` and the parsed ``--link`` (*link*)."""
    from profiler.analysis.findings import rule_ids
    from profiler.analysis.findings.config import configure

    return configure(args.findings_config, args.disable_finding, link, rule_ids())


def regex(text: str) -> str:
    """An option's regular expression, as polars (which matches the ranges' names) reads it; a bad one is
    argparse's one-line error, not a failure in the middle of the analysis."""
    import polars as pl

    try:
        pl.Series([""]).str.contains(text)
    except pl.exceptions.PolarsError as exc:
        said = [line.strip() for line in str(exc).splitlines() if line.strip().startswith("error:")]
        raise argparse.ArgumentTypeError(
            f"not a regular expression: {text!r} ({said[-1].removeprefix('error: ') if said else 'unreadable'})"
        ) from None
    return text


def parent(*arguments: tuple[tuple[str, ...], dict[str, Any]]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for flags, kw in arguments:
        p.add_argument(*flags, **kw)
    return p


def arg(*flags: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
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
    cache: argparse.ArgumentParser  # where the exports and analyses made from traces are kept


def link_parent(help: str) -> argparse.ArgumentParser:
    """A parent parser with the one ``--link`` declaration (``links.add_link_option``)."""
    from profiler.analysis.links import add_link_option  # no polars: a capture-only machine builds the parser too

    p = argparse.ArgumentParser(add_help=False)
    add_link_option(p, help)
    return p


def shared_options() -> Shared:
    from profiler.analysis.links import ASSUMED, LINKS  # no polars: a capture-only machine builds the parser too

    findings = parent(
        arg("--findings-config", default=None, metavar="FILE", help="TOML file: thresholds, disabled rules"),
        arg("--disable-finding", action="append", metavar="ID", help="turn a finding rule off (repeatable)"),
    )
    link = link_parent(
        "the host link the copies' GB/s are compared with, and slow-link's (default: from the GPU's "
        f"name; an unknown GPU: {LINKS[ASSUMED].name} assumed, and said)"
    )
    return Shared(
        nsys=parent(
            arg(
                "--nsys",
                default=None,
                help="nsys binary, to record or to export a .nsys-rep (default: the one profile-step finds)",
            )
        ),
        json=parent(arg("--json", action="store_true", help="print the result as JSON instead of text")),
        device=parent(arg("--device", type=int, default=None, help="only this deviceId")),
        steps=parent(
            arg(
                "--layer-pattern",
                default=None,
                type=regex,
                metavar="REGEX",
                help="regex whose first group names the layer in XLA op_name paths (default, by convention: "
                "layer_3, layers_3, x_layers_3, layers/3, block_3, h_3; a scan (while/body, layers, decoder): one "
                "family, numbered by its iterations)",
            ),
            arg(
                "--step-range",
                default=None,
                type=regex,
                metavar="REGEX",
                help="NVTX range names that mark steps (default: profile-step's step=N ranges, "
                "else the executions of the step program: docs/capture.md)",
            ),
        ),
        findings=argparse.ArgumentParser(add_help=False, parents=[findings, link]),
        cache=parent(
            arg(
                "--cache-dir",
                default=None,
                metavar="DIR",
                help="profile-step's cache folder, for this command (default: $PROFILE_STEP_CACHE, else "
                "$XDG_CACHE_HOME/profile-step, else ~/.cache/profile-step; `profile-step cache` shows it)",
            )
        ),
        db=parent(arg("--db", default="results.db", help="results database, for labels (default: results.db)")),
        wide=parent(
            arg(
                "--wide",
                action="store_true",
                help="long names (kernels, advice) in full; default: lines of at most 160 columns, names shortened",
            )
        ),
        policies=parent(
            arg("--policy", action="append", metavar="NAME", help="an offload policy (repeatable)"),
            arg("--policies", action="append", metavar="A,B,C", help="several policies at once"),
            arg(
                "--policy-arg",
                default=None,
                metavar="FLAG|TEMPLATE",
                help="also pass the policy to the script: a FLAG gives FLAG NAME (--policy-arg=--policy); a "
                "TEMPLATE with {policy} gives it filled in, split into words as a shell would (MaxText: "
                "'remat_policy={policy}'; '--remat={policy}'); attach a value that starts with '-' with '='",
            ),
            arg(
                "--policy-word",
                default=None,
                metavar="TEMPLATE",
                help="pass the policy as one word, TEMPLATE with {policy} filled in and nothing else changed "
                '(quotes kept: a JSON value, --policy-word=\'--config_overlay={"remat_policy":"{policy}"}\')',
            ),
        ),
    )


def link_names() -> list[str]:
    from profiler.analysis.links import LINKS

    return list(LINKS)


def check_device(given: str, trace: Any, device: int | None) -> None:
    """``--device N`` on one trace: an input error (naming *given*, the file or folder the user gave)
    unless device N ran GPU work in the trace's window; the devices that did are listed."""
    if device is None:
        return
    from profiler.errors import InputError

    active = trace.active_devices()
    if device not in active:
        ran = f"devices that ran GPU work: {', '.join(map(str, active))}" if active else "no device ran GPU work"
        raise InputError(given, f"--device {device}: no GPU work on device {device} in this trace ({ran})")
