"""What a JAX profiler trace of a TPU measured of its step program, for ``measured.load``.

A TPU's trace (``jax.profiler.trace``: ``<host>.trace.json.gz``) has a process ``/device:TPU:N``
whose thread ``XLA Modules`` holds one event per execution of a program (``jit_step(<fingerprint>)``,
``device_duration_ps``) and whose thread ``XLA Ops`` holds every HLO instruction the core ran, in
order, on one serial line (``device_offset_ps``, ``device_duration_ps``, ``hlo_category``). A
``while`` event spans its body's ops, which are listed inside it once per trip: its own time is its
span less theirs (the loop's condition and bookkeeping), so that no time is counted twice. An
async pair's ``*-done`` event is the time the core waited for its transfer.

The spans are read straight from the JSON (not through the nsys-schema conversion of
``profiler.trace.jax_profile``, which is about GPU streams): ``read`` gives the executions and the
ops with their own time, ``spans`` the frame ``analysis.instruction_times`` takes, and
``transfers`` each host transfer (start event to the end of its done) with its bytes.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from profiler.errors import InputError

I64 = pl.Int64
TPU_PROCESS = "/device:TPU:"
PERFETTO = "perfetto_trace.json.gz"
# what the chip calls itself in the trace's XPlane (``runsc.xplane.pb``): JAX's device_kind
_KIND = re.compile(rb"TPU v\d+[a-z]?(?: lite| Lite)?")


@dataclass
class TpuTrace:
    path: Path
    modules: pl.DataFrame  # execution, name, start, end, duration_ns (ns)
    ops: pl.DataFrame  # execution, hlo_op, category, start, end, self_ns (ns; while: its own time)
    device: str | None  # the chip's kind, when the trace names it


def find(folder: Path) -> Path | None:
    """The TPU trace under *folder* (a run folder's ``trace.json.gz``, a ``jax.profiler.trace``
    folder's ``plugins/profile/<run>/<host>.trace.json.gz``), or None when there is none."""
    if folder.is_file():
        return folder if _is_tpu(folder) else None
    found = [p for pat in ("*trace.json.gz", "*/*trace.json.gz", "*/*/*/*/*trace.json.gz")
             for p in sorted(folder.glob(pat)) if p.name != PERFETTO]  # fmt: skip
    return next((p for p in found if _is_tpu(p)), None)


def _is_tpu(path: Path) -> bool:
    """Whether a trace's first MiB names a TPU device process."""
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(1 << 20)
    except (OSError, EOFError):
        return False
    return TPU_PROCESS.encode() in head


def _load(path: Path) -> list[dict]:
    try:
        with gzip.open(path, "rb") as f:
            doc = json.load(f)
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(path, f"not a readable JAX profiler trace ({exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError(path, "holds no traceEvents")
    return events


def _device_kind(path: Path) -> str | None:
    """The chip's kind from the XPlane beside the trace (the JSON does not name it)."""
    for xp in sorted(path.parent.glob("*.xplane.pb")):
        try:
            m = _KIND.search(xp.read_bytes())
        except OSError:
            continue
        if m:
            return m.group(0).decode()
    return None


def read(path: Path) -> TpuTrace:
    """The executions and ops of the first TPU core in the trace at *path*."""
    events = _load(path)
    procs = {e.get("pid"): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "args" in e}  # fmt: skip
    tpu = sorted((n, p) for p, n in procs.items() if str(n).startswith(TPU_PROCESS))
    if not tpu:
        raise InputError(path, "names no TPU device process (/device:TPU:N): not a TPU trace")
    pid = tpu[0][1]
    threads = {e.get("tid"): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == pid}  # fmt: skip
    rows: dict[str, list] = {"thread": [], "name": [], "cat": [], "off": [], "dur": []}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != pid:
            continue
        a = e.get("args") or {}
        if "device_offset_ps" not in a:
            continue
        rows["thread"].append(threads.get(e.get("tid"), ""))
        rows["name"].append(str(e.get("name")))
        rows["cat"].append(a.get("hlo_category"))
        rows["off"].append(int(a["device_offset_ps"]))
        rows["dur"].append(int(a.get("device_duration_ps") or 0))
    ev = pl.DataFrame(rows, schema={"thread": pl.String, "name": pl.String, "cat": pl.String, "off": I64, "dur": I64})
    mods = (
        ev.filter(pl.col("thread") == "XLA Modules")
        .sort("off")
        .select(
            pl.int_range(pl.len(), dtype=I64).alias("execution"),
            pl.col("name").str.replace(r"\(.*$", "").alias("name"),
            (pl.col("off") // 1000).alias("start"),
            ((pl.col("off") + pl.col("dur")) // 1000).alias("end"),
            (pl.col("dur") / 1000).alias("duration_ns"),
        )
    )
    if mods.height == 0:
        raise InputError(path, "has no XLA Modules events on its TPU: no program execution to read")
    ops = ev.filter(pl.col("thread") == "XLA Ops").sort("off")
    ops = ops.with_columns(_self_ps(ops).alias("self_ps"))
    ops = ops.join_asof(mods.select("execution", (pl.col("start") * 1000).alias("m_off")), left_on="off",
                        right_on="m_off", strategy="backward")  # fmt: skip
    ops = ops.select(
        "execution",
        pl.col("name").alias("hlo_op"),
        pl.col("cat").alias("category"),
        (pl.col("off") // 1000).alias("start"),
        ((pl.col("off") + pl.col("dur")) // 1000).alias("end"),
        (pl.col("self_ps") / 1000).alias("self_ns"),
    ).filter(pl.col("execution").is_not_null())
    return TpuTrace(path, mods, ops, _device_kind(path))


def _self_ps(ops: pl.DataFrame) -> pl.Series:
    """Each op's own time: its duration, less (for a ``while``) that of the ops inside its span."""
    off = ops["off"].to_numpy()
    dur = ops["dur"].to_numpy()
    loop = (ops["cat"] == "while").fill_null(False).to_numpy()
    own = dur.astype(np.int64).copy()
    leaf = np.where(loop, 0, dur)
    csum = np.concatenate([[0], np.cumsum(leaf)])
    idx = np.flatnonzero(loop)
    for i in sorted(idx, key=lambda k: dur[k]):  # inner loops first; a handful per execution
        hi = int(np.searchsorted(off, off[i] + dur[i], side="left"))
        inner = idx[(idx > i) & (idx < hi)]
        own[i] = dur[i] - (csum[hi] - csum[i + 1]) - own[inner].sum()
    return pl.Series(np.maximum(own, 0))


def spans(t: TpuTrace, module: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """(spans for ``instruction_times``: execution, hlo_op, start, end = start + own time, bytes;
    the executions of the step program; its name): the program chosen by *module*, else the one
    with the most device time."""
    by = t.modules.group_by("name").agg(pl.col("duration_ns").sum()).sort("duration_ns", descending=True)
    name = module or str(by["name"][0])
    execs = t.modules.filter(pl.col("name") == name)
    if execs.height == 0:
        raise InputError(t.path, f"no execution of {name} (it ran {', '.join(by['name'].to_list())})")
    ops = t.ops.filter(pl.col("execution").is_in(execs["execution"].implode()))
    out = ops.select(
        "execution",
        "hlo_op",
        "start",
        (pl.col("start") + pl.col("self_ns").round().cast(I64)).alias("end"),
        pl.lit(None, I64).alias("bytes"),
    )
    return out, execs, name


def transfers(t: TpuTrace, pairs: dict[str, tuple[str, str, int]]) -> pl.DataFrame:
    """Each host transfer: *pairs* maps a done instruction to (its start, direction, bytes); the
    k-th run of a start in an execution pairs with the k-th of its done. Rows: cls, bytes, start
    (the start event's), end (the done's end), wait_ns (the done's own time: how long the core
    waited for it)."""
    if not pairs:
        return pl.DataFrame(
            schema={"execution": I64, "cls": pl.String, "bytes": I64, "start": I64, "end": I64, "wait_ns": pl.Float64}
        )
    p = pl.DataFrame(
        [(d, s, c, b) for d, (s, c, b) in pairs.items()],
        schema={"done": pl.String, "start_op": pl.String, "cls": pl.String, "bytes": I64},
        orient="row",
    )
    k = pl.int_range(pl.len()).over("execution", "hlo_op").alias("k")
    ops = t.ops.with_columns(k)
    starts = ops.select("execution", pl.col("hlo_op").alias("start_op"), "k", pl.col("start").alias("s"))
    dones = ops.join(p, left_on="hlo_op", right_on="done")
    return dones.join(starts, on=["execution", "start_op", "k"]).select(
        "execution", "cls", "bytes", pl.col("s").alias("start"), "end", pl.col("self_ns").alias("wait_ns")
    )
