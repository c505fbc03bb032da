"""Runs the dashboard shows, and their analysis cached on disk.

The dashboard only ever refers to a run by an opaque id; paths are found once,
under the folders it was started with, and never taken from the browser.
Each trace's analysis (``run_metrics.collect``, the same code as
``profile-step analyze``/``compare``) is cached beside it, in an SQLite results
file written through sqlite-utils (``<trace>.profile-step.db``), with its GPU
ops and NVTX step/layer ranges in Parquet for the timeline.  The cache is
reused until the trace's size or modification time changes; a folder that is
not writable gets its cache under ``~/.cache/profile-step/dashboard``.
What-ifs (``whatif.trace_whatif``) are computed on demand in the background and
kept in the same results file, one row per factor.  ``plan.json`` documents
of ``profile-step plan`` found under the same folders are listed as plans.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import sqlite_utils

from dashboards.catalog import CATALOG, Provenance, allowed, read_catalog
from profiler.analysis.breakdown import Breakdown
from profiler.analysis.run_metrics import collect
from profiler.analysis.whatif import trace_whatif
from profiler.capture import no_trace
from profiler.conventions import MANIFEST, PARTIAL_SUFFIX
from profiler.errors import InputError, ProfilerError
from profiler.report import store
from profiler.trace import load_trace

CACHE_VERSION = "9"  # 9: kernels_beside_copies; 8: HLO fingerprints, findings by cost, sync rows on their GPU
CACHE_SUFFIXES = (".profile-step.db", ".ops.parquet", ".ranges.parquet")
TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


# Where a run comes from: a profile-step run folder, a SYNTHETIC demonstration run (made by
# profiler/trace/demo.py, never a measurement), a public trace listed in a CATALOG.tsv, a trace file.
SOURCES = ("run", "synthetic", "external", "trace")


@dataclass
class RunRef:
    """A run the dashboard knows: an id, its trace, and its manifest when profile-step made it."""

    id: str
    trace: Path
    name: str
    manifest: dict[str, Any] | None = None
    partial: bool = False
    source: str = "trace"
    provenance: Provenance | None = None
    group: str = ""  # the folder given (and its first sub-folder) the run was found under
    no_trace: str | None = None  # a run folder without a trace: why (listed once, never analyzed)

    @property
    def synthetic(self) -> bool:
        return self.source == "synthetic"


def _ref(trace: Path, name: str, run_dir: Path | None = None, manifest: dict[str, Any] | None = None) -> RunRef:
    rid = hashlib.sha1(str(trace.resolve()).encode()).hexdigest()[:12]
    partial = run_dir is not None and run_dir.name.endswith(PARTIAL_SUFFIX)
    source = "trace"
    if manifest is not None:
        source = "synthetic" if manifest.get("synthetic") is True else "run"
    return RunRef(rid, trace, name, manifest, partial, source)


def _manifest(run_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _trace_in(run_dir: Path, manifest: dict[str, Any] | None) -> Path:
    """The run's trace: the export its manifest names, else trace.sqlite / trace.nsys-rep."""
    named = ((manifest or {}).get("files") or {}).get("sqlite")
    candidates = ([named] if isinstance(named, str) and "/" not in named else []) + ["trace.sqlite", "trace.nsys-rep"]
    for name in candidates:
        if (run_dir / name).is_file():
            return run_dir / name
    return run_dir / candidates[0]  # missing: shown as an error card


def _is_trace(path: Path) -> bool:
    return path.suffix in TRACE_SUFFIXES and not path.name.endswith(CACHE_SUFFIXES) and ".partial." not in path.name


def discover(paths: list[Path], depth: int = 2, licences: tuple[str, ...] | None = None) -> list[RunRef]:
    """Runs under *paths*: run folders, folders of runs, trace files, *depth* folders deep.

    A folder with a ``CATALOG.tsv`` contributes the traces it lists (under *licences* when
    given), each with its provenance; a trace two catalogues list (same repository, commit and
    path: ``sample_traces/public`` and ``../shared/traces``) is shown once, from the first.
    """
    refs: dict[str, RunRef] = {}
    listed: set[tuple[str, str, str]] = set()

    def add(ref: RunRef) -> None:
        refs.setdefault(ref.id, ref)

    def visit(path: Path, name: str, level: int) -> None:
        if path.is_file():
            if _is_trace(path) and not (path.suffix != ".sqlite" and path.with_suffix(".sqlite").is_file()):
                add(_ref(path, name))  # a report whose export sits beside it is shown once, as the export
            return
        if not path.is_dir():
            return
        if (path / MANIFEST).is_file():
            manifest = _manifest(path)
            ref = _ref(_trace_in(path, manifest), name, path, manifest)
            if not ref.trace.is_file():
                ref.no_trace = no_trace.reason(path, manifest)
            add(ref)
            return
        if (path / CATALOG).is_file():
            for file, prov in read_catalog(path).items():
                trace = path / file
                origin = (prov.repo, prov.commit, prov.path)
                if allowed(prov, licences) and trace.is_file() and _is_trace(trace) and origin not in listed:
                    listed.add(origin)
                    ref = _ref(trace, f"{name}/{file}" if level else file)
                    ref.source, ref.provenance = "external", prov
                    add(ref)
            return
        if level >= depth:
            return
        for child in sorted(path.iterdir()):
            visit(child, f"{name}/{child.name}" if level else child.name, level + 1)

    for path in paths:
        before = set(refs)
        if path.is_file() and path.suffix == ".json":
            continue  # a plan document (``discover_plans``)
        if path.is_file():
            add(_ref(path, path.name))
        else:
            visit(path, path.name, 0)
        for rid in set(refs) - before:  # runs of one folder (and sub-folder) belong together
            ref = refs[rid]
            ref.group = str(path / ref.name.split("/")[0]) if "/" in ref.name else str(path)
    return list(refs.values())


def _writable(folder: Path) -> bool:
    try:
        return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & stat.S_IWUSR)
    except OSError:
        return False


def cache_base(trace: Path) -> Path:
    """``<trace>`` beside it, or a per-trace name in the user cache when its folder is read-only."""
    if _writable(trace.parent):
        return trace
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "profile-step" / "dashboard"
    base.mkdir(parents=True, exist_ok=True)
    return base / (hashlib.sha1(str(trace.resolve()).encode()).hexdigest()[:16] + "-" + trace.name)


def _stamp(trace: Path) -> dict[str, Any]:
    st = trace.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "version": CACHE_VERSION}


@dataclass
class Analysis:
    """One run's cached analysis: the summary and, lazily, the ops for the timeline."""

    summary: dict[str, Any]
    ops_path: Path
    ranges_path: Path
    trace_path: Path | None = None  # the export analyzed (the what-if reads it again)
    db_path: Path | None = None  # the results file, which also keeps computed what-ifs
    _ops: pl.DataFrame | None = field(default=None, repr=False)
    _ranges: pl.DataFrame | None = field(default=None, repr=False)
    _by_device: dict[int | None, pl.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def ops(self) -> pl.DataFrame:
        if self._ops is None:
            self._ops = pl.read_parquet(self.ops_path)
        return self._ops

    @property
    def ranges(self) -> pl.DataFrame:
        if self._ranges is None:
            self._ranges = pl.read_parquet(self.ranges_path)
        return self._ranges

    def device_ops(self, device: int | None) -> pl.DataFrame:
        """The ops of one device (all when None), sorted by start: a step's window is then a slice."""
        if device not in self._by_device:
            ops = self.ops.sort("start") if device is None else self.ops.filter(pl.col("device") == device)
            self._by_device[device] = ops if ops["start"].is_sorted() else ops.sort("start")
        return self._by_device[device]


def _read_cache(base: Path, trace: Path) -> dict[str, Any] | None:
    db_path = Path(str(base) + ".profile-step.db")
    if not db_path.is_file():
        return None
    try:
        db = sqlite_utils.Database(db_path)
        meta = {r["key"]: r["value"] for r in db["meta"].rows} if db["meta"].exists() else {}
        if meta.get("stamp") != json.dumps(_stamp(trace), sort_keys=True):
            return None
        row = next(iter(db.query("SELECT summary_json FROM runs LIMIT 1")), None)
        return json.loads(row["summary_json"]) if row else None
    except Exception:  # a damaged cache is rebuilt, never trusted
        return None


def analyze_run(ref: RunRef, nsys: str | None = None) -> Analysis:
    """The run's analysis, from the cache when it is current, else computed and cached."""
    if not ref.trace.exists():
        raise ProfilerError(
            f"{ref.trace}: no trace in this run" + (f" (status {ref.manifest.get('status')})" if ref.manifest else "")
        )
    trace_file = ref.trace
    if trace_file.suffix != ".sqlite":
        trace_file = load_trace(ref.trace, nsys).path  # a report: analyze its (cached) export
    base = cache_base(trace_file)
    ops_path, ranges_path = Path(str(base) + ".ops.parquet"), Path(str(base) + ".ranges.parquet")
    db_path = Path(str(base) + ".profile-step.db")
    summary = _read_cache(base, trace_file)
    if summary is not None and ops_path.is_file() and ranges_path.is_file():
        return Analysis(summary, ops_path, ranges_path, trace_file, db_path)
    trace = load_trace(trace_file, nsys)
    bd = Breakdown(trace)  # one attribution for the summary and the timeline's ops
    summary = collect(trace, ref.manifest, breakdown=bd)
    layers = bd.layer_assignment()
    ops = (
        bd.ops.join(layers.select("op_id", "layer"), on="op_id", how="left")
        .select("op_id", "kind", "device", "stream", "start", "end", "name", "is_nccl", "cls", "bytes", "layer")
        .sort("device", "start")  # a device's ops are then in time order: a step's window is a slice
    )
    r = bd.ranges.ranges
    steps = bd.step_ranges().select(pl.lit("step").alias("lane"), "name", "start", "end")
    layer_ranges = bd.layer_ranges.join(r.select("range_id", "end"), on="range_id").select(
        pl.lit("layer").alias("lane"), pl.col("layer").alias("name"), "start", "end"
    )
    ranges = pl.concat([steps, layer_ranges])
    _write_atomic(ops_path, ops.write_parquet)
    _write_atomic(ranges_path, ranges.write_parquet)
    tmp = db_path.with_name(f".{db_path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    store.record(tmp, summary, label="dashboard-cache")
    db = sqlite_utils.Database(tmp)
    db["meta"].insert({"key": "stamp", "value": json.dumps(_stamp(trace_file), sort_keys=True)}, pk="key")
    db.close()
    os.replace(tmp, db_path)
    return Analysis(summary, ops_path, ranges_path, trace_file, db_path)


def _write_atomic(path: Path, writer: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer(tmp)
    os.replace(tmp, path)


class RunStore:
    """The dashboard's runs, analyzed in the background, each at most once at a time."""

    def __init__(self, paths: list[Path], nsys: str | None = None, licences: tuple[str, ...] | None = None) -> None:
        self.paths = paths
        self.nsys = nsys
        self.refs = {r.id: r for r in discover(paths, licences=licences)}
        self.results: dict[str, Analysis] = {}
        self.errors: dict[str, str] = {}
        self.current: str | None = None
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {r: threading.Lock() for r in self.refs}
        self.plans = {p.id: p for p in discover_plans(paths)}
        self.whatifs = WhatIfs(self)

    def get(self, run_id: str) -> Analysis:
        """The analysis of *run_id* (raises ProfilerError with a one-line reason)."""
        if run_id not in self.refs:
            raise ProfilerError(f"unknown run {run_id!r}")
        if self.refs[run_id].no_trace:  # said once, in its row of the runs table: not an error of every view
            raise ProfilerError(f"{self.refs[run_id].name}: no trace: {self.refs[run_id].no_trace}")
        with self._locks[run_id]:
            if run_id in self.results:
                return self.results[run_id]
            if run_id in self.errors:
                raise ProfilerError(self.errors[run_id])
            self.current = self.refs[run_id].name
            try:
                res = analyze_run(self.refs[run_id], self.nsys)
            except ProfilerError as exc:
                self.errors[run_id] = str(exc)
                raise
            except Exception as exc:  # a broken run must not take the app down
                self.errors[run_id] = f"{self.refs[run_id].trace}: cannot be analyzed ({type(exc).__name__}: {exc})"
                raise ProfilerError(self.errors[run_id]) from None
            finally:
                self.current = None
            self.results[run_id] = res
            return res

    def warm_up(self, then: Callable[[], None] | None = None) -> threading.Thread:
        """Analyze every run in a background thread (progress in ``progress()``), then call *then*."""

        def work() -> None:
            for rid in [r for r, ref in self.refs.items() if not ref.no_trace]:
                with contextlib.suppress(ProfilerError):
                    self.get(rid)
            if then is not None:
                then()

        t = threading.Thread(target=work, daemon=True)
        t.start()
        return t

    def progress(self) -> tuple[int, int, str | None]:
        done = len(self.results) + len(self.errors) + sum(1 for r in self.refs.values() if r.no_trace)
        return done, len(self.refs), self.current


# --- what-ifs: the replay of a run with its copies scaled by a factor ---------------------------
WHATIF_TABLE = "whatif"
WHATIF_VERSION = "1"


def whatif_key(factor: float, model_host: bool) -> str:
    """The cache key of one what-if of a run: the exact factor, and whether host synchronization is modeled."""
    return f"v{WHATIF_VERSION}/{factor!r}/{'host' if model_host else 'launch'}"


def _read_whatif(db_path: Path | None, key: str) -> dict[str, Any] | None:
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


def _write_whatif(db_path: Path | None, key: str, doc: dict[str, Any]) -> None:
    if db_path is None or not db_path.is_file():
        return
    with contextlib.suppress(Exception):  # the cache is a convenience: a read-only file only costs a recompute
        db = sqlite_utils.Database(db_path)
        db[WHATIF_TABLE].upsert({"key": key, "doc": json.dumps(doc)}, pk="key")
        db.close()


class WhatIfs:
    """What-if documents (``whatif.trace_whatif``) per (run, factor, host model): from memory, else
    from the run's results file, else computed by one background worker while the page says
    "computing".  Each is computed at most once."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._docs: dict[tuple[str, str], dict[str, Any]] = {}
        self._errors: dict[tuple[str, str], str] = {}
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[tuple[str, str], Analysis, float, bool]] = queue.Queue()
        self._worker: threading.Thread | None = None

    def get(self, rid: str, factor: float, model_host: bool = True) -> tuple[str, Any]:
        """``("done", doc)``, ``("computing", None)`` (started, or queued, in the background) or
        ``("error", message)``."""
        key = (rid, whatif_key(factor, model_host))
        with self._lock:
            if key in self._docs:
                return "done", self._docs[key]
            if key in self._errors:
                return "error", self._errors[key]
            if key in self._pending:
                return "computing", None
        try:
            run = self.store.get(rid)
        except ProfilerError as exc:
            return "error", str(exc)
        doc = _read_whatif(run.db_path, key[1])
        with self._lock:
            if doc is not None:
                self._docs[key] = doc
                return "done", doc
            if key not in self._pending:
                self._pending.add(key)
                self._queue.put((key, run, factor, model_host))
                if self._worker is None:  # one daemon thread: a replay never delays the server's exit
                    self._worker = threading.Thread(target=self._work, name="whatif", daemon=True)
                    self._worker.start()
        return "computing", None

    def _work(self) -> None:
        while True:
            self._compute(*self._queue.get())

    def _compute(self, key: tuple[str, str], run: Analysis, factor: float, model_host: bool) -> None:
        try:
            trace = load_trace(run.trace_path, self.store.nsys)
            doc = trace_whatif(trace, factor, model_host=model_host)
            _write_whatif(run.db_path, key[1], doc)
            with self._lock:
                self._docs[key] = doc
        except Exception as exc:  # one run's failure is shown on the page, never raised in the worker
            message = str(exc) if isinstance(exc, ProfilerError) else f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._errors[key] = f"{run.trace_path}: the what-if failed ({message})"
        finally:
            with self._lock:
                self._pending.discard(key)


# --- plans compiled for a GPU target (profile-step plan) ----------------------------------------
PLAN_FILE = "plan.json"


@dataclass
class PlanRef:
    """A ``profile-step plan`` result: its ``plan.json`` and a short name."""

    id: str
    path: Path
    name: str


def discover_plans(paths: list[Path], depth: int = 2) -> list[PlanRef]:
    """The ``plan.json`` documents under *paths*: given as files, or plan folders *depth* folders deep."""
    found: dict[str, PlanRef] = {}

    def add(path: Path, name: str) -> None:
        pid = "plan-" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
        found.setdefault(pid, PlanRef(pid, path, name))

    def visit(path: Path, level: int) -> None:
        if (path / PLAN_FILE).is_file():
            add(path / PLAN_FILE, path.name)
            return
        if level >= depth or (path / MANIFEST).is_file() or (path / CATALOG).is_file():
            return
        with contextlib.suppress(OSError):
            for child in sorted(path.iterdir()):
                if child.is_dir():
                    visit(child, level + 1)

    for path in paths:
        if path.is_file() and path.suffix == ".json":
            add(path, path.parent.name if path.name == PLAN_FILE else path.name)
        elif path.is_dir():
            visit(path, 0)
    return list(found.values())


def read_plan(ref: PlanRef) -> dict[str, Any]:
    """The plan document of *ref* (an InputError naming the file when it is not one)."""
    try:
        doc = json.loads(ref.path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(ref.path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("target"), dict) or not isinstance(doc.get("results"), list):
        raise InputError(ref.path, "is not a profile-step plan document (no target and results)")
    return doc
