"""``analyze --json`` documents as flat tables: one row per report, device, copy stream, layer, step.

A column is the JSON path of a value, nested keys joined with ``.``
(``copies.offload.exposed_ns``), so every key ``analyze --json`` gains shows
up as a column with no change here.  A list of objects becomes a child table
(``devices_streams``, ``layers_top_kernels``, ``findings``) whose rows carry their parent's
key columns and their ``position`` in the list; a list of plain values stays
a list column (``window_ns``, ``classes``); an empty list is null.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

Rows = dict[str, list[dict[str, Any]]]

# Tables every output has, with their key columns (written even when empty).
TABLES: dict[str, tuple[str, ...]] = {
    "reports": ("file", "rank"),
    "devices": ("file", "rank", "device"),
    "devices_streams": ("file", "rank", "device", "position"),
    "layers": ("file", "rank", "name", "device"),
    "steps": ("file", "rank", "name", "device"),
}
# Child tables with a shorter name than ``<table>_<path>``.
CHILD_NAMES = {"reports_findings_findings": "findings", "reports_findings_skipped": "findings_skipped"}


def flatten(doc: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Values by dotted path, and the lists of objects by dotted path (for child tables)."""
    flat: dict[str, Any] = {}
    children: dict[str, list[dict[str, Any]]] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            sub, kids = flatten(value, path + ".")
            flat.update(sub)
            children.update(kids)
        elif isinstance(value, list | tuple):
            if not value:
                continue
            if all(isinstance(v, dict) for v in value):
                children[path] = list(value)
            else:
                flat[path] = list(value)
        else:
            flat[path] = value
    return flat, children


def _emit(out: Rows, table: str, keys: dict[str, Any], doc: dict[str, Any], child_keys: dict[str, Any]) -> None:
    """One row of *table* from *doc*; its lists of objects go to ``<table>_<path>`` tables."""
    flat, children = flatten(doc)
    out[table].append({**keys, **flat})
    for path, items in children.items():
        child = f"{table}_{path.replace('.', '_')}"
        child = CHILD_NAMES.get(child, child)
        for i, item in enumerate(items):
            _emit(out, child, {**child_keys, "position": i}, item, {**child_keys, "position": i})


def report_rows(
    ident: dict[str, Any],
    plain: dict[str, Any],
    layers: dict[str, Any],
    steps: dict[str, Any],
    about: dict[str, Any] | None = None,
) -> Rows:
    """The rows of one report from its three documents: ``analyze --json`` (*plain*),
    ``analyze --by layer --json`` (*layers*) and ``analyze --by step --json`` (*steps*);
    *about* adds columns to the report's row (the input path)."""
    out: Rows = defaultdict(list)
    trace = dict(plain.get("trace") or {})
    gpus = trace.pop("gpus", None) or {}
    # the report: everything at the top of the plain document but the devices, the attribution
    # facts of the views, and the step summary (the steps themselves are rows of `steps`)
    top = {k: v for k, v in plain.items() if k not in ("trace", "devices")}
    summary = {k: v for k, v in (steps.get("steps") or {}).items() if k not in ("steps", "excluded")}
    _emit(
        out,
        "reports",
        {**ident, **(about or {})},
        {"trace": trace, **top, "attribution": layers.get("attribution") or {}, "steps": summary},
        ident,
    )
    for dev, d in plain.get("devices", {}).items():
        keys = {**ident, "device": dev}
        _emit(out, "devices", {**keys, "gpu": gpus.get(dev)}, d, keys)
    for entry in layers.get("layers") or []:
        keys = {**ident, "name": entry["name"], "device": entry["device"]}
        body = {k: v for k, v in entry.items() if k not in ("name", "device")}
        _emit(out, "layers", keys, body, {**ident, "layer": entry["name"], "device": entry["device"]})
    for step in (steps.get("steps") or {}).get("steps", []):
        head = {k: v for k, v in step.items() if k not in ("name", "devices")}
        per_device = step.get("devices") or {None: None}
        for dev, copies in per_device.items():
            keys = {**ident, "name": step["name"], "device": dev}
            _emit(out, "steps", keys, {**head, "copies": copies or {}}, {**ident, "step": step["name"], "device": dev})
    return dict(out)


def merge(parts: list[Rows]) -> Rows:
    """The rows of many reports, table by table (the fixed tables always present)."""
    out: Rows = {name: [] for name in TABLES}
    for part in parts:
        for table, rows in part.items():
            out.setdefault(table, []).extend(rows)
    return out


def columns(table: str, rows: list[dict[str, Any]]) -> list[str]:
    """Key columns first, then every other column in order of first appearance."""
    keys = TABLES.get(table, ())
    seen = dict.fromkeys(keys)
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def to_arrow(table: str, rows: list[dict[str, Any]]) -> Any:
    """A pyarrow Table; each column's type is inferred from all its values (nulls allowed)."""
    import pyarrow as pa

    names = columns(table, rows)
    return pa.table({c: pa.array([r.get(c) for r in rows]) for c in names} if names else {})


def write(rows: Rows, folder: Path, csv: bool = False) -> list[Path]:
    """``<table>.parquet`` (and ``.csv``) per table into *folder*; the paths written."""
    import pyarrow.parquet as pq

    written = []
    for table, table_rows in rows.items():
        arrow = to_arrow(table, table_rows)
        path = folder / f"{table}.parquet"
        pq.write_table(arrow, path)
        written.append(path)
        if csv:
            path = folder / f"{table}.csv"
            arrow.to_pandas().to_csv(path, index=False)
            written.append(path)
    return written
