"""Provenance of traces that come with a ``CATALOG.tsv`` (public traces gathered from repositories).

A folder holding ``CATALOG.tsv`` (a header row, then one row per trace: ``file``, ``repo``,
``commit``, ``path``, ``license``, ``description``, ...) contributes only the traces it lists,
each shown with where it came from.  ``licences`` keeps only those whose licence starts with one
of the given SPDX ids (``Apache-2.0``): the quickstart shows only traces whose licence allows it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import InputError

CATALOG = "CATALOG.tsv"
REQUIRED = ("file", "repo", "commit", "path", "license", "description")


@dataclass(frozen=True)
class Provenance:
    """Where a catalogued trace came from."""

    file: str
    repo: str
    commit: str
    path: str
    licence: str
    description: str
    gpus: str = ""

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}"

    @property
    def short(self) -> str:
        """``owner/repo@abc1234, Apache-2.0``."""
        return f"{self.repo}@{self.commit[:7]}, {self.licence.split(' ')[0]}"


def read_catalog(folder: Path) -> dict[str, Provenance]:
    """The catalogue of *folder*, by file name (an unreadable catalogue is a one-line InputError)."""
    path = folder / CATALOG
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(path, f"cannot be read ({exc})") from None
    missing = [c for c in REQUIRED if rows and c not in rows[0]]
    if missing:
        raise InputError(path, f"has no {', '.join(missing)} column")
    out = {}
    for r in rows:
        if r.get("file"):
            out[r["file"]] = Provenance(
                r["file"], r["repo"], r["commit"], r["path"], r["license"], r["description"], r.get("gpus") or ""
            )
    return out


def allowed(prov: Provenance, licences: tuple[str, ...] | None) -> bool:
    """True when no licence filter is given, or the trace's licence starts with one of *licences*."""
    return not licences or any(prov.licence.strip().startswith(lic) for lic in licences)
