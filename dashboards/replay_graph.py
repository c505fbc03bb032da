"""The what-if's replay graph of one run, prepared once and kept in the dashboard's cache.

What every what-if of a run shares, whatever the factor: the ops and their dependencies
(``dependencies``), the blocking host calls (``host_syncs``), the steps and each step's ops matched to
their rows (``step_frames``, ``keyed_step_ops``), from the same analysis as ``whatif.trace_whatif``.
A what-if is then one ``replay`` and its sums (``ReplayGraph.whatif``, the same document as
``trace_whatif``).  The graph is kept beside the run's cached analysis (``<key>-<trace>.replay.npz``
in profile-step's ``dashboard`` cache): NumPy arrays, polars frames as Arrow IPC bytes, and a JSON
description of the dataclasses holding them (only profiler's own classes are rebuilt; no pickle),
stamped with the run's cached ops file, so that a new analysis makes it stale.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import Dependencies, dependencies
from profiler.analysis.hostsync import HostSyncs, host_syncs
from profiler.analysis.replay import replay
from profiler.analysis.stalls import empty_stalls, op_stalls
from profiler.analysis.whatif import keyed_step_ops, step_frames, step_rows
from profiler.trace.loader import Trace

if TYPE_CHECKING:
    from profiler.analysis.breakdown import Breakdown

GRAPH_VERSION = "1"
SUFFIX = ".replay.npz"
OPS_SUFFIX = ".ops.parquet"
META = "__meta__"
KEYED = ("index", "device", "start", "row")  # what ``step_rows`` reads of ``keyed_step_ops``


@dataclass(frozen=True)
class ReplayGraph:
    """One run's replay graph: dependencies, host calls and the steps' ops (``None`` without steps)."""

    deps: Dependencies
    host: HostSyncs
    steps: pl.DataFrame | None
    keyed: pl.DataFrame | None

    @staticmethod
    def of(trace: Trace, breakdown: Breakdown | None = None) -> ReplayGraph:
        """The graph of *trace*, from the analysis ``trace_whatif`` makes (default layers and steps): the
        *breakdown* given (the dashboard's own analysis of the run, ``runs.result.build``), else made."""
        from profiler.analysis.breakdown import Breakdown
        from profiler.xla.names import DEFAULT_LAYER_PATTERN

        bd = breakdown if breakdown is not None else Breakdown(trace, DEFAULT_LAYER_PATTERN, None)
        deps = bd.stalls.deps if bd.stalls is not None else dependencies(trace)
        frames = step_frames(bd)
        keyed = keyed_step_ops(deps.ops, frames[1]).select(KEYED) if frames is not None else None
        return ReplayGraph(deps, host_syncs(trace, deps), frames[0] if frames else None, keyed)

    def whatif(self, factor: float, model_host: bool = True) -> dict[str, Any]:
        """``whatif.trace_whatif(trace, factor, model_host=...)``'s document, from the graph."""
        deps = self.deps
        rp = replay(deps, factor, self.host if model_host else None)
        ops = deps.ops
        stalls = op_stalls(deps, rp.start, rp.end, rp.launch).by_device()
        devices: dict[str, Any] = {}
        for dev in np.unique(ops.device).tolist():
            on = ops.device == dev
            w0 = int(ops.start[on].min())
            devices[str(dev)] = {
                "measured_span_ns": int(ops.end[on].max()) - w0,
                "span_ns": int(rp.end[on].max()) - w0,
                "steps": [],
                "stalls": stalls.get(int(dev), empty_stalls()),
            }
        if self.steps is not None and self.keyed is not None:
            for dev, rows in step_rows(rp, self.steps, self.keyed, keyed=self.keyed).items():
                if str(dev) in devices:
                    devices[str(dev)]["steps"] = rows
        return {"copy_scale": factor, "host_sync_modeled": rp.host_sync_modeled, "devices": devices}


# --- kept on disk ----------------------------------------------------------------------------------
def path_for(ops_path: Path) -> Path:
    """Where the graph of the run whose cached ops are *ops_path* is kept."""
    name = ops_path.name.removesuffix(OPS_SUFFIX)
    return ops_path.with_name(name + SUFFIX)


def stamp(ops_path: Path) -> str:
    """The cached analysis the graph belongs to: its ops file's size and time, and the format's version."""
    st = ops_path.stat()
    return f"{GRAPH_VERSION}/{st.st_size}/{st.st_mtime_ns}"


def encode(obj: Any, name: str, arrays: dict[str, np.ndarray]) -> Any:
    """*obj* as JSON, its arrays and frames put in *arrays* under names starting with *name*."""
    if isinstance(obj, np.ndarray):
        arrays[name] = obj
        return {"array": name}
    if isinstance(obj, pl.DataFrame):
        buf = io.BytesIO()
        obj.write_ipc(buf)
        arrays[name] = np.frombuffer(buf.getvalue(), dtype=np.uint8)
        return {"frame": name}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        fields = {f.name: encode(getattr(obj, f.name), f"{name}.{f.name}", arrays) for f in dataclasses.fields(obj)}
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    if isinstance(obj, dict):
        return {
            "dict": [
                [encode(k, f"{name}.k{i}", arrays), encode(v, f"{name}.{i}", arrays)]
                for i, (k, v) in enumerate(obj.items())
            ]
        }
    if obj is None or isinstance(obj, bool | int | float | str):
        return {"value": obj}
    raise TypeError(f"cannot keep a {type(obj).__name__} in a replay graph")


def decode(doc: Any, arrays: Any) -> Any:
    """What ``encode`` described, rebuilt (a class must be one of profiler's dataclasses)."""
    if "array" in doc:
        return arrays[doc["array"]]
    if "frame" in doc:
        return pl.read_ipc(io.BytesIO(arrays[doc["frame"]].tobytes()))
    if "class" in doc:
        module, qualname = doc["class"].split(":")
        own = module.startswith(("profiler.", "dashboards."))
        cls = getattr(importlib.import_module(module), qualname, None) if own else None
        if not dataclasses.is_dataclass(cls):
            raise ValueError(f"{doc['class']} is not one of profiler's dataclasses")
        return cls(**{k: decode(v, arrays) for k, v in doc["fields"].items()})
    if "dict" in doc:
        return {decode(k, arrays): decode(v, arrays) for k, v in doc["dict"]}
    return doc["value"]


def save(graph: ReplayGraph, ops_path: Path) -> None:
    """Keep *graph* beside the cached analysis whose ops are *ops_path* (replaced whole)."""
    arrays: dict[str, np.ndarray] = {}
    meta = {"stamp": stamp(ops_path), "graph": encode(graph, "g", arrays)}
    arrays[META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path = path_for(ops_path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        np.savez(f, allow_pickle=False, **arrays)
    os.replace(tmp, path)


def load(ops_path: Path) -> ReplayGraph | None:
    """The kept graph of the run whose cached ops are *ops_path*, or None when there is none, it is stale
    or it cannot be read (it is then made again)."""
    path = path_for(ops_path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(npz[META].tobytes())
            if meta.get("stamp") != stamp(ops_path):
                return None
            arrays = {k: npz[k] for k in npz.files}
        graph = decode(meta["graph"], arrays)
    except Exception:  # missing, damaged or from another version: made again, never trusted
        return None
    return graph if isinstance(graph, ReplayGraph) else None


def prepared(
    trace: Trace | Callable[[], Trace], ops_path: Path | None, breakdown: Breakdown | None = None
) -> ReplayGraph:
    """The graph of *trace*: kept when its cached analysis has one, else made (from *breakdown* when
    given) and kept (when it can be).  *trace* may be a function that opens it: then it is opened
    only when no kept graph serves."""
    graph = load(ops_path) if ops_path is not None else None
    if graph is None:
        graph = ReplayGraph.of(trace if isinstance(trace, Trace) else trace(), breakdown)
        if ops_path is not None and ops_path.is_file():
            with contextlib.suppress(OSError, TypeError, ValueError):  # a read-only cache; an object array
                save(graph, ops_path)
    return graph
