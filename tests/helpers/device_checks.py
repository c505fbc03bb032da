"""The per-device numbers checked against the reference implementation."""

from __future__ import annotations

from pathlib import Path

from profiler.trace import open_trace
from tests.helpers import reference_devices as ref


def check_devices(path: Path, got: dict) -> None:
    """*got* (the ``devices`` of ``analyze --json`` of *path*) equals the reference's on every key the
    reference computes."""
    trace = open_trace(path)
    window = ref.read_ops(path)[3]
    assert (trace.window.bounds if trace.window.active else None) == window, "the reference's window"
    want = ref.devices(path)
    assert sorted(got) == sorted(want)
    for dev, expected in want.items():
        assert ref.project(got[dev], expected) == expected, (path.name, dev)
