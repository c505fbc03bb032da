"""Run directories and their manifests.

A run lives in ``runs/<UTC timestamp>-<policy>-<id>/``.  While it runs, and
for ever if it is interrupted, the folder name ends in ``.partial``; it gets
its final name only once nsys has finished.  ``manifest.json`` is always
written whole (temporary file + rename), so a manifest that exists is never
half-written.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiler.conventions import LOG, MANIFEST, PARTIAL_SUFFIX, TRACE_STEM

__all__ = ["LOG", "MANIFEST", "PARTIAL_SUFFIX", "TRACE_STEM", "create", "finish", "read_manifest", "write_json"]


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


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write *doc* whole: a reader sees the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / MANIFEST).read_text())


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
