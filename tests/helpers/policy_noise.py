"""Collected runs of a policy with given step times, for the noise and verdict tests."""

from __future__ import annotations

MS = 1_000_000


def run(policy: str, steps_ms: list[float], fingerprint: str | None = None, platform: str | None = None) -> dict:
    ns = [int(s * MS) for s in steps_ms]
    return {
        "policy": policy,
        "trace": f"/x/{policy}/trace.sqlite",
        "steps": [{"name": f"step={i}", "duration_ns": d, "excluded": None} for i, d in enumerate(ns)]
        + [{"name": "step=99", "duration_ns": 10**12, "excluded": "warm-up"}],  # never in the spread
        "median_step_ns": sorted(ns)[len(ns) // 2],
        "copies": {d: {"bytes": 0} for d in ("d2h", "h2d", "offload")},
        "compiled": {
            "cost": None,
            "memory": None,
            "plan": None,
            "notes": [],
            "fingerprint": fingerprint,
            "platform": platform,
        },
    }
