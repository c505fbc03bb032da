"""profile-step as a library: the few calls a script needs, each the one the commands use.

    import profiler
    trace = profiler.load_trace("runs/<run>/trace.sqlite")     # an export, report or JAX profiler trace
    result = profiler.analyzed(trace)                          # analyze's numbers (result.devices, .steps)
    doc = profiler.from_recording("runs/<run>", ["h100"])      # plan --from: replay, roofline, predictions
    m = profiler.load_recording("runs/<run>")                  # what a recording measured per instruction
    prediction, error = profiler.replay(m)                     # its schedule with its own durations
    print(profiler.ROOFLINE.line())                            # how far a kind of prediction was off

Imported on first use: ``import profiler`` itself needs nothing beyond the standard library (capture
runs on machines without polars).
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

# name -> (module, attribute)
_API = {
    "load_trace": ("profiler.trace", "load_trace"),
    "analyzed": ("profiler.runs.result", "analyzed"),
    "load_recording": ("profiler.predict.measured", "load"),
    "calibrate": ("profiler.predict.calibrate", "calibrate"),
    "replay": ("profiler.predict.calibrate", "replay"),
    "ROOFLINE": ("profiler.analysis.accuracy", "ROOFLINE"),
    "CALIBRATED": ("profiler.analysis.accuracy", "CALIBRATED"),
}
__all__ = [*_API, "from_recording"]


def from_recording(
    path: str | Path, targets: list[str] | None = None, links: list[str] | None = None
) -> dict[str, Any]:
    """``plan --from``'s document for *path* (targets: ``h100``, ``a100``... or spec files; links:
    ``pcie5``, ``nvlink-c2c``... or GB/s)."""
    from profiler.analysis.links import given_link
    from profiler.predict.from_recording import from_recording as build

    return build(Path(path), targets, [given_link(k) for k in links] if links else None)


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'profiler' has no attribute {name!r}")
