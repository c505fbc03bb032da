"""What a JAX profiler trace of a TPU measured of its step program, for ``measured.load``.

The trace is read by ``profiler.trace.jax_profile`` (``read``, ``tpu_lines``: a TPU's ``XLA
Modules`` line, one event per execution of a program, and its ``XLA Ops`` line, every HLO
instruction the core ran in order; ``tpu_transfers``: its host transfers), timed here by the
device's clock (``device_offset_ps``, ``device_duration_ps``).  What is the prediction's own: a
``while`` event spans its body's ops, which are listed inside it once per trip, so its own time is
its span less theirs (the loop's condition and bookkeeping) and no time is counted twice; ``spans``
gives the frame ``analysis.instruction_times`` takes.  An async pair's ``*-done`` event is the
time the core waited for its transfer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from profiler.errors import InputError
from profiler.trace import jax_profile

I64 = pl.Int64
# what the chip calls itself in the trace's XPlane (``runsc.xplane.pb``): JAX's device_kind
_KIND = re.compile(rb"TPU v\d+[a-z]?(?: lite| Lite)?")


@dataclass
class TpuTrace:
    path: Path
    modules: pl.DataFrame  # execution, name, start, end, duration_ns (ns)
    ops: pl.DataFrame  # execution, hlo_op, category, start, end, self_ns (ns; while: its own time)
    transfers: pl.DataFrame  # execution, cls, bytes, start, end, wait_ns: each host transfer
    device: str | None  # the chip's kind, when the trace names it


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


def _lines(path: Path) -> pl.DataFrame:
    """The device-timed events of the first TPU core's lines (``jax_profile.tpu_lines``): line,
    name, cat, long_name, deviceId, off, dur (ps)."""
    ev = jax_profile.read(path)
    tpus = jax_profile.device_ordinals(ev.processes, "TPU")
    if not tpus:
        raise InputError(path, "names no TPU device process (/device:TPU:N): not a TPU trace")
    first = min(tpus, key=tpus.__getitem__)
    return (
        jax_profile.tpu_lines(ev, {first: tpus[first]})
        .filter(pl.col("device_offset_ps").is_not_null())
        .select(
            "line",
            "name",
            pl.col("hlo_category").alias("cat"),
            "long_name",
            "deviceId",
            pl.col("device_offset_ps").alias("off"),
            pl.col("device_duration_ps").fill_null(0).alias("dur"),
        )
    )


def read(path: Path) -> TpuTrace:
    """The executions, ops and host transfers of the first TPU core in the trace at *path*."""
    ev = _lines(path)
    mods = (
        ev.filter(pl.col("line") == jax_profile.TPU_MODULES_THREAD)
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
    ops = ev.filter(pl.col("line") == jax_profile.TPU_OPS_THREAD).sort("off")
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
        "long_name",
        "deviceId",
    ).filter(pl.col("execution").is_not_null())
    return TpuTrace(path, mods, ops.drop("long_name", "deviceId"), _transfers(ops), _device_kind(path))


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


def _transfers(ops: pl.DataFrame) -> pl.DataFrame:
    """Each host transfer of *ops* (``jax_profile.tpu_transfers``): execution, cls (its direction),
    bytes, start (the start event's), end (the done's end), wait_ns (the done's own time: how long
    the core waited for it)."""
    line = ops.select("deviceId", pl.col("hlo_op").alias("name"), pl.col("category").alias("hlo_category"),
                      "start", "end", "long_name")  # fmt: skip
    done = ops.select("execution", pl.col("hlo_op").alias("done_name"), pl.col("start").alias("wait_start"),
                      pl.col("self_ns").alias("wait_ns"))  # fmt: skip
    return (
        jax_profile.tpu_transfers(line)
        .join(done, on=["done_name", "wait_start"], maintain_order="left")
        .select("execution", pl.col("kind").alias("cls"), "bytes", "start", "end", "wait_ns")
    )
