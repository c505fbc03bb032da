"""One loader for every Nsight Systems SQLite export (nsys 2022.4 to 2026.x).

``open_trace(path)`` validates the file and returns a ``Trace`` whose
properties are typed polars frames, read on first use.  Schema differences
between nsys versions are handled here and nowhere else: tables that are
absent give empty frames, columns that are absent read as NULL, renamed
columns are found under their other names.

A trace is read through its analysis window (``window.py``): when the
recording marks one (the ``profile-step:capture`` range, a cudaProfilerStart/
Stop span, or what the run's ``--capture-range`` names), every frame holds
only what happened inside it; without one, the whole export as it is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import polars as pl

from profiler.errors import InputError
from profiler.trace import sqlite_io
from profiler.trace import window as windows
from profiler.trace.jax_profile import SOURCE as JAX_SOURCE
from profiler.trace.jax_profile import SOURCE_KEY
from profiler.trace.jax_profile import WAITS_KEY as JAX_WAITS_KEY

I64 = pl.Int64
STR = pl.String

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
CONTEXT_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)  # the GPU activity tables, whose contexts name devices
CONTEXT_COLUMN = "_context"  # the contextId, read beside a GPU activity table's columns for ``context_devices``
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
EVENT_TABLE = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
UNSET_ID = 4294967295  # CUPTI's "no stream" / "no event" in synchronization rows
# Tables only an nsys export has; one of them is enough to recognise one.
NSYS_MARKER_TABLES = (
    "META_DATA_EXPORT",
    "StringIds",
    "TARGET_INFO_GPU",
    KERNEL_TABLE,
    MEMCPY_TABLE,
    RUNTIME_TABLE,
    NVTX_TABLE,
)

# Logical column -> names it has had across nsys versions (first found wins).
ALIASES: dict[str, tuple[str, ...]] = {
    "deviceId": ("deviceId", "device", "deviceID"),
    "streamId": ("streamId", "stream", "streamID"),
    "correlationId": ("correlationId", "correlationID"),
    "globalPid": ("globalPid", "globalTid", "processId"),
    "globalTid": ("globalTid", "globalThreadId"),
    "shortName": ("shortName", "name"),
    "demangledName": ("demangledName", "demangled", "mangledName"),
    "bytes": ("bytes", "size"),
    "copyKind": ("copyKind", "kind"),
    "srcKind": ("srcKind", "srcMemKind"),
    "dstKind": ("dstKind", "dstMemKind"),
    "nameId": ("nameId", "name"),
    "textId": ("textId",),
    "text": ("text",),
    "domainId": ("domainId",),
    "endGlobalTid": ("endGlobalTid",),
    "rangeId": ("rangeId",),
    "eventType": ("eventType",),
    "eventId": ("eventId",),
    "syncType": ("syncType",),
    "contextId": ("contextId",),
}

# copyKind (ENUM_CUDA_MEMCPY_OPER) -> copy class of METRICS.md.
COPY_CLASSES = ("h2d", "d2h", "d2d", "p2p", "other")
_COPY_KIND_CLASS = {1: "h2d", 2: "d2h", 8: "d2d", 10: "p2p"}
# ENUM_CUDA_MEM_KIND of the host side of h2d / d2h copies.
HOST_KINDS = {0: "pageable", 1: "pinned"}
# NVTX_EVENTS.eventType values.
NVTX_PUSH_POP, NVTX_START_END, NVTX_MARK = 59, 60, 34
NVTX_DOMAIN_CREATE = 75


# Columns every GPU activity table shares: output name -> (logical column, dtype).
OP_SPEC: dict[str, tuple[str, pl.DataType]] = {
    "device": ("deviceId", I64),
    "stream": ("streamId", I64),
    "start": ("start", I64),
    "end": ("end", I64),
    "correlation_id": ("correlationId", I64),
    "global_pid": ("globalPid", I64),
}
KERNEL_NAME_SPEC: dict[str, tuple[str, pl.DataType]] = {
    "short_id": ("shortName", I64),
    "demangled_id": ("demangledName", I64),
}
# A kernel's launch shape (NULL in an export without these columns); 32 bits: CUDA's limits
# (grid x below 2^31, the other sizes below 2^16) fit, and a million kernels hold 24 MB less.
SHAPE_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
KERNEL_SHAPE_SPEC: dict[str, tuple[str, pl.DataType]] = {
    "grid_x": ("gridX", pl.Int32),
    "grid_y": ("gridY", pl.Int32),
    "grid_z": ("gridZ", pl.Int32),
    "block_x": ("blockX", pl.Int32),
    "block_y": ("blockY", pl.Int32),
    "block_z": ("blockZ", pl.Int32),
}


def _pid(expr: pl.Expr) -> pl.Expr:
    """The process id packed in bits 24..47 of a serialized GlobalId."""
    return (expr // (1 << 24)) % (1 << 24)


def _context_rows(df: pl.DataFrame, gpid: str, device: str) -> pl.DataFrame:
    """The distinct (pid, context, device) of a GPU activity table's rows (``CONTEXT_COLUMN``)."""
    return df.select(
        _pid(pl.col(gpid)).alias("pid"), pl.col(CONTEXT_COLUMN).alias("context"), pl.col(device).alias("device")
    ).unique()


def _call_key(gtid: pl.Expr, corr: pl.Expr) -> pl.Expr:
    """(pid << 32) + correlation id, as ``_launched_in_window``'s SQL packs a row's call (for ids
    >= 0, correlation ids below 2^32: no overflow)."""
    return _pid(gtid) * (1 << 32) + corr


def _kept_by_calls(df: pl.DataFrame, calls: pl.Series, bounds: tuple[int, int], has_start: bool) -> pl.DataFrame | None:
    """The rows of *df* (with ``_gpid``, ``_corr``, ``_start``) ``_launched_in_window`` keeps when
    *calls* are the keys of every CUDA call, all started in the window: a call among them, or a
    start in the window (the helper columns dropped); None where a key could differ from SQL's."""
    in_range = pl.col("_gpid").is_null() | (pl.col("_gpid") >= 0)
    in_range &= pl.col("_corr").is_null() | pl.col("_corr").is_between(0, (1 << 32) - 1)
    if not df.select(in_range.all()).item():
        return None
    t0, t1 = bounds
    key = _call_key(pl.col("_gpid"), pl.col("_corr")).fill_null(-1)
    in_time = (pl.col("_start") >= t0) & (pl.col("_start") < t1) if has_start else pl.lit(False)
    keep = key.is_in(calls.implode()) | in_time.fill_null(False)
    return df.filter(keep).drop("_gpid", "_corr", "_start")


def _tid(expr: pl.Expr) -> pl.Expr:
    """The thread id packed in bits 0..23 of a serialized GlobalId."""
    return expr % (1 << 24)


def _pid_tid() -> tuple[pl.Expr, pl.Expr]:
    """The ``pid`` and ``tid`` columns of a table's ``global_tid``."""
    return _pid(pl.col("global_tid")).alias("pid"), _tid(pl.col("global_tid")).alias("tid")


def nccl_flag(name: pl.Expr) -> pl.Expr:
    """METRICS.md: a kernel is NCCL when its name, less a leading ``void ``, starts with nccl."""
    return name.str.strip_prefix("void ").str.to_lowercase().str.starts_with("nccl").fill_null(False)


def copy_class(kind: pl.Expr) -> pl.Expr:
    """METRICS.md copy direction from ``copyKind`` (a chain of comparisons: cheaper than a lookup)."""
    out = pl.when(False).then(pl.lit(None, STR))
    for code, name in _COPY_KIND_CLASS.items():
        out = out.when(kind == code).then(pl.lit(name))
    return out.otherwise(pl.lit("other"))


def host_kind(kind: pl.Expr, src_kind: pl.Expr, dst_kind: pl.Expr) -> pl.Expr:
    """The memory kind of the host side of an h2d (source) or d2h (destination) copy;
    ``other`` for other copies and unknown kinds."""
    side = pl.when(kind == 1).then(src_kind).when(kind == 2).then(dst_kind)
    out = pl.when(False).then(pl.lit(None, STR))
    for code, name in HOST_KINDS.items():
        out = out.when(side == code).then(pl.lit(name))
    return out.otherwise(pl.lit("other"))


@dataclass
class Trace:
    """An opened export; each frame is read on first access and kept."""

    path: Path
    tables: dict[str, list[str]] = field(repr=False)
    row_counts: dict[str, int] = field(repr=False)
    meta: dict[str, str] = field(default_factory=dict, repr=False)
    window_spec: str = "auto"  # see window.py: auto, all, nvtx:NAME, cuda-profiler-api
    origin: Path | None = None  # the file the user named when this export was made from it (a report, a JAX trace)
    _launches: dict[tuple[str, ...], pl.DataFrame] = field(default_factory=dict, repr=False)
    _inside: dict[str, bool] = field(default_factory=dict, repr=False)  # ``_all_in_window``, per table
    # per GPU activity table read whole: its distinct (pid, context, device), for ``context_devices``
    _contexts: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)

    # --- export facts -------------------------------------------------------
    @property
    def source_path(self) -> Path:
        """The trace as the user named it: the report or JAX trace this export was made from, else the
        export itself; its folder is the run folder (manifest, compiled step)."""
        return self.origin or self.path

    @property
    def nsys_version(self) -> str | None:
        return self.meta.get("EXPORT_PRODUCT_VERSION")

    @property
    def schema_version(self) -> str | None:
        return self.meta.get("EXPORT_SCHEMA_VERSION")

    @property
    def source(self) -> str | None:
        """What the export was converted from (a JAX profiler trace), None for nsys's own export."""
        return self.meta.get(SOURCE_KEY)

    @property
    def waits_recorded(self) -> bool:
        """Whether the recording could hold CUDA event records and stream waits: an nsys export can
        (a missing table means none happened); a converted JAX profiler trace cannot, but a TPU's,
        whose done waits are its stream waits (``jax_profile.WAITS_KEY``)."""
        return self.source != JAX_SOURCE or bool(self.meta.get(JAX_WAITS_KEY))

    def has(self, table: str) -> bool:
        return table in self.tables

    # --- helpers ------------------------------------------------------------
    def _col(self, table: str, logical: str) -> str:
        """SQL for a logical column of *table*: its present name, or NULL."""
        cols = self.tables.get(table, [])
        for name in ALIASES.get(logical, (logical,)):
            if name in cols:
                return f'"{name}"'
        return "NULL"

    def _read(self, table: str, spec: dict[str, tuple[str, pl.DataType]], where: str = "") -> pl.DataFrame:
        """Read logical columns ``out_name -> (logical column, dtype)`` of *table* (rows matching
        the SQL condition *where*, if given)."""
        schema = {name: dtype for name, (_, dtype) in spec.items()}
        if table not in self.tables:
            return pl.DataFrame(schema=schema)
        keys = self._context_keys(table, spec, where)
        if keys is not None:
            spec = {**spec, CONTEXT_COLUMN: ("contextId", I64)}
            schema[CONTEXT_COLUMN] = I64
        exprs = {name: self._col(table, logical) for name, (logical, _) in spec.items()}
        try:
            df = sqlite_io.read_columns(self.path, table, exprs, schema, where=where, n_rows=self.row_counts.get(table))
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"table {table} cannot be read ({exc})") from None
        if keys is None:
            return df
        self._contexts[table] = _context_rows(df, *keys)
        return df.drop(CONTEXT_COLUMN)

    def _context_keys(self, table: str, spec: dict[str, tuple[str, pl.DataType]], where: str) -> tuple[str, str] | None:
        """The columns of *spec* that hold the process and device of a read of *table* that also
        takes its contexts for ``context_devices`` (a GPU activity table read whole, with a
        contextId, not taken yet); None for any other read."""
        if where or table not in CONTEXT_TABLES or table in self._contexts or self._col(table, "contextId") == "NULL":
            return None
        named = {logical: name for name, (logical, _) in spec.items()}
        if "globalPid" not in named or "deviceId" not in named:
            return None
        return named["globalPid"], named["deviceId"]

    def _strings(self, *ids: pl.Series) -> pl.DataFrame:
        """The StringIds rows (id, value) for the ids in *ids* (NULLs ignored)."""
        wanted = pl.concat([i.cast(I64) for i in ids]).drop_nulls().unique()
        if wanted.len() == 0:
            return self._read_strings("0")
        if wanted.len() <= 20_000:
            return self._read_strings(f"id IN ({','.join(map(str, wanted.to_list()))})")
        return self._all_strings.filter(pl.col("id").is_in(wanted.implode()))

    @cached_property
    def _all_strings(self) -> pl.DataFrame:
        """The whole StringIds table (id, value)."""
        return self._read_strings()

    def _read_strings(self, where: str = "") -> pl.DataFrame:
        if "StringIds" not in self.tables or where == "0":
            return pl.DataFrame(schema={"id": I64, "value": STR})
        try:
            return sqlite_io.read_columns(
                self.path, "StringIds", {"id": "id", "value": "value"}, {"id": I64, "value": STR}, where=where
            )
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"StringIds cannot be read ({exc})") from None

    # --- the analysis window ------------------------------------------------
    @cached_property
    def window(self) -> windows.Window:
        """The part of the recording every frame is read from (``window.py``)."""
        return windows.find(self, self.window_spec)

    def _started_in_window(self, table: str) -> str:
        """SQL: rows of *table* that started inside the window ("" without one)."""
        if not self.window.active:
            return ""
        t0, t1 = self.window.bounds
        start = self._col(table, "start")
        return f"({start} >= {t0} AND {start} < {t1})" if start != "NULL" else "0"

    def _all_in_window(self, table: str) -> bool:
        """Whether every row of *table* started inside the window (a start, and in it): one scan,
        cheaper than the search of every row's CUDA call in ``_launched_in_window``."""
        if table not in self._inside:
            cond = self._started_in_window(table)
            sql = f'SELECT COUNT(*) > 0 AND COUNT(*) = SUM({cond}) FROM "{table}"'
            try:
                con = sqlite_io.connect_ro(self.path)
                try:
                    self._inside[table] = bool(con.execute(sql).fetchone()[0])
                finally:
                    con.close()
            except sqlite3.DatabaseError as exc:
                raise InputError(self.path, f"table {table} cannot be read ({exc})") from None
        return self._inside[table]

    def _whole_window(self, table: str) -> bool:
        """Whether every row of *table* and every CUDA call started in the window (both tables there)."""
        both = RUNTIME_TABLE in self.tables and table in self.tables
        return both and self._all_in_window(table) and self._all_in_window(RUNTIME_TABLE)

    def _searches_calls(self, table: str) -> bool:
        """Whether ``_launched_in_window(table)`` keeps rows by a search of every CUDA call."""
        in_time = self._started_in_window(table)
        cols = (self._col(table, "correlationId"), self._col(table, "globalPid"))
        cols += (self._col(RUNTIME_TABLE, "correlationId"), self._col(RUNTIME_TABLE, "globalTid"))
        if not in_time or "NULL" in cols:
            return False
        return in_time == "0" or not self._whole_window(table)

    def _read_launched(
        self, table: str, spec: dict[str, tuple[str, pl.DataType]], runtime: pl.DataFrame | None
    ) -> pl.DataFrame:
        """``_read`` of the rows ``_launched_in_window(table)`` keeps.  Where that is a search of every
        CUDA call and *runtime* (``runtime``'s rows) holds every call (all started in the window),
        the rows are read whole and kept by their calls' keys in *runtime*: the same rows, without
        SQL's index of every call (seconds at millions of calls)."""
        calls = self._call_keys(table, runtime)
        if calls is not None:
            extra = {"_gpid": ("globalPid", I64), "_corr": ("correlationId", I64), "_start": ("start", I64)}
            df = self._read(table, {**spec, **extra})
            kept = _kept_by_calls(df, calls, self.window.bounds, self._col(table, "start") != "NULL")
            if kept is not None:
                return kept
        return self._read(table, spec, self._launched_in_window(table))

    def _call_keys(self, table: str, runtime: pl.DataFrame | None) -> pl.Series | None:
        """The (pid, correlation id) keys of every CUDA call, packed as ``_launched_in_window``
        packs them, from *runtime* when it holds every call with keys in range; else None."""
        if runtime is None or table not in self.tables or not self._searches_calls(table):
            return None
        if not self._all_in_window(RUNTIME_TABLE):
            return None
        known = runtime.filter(pl.col("correlation_id").is_not_null() & pl.col("global_tid").is_not_null())
        in_range = (pl.col("global_tid") >= 0) & pl.col("correlation_id").is_between(0, (1 << 32) - 1)
        if not known.select(in_range.all()).item():
            return None
        return known.select(_call_key(pl.col("global_tid"), pl.col("correlation_id")))[:, 0]

    def _launched_in_window(self, table: str) -> str:
        """SQL: GPU activity rows whose CUDA call (same process, same correlation id) started in
        the window, and rows with no such call that started in it themselves ("" without one).

        A window around the whole recording (every CUDA call and every row of *table* started
        in it) keeps every row: then no condition is read (every row's call, if it has one, is
        in the window, and a row without one started in it)."""
        in_time = self._started_in_window(table)
        corr, gpid = self._col(table, "correlationId"), self._col(table, "globalPid")
        r_corr, r_tid = self._col(RUNTIME_TABLE, "correlationId"), self._col(RUNTIME_TABLE, "globalTid")
        if not in_time or "NULL" in (corr, gpid, r_corr, r_tid):
            return in_time
        if not self._searches_calls(table):
            return ""
        t0, t1 = self.window.bounds
        key = f"COALESCE(((({gpid} >> 24) & 16777215) << 32) + {corr}, -1)"
        calls = (
            f"SELECT ((({r_tid} >> 24) & 16777215) << 32) + {r_corr} FROM {RUNTIME_TABLE} "
            f"WHERE {r_corr} IS NOT NULL AND {r_tid} IS NOT NULL"
        )
        return f"({key} IN ({calls} AND start >= {t0} AND start < {t1}) OR ({in_time} AND {key} NOT IN ({calls})))"

    def nvtx_ranges_named(self, name: str, domain: str | None) -> pl.DataFrame:
        """Push/pop and start/end ranges whose message is *name* in *domain* (``""``: the default
        domain; None: any): start, end (NULL when never closed), sorted by start; read from the
        whole recording."""
        if NVTX_TABLE not in self.tables:
            return pl.DataFrame(schema={"start": I64, "end": I64})
        quoted = "'" + name.replace("'", "''") + "'"
        text, text_id = self._col(NVTX_TABLE, "text"), self._col(NVTX_TABLE, "textId")
        match = [f"{text} = {quoted}"] if text != "NULL" else []
        if text_id != "NULL" and "StringIds" in self.tables:
            match.append(f"{text_id} IN (SELECT id FROM StringIds WHERE value = {quoted})")
        if not match:
            return pl.DataFrame(schema={"start": I64, "end": I64})
        kind = self._col(NVTX_TABLE, "eventType")
        where = f"{kind} IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND ({' OR '.join(match)})"
        spec = {"start": ("start", I64), "end": ("end", I64), "domain_id": ("domainId", I64)}
        rows = self._read(NVTX_TABLE, spec, where)
        if domain is not None:
            named = self._domains.filter(pl.col("domain").is_not_null())
            ids = named.filter(pl.col("domain") == domain)["domain_id"]
            in_domain = pl.col("domain_id").is_in(ids.implode())
            rows = rows.filter(in_domain if domain else ~pl.col("domain_id").is_in(named["domain_id"].implode()))
        return rows.select("start", "end").sort("start")

    def runtime_named(self, prefixes: tuple[str, ...]) -> pl.DataFrame:
        """CUDA API calls whose name starts with one of *prefixes* (nsys adds ``_v3020``-style
        suffixes): start, end, sorted by start; read from the whole recording."""
        name_id = self._col(RUNTIME_TABLE, "nameId")
        if RUNTIME_TABLE not in self.tables or name_id == "NULL" or "StringIds" not in self.tables:
            return pl.DataFrame(schema={"start": I64, "end": I64})
        like = " OR ".join(f"value LIKE '{p}%'" for p in prefixes)
        empty = pl.DataFrame(schema={"start": I64, "end": I64})
        try:  # the names first (a small table): most recordings never call these, and then
            con = sqlite_io.connect_ro(self.path)  # the big runtime table is not scanned at all
            try:
                ids = [int(r[0]) for r in con.execute(f"SELECT id FROM StringIds WHERE {like}")]
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"StringIds cannot be read ({exc})") from None
        if not ids:
            return empty
        return self._read(RUNTIME_TABLE, {"start": ("start", I64), "end": ("end", I64)}, self._named(ids)).sort("start")

    def _named(self, ids: list[int]) -> str:
        """The WHERE clause of the runtime rows whose name is one of the StringIds *ids* (none: ``0``)."""
        name_id = self._col(RUNTIME_TABLE, "nameId")  # "NULL" in an export without names: nothing matches
        return f"{name_id} IN ({','.join(map(str, ids))})" if ids and name_id != "NULL" else "0"

    @property
    def has_cuda_calls(self) -> bool:
        """Whether the recording holds any CUDA API call (none: no CUDA runtime or driver ran)."""
        return self.row_counts.get(RUNTIME_TABLE, 0) > 0

    # --- GPU activity -------------------------------------------------------
    @cached_property
    def kernels(self) -> pl.DataFrame:
        """device, stream, start, end, correlation_id, pid, name, is_nccl, and the launch shape
        (``SHAPE_COLUMNS``: grid_x .. block_z)."""
        spec = {**OP_SPEC, **KERNEL_NAME_SPEC, **KERNEL_SHAPE_SPEC}
        raw = self._read(KERNEL_TABLE, spec, self._launched_in_window(KERNEL_TABLE))
        return self._named_kernels(raw, names=True).select(
            "device",
            "stream",
            "start",
            "end",
            "correlation_id",
            _pid(pl.col("global_pid")).alias("pid"),
            "name",
            "is_nccl",
            *SHAPE_COLUMNS,
        )

    @cached_property
    def kernel_spans(self) -> pl.DataFrame:
        """device, start, end, is_nccl: what the device metrics need, read alone when
        ``kernels`` has not been read (fewer columns, no names), else taken from it."""
        for wider in ("kernels", "kernel_ops"):
            if wider in self.__dict__:
                return self.__dict__[wider].select("device", "start", "end", "is_nccl")
        spec = {k: OP_SPEC[k] for k in ("device", "start", "end")}
        raw = self._read(KERNEL_TABLE, {**spec, **KERNEL_NAME_SPEC}, self._launched_in_window(KERNEL_TABLE))
        return self._named_kernels(raw, names=False).select("device", "start", "end", "is_nccl")

    @cached_property
    def kernel_ops(self) -> pl.DataFrame:
        """device, stream, start, end, correlation_id, pid, is_nccl: kernels as the dependency
        analysis needs them (no names), taken from ``kernels`` when that was read."""
        cols = ("device", "stream", "start", "end", "correlation_id", "pid", "is_nccl")
        if "kernels" in self.__dict__:
            return self.kernels.select(cols)
        raw = self._read(KERNEL_TABLE, {**OP_SPEC, **KERNEL_NAME_SPEC})
        named = self._named_kernels(raw, names=False)
        return named.with_columns(_pid(pl.col("global_pid")).alias("pid")).select(cols)

    def _named_kernels(self, raw: pl.DataFrame, names: bool) -> pl.DataFrame:
        """*raw* with ``is_nccl`` (and ``name`` if asked): the short name, else the demangled one.

        When every short name id resolves (the usual case), both come from a
        lookup by short name id; otherwise each distinct (short, demangled)
        pair is resolved and joined back.
        """
        ids = raw["short_id"]
        short = self._strings(ids.drop_nulls().unique())
        if ids.null_count() == 0 and ids.is_in(short["id"].implode()).all():
            lookup = short.select("id", pl.col("value").alias("name"), nccl_flag(pl.col("value")).alias("is_nccl"))
            by_id = pl.col("short_id").replace_strict
            cols = [by_id(lookup["id"], lookup["is_nccl"], default=False, return_dtype=pl.Boolean).alias("is_nccl")]
            if names:
                cols.append(by_id(lookup["id"], lookup["name"], default=None, return_dtype=STR).alias("name"))
            return raw.with_columns(cols)
        pairs = raw.select("short_id", "demangled_id").unique()
        strings = self._strings(pairs["short_id"], pairs["demangled_id"])
        name = pl.coalesce("short", "demangled")
        pairs = (
            pairs.join(strings.rename({"id": "short_id", "value": "short"}), on="short_id", how="left")
            .join(strings.rename({"id": "demangled_id", "value": "demangled"}), on="demangled_id", how="left")
            .select("short_id", "demangled_id", name.alias("name"), nccl_flag(name).alias("is_nccl"))
        )
        return raw.join(pairs, on=["short_id", "demangled_id"], how="left", nulls_equal=True)

    @cached_property
    def copies(self) -> pl.DataFrame:
        """device, stream, start, end, correlation_id, pid, bytes, copy_kind, cls,
        src_kind, dst_kind, host_kind."""
        spec = {
            **OP_SPEC,
            "bytes": ("bytes", I64),
            "copy_kind": ("copyKind", I64),
            "src_kind": ("srcKind", I64),
            "dst_kind": ("dstKind", I64),
        }
        df = self._read(MEMCPY_TABLE, spec, self._launched_in_window(MEMCPY_TABLE))
        kind = pl.col("copy_kind")
        return df.with_columns(
            _pid(pl.col("global_pid")).alias("pid"),
            copy_class(kind).alias("cls"),
            host_kind(kind, pl.col("src_kind"), pl.col("dst_kind")).alias("host_kind"),
        ).drop("global_pid")

    @cached_property
    def memsets(self) -> pl.DataFrame:
        """device, stream, start, end, correlation_id, pid, bytes."""
        df = self._read(MEMSET_TABLE, {**OP_SPEC, "bytes": ("bytes", I64)}, self._launched_in_window(MEMSET_TABLE))
        return df.with_columns(_pid(pl.col("global_pid")).alias("pid")).drop("global_pid")

    def active_devices(self) -> list[int]:
        """The deviceIds that ran a kernel, a copy or a memset in the window (``--device`` picks one of
        these; TARGET_INFO_GPU may list every GPU of the node, or none)."""
        ids = pl.concat([t.select("device") for t in (self.kernels, self.copies, self.memsets)])
        return sorted(ids["device"].drop_nulls().unique().to_list())

    # --- CUDA events: records and stream waits -----------------------------
    @cached_property
    def context_devices(self) -> pl.DataFrame:
        """pid, context, device: the one device that ran the ops (kernels, copies, memsets) of each
        CUDA context in its process, over the whole recording; contexts with no op, or ops of
        several devices, are left out (METRICS.md, Stalls, Inputs)."""
        schema = {"pid": I64, "context": I64, "device": I64}
        read = self._contexts_read()
        if read is not None:
            one = pl.col("device").n_unique() == 1
            return (
                read.group_by("pid", "context")
                .agg(pl.col("device").min(), one.alias("_one"))
                .filter("_one")
                .drop("_one")
                .sort("pid", "context")
            )
        parts = []
        for table in CONTEXT_TABLES:
            cols = [self._col(table, c) for c in ("globalPid", "contextId", "deviceId")]
            if table in self.tables and "NULL" not in cols:
                gpid, ctx, dev = cols
                pid = f"(({gpid} >> 24) & 16777215)"
                parts.append(f'SELECT DISTINCT {pid} AS pid, {ctx} AS context, {dev} AS device FROM "{table}"')
        if not parts:
            return pl.DataFrame(schema=schema)
        sql = (
            f"SELECT pid, context, MIN(device) AS device FROM ({' UNION '.join(parts)}) "
            "WHERE pid IS NOT NULL AND context IS NOT NULL AND device IS NOT NULL "
            "GROUP BY pid, context HAVING COUNT(DISTINCT device) = 1"
        )
        try:
            return sqlite_io.read_query(self.path, sql, schema)
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"the GPU activity tables cannot be read ({exc})") from None

    def _contexts_read(self) -> pl.DataFrame | None:
        """The distinct (pid, context, device) with none NULL of every GPU activity table that has
        those columns, where the reads of the tables took them all (``_read``); else None."""
        tables = [t for t in CONTEXT_TABLES if t in self.tables]
        cols = [self._col(t, c) for t in tables for c in ("globalPid", "contextId", "deviceId")]
        if "NULL" in cols or not all(t in self._contexts for t in tables):
            return None
        parts = [self._contexts[t] for t in tables]
        if not parts:
            return pl.DataFrame(schema={"pid": I64, "context": I64, "device": I64})
        return pl.concat(parts).unique().drop_nulls()

    def _device_of_context(self, df: pl.DataFrame) -> pl.DataFrame:
        """*df* (pid, context, device, ...) with ``device`` taken from its context's ops where they
        name one device, its own ``deviceId`` otherwise (nsys leaves 0 on synchronization and
        event rows); the context column dropped."""
        if df.height == 0:
            return df.drop("context")
        ctx = self.context_devices.rename({"device": "_ctx_device"})
        return (
            df.join(ctx, on=["pid", "context"], how="left", maintain_order="left")
            .with_columns(pl.coalesce("_ctx_device", "device").alias("device"))
            .drop("context", "_ctx_device")
        )

    @cached_property
    def event_records(self) -> pl.DataFrame:
        """``cudaEventRecord``/``cuEventRecord`` activity: device (its context's), stream, event_id,
        correlation_id, pid."""
        return self._event_records(None)

    def event_records_given(self, runtime: pl.DataFrame | None) -> pl.DataFrame:
        """``event_records``, read (once: kept as it) with *runtime*, the ``runtime`` rows at hand."""
        return self._kept("event_records", lambda: self._event_records(runtime))

    def _kept(self, name: str, make: Callable[[], pl.DataFrame]) -> pl.DataFrame:
        """The cached property *name*, made by *make* (and kept as it) when it is not yet."""
        if name not in self.__dict__:
            self.__dict__[name] = make()
        return self.__dict__[name]

    def _event_records(self, runtime: pl.DataFrame | None) -> pl.DataFrame:
        spec = {k: OP_SPEC[k] for k in ("device", "stream", "correlation_id", "global_pid")}
        spec |= {"event_id": ("eventId", I64), "context": ("contextId", I64)}
        df = self._read_launched(EVENT_TABLE, spec, runtime)
        return self._device_of_context(df.with_columns(_pid(pl.col("global_pid")).alias("pid")).drop("global_pid"))

    @cached_property
    def syncs(self) -> pl.DataFrame:
        """Synchronization activity (stream waits, stream/event/device synchronizes): start, end,
        device (its context's), stream, event_id, sync_type, correlation_id, pid.  Unset stream or
        event ids (4294967295) read as NULL, so that a stream wait is a row with both set."""
        return self._syncs(None)

    def syncs_given(self, runtime: pl.DataFrame | None) -> pl.DataFrame:
        """``syncs``, read (once: kept as it) with *runtime*, the ``runtime`` rows at hand."""
        return self._kept("syncs", lambda: self._syncs(runtime))

    def _syncs(self, runtime: pl.DataFrame | None) -> pl.DataFrame:
        spec = {**OP_SPEC, "event_id": ("eventId", I64), "sync_type": ("syncType", I64), "context": ("contextId", I64)}
        df = self._read_launched(SYNC_TABLE, spec, runtime)
        unset = [
            pl.when(pl.col(c) == UNSET_ID).then(None).otherwise(pl.col(c)).alias(c) for c in ("stream", "event_id")
        ]
        return self._device_of_context(
            df.with_columns(*unset, _pid(pl.col("global_pid")).alias("pid")).drop("global_pid")
        )

    # --- host side ----------------------------------------------------------
    @cached_property
    def runtime(self) -> pl.DataFrame:
        """CUDA API calls, as far as attribution needs them: start, global_tid, pid, tid, correlation_id."""
        return self._runtime_rows()

    def read_runtime(self) -> pl.DataFrame:
        """The rows of ``runtime``, read anew and not kept (for a pass that needs them once)."""
        return self._runtime_rows()

    def launches_of(self, tables: tuple[str, ...]) -> pl.DataFrame:
        """The runtime rows (as ``runtime``) whose correlation id appears in the GPU activity
        *tables*: far fewer than all when copies alone are attributed.  All rows when
        ``runtime`` was read already or kernels are asked for (nearly every call launches one)."""
        corr = self._col(RUNTIME_TABLE, "correlationId")
        if "runtime" in self.__dict__ or KERNEL_TABLE in tables or corr == "NULL":
            return self.runtime
        key = tuple(sorted(tables))
        if key not in self._launches:
            sources = [(t, self._col(t, "correlationId")) for t in tables if t in self.tables]
            selects = [f'SELECT {c} FROM "{t}"' for t, c in sources if c != "NULL"]
            where = f"{corr} IN ({' UNION ALL '.join(selects)})" if selects else "0"
            in_window = self._started_in_window(RUNTIME_TABLE)
            self._launches[key] = self._runtime_rows(f"({where}) AND {in_window}" if in_window else where)
        return self._launches[key]

    def _runtime_rows(self, where: str | None = None) -> pl.DataFrame:
        spec = {k: self.RUNTIME_CALL_SPEC[k] for k in ("start", "global_tid", "correlation_id")}
        df = self._read(RUNTIME_TABLE, spec, self._started_in_window(RUNTIME_TABLE) if where is None else where)
        return df.select(
            "start",
            "global_tid",
            *_pid_tid(),
            "correlation_id",
        )

    RUNTIME_CALL_SPEC: ClassVar[dict[str, tuple[str, pl.DataType]]] = {
        "start": ("start", I64),
        "end": ("end", I64),
        "global_tid": ("globalTid", I64),
        "correlation_id": ("correlationId", I64),
        "name_id": ("nameId", I64),
    }

    @cached_property
    def runtime_calls(self) -> pl.DataFrame:
        """Every CUDA runtime/driver API call with its name: start, end, pid, tid, global_tid,
        correlation_id, name."""
        df = self._read(RUNTIME_TABLE, self.RUNTIME_CALL_SPEC, self._started_in_window(RUNTIME_TABLE))
        return self._named_calls(df, self._strings(df["name_id"].unique()))

    def runtime_calls_named(self, pattern: str, without: str | None = None) -> pl.DataFrame:
        """The calls of :attr:`runtime_calls` whose name matches the regex *pattern* (and does not
        contain the text *without*): the names are matched in StringIds, and only their calls are
        read (a trace has millions of launches)."""
        if "runtime_calls" in self.__dict__:
            name = pl.col("name").fill_null("")
            match = name.str.contains(pattern)
            return self.runtime_calls.filter(match & ~name.str.contains(without, literal=True) if without else match)
        match = pl.col("value").str.contains(pattern)
        if without:
            match = match & ~pl.col("value").str.contains(without, literal=True)
        names = self._all_strings.filter(match)
        where = self._named(names["id"].to_list())
        in_window = self._started_in_window(RUNTIME_TABLE)
        df = self._read(RUNTIME_TABLE, self.RUNTIME_CALL_SPEC, f"({where}) AND {in_window}" if in_window else where)
        return self._named_calls(df, names)

    @staticmethod
    def _named_calls(df: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
        names = names.rename({"id": "name_id", "value": "name"})
        return df.join(names, on="name_id", how="left", maintain_order="left").select(
            "start",
            "end",
            *_pid_tid(),
            "global_tid",
            "correlation_id",
            "name",
        )

    NVTX_SPEC: ClassVar[dict[str, tuple[str, pl.DataType]]] = {
        "start": ("start", I64),
        "end": ("end", I64),
        "event_type": ("eventType", I64),
        "raw_text": ("text", STR),
        "text_id": ("textId", I64),
        "domain_id": ("domainId", I64),
        "global_tid": ("globalTid", I64),
        "end_global_tid": ("endGlobalTid", I64),
        "range_id": ("rangeId", I64),
    }

    def _nvtx_rows(self, where: str = "") -> pl.DataFrame:
        """NVTX rows (matching *where*) with ``text``: the message, registered or not."""
        df = self._read(NVTX_TABLE, self.NVTX_SPEC, where)
        strings = self._strings(df["text_id"]).rename({"id": "text_id", "value": "reg"})
        return df.join(strings, on="text_id", how="left").with_columns(pl.coalesce("raw_text", "reg").alias("text"))

    @staticmethod
    def _domain_names(rows: pl.DataFrame) -> pl.DataFrame:
        return (
            rows.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE)
            .group_by("domain_id")
            .agg(pl.col("text").first().alias("domain"))
        )

    @cached_property
    def _domains(self) -> pl.DataFrame:
        """NVTX domain names: domain_id, domain."""
        return self._domain_names(self._nvtx_rows(f"{self._col(NVTX_TABLE, 'eventType')} = {NVTX_DOMAIN_CREATE}"))

    def _nvtx_in_window(self) -> str:
        """SQL: NVTX rows to read through the window: ranges overlapping it, marks in it, and
        every other event (domain names, ...)."""
        if not self.window.active:
            return ""
        t0, t1 = self.window.bounds
        kind, end = self._col(NVTX_TABLE, "eventType"), self._col(NVTX_TABLE, "end")
        ranges = f"{NVTX_PUSH_POP}, {NVTX_START_END}"
        return (
            f"({kind} NOT IN ({ranges}, {NVTX_MARK}) OR ({kind} = {NVTX_MARK} AND start >= {t0} AND start < {t1}) "
            f"OR ({kind} IN ({ranges}) AND start < {t1} AND ({end} IS NULL OR {end} > {t0} OR start >= {t0})))"
        )

    @cached_property
    def nvtx(self) -> pl.DataFrame:
        """NVTX events: start, end, event_type, text, domain_id, domain, global_tid,
        end_global_tid, pid, tid, range_id.  ``text`` is the message, registered or not.
        Through a window, ranges that overlap it are cut to it."""
        df = self._nvtx_rows(self._nvtx_in_window())
        if self.window.active:
            t0, t1 = self.window.bounds
            is_range = pl.col("event_type").is_in([NVTX_PUSH_POP, NVTX_START_END])
            df = df.with_columns(
                pl.when(is_range).then(pl.max_horizontal("start", pl.lit(t0))).otherwise("start").alias("start"),
                pl.when(is_range & pl.col("end").is_not_null())
                .then(pl.min_horizontal("end", pl.lit(t1)))
                .otherwise("end")
                .alias("end"),
            )
        return df.join(self._domain_names(df), on="domain_id", how="left").select(
            "start",
            "end",
            "event_type",
            "text",
            "domain_id",
            "domain",
            "global_tid",
            "end_global_tid",
            *_pid_tid(),
            "range_id",
        )

    @cached_property
    def memory_events(self) -> pl.DataFrame:
        """CUDA device memory allocations and frees (``--cuda-memory-usage=true``):
        device, start, bytes, op (0 allocation, 1 deallocation), mem_kind."""
        spec = {
            "device": ("deviceId", I64),
            "start": ("start", I64),
            "bytes": ("bytes", I64),
            "op": ("memoryOperationType", I64),
            "mem_kind": ("memKind", I64),
        }
        table = "CUDA_GPU_MEMORY_USAGE_EVENTS"
        return self._read(table, spec, self._started_in_window(table))

    # --- target facts -------------------------------------------------------
    @cached_property
    def devices(self) -> pl.DataFrame:
        """GPUs named in the export: id, name, total_memory, bus, sm_count (NULL where not written)."""
        spec = {
            "id": ("id", I64),
            "name": ("name", STR),
            "total_memory": ("totalMemory", I64),
            "bus": ("busLocation", STR),
            "sm_count": ("smCount", I64),
        }
        for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE"):
            if table in self.tables:
                return self._read(table, spec).unique("id", keep="first").sort("id")
        return pl.DataFrame(schema={n: t for n, (_, t) in spec.items()})

    @cached_property
    def streams(self) -> pl.DataFrame:
        """CUDA streams: stream, pid, context, priority, flag."""
        spec = {
            "stream": ("streamId", I64),
            "pid": ("processId", I64),
            "context": ("contextId", I64),
            "priority": ("priority", I64),
            "flag": ("flag", I64),
        }
        return self._read("TARGET_INFO_CUDA_STREAM", spec)


def open_trace(path: str | Path, window: str | None = None, origin: Path | None = None) -> Trace:
    """Validate *path* as an nsys SQLite export and return a lazily-read Trace, read through the
    analysis *window* (``auto``, ``all``, ``nvtx:NAME``, ``cuda-profiler-api``; by default what
    the run folder's manifest says, else ``auto``)."""
    path = Path(path)
    sqlite_io.check_sqlite_file(path)
    spec = windows.check_spec(window) if window else (windows.spec_from_manifest(path) or "auto")
    try:
        con = sqlite_io.connect_ro(path)
        try:
            tables = sqlite_io.table_columns(con)
            if not any(t in tables for t in NSYS_MARKER_TABLES):
                raise InputError(path, "is an SQLite database but not an Nsight Systems export")
            meta: dict[str, str] = {}
            if "META_DATA_EXPORT" in tables:
                meta = {
                    str(k): str(v) for k, v in con.execute("SELECT name, value FROM META_DATA_EXPORT") if v is not None
                }
            counts = {
                t: sqlite_io.estimate_rows(con, t)
                for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE, NVTX_TABLE, EVENT_TABLE, SYNC_TABLE)
                if t in tables
            }
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"cannot be read as SQLite ({exc})") from None
    return Trace(path=path, tables=tables, row_counts=counts, meta=meta, window_spec=spec, origin=origin)
