"""Finding nsys, exporting reports, and reading exports into typed polars frames."""

from __future__ import annotations

from pathlib import Path

from profiler.trace.loader import Trace, open_trace
from profiler.trace.nsys import export_report, is_report

__all__ = ["Trace", "load_trace", "open_trace"]


def load_trace(path: str | Path, nsys: str | None = None) -> Trace:
    """Open an export, or a ``.nsys-rep`` through its (cached) SQLite export."""
    path = Path(path)
    if path.is_file() and is_report(path):
        return open_trace(export_report(path, nsys))
    return open_trace(path)
