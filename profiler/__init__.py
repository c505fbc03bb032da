"""profile-step as a library: the few calls a script needs, each the one the commands use.

    import profiler
    trace = profiler.load_trace("runs/<run>/trace.sqlite")     # an export, report or JAX profiler trace
    result = profiler.analyzed(trace)                          # analyze's numbers (result.devices, .steps)
    doc = profiler.from_recording("runs/<run>", ["h100"])      # plan --from: replay, roofline, predictions
    m = profiler.load_recording("runs/<run>")                  # what a recording measured per instruction
    prediction, error = profiler.replay(m)                     # its schedule with its own durations
    print(profiler.ROOFLINE.line())                            # how far a kind of prediction was off
    print(profiler.XLA.line())                                 # ... costed by XLA's own estimates (plan, tune)

Imported on first use: ``import profiler`` itself needs nothing beyond the standard library (capture
runs on machines without polars).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# the names of profiler/api.py (its __all__ is this list), which imports the analysis: loaded when first asked for
__all__ = [
    "CALIBRATED",
    "ROOFLINE",
    "XLA",
    "analyzed",
    "calibrate",
    "from_recording",
    "load_recording",
    "load_trace",
    "replay",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("profiler.api"), name)
    raise AttributeError(f"module 'profiler' has no attribute {name!r}")
