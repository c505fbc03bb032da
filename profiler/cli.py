"""``profile-step``: the table of its subcommands (each a module of ``profiler/commands``: its parser
and its function), and the one place that turns errors into one line (and, under ``--json``, into one
JSON object on stdout).  No logic of its own."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import ClassVar, NoReturn

from profiler import cache_dir
from profiler.commands import (
    analyze,
    cache,
    compare,
    dashboard,
    findings,
    install_recipe,
    pgle,
    plan,
    record,
    run,
    tune,
    whatif,
)
from profiler.commands.options import json_error, shared_options, wants_json
from profiler.errors import ProfilerError

# Each subcommand's parser, in the order --help lists them: a new one is a module of profiler/commands
# (``add(sub, shared)`` and its function) and a line here.
COMMANDS = {
    "analyze": analyze.add,
    "findings": findings.add,
    "whatif": whatif.add,
    "run": run.add,
    "record": record.add,
    "compare": compare.add,
    "plan": plan.add,
    "tune": tune.add,
    "pgle": pgle.add,
    "dashboard": dashboard.add,
    "install-recipe": install_recipe.add,
    "cache": cache.add,
}
SUBCOMMANDS = tuple(COMMANDS)


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are one line (the usage block left to ``--help``), profile-step's own
    where it has a better one (its subcommands' parsers are of this class too)."""

    argv: ClassVar[list[str]] = []  # the words being parsed (main sets them)

    def error(self, message: str) -> NoReturn:
        from profiler.capture.policy_arg import FLAGS, dangling

        named = [f for f in FLAGS if f"argument {f}: expected one argument" in message]
        said = dangling([w for w in self.argv if not w.startswith(tuple(FLAGS)) or w in named]) if named else None
        if wants_json(None, self.argv):  # a usage error of a command asked for JSON: its JSON object first
            json_error(self.argv[0] if self.argv else None, said or message, 2)
        if said:
            self.exit(2, f"profile-step: error: {said}\n")
        prog = self.prog  # the top parser says what its subcommand's did not parse: named after the subcommand
        if " " not in prog and self.argv and self.argv[0] in SUBCOMMANDS:
            prog = f"{prog} {self.argv[0]}"
        self.exit(2, f"{prog}: error: {message} (see {prog} --help)\n")  # one line, no usage block


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


def _from_ctrl_c(exc: BaseException) -> bool:
    """Whether *exc* was raised because of a KeyboardInterrupt (its cause or context, down the chain)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


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

    def failed(line: str, exit_code: int) -> int:
        if wants_json(args):
            json_error(args.command, line.removeprefix("error: "), exit_code)
        print(f"profile-step: {line}", file=sys.stderr)
        return exit_code

    try:
        cache_dir.use(getattr(args, "cache_dir", None))  # --cache-dir: for this command and what it starts
        return int(args.func(args))
    except ProfilerError as exc:
        return failed(f"error: {exc}", exc.exit_code)
    except KeyboardInterrupt:
        return failed("interrupted", 130)
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: still one line, the traceback on request
        if _from_ctrl_c(exc):  # Ctrl-C inside an import: Python wraps it ("Error calling __set_name__ ...")
            return failed("interrupted", 130)
        if os.environ.get("PROFILE_STEP_DEBUG"):
            raise
        return failed(f"internal error: {type(exc).__name__}: {exc} (set PROFILE_STEP_DEBUG=1 for a traceback)", 3)


if __name__ == "__main__":
    sys.exit(main())
