"""The readable form of ``profile-step whatif``."""

from __future__ import annotations

from typing import Any

from profiler.report.text import ms, table
from profiler.units import human_time, wrap


def _change(before: int, after: int) -> str:
    """``before -> after (±change, ±%)``, each time in its own unit (``18.5 s -> 16.6 s (-1.90 s, -10.3%)``)."""
    d = after - before
    rel = f", {100 * d / before:+.1f}%" if before else ""
    t = lambda ns: human_time(ns, nanoseconds=True)  # noqa: E731
    return f"{t(before)} -> {t(after)} ({'+' if d >= 0 else '-'}{t(abs(d))}{rel})"


def _stalled(st: dict[str, Any]) -> int:
    return st["by_blocker"]["offload"]["stall_ns"]


def render_whatif(doc: dict[str, Any], measured_stalls: dict[str, dict[str, Any]], gpus: dict[str, str]) -> str:
    """Per device the span and the copy-caused stalls, measured and predicted, then per step."""
    link = doc.get("link")
    scale = doc["copy_scale"]
    how = f"{link['from']} ({link['from_gbps']:g} GB/s) -> {link['to']} ({link['to_gbps']:g} GB/s): " if link else ""
    sync = (
        "host synchronization modeled: a call that waited for the GPU returns when its work is done, and its "
        "thread's later launches move with it"
        if doc["host_sync_modeled"]
        else "host launch times as recorded"
    )
    out = [wrap(f"What-if: {how}every h2d/d2h copy takes {scale:.4g}x its recorded time ({sync})")]
    if not doc["devices"]:
        return out[0] + "\nNo GPU activity in this trace: nothing to replay."
    for dev, d in doc["devices"].items():
        name = gpus.get(dev)
        out.append("")
        out.append(f"Device {dev}{f' ({name})' if name else ''}")
        out.append(f"  GPU span:          {_change(d['measured_span_ns'], d['span_ns'])}")
        before = _stalled(measured_stalls.get(dev, d["stalls"]))
        out.append(f"  stalled by copies: {_change(before, _stalled(d['stalls']))}")
        if d["steps"]:
            rows = [
                [
                    s["name"],
                    ms(s["measured_ns"]),
                    ms(s["predicted_ns"]),
                    ms(s["saving_ns"]),
                    ms(s["gpu_span_ns"]),
                    ms(s["replayed_gpu_span_ns"]),
                    s["model"],
                    s["excluded"] or "",
                ]
                for s in d["steps"]
            ]
            out.append(
                table(
                    (
                        "step",
                        "measured ms",
                        "predicted ms",
                        "saving ms",
                        "GPU span ms",
                        "replayed ms",
                        "by",
                        "excluded",
                    ),
                    rows,
                    left=(0, 6, 7),
                )
            )
            out.append(
                "  (by host: the step moves with its thread, which waited for the GPU inside it; "
                "by gpu: less how much earlier its last GPU op ends)"
            )
    return "\n".join(out)
