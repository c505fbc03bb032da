"""Runs the dashboard shows, and their analysis cached on disk.

The dashboard only ever refers to a run by an opaque id; paths are found once,
under the folders it was started with, and never taken from the browser.
Each trace's analysis (``runs.result.build``, the same code as
``profile-step analyze``/``compare``) is kept in its cache (``runs.store.CacheFiles``),
reused until the trace's size or modification time changes.  What-ifs
(``whatif.trace_whatif``'s documents) are computed on demand in the background, each from the run's
replay graph (``replay_graph``: made once per run and kept beside its cache), and kept in the
same cache, one row per factor.  ``plan.json`` documents
of ``profile-step plan`` found under the same folders are listed as plans.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from dashboards import replay_graph
from profiler.analysis.findings.config import FindingsConfig
from profiler.errors import InputError, ProfilerError
from profiler.runs import store
from profiler.runs.catalog import CATALOG
from profiler.runs.discover import RunRef, discover
from profiler.runs.result import build
from profiler.stored import folder
from profiler.stored.summary import RunSummary
from profiler.trace import load_trace


@dataclass
class Analysis:
    """One run's cached analysis: the run (``RunSummary``, read from the cache or made fresh) and,
    lazily, the ops for the timeline."""

    run: RunSummary
    ops_path: Path
    ranges_path: Path
    trace_path: Path | None = None  # the trace given (the what-if reads it again, through its cached export)
    db_path: Path | None = None  # the results file, which also keeps computed what-ifs
    _ops: pl.DataFrame | None = field(default=None, repr=False)
    _ranges: pl.DataFrame | None = field(default=None, repr=False)
    _by_device: dict[int | None, pl.DataFrame] = field(default_factory=dict, repr=False)
    _layer_copies: dict[str, pl.DataFrame] | None = field(default=None, repr=False)
    _t0: int | None = field(default=None, repr=False)

    @property
    def summary(self) -> dict[str, Any]:
        """The run's document (``run.to_json()``), for the views that read it as a dict."""
        return self.run.to_json()

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

    @property
    def t0(self) -> int:
        """The run's first GPU op's start (the copies' times are shown from it)."""
        if self._t0 is None:
            self._t0 = int(self.ops["start"].min() or 0)
        return self._t0

    def layer_copies(self, layer: str, device: int | None) -> pl.DataFrame:
        """The h2d/d2h copies of *layer* on *device* (all devices when None), by start: from the run's
        copies split by layer once (the layer's details are then a slice, not a pass over every op)."""
        part = self._split_layers().get(layer)
        if part is None:
            return self.ops.head(0).select("layer", "device", "cls", "stream", "start", "end", "bytes")
        return part if device is None else part.filter(pl.col("device") == device)

    def _split_layers(self) -> dict[str, pl.DataFrame]:
        """The run's h2d/d2h copies by layer (each by start), made once."""
        if self._layer_copies is None:
            copies = self.ops.filter(pl.col("cls").is_in(["h2d", "d2h"]) & pl.col("layer").is_not_null())
            copies = copies.select("layer", "device", "cls", "stream", "start", "end", "bytes")
            parts = copies.sort("start", maintain_order=True).partition_by("layer", as_dict=True)
            self._layer_copies = {key[0]: part for key, part in parts.items()}
        return self._layer_copies

    def prepare(self, device: int | None) -> None:
        """Make ahead what the views of one (run, GPU) slice: its ops by start (the timeline), the copies
        by layer and the run's first start (a layer's details)."""
        self.device_ops(device)
        self._split_layers()
        self.t0  # noqa: B018

    def device_ops(self, device: int | None) -> pl.DataFrame:
        """The ops of one device (all when None), sorted by start: a step's window is then a slice."""
        if device not in self._by_device:
            ops = self.ops.sort("start") if device is None else self.ops.filter(pl.col("device") == device)
            self._by_device[device] = ops if ops["start"].is_sorted() else ops.sort("start")
        return self._by_device[device]


def analyze_run(ref: RunRef, nsys: str | None = None) -> Analysis:
    """The run's analysis, from the cache when it is current, else computed and cached."""
    if not ref.trace.exists():
        raise ProfilerError(
            f"{ref.trace}: no trace in this run" + (f" (status {ref.manifest.get('status')})" if ref.manifest else "")
        )
    # a report or a JAX profiler trace is analyzed through its (cached) export, but opened as the file
    # it is: a JAX trace's export lies in the user cache, and its run folder (the compiled step, the
    # plan that puts copies in layers) is found from the file given, as analyze finds it
    trace = None if ref.trace.suffix == ".sqlite" else load_trace(ref.trace, nsys)
    files = store.CacheFiles.of(ref.trace if trace is None else trace.path)
    cached = files.read()
    if cached is not None:
        return Analysis(RunSummary.from_json(cached), files.ops, files.ranges, ref.trace, files.db)
    run = build(trace or load_trace(ref.trace, nsys), ref.manifest, findings=FindingsConfig())
    summary = run.summary()
    files.write(summary.to_json(), *run.timeline())
    # the what-ifs' replay graph, from this analysis (not made again by the first what-if); should it
    # fail, the what-if process makes it again and shows its error where a what-if is asked for
    with contextlib.suppress(Exception):
        replay_graph.prepared(run.trace, files.ops, run.breakdown)
    return Analysis(summary, files.ops, files.ranges, ref.trace, files.db)


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
        self.first: list[Path] = []  # runs the first view selects (dashboard --first): the terminal's verdict

    def is_first(self, run_id: str) -> bool:
        """Whether *run_id*'s trace lies in (or is) a path given to ``dashboard --first``."""
        trace = self.refs[run_id].trace.resolve()
        return any(p == trace or p in trace.parents for p in self.first)

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
        """Analyze every run in a background thread (progress in ``progress()``), then call *then*; the runs
        given first (``--first``) before the others, so that the first view settles on them soonest."""

        def work() -> None:
            todo = [r for r, ref in self.refs.items() if not ref.no_trace]
            for rid in sorted(todo, key=lambda r: not self.is_first(r)):  # a stable sort: discovery order kept
                with contextlib.suppress(ProfilerError):
                    self.get(rid)
            if then is not None:
                then()

        t = threading.Thread(target=work, daemon=True)
        t.start()
        return t

    def close(self) -> None:
        """Stop the background work that holds processes (the what-ifs'); the analyses' thread is a
        daemon and ends with the server."""
        self.whatifs.close()

    def progress(self) -> tuple[int, int, str | None]:
        done = len(self.results) + len(self.errors) + sum(1 for r in self.refs.values() if r.no_trace)
        return done, len(self.refs), self.current


# --- what-ifs: the replay of a run with its copies scaled by a factor ---------------------------
# key, trace, nsys, factor, host, results, the cached ops (beside which the replay graph is kept)
Job = tuple[tuple[str, str], Path, str | None, float, bool, Path | None, Path | None]
KEPT_GRAPHS = 2  # replay graphs the what-if process holds in memory (the last runs replayed)


def replay_worker(jobs: multiprocessing.Queue, done: multiprocessing.Queue) -> None:
    """The what-if process: one replay at a time, at a lower priority than the server and the browser,
    each kept in its run's results file and sent back as (key, document, error).  It ends as soon as
    its server does, however that ended (a killed server runs no exit handler to end it), even in the
    middle of a replay (SQLite rolls back a write cut short)."""
    with contextlib.suppress(OSError):
        os.nice(10)
    server = multiprocessing.parent_process()
    if server is not None:
        threading.Thread(target=lambda: (server.join(), os._exit(0)), name="server-gone", daemon=True).start()
    done.cancel_join_thread()  # at its end, never wait for a server that is gone to read the last answer
    graphs: dict[Path, replay_graph.ReplayGraph] = {}  # the last runs' graphs, the latest last
    while True:
        key, trace_path, nsys, factor, model_host, db_path, ops_path = jobs.get()
        try:
            opened = partial(load_trace, trace_path, nsys)  # opened only when no kept graph serves
            graph = graphs.pop(trace_path, None) or replay_graph.prepared(opened, ops_path)
            graphs[trace_path] = graph
            while len(graphs) > KEPT_GRAPHS:
                graphs.pop(next(iter(graphs)))
            doc = graph.whatif(factor, model_host)
            store.write_whatif(db_path, key[1], doc)
            done.put((key, doc, None))
        except Exception as exc:  # one run's failure is shown on the page, never raised in the worker
            message = str(exc) if isinstance(exc, ProfilerError) else f"{type(exc).__name__}: {exc}"
            done.put((key, None, f"{trace_path}: the what-if failed ({message})"))


class WhatIfs:
    """What-if documents (``whatif.trace_whatif``) per (run, factor, host model): from memory, else
    from the run's results file, else computed in the background while the page says "computing".
    Each is computed at most once, in a process of its own (``replay_worker``): a replay holds the
    CPU for seconds, and in a thread of the server it would slow every answer to the page."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._docs: dict[tuple[str, str], dict[str, Any]] = {}
        self._errors: dict[tuple[str, str], str] = {}
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._queue: queue.Queue[Job] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._proc: Any = None  # the what-if process and its two queues, while there is one
        self._pipes: tuple[Any, Any] | None = None
        self._closed = False

    def get(self, rid: str, factor: float, model_host: bool = True) -> tuple[str, Any]:
        """``("done", doc)``, ``("computing", None)`` (started, or queued, in the background) or
        ``("error", message)``."""
        key = (rid, store.whatif_key(factor, model_host))
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
        doc = store.read_whatif(run.db_path, key[1])
        with self._lock:
            if doc is not None:
                self._docs[key] = doc
                return "done", doc
            if key not in self._pending:
                self._pending.add(key)
                job = (key, run.trace_path, self.store.nsys, factor, model_host, run.db_path, run.ops_path)
                self._queue.put(job)
                if self._worker is None:  # one daemon thread: a replay never delays the server's exit
                    self._worker = threading.Thread(target=self._work, name="whatif", daemon=True)
                    self._worker.start()
        return "computing", None

    def start(self) -> None:
        """Start the what-if process now (its imports take seconds), so that it is ready for the first
        replays instead of starting with them."""
        self._process()

    def _work(self) -> None:
        """Hand the queued replays to the what-if process one at a time (a new one if it died)."""
        while True:
            job = self._queue.get()
            started = self._process()
            if started is None:  # closed: the server is stopping
                return
            proc, (jobs, done) = started
            jobs.put(job)
            result = None
            while result is None:
                try:
                    result = done.get(timeout=1.0)
                except queue.Empty:
                    if not proc.is_alive():
                        result = (job[0], None, f"{job[1]}: the what-if process ended (exit code {proc.exitcode})")
            key, doc, error = result
            with self._lock:
                if doc is not None:
                    self._docs[key] = doc
                else:
                    self._errors[key] = error
                self._pending.discard(key)

    def _process(self) -> tuple[Any, tuple[Any, Any]] | None:
        """The what-if process and its queues: the running one, else a new one; None once closed."""
        with self._lock:
            if self._closed:
                return None
            if self._proc is None or not self._proc.is_alive():
                self._drop_pipes()
                ctx = multiprocessing.get_context("spawn")  # never fork a server with threads
                self._pipes = (ctx.Queue(), ctx.Queue())
                self._proc = ctx.Process(
                    target=replay_worker, args=self._pipes, name="profile-step whatif", daemon=True
                )
                self._proc.start()
            assert self._pipes is not None
            return self._proc, self._pipes

    def _drop_pipes(self) -> None:
        """Close the queues of a what-if process that has ended (their semaphores released)."""
        for q in self._pipes or ():
            q.close()
            q.cancel_join_thread()
        self._pipes = None

    def close(self) -> None:
        """Stop the what-if process (a replay in progress is dropped: SQLite rolls its write back) and
        release its queues; no new one starts after this."""
        with self._lock:
            self._closed = True
            proc = self._proc
        if proc is not None and proc.is_alive():
            proc.terminate()
            proc.join(5)
        with self._lock:
            self._drop_pipes()
            self._proc = None


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
        if level >= depth or folder.is_run(path) or (path / CATALOG).is_file():
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
