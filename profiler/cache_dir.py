"""The one folder profile-step keeps its caches in, never beside a user's traces or reports.

Where: ``$PROFILE_STEP_CACHE`` when set (``--cache-dir`` sets it for one command), else
``$XDG_CACHE_HOME/profile-step``, else ``~/.cache/profile-step``.  Sub-folders, one per kind of
cache (``cache_dir(name)``): ``exports`` (the SQLite exports profile-step makes itself: conversions
of JAX profiler traces, a report's export where nsys's own ``REPORT.sqlite`` cannot go) and
``dashboard`` (each trace's analysis, its timeline's frames, its what-ifs and their replay graph).  Entries are keyed by
the trace's resolved path, so two traces never share one; an analysis is remade when the trace or
profile-step's own code changes (``runs.store.code_digest``).  A folder profile-step creates holds a
``CACHEDIR.TAG`` (the Cache Directory Tagging convention: backups skip it); ``clear`` empties only a
folder holding that tag.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import InputError

ENV = "PROFILE_STEP_CACHE"
TAG_NAME = "CACHEDIR.TAG"
TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by profile-step.\n"
    "# `profile-step cache --clear` empties this folder; see https://bford.info/cachedir/\n"
)
KINDS = ("exports", "dashboard", "tune")  # the sub-folders profile-step writes (all that clear removes)


def root() -> Path:
    """The cache folder: ``$PROFILE_STEP_CACHE``, else ``$XDG_CACHE_HOME/profile-step``, else
    ``~/.cache/profile-step`` (not created here)."""
    own = os.environ.get(ENV)
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "profile-step"


def use(folder: str | Path | None) -> None:
    """Make *folder* the cache for this process and the processes it starts (``--cache-dir``)."""
    if folder:
        os.environ[ENV] = str(Path(folder).expanduser().resolve())


def _make_root(base: Path) -> None:
    """Create *base*, tagged, when it is new or empty; a folder that already holds other files is
    used as it is and never tagged (so ``clear`` never empties it)."""
    if not base.exists() or not any(base.iterdir()):
        base.mkdir(parents=True, exist_ok=True)
        (base / TAG_NAME).write_text(TAG)


def cache_dir(name: str) -> Path:
    """The sub-folder *name* (one of ``KINDS``) of the cache, created."""
    if name not in KINDS:
        raise ValueError(f"unknown cache {name!r} (known: {', '.join(KINDS)})")
    base = root()
    try:
        _make_root(base)
        (base / name).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            base, f"cannot be used as profile-step's cache ({exc.strerror}); set {ENV} or --cache-dir"
        ) from None
    return base / name


def path_key(path: Path, chars: int = 16) -> str:
    """A short key of *path*'s resolved location: two files never share a cache entry."""
    return hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:chars]


def is_tagged(folder: Path) -> bool:
    """Whether *folder* holds profile-step's ``CACHEDIR.TAG``."""
    try:
        return (folder / TAG_NAME).read_text() == TAG
    except (OSError, UnicodeDecodeError):
        return False


@dataclass(frozen=True)
class Usage:
    """What the cache holds, per kind: files and bytes."""

    folder: Path
    tagged: bool
    kinds: dict[str, tuple[int, int]]  # name -> (files, bytes)

    @property
    def files(self) -> int:
        return sum(n for n, _ in self.kinds.values())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.kinds.values())

    def doc(self) -> dict[str, object]:
        return {
            "folder": str(self.folder),
            "tagged": self.tagged,
            "files": self.files,
            "bytes": self.bytes,
            "kinds": {k: {"files": n, "bytes": b} for k, (n, b) in self.kinds.items()},
        }


def _size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    return len(files), sum(p.stat().st_size for p in files)


def usage(base: Path | None = None) -> Usage:
    """Where the cache is and how big each kind of cache in it is."""
    base = root() if base is None else base
    return Usage(base, is_tagged(base), {k: _size(base / k) for k in KINDS})


def clear(base: Path | None = None) -> Usage:
    """Remove every kind of cache from *base* (default: the cache), and say what was there; refuses
    (InputError) a folder without profile-step's ``CACHEDIR.TAG``: never a folder it did not make."""
    base = root() if base is None else base
    before = usage(base)
    if not base.exists():
        return before
    if not before.tagged:
        raise InputError(base, f"holds no profile-step {TAG_NAME}: not a cache profile-step made, left as it is")
    for kind in KINDS:
        shutil.rmtree(base / kind, ignore_errors=True)
    return before
