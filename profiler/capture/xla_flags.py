"""XLA flag presets merged into the user's own ``XLA_FLAGS``."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

LHS = "--xla_gpu_enable_latency_hiding_scheduler"
PIPELINED_OFFLOAD = "--xla_gpu_enable_pipelined_host_offloading"
ASYNC_LIMIT = "--xla_gpu_experimental_parallel_async_compute_limit"
COMMAND_BUFFER = "--xla_gpu_enable_command_buffer"
DUMP_TO = "--xla_dump_to"
DUMP_AS_TEXT = "--xla_dump_hlo_as_text"
# XLA writes its own estimate of each kernel's time into the compiled module (backend_config
# "reification_cost"), which profiler.predict.roofline takes where it is nearer to a real GPU
COST_MODEL_STATS = "--xla_gpu_collect_cost_model_stats"


def parse(flags: str) -> dict[str, str | None]:
    """``--a=1 --b`` -> {"--a": "1", "--b": None}, order kept."""
    out: dict[str, str | None] = {}
    for tok in shlex.split(flags or ""):
        name, sep, value = tok.partition("=")
        out[name] = value if sep else None
    return out


def render(flags: dict[str, str | None]) -> str:
    return " ".join(k if v is None else f"{k}={v}" for k, v in flags.items())


@dataclass(frozen=True)
class FlagPlan:
    """What the run's XLA_FLAGS will be, and why."""

    before: str
    after: str
    set_by_preset: dict[str, str]
    kept_from_user: dict[str, str | None]


def plan(
    user_flags: str,
    lhs: bool = False,
    pipelined_offload: bool = False,
    async_limit: int | None = None,
    command_buffers_off: bool = True,
    dump_to: str | None = None,
) -> FlagPlan:
    """Merge presets into *user_flags*.

    Presets asked for on the command line win over the same flag in
    ``XLA_FLAGS``; the default "command buffers off" (so that XLA's per-thunk
    NVTX ranges exist) yields to a value the user set, and so does the XLA
    dump (*dump_to*, as text) to a dump folder of the user's.
    """
    flags = parse(user_flags)
    user = dict(flags)
    asked: dict[str, str] = {}
    if lhs:
        asked[LHS] = "true"
    if pipelined_offload:
        asked[PIPELINED_OFFLOAD] = "true"
    if async_limit is not None:
        asked[ASYNC_LIMIT] = str(async_limit)
    if command_buffers_off and COMMAND_BUFFER not in flags:
        asked[COMMAND_BUFFER] = ""
    if dump_to and DUMP_TO not in flags:
        asked[DUMP_TO] = dump_to
        asked[DUMP_AS_TEXT] = "true"
    flags.update(asked)
    kept = {k: v for k, v in user.items() if k not in asked}
    return FlagPlan(before=user_flags or "", after=render(flags), set_by_preset=asked, kept_from_user=kept)


def forced(plan: FlagPlan) -> list[str]:
    """The presets asked for on the command line (they win over the script's own value too)."""
    return [k for k in (LHS, PIPELINED_OFFLOAD, ASYNC_LIMIT) if k in plan.set_by_preset]


def for_target_compile(current: str | None, extra: list[str] | None = None) -> str:
    """``XLA_FLAGS`` for a compile for a GPU target (plan, tune): *current* (the user's), then *extra*,
    with XLA's own per-kernel estimates asked for (``COST_MODEL_STATS``) unless either sets it."""
    flags = " ".join([current or "", *(extra or [])]).strip()
    return flags if COST_MODEL_STATS in parse(flags) else f"{flags} {COST_MODEL_STATS}=true".strip()
