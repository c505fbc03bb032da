"""A second, plain implementation of METRICS.md "Kernels slowed by copies", for the tests.

It reads the export with the sqlite3 module (not the project's loader) and
applies the definition literally, one kernel at a time: slow, obviously right,
and independent of the code under test.
"""

from __future__ import annotations

import bisect
import sqlite3
from pathlib import Path
from typing import Any

H2D, D2H = 1, 2


def merged(ivs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of *ivs* as sorted, disjoint intervals (empty ones dropped)."""
    out: list[list[int]] = []
    for s, e in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def overlap(a0: int, a1: int, union: list[tuple[int, int]], starts: list[int]) -> int:
    """|[a0, a1) ∩ union|: the pieces from the last one starting before a0 on, until a1."""
    total = 0
    i = max(0, bisect.bisect_right(starts, a0) - 1)
    while i < len(union) and union[i][0] < a1:
        s, e = union[i]
        total += max(0, min(a1, e) - max(a0, s))
        i += 1
    return total


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def kernels_beside_copies(path: Path) -> dict[int, dict[str, Any]]:
    """Per device with a kernel counted on either side: the METRICS.md ``kernels_beside_copies``."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
    copies: dict[int, list[tuple[int, int, int]]] = {}
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for s, e, dev, kind in con.execute("SELECT start, end, deviceId, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            if None not in (s, e, dev) and e >= s:
                copies.setdefault(dev, []).append((s, e, kind))
    kernels = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        have = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        shape = ", ".join(c if c in have else "NULL" for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
        kernels = con.execute(
            f"SELECT start, end, deviceId, shortName, demangledName, {shape} FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchall()
    con.close()
    unions = {}
    for dev, mine in copies.items():
        every = merged([(a, b) for a, b, _ in mine])
        offload = merged([(a, b) for a, b, k in mine if k in (H2D, D2H)])
        unions[dev] = (every, [a for a, _ in every], offload, [a for a, _ in offload])
    groups: dict[tuple, dict[str, list[int]]] = {}
    calls: dict[int, dict[str, int]] = {}
    for s, e, dev, short, dem, gx, gy, gz, bx, by, bz in kernels:
        if None in (s, e, dev) or e <= s:
            continue
        u_all, s_all, u_off, s_off = unions.get(dev, ([], [], [], []))
        every, offload = overlap(s, e, u_all, s_all), overlap(s, e, u_off, s_off)
        if every == 0:
            side = "alone"
        elif 2 * offload >= e - s:
            side = "beside"
        else:
            continue
        calls.setdefault(dev, {"alone": 0, "beside": 0})[side] += 1
        name = strings.get(short) if strings.get(short) is not None else strings.get(dem)
        key = (dev, name, (gx, gy, gz), (bx, by, bz))
        groups.setdefault(key, {"alone": [], "beside": []})[side].append(e - s)
    out: dict[int, dict[str, Any]] = {
        dev: {"groups": 0, "calls_alone": c["alone"], "calls_beside": c["beside"], "excess_ns": 0, "top": []}
        for dev, c in calls.items()
    }
    for (dev, name, grid, block), sides in groups.items():
        if len(sides["alone"]) < 3 or len(sides["beside"]) < 3:
            continue
        a = sorted(sides["alone"])[(len(sides["alone"]) - 1) // 2]
        b = sorted(sides["beside"])[(len(sides["beside"]) - 1) // 2]
        excess = len(sides["beside"]) * max(0, b - a)
        d = out[dev]
        d["groups"] += 1
        d["excess_ns"] += excess
        d["top"].append(
            {
                "name": name,
                "grid": list(grid),
                "block": list(block),
                "alone": {"count": len(sides["alone"]), "median_ns": a},
                "beside": {"count": len(sides["beside"]), "median_ns": b},
                "slowdown": b / a,
                "excess_ns": excess,
            }
        )
    for d in out.values():
        d["top"].sort(key=lambda g: (-g["excess_ns"], g["name"] or "", g["grid"], g["block"]))
        d["top"] = d["top"][:10]
    return out
