"""The ``nsys profile`` command line: defaults for this job, user options on top."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from profiler.conventions import CAPTURE_RANGE, DOMAIN

# Short options of nsys profile that take a value, and their long names.
SHORT = {
    "-t": "--trace",
    "-s": "--sample",
    "-o": "--output",
    "-c": "--capture-range",
    "-f": "--force-overwrite",
    "-b": "--backtrace",
    "-d": "--duration",
    "-y": "--delay",
    "-w": "--show-output",
    "-e": "--env-var",
    "-n": "--inherit-environment",
    "-p": "--nvtx-capture",
    "-x": "--stop-on-exit",
}


def default_options(keep_warmup: bool) -> dict[str, str]:
    """nsys profile options suited to measuring copy overlap."""
    opts = {
        "--trace": "cuda,nvtx,osrt,cublas,cudnn",
        "--cuda-memory-usage": "true",
        "--cuda-graph-trace": "node",
        "--sample": "none",
        "--cpuctxsw": "none",
        "--export": "sqlite",
        "--force-overwrite": "false",
    }
    if not keep_warmup:
        opts.update(
            {
                "--capture-range": "nvtx",
                "--nvtx-capture": f"{CAPTURE_RANGE}@{DOMAIN}",
                "--capture-range-end": "stop",
            }
        )
    return opts


def parse_user_options(args: Sequence[str]) -> dict[str, str | None]:
    """``--trace=cuda,nvtx``, ``--trace cuda``, ``-t cuda``, ``--flag`` -> {long name: value}."""
    out: dict[str, str | None] = {}
    toks = [t for a in args for t in shlex.split(a)]
    i = 0
    while i < len(toks):
        tok = toks[i]
        if not tok.startswith("-"):
            raise ValueError(f"nsys option expected, got {tok!r}")
        name, sep, value = tok.partition("=")
        name = SHORT.get(name, name)
        if sep:
            out[name] = value
        elif i + 1 < len(toks) and not toks[i + 1].startswith("-"):
            out[name] = toks[i + 1]
            i += 1
        else:
            out[name] = None
        i += 1
    return out


def build(
    nsys: Path, output: Path, program: Sequence[str], user_args: Sequence[str] = (), keep_warmup: bool = False
) -> list[str]:
    """The full command: ``nsys profile [defaults, overridden by the user's] -o OUTPUT program...``."""
    opts: dict[str, str | None] = dict(default_options(keep_warmup))
    opts.update(parse_user_options(user_args))
    opts["--output"] = str(output)
    cmd = [str(nsys), "profile"]
    for name, value in opts.items():
        cmd.append(name if value is None else f"{name}={value}")
    return [*cmd, *program]
