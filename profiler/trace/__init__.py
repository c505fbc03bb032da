"""Finding nsys, exporting reports, and reading exports into typed polars frames.

The loader (and with it polars) is imported on first use, so that capture,
which only needs ``profiler.trace.nsys``, runs on a machine without polars.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler.trace.loader import Trace

__all__ = ["Trace", "load_trace", "open_trace"]


def load_trace(path: str | Path, nsys: str | None = None, window: str | None = None) -> Trace:
    """Open an export, a ``.nsys-rep`` or a JAX profiler trace through its (cached) SQLite export, through the analysis
    *window* (default: what the run folder's manifest says, else ``auto``; see ``window.py``)."""
    from profiler.trace import jax_profile
    from profiler.trace.loader import open_trace
    from profiler.trace.nsys import export_report, is_report
    from profiler.trace.window import spec_from_manifest

    path = Path(path)
    window = window or spec_from_manifest(path)  # a report's export may lie elsewhere: ask its folder
    if path.is_file() and is_report(path):
        return open_trace(export_report(path, nsys), window, origin=path)
    if jax_profile.is_jax_trace(path):
        return open_trace(jax_profile.export(path), window, origin=jax_profile.find(path))
    return open_trace(path, window)


def __getattr__(name: str) -> Any:
    if name in ("Trace", "open_trace"):
        from profiler.trace import loader

        return getattr(loader, name)
    raise AttributeError(name)
