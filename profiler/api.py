"""The library's names (``profiler.__all__``), each the function the commands call: the facade
``import profiler`` forwards to on first use (it stands above every layer, as the commands do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the names ``import profiler`` forwards here: profiler/__init__.py owns the list, as it must load nothing
from profiler import __all__ as __all__
from profiler.analysis.accuracy import CALIBRATED as CALIBRATED
from profiler.analysis.accuracy import ROOFLINE as ROOFLINE
from profiler.analysis.accuracy import XLA as XLA
from profiler.predict import measured
from profiler.predict.calibrate import calibrate as calibrate
from profiler.predict.calibrate import replay as replay
from profiler.runs.result import analyzed as analyzed
from profiler.trace import load_trace as load_trace

load_recording = measured.load


def from_recording(
    path: str | Path, targets: list[str] | None = None, links: list[str] | None = None
) -> dict[str, Any]:
    """``plan --from``'s document for *path* (targets: ``h100``, ``a100``... or spec files; links:
    ``pcie5``, ``nvlink-c2c``... or GB/s)."""
    from profiler.analysis.links import given_link
    from profiler.predict.from_recording import from_recording as build

    return build(Path(path), targets, [given_link(k) for k in links] if links else None)
