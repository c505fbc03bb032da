"""Rules about the kernels beside the copies: a hidden copy that costs kernel time (METRICS.md
"Kernels slowed by copies"), for compute kernels and, as its NCCL case, for collectives."""

from __future__ import annotations

from typing import Any

import polars as pl

from profiler.analysis.findings import Finding, changes, rule
from profiler.analysis.findings.config import exceeds
from profiler.analysis.findings.evidence import CannotDecide, Evidence
from profiler.analysis.findings.rules.text import ms, names
from profiler.analysis.kernels_slowed import SIZE_BIAS_NOTE, group_entry, no_baseline, persistent


def _judged(ev: Evidence) -> None:
    """CannotDecide unless some device has a group of kernels both alone and beside copies."""
    per = {d: v.get("kernels_beside_copies") for d, v in ev.devices.items()}
    if any(e and e["groups"] for e in per.values()):
        return
    blind = [d for d, e in per.items() if e and no_baseline(e)]
    if blind:
        raise CannotDecide(
            f"every kernel that ran beside copies on device {', '.join(blind)} ran beside them: no kernel ran "
            "alone to compare with (no baseline)"
        )
    raise CannotDecide("no (name, grid, block) group has 3 kernels alone and 3 beside h2d/d2h copies on any device")


def _persistent(ev: Evidence, dev: str, row: dict[str, Any]) -> bool:
    """Whether a group (a row of ``kernel_groups``) is of persistent kernels on its GPU."""
    return persistent([row[f"grid_{a}"] for a in "xyz"], ev.sm_counts.get(dev))


def _persistent_note(ev: Evidence, dev: str, groups: list[dict[str, Any]]) -> str:
    listed = names([f"{g['name']} {'x'.join(map(str, g['grid']))} {g['slowdown']:.2f}x" for g in groups])
    return (
        f"left out on {ev.device_word} {dev}: "
        f"{len(groups)} group(s) of persistent kernels ({listed}): each launches as "
        f"many blocks as the GPU's {ev.sm_counts[dev]} SMs whatever the problem's size, so a group mixes GEMMs "
        "of every size and its calls beside copies may only be the larger ones"
    )


def _slowed(ev: Evidence, nccl: bool, limit: str) -> list[tuple[str, list[dict[str, Any]], int, str | None]]:
    """Per device (in order): the groups (NCCL or not) slower beside copies than *limit*, most excess first,
    their excess time, and a note on the persistent kernels' groups left out (``_persistent``).  A device
    whose slow groups are all persistent has none; where no device has any, CannotDecide says why."""
    groups, _ = ev.kernel_groups
    groups = groups.filter(pl.col("is_nccl").fill_null(False) == nccl)
    out = []
    left: list[str] = []
    for (dev,), rows in groups.sort("device", maintain_order=True).group_by("device", maintain_order=True):
        dev = str(dev)
        slow = [
            r for r in rows.iter_rows(named=True) if r["excess_ns"] > 0 and exceeds(r["slowdown"], ev.config[limit])
        ]
        is_mixed = [_persistent(ev, dev, r) for r in slow]
        mixed = [group_entry(r) for r, m in zip(slow, is_mixed, strict=True) if m]
        kept = [r for r, m in zip(slow, is_mixed, strict=True) if not m]
        note = _persistent_note(ev, dev, mixed) if mixed else None
        if kept:
            out.append((dev, [group_entry(r) for r in kept], sum(r["excess_ns"] for r in kept), note))
        elif note:
            left.append(note)
    if not out and left:
        raise CannotDecide("; ".join(left) + ": their slowdown beside copies cannot be told from their sizes")
    return out


def _listed(groups: list[dict[str, Any]]) -> list[str]:
    return [
        f"{g['name']} {'x'.join(map(str, g['grid']))}/{'x'.join(map(str, g['block']))} {g['slowdown']:.2f}x"
        for g in groups
    ]


def _finding(
    ev: Evidence,
    rule_id: str,
    dev: str,
    groups: list[dict[str, Any]],
    excess: int,
    what: str,
    action: str,
    left_out: str | None = None,
) -> Finding:
    beside = sum(g["beside"]["count"] for g in groups)
    everything = ((ev.devices.get(dev) or {}).get("kernels_beside_copies") or {}).get("excess_ns")
    others = "run under the threshold" + (" or are left out (below)" if left_out else "")
    of_all = (
        f" (of the {ms(everything)} that every group of kernels loses beside copies, the 'kernel time lost' of "
        f"analyze and the dashboard: the others {others})"
        if everything is not None and everything != excess
        else ""
    )
    return Finding(
        rule_id,
        "problem",
        f"{ev.device_word} {dev}: {len(groups)} {what} group(s) (name, grid/block) run slower beside h2d/d2h copies "
        f"({names(_listed(groups))}): {ms(excess)} of kernel time lost over {beside} calls beside copies "
        f"(beside minus alone lower-median duration, per call){of_all}: these copies are hidden, not free"
        + (f"; {left_out}" if left_out else ""),
        action + f"; {SIZE_BIAS_NOTE}: the evidence gives each group's medians and counts",
        where={"device": dev, "kernels": [g["name"] for g in groups]},
        evidence={"excess_ns": excess, "all_groups_excess_ns": everything, "groups": groups}
        | ({"left_out": left_out} if left_out else {}),
        view="policies",
        attributed_ns=excess,
        change=changes.kernels_alone(ev, dev, groups),
        **ev.basis_device(dev),
    )


@rule("kernels-slowed-by-copies")
def kernels_slowed_by_copies(ev: Evidence) -> list[Finding]:
    _judged(ev)
    return [
        _finding(
            ev,
            "kernels-slowed-by-copies",
            dev,
            groups,
            excess,
            "kernel",
            "the copies share HBM bandwidth with the kernels beside them: keep offload copies away from "
            "memory-bound kernels (XLA's selective overlap for host offloading, openxla/xla issue 46150), offload "
            "fewer or larger activations, or compare the step time with the copies on the device",
            left_out,
        )
        for dev, groups, excess, left_out in _slowed(ev, nccl=False, limit="kernel_slowdown")
    ]


@rule("nccl-slowed-by-copies")
def nccl_slowed_by_copies(ev: Evidence) -> list[Finding]:
    if not ev.kernels["is_nccl"].fill_null(False).any():
        raise CannotDecide("no NCCL kernels in this trace")
    _judged(ev)
    return [
        _finding(
            ev,
            "nccl-slowed-by-copies",
            dev,
            groups,
            excess,
            "NCCL kernel",
            "device-to-host traffic competes with NCCL for the link and for memory bandwidth (NVIDIA/nccl "
            "issues 1414 and 2218): schedule offloads away from collectives (latency hiding scheduler), or "
            "offload less during the collective-heavy part of the step",
            left_out,
        )
        for dev, groups, excess, left_out in _slowed(ev, nccl=True, limit="nccl_slowdown")
    ]
