"""The library's names (``profiler.__all__``), each the function the commands call: the facade
``import profiler`` forwards to on first use (it stands above every layer, as the commands do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.accuracy import CALIBRATED, ROOFLINE
from profiler.predict.calibrate import calibrate, replay
from profiler.predict.measured import load as load_recording
from profiler.runs.result import analyzed
from profiler.trace import load_trace

__all__ = [
    "CALIBRATED",
    "ROOFLINE",
    "analyzed",
    "calibrate",
    "from_recording",
    "load_recording",
    "load_trace",
    "replay",
]


def from_recording(
    path: str | Path, targets: list[str] | None = None, links: list[str] | None = None
) -> dict[str, Any]:
    """``plan --from``'s document for *path* (targets: ``h100``, ``a100``... or spec files; links:
    ``pcie5``, ``nvlink-c2c``... or GB/s)."""
    from profiler.analysis.links import given_link
    from profiler.predict.from_recording import from_recording as build

    return build(Path(path), targets, [given_link(k) for k in links] if links else None)
