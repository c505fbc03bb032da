"""The ``nsys profile`` command line: defaults for this job, user options on top."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from profiler.conventions import CAPTURE_RANGE, DOMAIN

# --capture-range modes (see conventions.CAPTURE_MODES) and what nsys records under each
MODES = {
    "auto": "the whole run",
    "all": "the whole run",
    "nvtx": "only inside the NVTX range NAME",
    "cuda-profiler-api": "only between cudaProfilerStart and cudaProfilerStop",
}


def nvtx_capture(mode: str) -> str:
    """nsys's ``--nvtx-capture`` value for ``nvtx:NAME``: profile-step's own range in its own domain."""
    name = mode.removeprefix("nvtx:")
    return f"{CAPTURE_RANGE}@{DOMAIN}" if name == CAPTURE_RANGE else name


def describe(mode: str) -> str:
    """What nsys records under *mode*, for people."""
    key = "nvtx" if mode.startswith("nvtx:") else mode
    return MODES[key].replace("NAME", nvtx_capture(mode)) if key == "nvtx" else MODES[key]


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


# What the analysis reads (trace/loader.py): the CUPTI activity and runtime tables (cuda), NVTX_EVENTS
# (nvtx) and CUDA_GPU_MEMORY_USAGE_EVENTS (--cuda-memory-usage). OS runtime calls and their call chains
# (osrt), cuBLAS and cuDNN API ranges are read by nothing: recorded on request (--trace-extra).
ANALYSIS_TRACE = ("cuda", "nvtx")


def trace_set(extra: Sequence[str] = ()) -> str:
    """nsys's ``--trace`` value: what the analysis reads, then *extra* (``osrt``, ``cublas,cudnn``...)."""
    names = [n.strip() for group in extra for n in group.split(",") if n.strip()]
    if "none" in names:
        raise ValueError("--trace-extra adds to cuda,nvtx; to replace the set, use --nsys-arg=--trace=...")
    return ",".join(dict.fromkeys([*ANALYSIS_TRACE, *names]))


def default_options(capture: str = "auto", trace_extra: Sequence[str] = ()) -> dict[str, str]:
    """nsys profile options suited to measuring copy overlap, recording what *capture* asks for."""
    opts = {
        "--trace": trace_set(trace_extra),
        "--cuda-memory-usage": "true",
        "--cuda-graph-trace": "node",
        "--sample": "none",
        "--cpuctxsw": "none",
        "--export": "sqlite",
        "--force-overwrite": "false",
    }
    if capture.startswith("nvtx:"):
        opts.update({"--capture-range": "nvtx", "--nvtx-capture": nvtx_capture(capture), "--capture-range-end": "stop"})
    elif capture == "cuda-profiler-api":
        opts.update({"--capture-range": "cudaProfilerApi", "--capture-range-end": "stop"})
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
    nsys: Path,
    output: Path,
    program: Sequence[str],
    user_args: Sequence[str] = (),
    capture: str = "auto",
    trace_extra: Sequence[str] = (),
) -> list[str]:
    """The full command: ``nsys profile [defaults, overridden by the user's] -o OUTPUT program...``."""
    opts: dict[str, str | None] = dict(default_options(capture, trace_extra))
    opts.update(parse_user_options(user_args))
    opts["--output"] = str(output)
    cmd = [str(nsys), "profile"]
    for name, value in opts.items():
        cmd.append(name if value is None else f"{name}={value}")
    return [*cmd, *program]
