"""The results database and the dashboard's cache: analysed runs in SQLite, through sqlite-utils.

Results database (``record``, ``load_label``): tables ``runs`` (one row per recorded trace,
with its full run document as JSON for an exact round trip), and for SQL users
``device_copies``, ``copies``, ``layers`` and ``steps``.  A run's id is derived from its
trace's path (``folder.run_id``), so recording the same trace again replaces its rows; every
record is one transaction.

Dashboard cache (``CacheFiles``): the same database with one run, in the ``dashboard`` folder of
profile-step's cache (``<key>-<trace>.profile-step.db``, the key from the trace's resolved path),
stamped with the trace's size and modification time, with the run's GPU ops and NVTX step/layer
ranges in Parquet for the timeline and the what-ifs computed so far (one row per factor).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

if TYPE_CHECKING:
    import polars as pl

from profiler.analysis.run_metrics import SUM_KEYS
from profiler.errors import InputError
from profiler.stored import folder
from profiler.stored.summary import RunSummary

METRIC_COLUMNS = (
    *SUM_KEYS,
    "hidden_fraction",
    "gbps",
)


def open_db(path: Path, create: bool) -> sqlite_utils.Database:
    if not create and not path.is_file():
        raise InputError(path, "no such results database")
    try:
        db = sqlite_utils.Database(path)
        db.execute("PRAGMA foreign_keys = ON")
        return db
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"cannot be used as a results database ({exc})") from None


def record(db_path: Path, run: RunSummary | dict[str, Any], label: str | None) -> str:
    """Write *run* (``runs.result.RunResult.summary``, or its document ``to_json``) under *label*;
    returns its run id."""
    if isinstance(run, RunSummary):
        run = run.to_json()
    db = open_db(db_path, create=True)
    rid = folder.run_id(run["trace"])
    now = datetime.now(UTC).isoformat(timespec="seconds")

    def metrics(m: dict[str, Any]) -> dict[str, Any]:
        return {k: m.get(k) for k in METRIC_COLUMNS}

    try:
        with db.conn:
            for table in ("device_copies", "copies", "layers", "steps", "runs"):
                if db[table].exists():
                    db.execute(f"DELETE FROM [{table}] WHERE run_id = ?", [rid])
            db["runs"].insert(
                {
                    "run_id": rid,
                    "label": label,
                    "policy": run["policy"],
                    "trace": run["trace"],
                    "recorded_at": now,
                    "nsys_version": run["nsys_version"],
                    "median_step_ns": run["median_step_ns"],
                    "steps": len(run["steps"]),
                    "summary_json": json.dumps(run, default=str),
                },
                pk="run_id",
                replace=True,
                alter=True,
            )
            db["copies"].insert_all(
                [{"run_id": rid, "direction": d, **metrics(m)} for d, m in run["copies"].items()],
                foreign_keys=[("run_id", "runs", "run_id")],
                alter=True,  # databases recorded by earlier versions gain the new columns
            )
            db["device_copies"].insert_all(
                [
                    {"run_id": rid, "device": dev, "direction": d, **metrics(m)}
                    for dev, per in run["devices"].items()
                    for d, m in per.items()
                ],
                foreign_keys=[("run_id", "runs", "run_id")],
                alter=True,
            )
            db["layers"].insert_all(
                [
                    {
                        "run_id": rid,
                        "layer": name,
                        "direction": d,
                        "inferred_index": v["inferred_index"],
                        **metrics(v[d]),
                    }
                    for name, v in run["layers"].items()
                    for d in ("h2d", "d2h", "offload")
                ],
                foreign_keys=[("run_id", "runs", "run_id")],
                alter=True,
            )
            db["steps"].insert_all(
                [{"run_id": rid, **s} for s in run["steps"]],
                foreign_keys=[("run_id", "runs", "run_id")],
                alter=True,
            )
    except sqlite3.DatabaseError as exc:
        raise InputError(db_path, f"cannot be written ({exc})") from None
    return rid


def load_label(db_path: Path, label: str) -> list[dict[str, Any]]:
    """Every run recorded under *label*, as ``runs.result.RunResult.to_json`` documents."""
    db = open_db(db_path, create=False)
    if not db["runs"].exists():
        raise InputError(db_path, "the results database is empty (nothing recorded yet)")
    rows = list(db.query("SELECT summary_json FROM runs WHERE label = ? ORDER BY policy", [label]))
    if not rows:
        labels = [r["label"] for r in db.query("SELECT DISTINCT label FROM runs ORDER BY label")]
        raise InputError(db_path, f"no runs labelled {label!r} (labels: {', '.join(map(str, labels)) or 'none'})")
    return [json.loads(r["summary_json"]) for r in rows]


# --- the dashboard's cache ---------------------------------------------------------------------
CACHE_VERSION = "11"  # 11: a JAX trace analyzed with its run folder (compiled step, layers); 10: steps
# per direction (the verdict); 9: kernels_beside_copies;
# 8: HLO fingerprints, findings by cost, sync rows on their GPU
CACHE_LABEL = "dashboard-cache"


def cache_base(trace: Path) -> Path:
    """The stem of *trace*'s cache files: its name, keyed by its resolved path, in the ``dashboard``
    folder of profile-step's cache (``profiler.cache_dir``), never beside the trace."""
    from profiler.cache_dir import cache_dir, path_key

    return cache_dir("dashboard") / f"{path_key(trace)}-{trace.name}"


@functools.cache
def code_digest() -> str:
    """A digest of profiler/'s own source: an analysis cached by other code (another release, a local
    change) is not read back as this code's."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _stamp(trace: Path) -> str:
    """What a cached analysis of *trace* is valid for: the export as it was (size, time) and the code."""
    st = trace.stat()
    return json.dumps(
        {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "version": CACHE_VERSION, "code": code_digest()},
        sort_keys=True,
    )


def _write_atomic(path: Path, writer: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer(tmp)
    os.replace(tmp, path)


@dataclass(frozen=True)
class CacheFiles:
    """The cache of one analysed export: its results file and the timeline's Parquet files."""

    trace: Path  # the export (a report's cached export)
    db: Path
    ops: Path
    ranges: Path

    @classmethod
    def of(cls, trace: Path) -> CacheFiles:
        base = str(cache_base(trace))
        db, ops, ranges = (Path(base + s) for s in folder.CACHE_SUFFIXES)
        return cls(trace, db, ops, ranges)

    def read(self) -> dict[str, Any] | None:
        """The cached run document, when the cache is whole and the export unchanged since."""
        if not (self.db.is_file() and self.ops.is_file() and self.ranges.is_file()):
            return None
        try:
            db = sqlite_utils.Database(self.db)
            meta = {r["key"]: r["value"] for r in db["meta"].rows} if db["meta"].exists() else {}
            if meta.get("stamp") != _stamp(self.trace):
                return None
            row = next(iter(db.query("SELECT summary_json FROM runs LIMIT 1")), None)
            return json.loads(row["summary_json"]) if row else None
        except Exception:  # a damaged cache is rebuilt, never trusted
            return None

    def write(self, run: dict[str, Any], ops: pl.DataFrame, ranges: pl.DataFrame) -> None:
        """Cache the run document and the timeline's frames (each file replaced whole)."""
        _write_atomic(self.ops, ops.write_parquet)
        _write_atomic(self.ranges, ranges.write_parquet)
        tmp = self.db.with_name(f".{self.db.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        record(tmp, run, label=CACHE_LABEL)
        db = sqlite_utils.Database(tmp)
        db["meta"].insert({"key": "stamp", "value": _stamp(self.trace)}, pk="key")
        db.close()
        os.replace(tmp, self.db)


# --- what-ifs: the replay of a run with its copies scaled by a factor, in the run's cache ---------
WHATIF_TABLE = "whatif"
WHATIF_VERSION = "1"


def whatif_key(factor: float, model_host: bool) -> str:
    """The cache key of one what-if of a run: the exact factor, and whether host synchronization is modeled."""
    return f"v{WHATIF_VERSION}/{factor!r}/{'host' if model_host else 'launch'}"


def read_whatif(db_path: Path | None, key: str) -> dict[str, Any] | None:
    if db_path is None or not db_path.is_file():
        return None
    try:
        db = sqlite_utils.Database(db_path)
        if not db[WHATIF_TABLE].exists():
            return None
        row = next(iter(db.query(f"SELECT doc FROM {WHATIF_TABLE} WHERE key = ?", [key])), None)
        return json.loads(row["doc"]) if row else None
    except Exception:  # a damaged cache is recomputed, never trusted
        return None


def write_whatif(db_path: Path | None, key: str, doc: dict[str, Any]) -> None:
    if db_path is None or not db_path.is_file():
        return
    with contextlib.suppress(Exception):  # the cache is a convenience: a read-only file only costs a recompute
        db = sqlite_utils.Database(db_path)
        db[WHATIF_TABLE].upsert({"key": key, "doc": json.dumps(doc)}, pk="key")
        db.close()
