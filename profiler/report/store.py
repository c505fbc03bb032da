"""The results database: analyzed runs in SQLite, written through sqlite-utils.

Tables: ``runs`` (one row per recorded trace, with its full summary as JSON for
an exact round trip), and for SQL users ``device_copies``, ``copies``,
``layers`` and ``steps``.  A run's id is derived from its trace's path, so
recording the same trace again replaces its rows; every record is one
transaction.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from profiler.analysis.run_metrics import SUM_KEYS
from profiler.errors import InputError

METRIC_COLUMNS = (
    *SUM_KEYS,
    "hidden_fraction",
    "gbps",
)


def run_id(trace_path: str) -> str:
    return hashlib.sha1(str(Path(trace_path).resolve()).encode()).hexdigest()[:16]


def open_db(path: Path, create: bool) -> sqlite_utils.Database:
    if not create and not path.is_file():
        raise InputError(path, "no such results database")
    try:
        db = sqlite_utils.Database(path)
        db.execute("PRAGMA foreign_keys = ON")
        return db
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"cannot be used as a results database ({exc})") from None


def record(db_path: Path, run: dict[str, Any], label: str | None) -> str:
    """Write *run* (``runs.result.RunResult.to_json``) under *label*; returns its run id."""
    db = open_db(db_path, create=True)
    rid = run_id(run["trace"])
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
