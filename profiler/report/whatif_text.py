"""The readable form of ``profile-step whatif``."""

from __future__ import annotations

import textwrap
from typing import Any

from profiler.conventions import device_word
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


def _why(doc: dict[str, Any], dev: str, d: dict[str, Any], w: str) -> list[str]:
    """Where a device's saving comes from when its own copies cannot explain it, and the other host
    model's answer when it differs more than 2x (*w*: what the devices are called, GPU or TPU)."""
    out = []
    saving = d["measured_span_ns"] - d["span_ns"]
    own = d.get("copy_busy_ns")
    lost = None if own is None else round(own * (1 - doc["copy_scale"]))
    by = d.get("saving_by_copies_of") or {}
    if lost is not None and doc["copy_scale"] < 1 and saving > lost and by:  # shorter copies, more saved
        others = {e: v for e, v in by.items() if e != dev and v > 0}
        parts = []
        for e, v in sorted(others.items(), key=lambda kv: -kv[1]):
            waits = (d.get("host_waits_on") or {}).get(e)
            how = (
                f", through host threads that wait for {w} {e}'s work ({waits['calls']} blocking calls held "
                f"them {ms(waits['blocked_ns'])} ms)"
                if waits
                else ""
            )
            parts.append(f"{ms(v)} ms from {w} {e}'s copies alone{how}")
        if parts:
            out.append(
                f"  the saving ({ms(saving)} ms) exceeds what this {w}'s own copies lose ({ms(lost)} ms of copy "
                f"time); its own copies alone give back {ms(by.get(dev, 0))} ms, and " + "; ".join(parts)
            )
    other = doc.get("other_host_model")
    if other and dev in other["spans"]:
        alt = d["measured_span_ns"] - other["spans"][dev]
        big, small = max(abs(saving), abs(alt)), min(abs(saving), abs(alt))
        if big > 2 * small and big - small >= 1_000:
            label = (
                "with host synchronization modeled"
                if other["host_sync_modeled"]
                else "with launch times as recorded (--no-host-sync)"
            )
            out.append(
                f"  {label}: {_change(d['measured_span_ns'], other['spans'][dev])}; "
                f"the {w} span above: {human_time(d['span_ns'], nanoseconds=True)}"
            )
    return out


def _which_model(doc: dict[str, Any], w: str) -> str:
    """Which host model the trace supports, from its blocking calls (a TPU's host calls, a GPU's CUDA calls)."""
    calls = "CUDA calls" if w == "GPU" else "host calls"
    other = doc["other_host_model"]
    n, lag = other["blocking_calls"], other["median_lag_ns"]
    if n:
        return (
            f"The trace supports modeling host synchronization (the default): {n} {calls} held their thread "
            f"until {w} work ended and returned a median {ms(lag)} ms after it; --no-host-sync keeps the recorded "
            "launch times, as if the host never waited."
        )
    return f"The trace has no {calls[:-1]} that held its thread until {w} work ended: the recorded launch times stand."


def _link(name: str, gbps: float) -> str:
    """A link as the what-if's first line names it: ``PCIe Gen5 x16 (63 GB/s)``; a link named by its
    speed (``--link 63``: ``63 GB/s``) once."""
    return name if name.endswith("GB/s") else f"{name} ({gbps:g} GB/s)"


def render_whatif(doc: dict[str, Any], measured_stalls: dict[str, dict[str, Any]], gpus: dict[str, str]) -> str:
    """Per device the span and the copy-caused stalls, measured and predicted, then per step; in the
    devices' own word (*gpus*' names: a TPU's span)."""
    w = device_word(list(gpus.values()))
    link = doc.get("link")
    scale = doc["copy_scale"]
    how = f"{_link(link['from'], link['from_gbps'])} -> {_link(link['to'], link['to_gbps'])}: " if link else ""
    sync = (
        f"host synchronization modeled: a call that waited for the {w} returns when its work is done, and its "
        "thread's later launches move with it"
        if doc["host_sync_modeled"]
        else "host launch times as recorded"
    )
    copies = (
        "every h2d/d2h copy takes no time (0x its recorded time; the copy-free line below also drops the waits on them)"
        if scale == 0
        else f"every h2d/d2h copy takes {scale:.4g}x its recorded time"
    )
    out = [wrap(f"What-if: {how}{copies}; {sync}")]
    if not doc["devices"]:
        return out[0] + f"\nNo {w} activity in this trace: nothing to replay."
    differs = False
    for dev, d in doc["devices"].items():
        name = gpus.get(dev)
        out.append("")
        out.append(f"Device {dev}{f' ({name})' if name else ''}")
        out.append(f"  {w} span:          {_change(d['measured_span_ns'], d['span_ns'])}")
        if "copy_free_span_ns" in d:
            out.append(f"  copy-free:         {_change(d['measured_span_ns'], d['copy_free_span_ns'])}")
        if doc.get("stalls_measured", True):
            before = _stalled(measured_stalls.get(dev, d["stalls"]))
            out.append(f"  stalled by copies: {_change(before, _stalled(d['stalls']))}")
        else:
            out.append("  stalled by copies: not measured (no stream waits in this trace: analyze says the same)")
        why = _why(doc, dev, d, w)
        for line in why:
            out += textwrap.wrap(line.strip(), 110, initial_indent="  ", subsequent_indent="    ")
        differs = differs or any(f"the {w} span above" in line for line in why)
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
                        f"{w} span ms",
                        f"{w} span replayed ms",
                        "predicted by",
                        "excluded",
                    ),
                    rows,
                    left=(0, 6, 7),
                )
            )
            out += textwrap.wrap(
                f"(predicted by host: the step moves with its thread, which waited for the {w} inside it; "
                f"by gpu: the measured step less how much earlier its last {w} op ends; {w} span: its first "
                f"{w} op's start to its last one's end, as recorded and replayed)",
                118,
                initial_indent="  ",
                subsequent_indent="   ",
            )
    if differs:
        out.append("")
        out += textwrap.wrap(_which_model(doc, w), 110)
    if any("copy_free_span_ns" in d for d in doc["devices"].values()):
        out.append("")
        out.append("(copy-free: every h2d/d2h copy at zero time, and no op waits for them: the most that keeping")
        out.append(" the activations on the device can give back)")
    return "\n".join(out)
