"""A run folder: the only reader and writer of one.

A run lives in ``runs/<UTC timestamp>-<policy>[-rank<R>]-<id>/``.  While it runs, and
for ever if it is interrupted, the folder name ends in ``.partial``; it gets
its final name only once nsys has finished.  ``manifest.json`` is always
written whole (temporary file + rename), so a manifest that exists is never
half-written.  Beside it: the trace (``trace.sqlite`` / ``trace.nsys-rep``, or
the export the manifest names), the compiled step (``compiled.json``) and the
analysis window the run asked for (the manifest's ``capture.analysis_window``).

Only the standard library: capture writes run folders on machines without polars.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiler.conventions import CAPTURE_MANIFEST_KEY, COMPILED, LOG, MANIFEST, PARTIAL_SUFFIX, TRACE_STEM

__all__ = [
    "LOG",
    "MANIFEST",
    "PARTIAL_SUFFIX",
    "TRACE_STEM",
    "compiled_in",
    "compiled_of",
    "create",
    "finish",
    "manifest_of",
    "read_manifest",
    "run_id",
    "trace_in",
    "window_spec_of",
    "write_json",
]

RUN_ID_CHARS = 16  # the results database's ids since its first version (a recorded run keeps its id)
TRACE_FILES = (f"{TRACE_STEM}.sqlite", f"{TRACE_STEM}.nsys-rep", f"{TRACE_STEM}.json.gz")  # the last: jax.profiler
# what the dashboard keeps beside a trace it analysed (``store.CacheFiles``): never a trace itself
CACHE_SUFFIXES = (".profile-step.db", ".ops.parquet", ".ranges.parquet")


# --- writing (capture) -------------------------------------------------------------------------
def slug(text: str) -> str:
    """A file-name-safe form of a policy name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "run"


def create(runs_dir: Path, policy: str, rank: int | None = None) -> Path:
    """A new, empty ``<runs_dir>/<stamp>-<policy>[-rank<R>]-<id>.partial`` folder (never an existing one)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    tag = f"-rank{rank}" if rank is not None else ""
    for _ in range(100):
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = runs_dir / f"{stamp}-{slug(policy)}{tag}-{secrets.token_hex(3)}{PARTIAL_SUFFIX}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"could not create a run folder in {runs_dir}")


def final_name(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name.removesuffix(PARTIAL_SUFFIX))


def finish(run_dir: Path) -> Path:
    """Give a completed run its final name."""
    target = final_name(run_dir)
    run_dir.rename(target)
    return target


def output_folder(out_dir: Path | None, parent: Path, name: str) -> Path:
    """The folder a plan or a tune writes: *out_dir* when given (new or empty: never overwritten),
    else a new one named for *name* under *parent*."""
    if out_dir is None:
        return finish(create(parent, name))
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        from profiler.errors import InputError

        raise InputError(out_dir, "exists and is not an empty folder (profile-step never overwrites)")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write *doc* whole: a reader sees the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# --- reading -----------------------------------------------------------------------------------
def is_run(path: Path) -> bool:
    """Whether *path* is a run folder (it holds a manifest)."""
    return (path / MANIFEST).is_file()


def is_partial(run_dir: Path) -> bool:
    """Whether the run never finished (its folder still ends in ``.partial``)."""
    return run_dir.name.endswith(PARTIAL_SUFFIX)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest (OSError / ValueError when it is missing or not JSON)."""
    return json.loads((run_dir / MANIFEST).read_text())


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in *path*, or None when it is missing, unreadable or not an object."""
    try:
        doc = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def manifest_in(run_dir: Path) -> dict[str, Any] | None:
    """The manifest of *run_dir*, or None when there is none that reads."""
    return _json_object(run_dir / MANIFEST)


def device_kind(manifest: dict[str, Any] | None) -> str | None:
    """The kind of the first device a manifest names (``devices[0].kind``: JAX's device_kind), or None."""
    devices = (manifest or {}).get("devices") or []
    kinds = [d.get("kind") for d in devices if isinstance(d, dict) and d.get("kind")]
    return str(kinds[0]) if kinds else None


def manifest_of(trace_path: Path) -> dict[str, Any] | None:
    """The manifest of the run folder holding *trace_path*, if any."""
    return manifest_in(Path(trace_path).parent)


def compiled_in(run_dir: Path) -> dict[str, Any] | None:
    """The compiled.json of *run_dir* (the step's compiled module, see profiler.capture.step_module)."""
    return _json_object(Path(run_dir) / COMPILED)


TUNE_PREDICTION = "tune_prediction.json"  # what ``tune --verify`` predicted for the candidate it ran


def tune_prediction_in(run_dir: Path) -> dict[str, Any] | None:
    """The tune_prediction.json of *run_dir*: ``{"tune", "candidate", "link", "target"}``."""
    return _json_object(Path(run_dir) / TUNE_PREDICTION)


def compiled_of(trace_path: Path) -> dict[str, Any] | None:
    """The compiled.json beside the trace."""
    return compiled_in(Path(trace_path).parent)


def window_spec_of(trace_path: Path) -> str | None:
    """The analysis window the manifest beside *trace_path* asks for (unchecked), if any."""
    capture = (manifest_of(trace_path) or {}).get(CAPTURE_MANIFEST_KEY)
    spec = capture.get("analysis_window") if isinstance(capture, dict) else None
    return spec if isinstance(spec, str) else None


def trace_in(run_dir: Path, manifest: dict[str, Any] | None = None) -> Path | None:
    """The run's trace: the export its manifest names, else ``trace.sqlite`` / ``trace.nsys-rep``;
    None when there is none."""
    named = ((manifest or {}).get("files") or {}).get("sqlite")
    for name in ([named] if isinstance(named, str) and "/" not in named else []) + list(TRACE_FILES):
        if (run_dir / name).is_file():
            return run_dir / name
    return None


def has_trace(run_dir: Path) -> bool:
    return any((run_dir / name).is_file() for name in TRACE_FILES)


def run_id(trace_path: str | Path) -> str:
    """A run's id: derived from its trace's resolved path (the same trace is the same run)."""
    return hashlib.sha1(str(Path(trace_path).resolve()).encode()).hexdigest()[:RUN_ID_CHARS]
