"""Terminal lines for what the copies cost: stalls and copy bandwidth by context."""

from __future__ import annotations

from typing import Any

from profiler.report.text import gbps, ms, table

CONTEXT_LABELS = (("alone", "alone"), ("kernels", "beside kernels"), ("copies", "beside copies"), ("mixed", "mixed"))


def stall_lines(st: dict[str, Any] | None) -> list[str]:
    """One line on the device's stream waits and what the copies' waits cost."""
    if not st:
        return []
    w = st["waits"]
    if not w["total"]:
        return ["  stalls: no stream waits on this GPU (nothing on it waited, through CUDA events, for a copy)"]
    off = st["by_blocker"]["offload"]
    kern = st["by_blocker"]["kernel"]
    return [
        f"  stalled by copies: {ms(off['stall_ns'])} ms over {off['count']} ops "
        f"(compute {ms(st['compute_stalled_by_offload_ns'])} ms, NCCL {ms(st['nccl_stalled_by_offload_ns'])} ms); "
        f"by kernels {ms(kern['stall_ns'])} ms; "
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
