"""Training steps and warm-up from XLA's own ranges, for scripts with no step annotation.

On a GPU, XLA writes one ``XlaModule`` range (domain ``TSL``) per execution of
an executable; on any other backend profile-step's start-up hook writes the same in
its own domain (``profiler.capture.startup``).  The executions of the step's
program are the steps:

- executions are grouped by program (``hlo_module``, ``program_id``); a program's GPU time is
  the sum over its executions of the busy time (union) of the GPU ops launched inside each
  (nsys's projection of a range onto the GPU);
- the step's program is chosen by the one rule of ``profiler.xla.step_program`` (the programs
  that ran more than once, then the most GPU time, the most executions, the most host time);
  so a script's init (run once) is never its step, and on a CPU (no GPU time) the program that
  ran most often is; other programs of the same name are not steps, and are said once;
- executions that run inside a compile range on their own thread (the
  autotuner's trial modules, ``XlaModule:#hlo_module=extracted#``) are compile
  work, never steps;
- one process driving several GPUs runs each step once per GPU: the k-th
  execution on each device (in each process) together are step k;
- executions that overlap (host time, same process) a compile range of the
  same module (``XlaCompile``, ``XlaPass``, ... with its ``module=``; by
  ``program_id`` when both name one), and each device's first execution of a
  program whose compilation the recording holds, are warm-up: the step is
  listed and excluded from medians.

A step's span is its projection onto the GPU (first start to last end of the
ops launched inside its executions), or their host range when they launched
none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from profiler.analysis.intervals import length_by_group, union
from profiler.conventions import DOMAIN
from profiler.xla.step_program import Program, StepProgram, choose, program_label, with_flops

I64 = pl.Int64
NO_XLA = (
    "no XLA module ranges: XLA writes them only on GPUs (XLA:CPU emits no NVTX), and only with nsys tracing NVTX; "
    "profile-step run's start-up hook writes them for jax.jit programs on every backend"
)


@dataclass(frozen=True)
class ModuleSteps:
    """The step program's executions as steps, or why there are none."""

    steps: pl.DataFrame  # index, range_id, name, start, end, warmup (or NULL), pid, global_tid (of the first execution)
    members: pl.DataFrame  # range_id, index: every execution of each step
    module: str | None
    program_id: int | None
    note: str | None
    chosen_by: str | None = None  # how the program was chosen: StepProgram.sentence
    by_hook: bool = False  # the executions come from profile-step's start-up hook (no XLA module ranges)
    step: StepProgram | None = None  # the one rule's answer (profiler.xla.step_program)

    @property
    def source(self) -> str | None:
        if self.module is None:
            return None
        hook = ", recorded by profile-step's start-up hook" if self.by_hook else ""
        return f"the executions of {program_label(self.module, self.program_id)}{hook}"


def gpu_projection(modules: pl.DataFrame, pairs: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Per module range: gpu_start, gpu_end, gpu_ns (busy union) and device (the first) of the ops
    launched inside it."""
    p = pairs.join(modules.select("range_id"), on="range_id")
    if p.height == 0:
        return modules.select("range_id").with_columns(
            pl.lit(None, I64).alias("gpu_start"),
            pl.lit(None, I64).alias("gpu_end"),
            pl.lit(0, I64).alias("gpu_ns"),
            pl.lit(None, I64).alias("device"),
        )
    spans = ops.select("start", "end", "device")[p["op_id"].to_numpy()].with_columns(p["range_id"])
    busy = length_by_group(union(spans["range_id"].to_numpy(), spans["start"].to_numpy(), spans["end"].to_numpy()))
    agg = spans.group_by("range_id").agg(
        pl.col("start").min().alias("gpu_start"), pl.col("end").max().alias("gpu_end"), pl.col("device").min()
    )
    agg = agg.with_columns(pl.col("range_id").replace_strict(busy, default=0, return_dtype=I64).alias("gpu_ns"))
    return modules.select("range_id").join(agg, on="range_id", how="left").with_columns(pl.col("gpu_ns").fill_null(0))


def _merged(frame: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """The union of ``[start, end)`` ranges per *key*: key..., start, end (disjoint, sorted)."""
    if frame.height == 0:
        return frame.select(*key, "start", "end")
    f = frame.sort(*key, "start").with_columns(pl.col("end").cum_max().shift(1).over(key).alias("_prev_end"))
    f = f.with_columns(
        (pl.col("_prev_end").is_null() | (pl.col("start") > pl.col("_prev_end"))).cum_sum().over(key).alias("_run")
    )
    return f.group_by(*key, "_run").agg(pl.col("start").min(), pl.col("end").max()).drop("_run").sort(*key, "start")


def _inside(points: pl.DataFrame, spans: pl.DataFrame, by: str) -> pl.Series:
    """For each of *points* (``start``, *by*): whether it starts inside one of *spans* of the same *by*."""
    if spans.height == 0 or points.height == 0:
        return pl.Series([False] * points.height, dtype=pl.Boolean)
    merged = _merged(spans, [by]).rename({"start": "_s", "end": "_e"})
    hit = (
        points.select(by, "start")
        .with_row_index("_i")
        .sort("start")
        .join_asof(
            merged.sort("_s"), left_on="start", right_on="_s", by=by, strategy="backward", check_sortedness=False
        )
        .sort("_i")
    )
    return (hit["_e"].is_not_null() & (hit["start"] < hit["_e"])).alias("inside")


def module_steps(
    ranges: pl.DataFrame,
    pairs: pl.DataFrame,
    ops: pl.DataFrame,
    declared: str | None = None,
    flops: dict[tuple[str, int], float] | None = None,
) -> ModuleSteps:
    """The steps of *ranges* (parsed by ``profiler.xla.names.parse_xla``) from XLA module executions.

    *pairs* (op_id, range_id) and *ops* (by op_id) give the GPU ops launched inside each range;
    *declared*: the module the script named its step (``annotate.compiled_step``), if any;
    *flops*: FLOPs per execution by (module, program id), the run's compiled modules
    (``step_program.module_flops``): the step is chosen by its work where they are known.
    """
    schema = {"index": pl.UInt32, "range_id": I64, "name": pl.String, "start": I64, "end": I64}
    empty = pl.DataFrame(schema={**schema, "warmup": pl.String, "pid": I64, "global_tid": I64})
    no_members = pl.DataFrame(schema={"range_id": I64, "index": pl.UInt32})
    modules = ranges.filter(pl.col("xla_kind") == "module")
    if modules.height == 0:
        return ModuleSteps(empty, no_members, None, None, NO_XLA)
    compiles = ranges.filter(pl.col("xla_kind") == "compile")
    candidates = outside_compiles(ranges)
    if candidates.height == 0:
        note = "every XLA module execution ran inside a compilation (autotuning)"
        return ModuleSteps(empty, no_members, None, None, note)
    candidates = candidates.join(gpu_projection(candidates, pairs, ops), on="range_id", how="left")
    programs = with_flops(programs_of(candidates), flops or {})
    step = choose(programs, declared)
    module, program = step.name, step.program_id
    same = pl.col("hlo_module") == module
    same_program = same & (
        pl.col("program_id").eq_missing(program) if program is not None else pl.col("program_id").is_null()
    )
    execs = candidates.filter(same_program).sort("start")
    # compile ranges that name this module (and this program, when they name one)
    named = compiles.filter(same & (pl.col("program_id").is_null() | pl.col("program_id").eq_missing(program)))
    overlapping = _overlaps(execs, named)
    compiled_before = (
        named.group_by("pid").agg(pl.col("start").min().alias("_c0"))
        if named.height
        else pl.DataFrame(schema={"pid": I64, "_c0": I64})
    )
    # one device's sequence of executions: its GPU (in its process), else its thread
    lane = pl.coalesce(pl.col("device").cast(pl.String), pl.format("thread {}", pl.col("global_tid")))
    execs = (
        execs.with_columns(overlapping.alias("_overlaps"), pl.int_range(pl.len()).over("pid", lane).alias("_k"))
        .join(compiled_before, on="pid", how="left")
        .with_columns(
            pl.when(pl.col("_overlaps"))
            .then(pl.lit(f"warm-up: runs while {module} compiles or autotunes"))
            .when((pl.col("_k") == 0) & pl.col("_c0").is_not_null() & (pl.col("_c0") <= pl.col("start")))
            .then(pl.lit("warm-up: first execution after its compilation"))
            .alias("warmup"),
            pl.coalesce("gpu_start", "start").alias("span_start"),
            pl.coalesce("gpu_end", "end").alias("span_end"),
        )
    )
    steps = (
        execs.sort("start")
        .group_by("_k", maintain_order=True)
        .agg(
            pl.col("range_id").first(),
            pl.col("span_start").min().alias("start"),
            pl.col("span_end").max().alias("end"),
            pl.col("warmup").drop_nulls().first(),
            pl.col("pid").first(),
            pl.col("global_tid").first(),
        )
        .sort("_k")
        .with_columns(pl.col("_k").cast(pl.UInt32).alias("index"))
        .select(
            "index",
            "range_id",
            pl.format("{}#{}", pl.lit(module), pl.col("_k")).alias("name"),
            "start",
            "end",
            "warmup",
            "pid",
            "global_tid",
        )
    )
    members = execs.select("range_id", pl.col("_k").cast(pl.UInt32).alias("index"))
    note = step.sentence if len(programs) > 1 else None
    by_hook = bool(execs.height) and "domain" in execs.columns and execs["domain"][0] == DOMAIN
    return ModuleSteps(steps, members, module, program, note, step.sentence, by_hook, step)


def programs_of(executions: pl.DataFrame) -> list[Program]:
    """Per program (hlo_module, program_id) of *executions* (XlaModule ranges with ``start``, ``end``,
    ``gpu_ns`` and, where the host time is not ``end - start``, ``host_ns``): its executions, GPU
    time, host time and first start, for ``step_program.choose``."""
    if executions.height == 0:
        return []
    gpu = pl.col("gpu_ns").fill_null(0).sum() if "gpu_ns" in executions.columns else pl.lit(0, I64)
    host = pl.col("host_ns") if "host_ns" in executions.columns else pl.col("end") - pl.col("start")
    totals = executions.group_by("hlo_module", "program_id").agg(
        gpu.alias("gpu_ns"),
        host.sum().alias("host_ns"),
        pl.col("start").min().alias("first"),
        pl.len().alias("executions"),
    )
    return [
        Program(str(n), int(p) if p is not None else None, int(e), int(g or 0), int(h), int(f))
        for n, p, g, h, f, e in totals.select(
            "hlo_module", "program_id", "gpu_ns", "host_ns", "first", "executions"
        ).iter_rows()
        if n
    ]


def outside_compiles(ranges: pl.DataFrame) -> pl.DataFrame:
    """The ``XlaModule`` ranges of *ranges* (parsed by ``parse_xla``) that do not start inside a compile
    range on their own thread (the autotuner's trial executions are compile work)."""
    modules = ranges.filter(pl.col("xla_kind") == "module")
    compiles = ranges.filter(pl.col("xla_kind") == "compile")
    return modules.filter(~_inside(modules, compiles, "global_tid"))


def _overlaps(execs: pl.DataFrame, compiles: pl.DataFrame) -> pl.Series:
    """For each execution: whether it overlaps (host time) one of *compiles* in its process."""
    if compiles.height == 0 or execs.height == 0:
        return pl.Series([False] * execs.height, dtype=pl.Boolean)
    merged = _merged(compiles, ["pid"])
    out = np.zeros(execs.height, dtype=bool)
    for (pid,), spans in merged.group_by(["pid"]):  # one pass per process
        rows = np.flatnonzero((execs["pid"] == pid).to_numpy())
        s, e = spans["start"].to_numpy(), spans["end"].to_numpy()
        es, ee = execs["start"].to_numpy()[rows], execs["end"].to_numpy()[rows]
        last = np.searchsorted(s, ee, side="left") - 1  # the last compile span starting before the execution ends
        out[rows] = (last >= 0) & (e[np.maximum(last, 0)] > es)
    return pl.Series(out)
