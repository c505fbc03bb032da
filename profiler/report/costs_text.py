"""Terminal lines for what the copies cost: stalls and copy bandwidth by context."""

from __future__ import annotations

from typing import Any

from profiler.analysis.kernels_slowed import MIN_CALLS, SIZE_BIAS_NOTE, no_baseline, persistent, persistent_in
from profiler.report.table import table
from profiler.trace.jax_profile import NO_WAITS
from profiler.units import Units, count, gbps, human_time

CONTEXT_LABELS = (("alone", "alone"), ("kernels", "beside kernels"), ("copies", "beside copies"), ("mixed", "mixed"))


def stall_lines(st: dict[str, Any] | None) -> list[str]:
    """One line on the device's stream waits and what the copies' waits cost."""
    if not st:
        return []
    if st.get("recorded") is False:
        return [f"  stalls: not measured: {NO_WAITS}"]
    w = st["waits"]
    if not w["total"]:
        return ["  stalls: no stream waits on this GPU (nothing on it waited, through CUDA events, for a copy)"]
    off = st["by_blocker"]["offload"]
    kern = st["by_blocker"]["kernel"]
    return [
        f"  stalled by copies: {human_time(off['stall_ns'], nanoseconds=True)} over {count(off['count'], 'op')} "
        f"(compute {human_time(st['compute_stalled_by_offload_ns'], nanoseconds=True)}, "
        f"NCCL {human_time(st['nccl_stalled_by_offload_ns'], nanoseconds=True)}); "
        f"waiting for kernels instead (not copies): {human_time(kern['stall_ns'], nanoseconds=True)}; "
        f"{w['total']} stream wait{'' if w['total'] == 1 else 's'} on this GPU "
        f"({w['resolved']} resolved, {w['unresolved']} unresolved)"
    ]


def context_table(copies: dict[str, Any]) -> list[str]:
    """Achieved GB/s of h2d/d2h copies of 1 MiB or more, alone vs beside kernels or other copies."""
    rows = []
    for cls in ("h2d", "d2h"):
        ctx = copies[cls].get("contexts")
        if not ctx or not any(v["count"] for v in ctx.values()):
            continue
        cells = [f"{gbps(ctx[k]['gbps'])} ({ctx[k]['count']})" if ctx[k]["count"] else "-" for k, _ in CONTEXT_LABELS]
        slow = copies[cls].get("slowdown_with_kernels")
        rows.append([cls, *cells, "-" if slow is None else f"{slow:.2f}x"])
    if not rows:
        return []
    headers = ("GB/s by context (copies >= 1 MiB)", *(f"{label} (n)" for _, label in CONTEXT_LABELS), "slowdown")
    return ["", table(headers, rows)]


def short_name(name: str, wide: bool = False, width: int = 48) -> str:
    """A kernel's name cut to *width* characters (``…`` at the end), whole with *wide* (``--wide``)."""
    return name if wide or len(name) <= width else name[: width - 1] + "…"


def kernels_beside_lines(
    kb: dict[str, Any] | None, kernels: int | None = None, wide: bool = False, sms: int | None = None
) -> list[str]:
    """Kernels slowed by copies (METRICS.md): a line on the device's kernels alone and beside
    h2d/d2h copies and, when groups count, their medians and excess time, with the size-bias caveat.
    *kernels*: the device's kernels (compute and NCCL), to say how many are in neither side; kernel
    names shortened unless *wide*; *sms*: the GPU's, to mark the groups of persistent kernels (one
    launch shape for every size: their slowdown may be size alone), as the dashboard does."""
    if not kb or not (kb["calls_alone"] or kb["calls_beside"]):
        return []
    neither = None if kernels is None else kernels - kb["calls_alone"] - kb["calls_beside"]
    head = "  kernels beside copies: " + (f"of its {_n(kernels, 'kernel')}, " if kernels is not None else "")
    rest = (
        f"; {neither} partly beside copies, of zero length, or an async start or done, are in neither side"
        if neither
        else ""
    )
    alone = _n(kb["calls_alone"], "kernel") if kernels is None else str(kb["calls_alone"])
    sides = f"{alone} alone (no copy overlaps them), {kb['calls_beside']} beside h2d/d2h copies{rest}"
    if not kb["calls_beside"]:
        return ["", head + f"none ran beside h2d/d2h copies ({kb['calls_alone']} alone{rest}): nothing to measure"]
    if no_baseline(kb):
        return [
            "",
            head + f"{kb['calls_beside']} ran beside h2d/d2h copies (half or more of their time), none alone{rest}: "
            "no baseline to measure a slowdown against (0 groups)",
        ]
    if not kb["groups"]:
        return ["", head + f"{sides}; no (name, grid, block) has {MIN_CALLS} of each: 0 groups"]
    top = kb["top"]
    u = Units.of([], [v for g in top for v in (g["alone"]["median_ns"], g["beside"]["median_ns"])])
    e = Units.of([], [kb["excess_ns"], *(g["excess_ns"] for g in top)])
    rows = [
        [
            short_name(g["name"] or "?", wide),
            "x".join(map(str, g["grid"])),
            "x".join(map(str, g["block"])),
            f"{u.t(g['alone']['median_ns'])} ({g['alone']['count']})",
            f"{u.t(g['beside']['median_ns'])} ({g['beside']['count']})",
            f"{g['slowdown']:.2f}x" + (" (persistent)" if persistent(g["grid"], sms) else ""),
            e.t(g["excess_ns"]),
        ]
        for g in top
    ]
    mixed = persistent_in(kb, sms)
    headers = ("kernel", "grid", "block", f"alone {u.time} (n)", f"beside {u.time} (n)", "slowdown", f"excess {e.time}")
    shown = f"the {len(top)} with most excess" if kb["groups"] > len(top) else "all"
    return [
        "",
        head + f"{sides}; {_n(kb['groups'], 'group')} (name, grid, block) with {MIN_CALLS}+ of each, {shown} below; "
        f"excess kernel time {e.t(kb['excess_ns'])} {e.time} (from median durations)"
        + (
            f"; {e.t(mixed)} {e.time} of it in persistent kernels, {e.t(kb['excess_ns'] - mixed)} {e.time} aside "
            "from them, as compare counts it"
            if mixed
            else ""
        ),
        table(headers, rows, left=(0, 1, 2)),
        f"  caveat: {SIZE_BIAS_NOTE}"
        + (
            "; (persistent): as many blocks as the GPU has SMs (cuBLAS's nvjet GEMMs on Hopper), one launch shape "
            "for every size, so the group mixes sizes and its slowdown may be size alone (the findings leave it out)"
            if mixed
            else ""
        ),
    ]


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
