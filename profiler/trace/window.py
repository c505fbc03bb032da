"""The analysis window: the part of a recording that every number is computed from.

``profile-step`` records the whole run by default and lets the trace say where
the steady state is.  The window is found once, when a trace is opened, from
the ``--capture-range`` mode the run used (its manifest) or the one asked for:

- ``auto``: the ``profile-step:capture`` range (the script entered
  ``annotate.capture()``), else the span from the first ``cudaProfilerStart``
  to the next ``cudaProfilerStop`` in the CUDA runtime table (MaxText's
  ``profiler=nsys``, ctypes, PyTorch-style loops), else none;
- ``nvtx:NAME`` (``NAME@DOMAIN`` or ``NAME@*`` as nsys writes them): the first
  range of that name;
- ``cuda-profiler-api``: the cudaProfilerStart/Stop span;
- ``all``: none.

With no window the trace is read as it is (the numbers are exactly those of
an export without one).  With one, the loader reads only what happened in it
(``Trace`` applies it to every frame; see ``loader.py``): GPU activity whose
CUDA call started in ``[start, end)`` (activity with no call: its own start),
CUDA calls and memory events that started in it, NVTX marks in it, and NVTX
ranges that overlap it, cut to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from profiler.conventions import (
    CAPTURE_RANGE,
    CUDA_PROFILER_START,
    CUDA_PROFILER_STOP,
    DOMAIN,
)
from profiler.stored.folder import window_spec_of

SPECS = ("auto", "all", "cuda-profiler-api")
OPEN_END = 1 << 62  # the end of a window whose range or profiler span never closed


class Recording(Protocol):
    """What the window is found from: the parts of ``loader.Trace`` read here (so this module
    does not import the loader, which imports it)."""

    @property
    def has_cuda_calls(self) -> bool: ...

    def runtime_named(self, prefixes: tuple[str, ...]) -> Any: ...

    def nvtx_ranges_named(self, name: str, domain: str | None) -> Any: ...


def check_spec(spec: str) -> str:
    """*spec* if it is ``auto``, ``all``, ``cuda-profiler-api`` or ``nvtx:NAME``; else ValueError."""
    if spec in SPECS or (spec.startswith("nvtx:") and len(spec) > len("nvtx:")):
        return spec
    raise ValueError(f"{spec!r} is not one of auto, all, nvtx:NAME, cuda-profiler-api")


def nvtx_name_and_domain(spec: str) -> tuple[str, str | None]:
    """``nvtx:NAME[@DOMAIN]`` -> (NAME, DOMAIN), read as nsys's ``--nvtx-capture`` reads it: no
    domain is the default domain (``""``), ``@*`` any domain (None); profile-step's own range is
    in its own domain."""
    body = spec.removeprefix("nvtx:")
    name, at, domain = body.rpartition("@")
    if not at:
        name, domain = body, ""
    if name == CAPTURE_RANGE and not domain:
        domain = DOMAIN
    return name, (None if domain == "*" else domain)


def spec_from_manifest(trace_path: Path) -> str | None:
    """The analysis window a run folder's manifest asks for (``capture.analysis_window``), if any."""
    spec = window_spec_of(trace_path)
    try:
        return check_spec(spec) if spec is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Window:
    """Where the analysis reads: ``[start, end)`` in the trace's clock, or the whole trace."""

    spec: str
    start: int | None = None
    end: int | None = None  # None with a start: never closed (the trace's end)
    source: str | None = None  # what marked it, for the reader
    note: str | None = None  # why there is none, or what else was seen

    @property
    def active(self) -> bool:
        return self.start is not None

    @property
    def bounds(self) -> tuple[int, int]:
        assert self.start is not None
        return self.start, self.end if self.end is not None else OPEN_END

    def facts(self) -> dict[str, Any]:
        """The ``window`` entry of the JSON output."""
        return {
            "mode": self.spec,
            "source": self.source,
            "start_ns": self.start,
            "end_ns": self.end,
            "duration_ns": self.end - self.start if self.start is not None and self.end is not None else None,
            "note": self.note,
        }


def _first_range(rows: Any, what: str) -> tuple[int, int | None, str | None]:
    """(start, end, note) of the first of *rows* (start-sorted ranges)."""
    start, end = int(rows["start"][0]), rows["end"][0]
    note = f"the first of {rows.height} {what}" if rows.height > 1 else None
    return start, (int(end) if end is not None else None), note


def _profiler_span(trace: Recording) -> tuple[Window | None, str]:
    """The first cudaProfilerStart and the next cudaProfilerStop, or why there is none."""
    starts = trace.runtime_named(CUDA_PROFILER_START)
    if starts.height == 0:
        if not trace.has_cuda_calls:
            return None, "no CUDA runtime: the recording holds no CUDA API calls, so no cudaProfilerStart/Stop"
        return None, "no cudaProfilerStart/Stop calls"
    t0 = int(starts["start"][0])
    stops = trace.runtime_named(CUDA_PROFILER_STOP)
    later = stops.filter(stops["start"] >= t0)
    end = int(later["end"][0]) if later.height else None
    note = None if later.height else "cudaProfilerStop never called: to the end of the recording"
    if starts.height > 1:
        note = (note + "; " if note else "") + f"the first of {starts.height} cudaProfilerStart calls"
    return Window("", t0, end, "cudaProfilerStart/Stop span", note), ""


def find(trace: Recording, spec: str) -> Window:
    """The analysis window of *trace* under *spec* (see the module docstring)."""
    if spec == "all":
        return Window(spec, note="--capture-range all")
    if spec.startswith("nvtx:"):
        name, domain = nvtx_name_and_domain(spec)
        rows = trace.nvtx_ranges_named(name, domain)
        label = f"NVTX range {name}" + ("@*" if domain is None else f"@{domain}" if domain else "")
        if rows.height == 0:
            return Window(spec, note=f"no {label} in the recording")
        start, end, note = _first_range(rows, f"{label} ranges")
        return Window(spec, start, end, label, note)
    notes = []
    if spec == "auto":
        rows = trace.nvtx_ranges_named(CAPTURE_RANGE, DOMAIN)
        if rows.height:
            start, end, note = _first_range(rows, f"{CAPTURE_RANGE} ranges")
            return Window(spec, start, end, f"{CAPTURE_RANGE} range", note)
        notes.append(f"no {CAPTURE_RANGE} range")
    found, why = _profiler_span(trace)
    if found is not None:
        return Window(spec, found.start, found.end, found.source, found.note)
    notes.append(why)
    return Window(spec, note="; ".join(notes))
