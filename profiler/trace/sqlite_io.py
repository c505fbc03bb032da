"""Read-only access to an SQLite file: validation and fast column reads.

Every connection is opened with ``mode=ro&immutable=1``: SQLite then never
writes, locks or creates anything beside the file.  Columns are read through
the ADBC SQLite driver (Arrow batches, the GIL released), split by rowid
across threads for big tables; plain ``sqlite3`` is the fallback for what ADBC
refuses (mixed column types, text that is not UTF-8).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from profiler.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
# Tables large enough to be worth reading in parallel pieces.
PARALLEL_MIN_ROWS = 200_000
# Rows per Arrow batch from the SQLite driver (its default, 1,024, leaves a big table in thousands of
# small buffers: slower to gather and to free)
BATCH_ROWS = 65_536
# Threads per big read; a worker among others on the same cores reads on one (``set_read_threads``).
_read_threads = 2


def set_read_threads(n: int) -> int:
    """How many threads one big table read may use (1: read on the calling thread); returns
    the previous setting."""
    global _read_threads
    prev, _read_threads = _read_threads, max(1, n)
    return prev


def ro_uri(path: Path) -> str:
    """A ``file:`` URI that opens *path* strictly read-only."""
    return Path(os.path.abspath(path)).as_uri() + "?mode=ro&immutable=1"


def connect_ro(path: Path) -> sqlite3.Connection:
    """Open *path* read-only with the standard library driver."""
    con = sqlite3.connect(ro_uri(path), uri=True, check_same_thread=False)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def check_sqlite_file(path: Path) -> None:
    """Raise InputError unless *path* is a complete SQLite database file."""
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if path.is_dir():
        raise InputError(path, "is a directory, not a trace file")
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise InputError(path, "is empty")
    if header.startswith(b"PK\x03\x04"):
        why = (
            "is a zip archive, not an nsys export (an nsys-jax archive: profile-step pgle and plan --calibrate read it)"
        )
        raise InputError(path, why)
    if not header.startswith(SQLITE_MAGIC):
        raise InputError(path, "is not an SQLite database (nor an nsys report)")
    if len(header) < 100:
        raise InputError(path, "is truncated (incomplete SQLite header)")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, n_pages = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    if n_pages and valid_for == change_counter and size < n_pages * page_size:
        raise InputError(path, f"is truncated ({size} bytes, the header promises {n_pages * page_size})")


def table_columns(con: sqlite3.Connection) -> dict[str, list[str]]:
    """Every table of the database with its column names."""
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in tables}


def _read_adbc(uri: str, sql: str) -> pl.DataFrame:
    """One query through the ADBC driver manager's low-level API: an Arrow C
    stream that polars imports directly (no pyarrow/pandas import cost)."""
    import adbc_driver_manager as adbc
    import adbc_driver_sqlite

    with (
        adbc.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=uri) as db,
        adbc.AdbcConnection(db) as con,
        adbc.AdbcStatement(con) as stmt,
    ):
        with contextlib.suppress(Exception):  # a driver without the option: its own batch size
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        stmt.set_sql_query(sql)
        stream, _ = stmt.execute_query()
        df = pl.DataFrame(stream)
    for name, dtype in df.schema.items():
        if dtype == pl.String:  # SQLite text need not be UTF-8: refuse it here, not later
            df.get_column(name).cast(pl.Binary).cast(pl.String, strict=True)
    return df


def _read_sqlite3(path: Path, sql: str, names: Sequence[str]) -> pl.DataFrame:
    con = connect_ro(path)
    try:
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    return pl.DataFrame(rows, schema=list(names), orient="row", infer_schema_length=None)


def _read_one(path: Path, sql: str, names: Sequence[str]) -> pl.DataFrame:
    try:
        return _read_adbc(ro_uri(path), sql)
    except Exception:  # ADBC refuses mixed types and bad UTF-8: the slow path takes all
        return _read_sqlite3(path, sql, names)


def read_columns(
    path: Path,
    table: str,
    exprs: dict[str, str],
    schema: dict[str, pl.DataType],
    where: str = "",
    n_rows: int | None = None,
) -> pl.DataFrame:
    """Read ``SELECT expr AS name, ...`` from *table* into a frame of *schema*.

    *exprs* maps output names to SQL expressions (a column, ``NULL``, ...).
    Big tables are read in rowid slices on two threads.
    """
    select = ", ".join(f"{e} AS {n}" for n, e in exprs.items())
    base = f'SELECT {select} FROM "{table}"'
    names = list(exprs)
    pieces: list[str]
    if n_rows is not None and n_rows >= PARALLEL_MIN_ROWS and _read_threads > 1:
        lo, hi = _rowid_bounds(path, table)
        mid = (lo + hi) // 2
        cond = f"({where}) AND " if where else ""
        pieces = [
            f"{base} WHERE {cond}rowid <= {mid}",
            f"{base} WHERE {cond}rowid > {mid}",
        ]
    else:
        pieces = [f"{base} WHERE {where}" if where else base]
    if len(pieces) == 1:
        frames = [_read_one(path, pieces[0], names)]
    else:
        with ThreadPoolExecutor(len(pieces)) as pool:
            frames = list(pool.map(lambda q: _read_one(path, q, names), pieces))
    frames = [_conform(f, names, schema) for f in frames]
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def read_query(path: Path, sql: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """The rows of one SELECT (its columns named as *schema*, in order) as a frame of *schema*."""
    names = list(schema)
    return _conform(_read_one(path, sql, names), names, schema)


def _rowid_bounds(path: Path, table: str) -> tuple[int, int]:
    con = connect_ro(path)
    try:
        # two subqueries: each is one b-tree descent; min and max in one SELECT scan the table
        lo, hi = con.execute(
            f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")'
        ).fetchone()
    finally:
        con.close()
    return int(lo or 0), int(hi or 0)


def _conform(df: pl.DataFrame, names: Sequence[str], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Give *df* exactly the columns and dtypes of *schema* (NULL-only columns included)."""
    df.columns = list(names)
    out = []
    for name in names:
        dtype = schema[name]
        col = df.get_column(name)
        if col.dtype == pl.Null or len(col) == 0:
            col = pl.Series(name, [None] * len(col), dtype=dtype)
        elif col.dtype == pl.Binary and dtype == pl.String:  # BLOBs where text was expected
            col = pl.Series(name, [None if v is None else v.decode("utf-8", "replace") for v in col], dtype=pl.String)
        elif col.dtype != dtype:
            col = col.cast(dtype, strict=False)
        out.append(col)
    return pl.DataFrame(out)


def estimate_rows(con: sqlite3.Connection, table: str) -> int:
    """About how many rows *table* holds: its largest rowid (one b-tree descent; exact
    for nsys exports, which never delete), else a count."""
    try:
        top = con.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    except sqlite3.OperationalError:  # a WITHOUT ROWID table
        top = None
    if top is not None:
        return int(top)
    return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
