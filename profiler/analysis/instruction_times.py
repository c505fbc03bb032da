"""What a trace measured of a compiled program: per HLO instruction, its GPU time per execution
of the step, and the copies' bandwidth by size (issue 23: calibration, PGLE, accuracy).

The unit is the *span*: one XLA thunk range (``Thunk:#...,hlo_op=NAME#``) in one execution of
the step module (one ``XlaModule`` range), with the GPU interval its work occupied (``start``,
``end``, ns).  Two sources give spans:

- nsys's ``nvtx_gpu_proj_trace`` (the nsys-jax archives): each range projected onto the GPU;
- an nsys SQLite export: the kernels, copies and memsets launched inside each thunk range
  (METRICS.md's attribution: by the launching call), the span from the first op's start to
  the last op's end.

An instruction's duration in one execution is the sum of its spans there (XLA may split an
instruction into several thunks, and a loop body's instruction runs once per trip);
``instruction_times`` gives the median over executions.  A thunk range that holds other thunk
ranges (a ``while`` loop's, around its body's on every trip) owns only the ops launched outside
them, each its own span.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import polars as pl

from profiler.analysis.xla_steps import gpu_projection, outside_compiles, programs_of
from profiler.xla.names import parse_xla
from profiler.xla.step_program import StepProgram, choose, with_flops

I64 = pl.Int64
SPAN_SCHEMA = {"execution": I64, "hlo_op": pl.String, "start": I64, "end": I64, "bytes": I64, "cls": pl.String}
OP_CLASSES = ("matmul", "fusion", "reduction", "collective", "copy", "other")
COLLECTIVE_PREFIXES = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "send",
    "recv",
    "ragged-all-to-all",
)


def guess_class(opcode: pl.Expr, name: pl.Expr, target: pl.Expr | None = None) -> pl.Expr:
    """The op class when the step's HLO is not at hand (with it, ``profiler.predict.calibrate.
    op_classes`` decides): ``matmul`` (cuBLAS/cuDNN custom calls, GEMM fusions), ``collective``,
    ``copy``, ``reduction`` (fusions XLA named for a reduce: ``input_reduce_fusion``), ``fusion`` (other
    fusions), ``other``, from opcode (or, NULL, what XLA's instruction
    names say: ``fusion.3``, ``copy-start.1``), name and custom-call target."""
    tgt = target.fill_null("") if target is not None else pl.lit("")
    nm = name.fill_null("")
    # without the module, the opcode as XLA's instruction names say it (fusion.3, copy-start.1)
    guess = pl.when(nm.str.contains("fusion")).then(pl.lit("fusion")).otherwise(nm.str.replace(r"(?:\.\d+)+$", ""))
    op = pl.coalesce(opcode, guess).fill_null("")
    collective = pl.any_horizontal([op.str.starts_with(p) for p in COLLECTIVE_PREFIXES]) | (
        (op == "async-start") & pl.any_horizontal([nm.str.contains(p, literal=True) for p in COLLECTIVE_PREFIXES])
    )
    matmul = (
        tgt.str.contains(r"cublas|cudnn|gemm|Gemm")
        | ((op == "fusion") & nm.str.contains(r"^(?:gemm_fusion|cublas|triton_gemm|cudnn|.*_dot)"))
        | (op == "dot")
        | (op == "convolution")
    )
    copy = op.is_in(["copy-start", "copy-done", "copy"]) | nm.str.starts_with("copy-start")
    return (
        pl.when(collective)
        .then(pl.lit("collective"))
        .when(matmul)
        .then(pl.lit("matmul"))
        .when(copy)
        .then(pl.lit("copy"))
        .when((op == "fusion") & nm.str.contains("reduce", literal=True))
        .then(pl.lit("reduction"))
        .when(op == "fusion")
        .then(pl.lit("fusion"))
        .otherwise(pl.lit("other"))
    )


def _xla(frame: pl.DataFrame, text: str, domain: str | None) -> pl.DataFrame:
    return parse_xla(frame, text=text, domain=domain)


def projection_spans(proj: pl.DataFrame, module: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame, StepProgram]:
    """(spans, executions, the step program) from an ``nvtx_gpu_proj_trace`` frame (columns ``Name``
    with the ``TSL:`` domain prefix, ``Projected Start``, ``Projected Duration``, ``Orig Duration``,
    ``RangeId``, ``ParentId``, ``TID``).  The step program is the one rule's
    (``profiler.xla.step_program``, on each range's projected GPU time); *module*: only programs of
    that ``hlo_module``."""
    p = proj.filter(pl.col("RangeId").is_not_null() & pl.col("Name").is_not_null()).with_columns(
        pl.col("Name").str.extract(r"^([^:]+):", 1).alias("_domain"),
        pl.col("Name").str.replace(r"^[^:]+:", "").alias("_text"),
        pl.col("RangeId").cast(I64),
        pl.col("ParentId").cast(I64),
        pl.col("Projected Start").cast(I64).alias("start"),
        (pl.col("Projected Start") + pl.col("Projected Duration")).cast(I64).alias("end"),
        pl.col("Projected Duration").cast(I64).alias("gpu_ns"),
        pl.col("Orig Duration").cast(I64).alias("host_ns")
        if "Orig Duration" in proj.columns
        else pl.col("Projected Duration").cast(I64).alias("host_ns"),
        (pl.col("TID").cast(I64) if "TID" in proj.columns else pl.lit(0, I64)).alias("global_tid"),
    )
    p = _xla(p, "_text", "_domain")
    step, execs = _executions(p, module)
    execs = execs.select("execution", "RangeId", "start", "end", "program_id")
    spans = (
        p.filter(pl.col("xla_kind") == "thunk")
        .join(execs.select("execution", pl.col("RangeId").alias("ParentId")), on="ParentId")
        .select(
            "execution",
            "hlo_op",
            "start",
            "end",
            pl.lit(None, I64).alias("bytes"),
            pl.lit(None, pl.String).alias("cls"),
        )
    )
    return spans, execs.drop("RangeId"), step


def _executions(
    ranges: pl.DataFrame,
    module: str | None,
    declared: str | None = None,
    flops: dict[tuple[str, int], float] | None = None,
) -> tuple[StepProgram, pl.DataFrame]:
    """(the step program by the one rule, its XlaModule ranges in time order numbered by ``execution``)
    from ranges named by ``_xla`` with ``gpu_ns`` per range (and ``host_ns`` where the host time is not
    ``end - start``).  Executions inside compilation (autotuning) and ranges without a ``program_id``
    are never the step's.  *module*: only programs of that name; *declared*: the name the script
    handed to ``annotate.compiled_step`` (the rule's narrowing, as in ``Breakdown.module_steps``);
    *flops*: FLOPs per execution by (module, program id) (``step_program.module_flops``)."""
    mods = outside_compiles(ranges).filter(pl.col("program_id").is_not_null())
    if mods.height == 0:
        raise ValueError("no XlaModule range with a program_id: not a trace of XLA executions")
    step = choose(with_flops(programs_of(mods), flops or {}), module or declared)
    if step.name is None or (module and step.name != module):
        ran = ", ".join(sorted(set(mods["hlo_module"].drop_nulls().to_list()))[:5])
        raise ValueError(f"no execution of module {module!r} in the trace (it ran {ran})")
    same = (pl.col("hlo_module") == step.name) & (pl.col("program_id") == step.program_id)
    execs = mods.filter(same).sort("start").with_row_index("execution")
    return step, execs.with_columns(pl.col("execution").cast(I64))


@dataclass(frozen=True)
class ProgramOrder:
    """The step's ops in schedule order, for the work a command buffer ran (``program_order`` in
    ``profiler.predict.schedule`` makes it): ``names[i]`` is op *i*'s instruction, ``position`` the
    first op of each instruction, ``launchers`` the sorted positions of the ops that launch GPU work;
    a thunk of none of ``instructions`` (with ``position``'s) is a command buffer."""

    names: list[str]
    position: dict[str, int]
    launchers: np.ndarray
    instructions: frozenset[str] = frozenset()  # every instruction of the module (a loop body's too)


def export_ops(
    ranges: pl.DataFrame,
    ops: pl.DataFrame,
    pairs: pl.DataFrame,
    module: str | None = None,
    declared: str | None = None,
    flops: dict[tuple[str, int], float] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, StepProgram]:
    """(each GPU op with its innermost thunk range, executions, the step program) from an export's NVTX
    *ranges* (attribution's: range_id, name, domain, start, end, global_tid), its GPU *ops* (op_id,
    start, end, kind, cls, bytes, name) and the (op_id, range_id) *pairs* of attribution; ``spans_of``
    makes the spans. *declared*: the step the script handed over (see ``_executions``)."""
    r = _xla(ranges, "name", "domain")
    mods = r.filter(pl.col("xla_kind") == "module")
    proj = gpu_projection(mods, pairs, ops).select("range_id", "gpu_ns", "gpu_start", "gpu_end")
    r = r.join(proj, on="range_id", how="left")
    step, execs = _executions(r, module, declared, flops)
    thunks = r.filter(pl.col("xla_kind") == "thunk").select("range_id", "hlo_op", "start", "end", "global_tid")
    # a thunk range that holds other thunk ranges (a loop's, around its body's thunks on every trip):
    # the next range of its thread starts before it ends
    thunks = thunks.sort(["global_tid", "start", "end"], descending=[False, False, True], nulls_last=True).with_columns(
        (pl.col("start").shift(-1).over("global_tid") < pl.col("end")).fill_null(False).alias("parent")
    )
    # the execution a thunk range lies in: the latest module range on its thread that started before it
    thunks = (
        thunks.sort("start")
        .join_asof(
            execs.select(
                "execution", pl.col("start").alias("m_start"), pl.col("end").alias("m_end"), "global_tid"
            ).sort("m_start"),
            left_on="start",
            right_on="m_start",
            by="global_tid",
            strategy="backward",
            check_sortedness=False,  # sorted by time above; per thread too
        )
        .filter(pl.col("execution").is_not_null() & (pl.col("start") < pl.col("m_end")))
    )
    # the innermost thunk range of each op (a loop's range holds its body's: the latest start wins,
    # then the earliest end)
    own = (
        pairs.join(
            thunks.select(
                "range_id",
                "execution",
                "hlo_op",
                "parent",
                pl.col("start").alias("r_start"),
                pl.col("end").alias("r_end"),
            ),
            on="range_id",
        )
        .sort(["r_start", "r_end"], descending=[True, False], nulls_last=True)
        .unique("op_id", keep="first")
        .join(ops.select("op_id", "start", "end", "kind", "cls", "bytes", _op_name(ops)), on="op_id")
    )
    return own, execs.select("execution", "start", "end", "program_id", "gpu_start", "gpu_end"), step


def _op_name(ops: pl.DataFrame) -> pl.Expr:
    return pl.col("name").cast(pl.String) if "name" in ops.columns else pl.lit(None, pl.String).alias("name")


def spans_of(own: pl.DataFrame, order: ProgramOrder | None = None) -> pl.DataFrame:
    """The spans of *own* (``export_ops``' ops): a thunk's span is its ops' first start to last end.
    With the program's *order*, the ops of a thunk that is not an op of the program (XLA's command
    buffers, ``command_buffer_N``: one CUDA graph of many instructions) go to the instructions that
    ran them (``inside_command_buffers``), each op its own span."""
    outside = pl.lit(False)
    if order is not None:
        own = inside_command_buffers(own, order)
        outside = pl.col("_outside")
    # a range that holds others: each of its own ops is a span (from its first op to its last, it
    # would cover the ranges inside it and count their time twice); so is each op of a command buffer
    part = pl.when(pl.col("parent") | outside).then(pl.col("op_id")).otherwise(-1).alias("_part")
    spans = own.group_by("range_id", "execution", "hlo_op", part).agg(
        pl.col("start").min(),
        pl.col("end").max(),
        pl.col("bytes").filter(pl.col("kind") == "copy").sum().cast(I64).alias("bytes"),
        pl.col("cls").filter(pl.col("kind") == "copy").first().alias("cls"),
    )
    return spans.select(list(SPAN_SCHEMA)).sort("execution", "start")


def inside_command_buffers(own: pl.DataFrame, order: ProgramOrder) -> pl.DataFrame:
    """*own* with ``hlo_op`` set, for the kernels of a thunk that is not an op of the program (a
    command buffer: one CUDA graph of many instructions), to the instruction that launched each.

    The graph runs its kernels in the order of the ops it was made of, so each thunk's kernels, in
    the order they ran, are aligned with the program's launching ops in schedule order
    (``difflib``'s longest matching blocks, one alignment a thunk, not a loop over kernels): a kernel
    named for its op (XLA names a fusion's kernel after it: ``loop_convert_fusion.15`` runs
    ``loop_convert_fusion_15``) matches it, a library kernel (a cuBLAS GEMM's ``nvjet_...``) a
    custom call, a ``memcpy`` kernel a device copy, and between two matched blocks equally many
    kernels and ops pair in order (XLA reuses one kernel for identical fusions, under the first
    one's name); a run of library kernels longer than its run of custom calls gives the rest to the
    last (a GEMM of two kernels). Kernels matched to nothing, memsets and copies keep the thunk's
    name. Adds ``_outside`` (the op's thunk is not an op of the program)."""
    names = np.asarray(order.names, dtype=object)
    launch = [_token(order.names[i]) for i in order.launchers]
    by_token = {t for t in launch if t not in ("LIB", "COPY")}
    known = list(order.instructions | order.position.keys())
    own = own.with_columns((~pl.col("hlo_op").is_in(known)).alias("_outside"))
    own = own.with_row_index("_row").sort("range_id", "start", "op_id")
    kernels = {
        k[0]: part
        for k, part in own.filter(pl.col("_outside") & (pl.col("kind") == "kernel"))
        .partition_by("range_id", as_dict=True, maintain_order=True)
        .items()
    }
    if not kernels:
        return own.sort("_row").drop("_row")
    # an execution's thunks in the order they ran: each command buffer is aligned with the ops after
    # those the thunks before it ran (a later layer's kernels, named after the first layer's fusions,
    # do not go back to the first layer): the known thunks' floor, then the command buffers' own
    thunks = (
        own.group_by("execution", "range_id")
        .agg(pl.col("r_start").first(), pl.col("hlo_op").first())
        .sort("execution", "r_start", "range_id")
    )
    pos = thunks["hlo_op"].replace_strict(order.position, default=-1, return_dtype=I64).to_numpy()
    after = np.where(pos >= 0, np.searchsorted(order.launchers, pos, side="right"), 0)
    thunks = thunks.with_columns(pl.Series("_after", after)).with_columns(
        pl.col("_after").cum_max().over("execution").alias("_floor")
    )
    rows: list[np.ndarray] = []
    picked: list[np.ndarray] = []
    last, cursor = None, 0
    buffers = thunks.filter(pl.col("range_id").is_in(list(kernels)))
    for range_id, execution, floor in buffers.select("range_id", "execution", "_floor").iter_rows():
        cursor = max(0 if execution != last else cursor, floor)
        last = execution
        part = kernels[range_id]
        seen = [_kernel_token(n, by_token) for n in part["name"].to_list()]
        window = launch[cursor : cursor + 2 * len(seen) + 16]
        at = _align(seen, window)
        ok = at >= 0
        rows.append(part["_row"].to_numpy()[ok])
        picked.append(names[order.launchers[cursor + at[ok]]])
        if ok.any():
            cursor += int(at[ok].max()) + 1
    row = np.concatenate(rows)  # one array per command buffer with kernels, so never an empty list
    fill = pl.DataFrame(
        {"_row": row, "_op": np.concatenate(picked).tolist()}, schema={"_row": pl.UInt32, "_op": pl.String}
    )
    return (
        own.join(fill, on="_row", how="left")
        .with_columns(pl.coalesce("_op", "hlo_op").alias("hlo_op"))
        .sort("_row")
        .drop("_row", "_op")
    )


def _token(op: str) -> str:
    """What an op's kernel is called: ``LIB`` for a custom call (a library's kernel: cuBLAS, cuDNN),
    ``COPY`` for a copy on the device (XLA's ``memcpy...`` kernels), else its name as XLA names kernels."""
    if op.startswith("custom-call"):
        return "LIB"
    return "COPY" if op.startswith("copy.") or op == "copy" else op.replace(".", "_").replace("-", "_")


def _kernel_token(kernel: str | None, known: set[str]) -> str:
    name = (kernel or "").split("(")[0].strip()
    if name in known:
        return name
    return "COPY" if name.startswith("memcpy") else "LIB"


def _align(seen: list[str], launch: list[str]) -> np.ndarray:
    """For each kernel token in *seen*, the index into *launch* of the op that ran it, or -1.

    Consecutive library kernels are one token on each side (a GEMM may run two kernels, two GEMMs
    may follow each other), split again in order: the i-th kernel of a run to the i-th op of its
    run, the ones past the last op to the last."""
    k_runs, k_at = _runs(seen)
    o_runs, o_at = _runs(launch)
    out = np.full(len(seen), -1, dtype=np.int64)
    m = difflib.SequenceMatcher(None, k_runs, o_runs, autojunk=False)
    for tag, i1, i2, j1, j2 in m.get_opcodes():
        if tag == "replace":  # pair as many as both sides have, in order
            n = min(i2 - i1, j2 - j1)
            i2, j2 = i1 + n, j1 + n
        elif tag != "equal":
            continue
        for a, b in zip(range(i1, i2), range(j1, j2), strict=True):
            kernels = np.arange(k_at[a], k_at[a + 1])
            ops = np.arange(o_at[b], o_at[b + 1])
            out[kernels] = ops[np.minimum(np.arange(kernels.size), ops.size - 1)]
    return out


def _runs(tokens: list[str]) -> tuple[list[str], np.ndarray]:
    """*tokens* with each run of ``LIB`` as one, and where each run starts (plus the end)."""
    arr = np.asarray(tokens, dtype=object)
    lib = arr == "LIB"
    first = np.ones(arr.size, dtype=bool)
    first[1:] = ~(lib[1:] & lib[:-1])
    at = np.flatnonzero(first)
    return arr[at].tolist(), np.append(at, arr.size)


def instruction_times(spans: pl.DataFrame) -> pl.DataFrame:
    """Per instruction: ``median_ns`` (its spans summed per execution, median over executions),
    ``min_ns``, ``max_ns``, ``executions`` (how many executions ran it), ``thunks`` (spans per
    execution, median), ``bytes`` (copied per execution, median; NULL without copies),
    ``first_ns`` (median start of its first span after the execution's first span)."""
    if spans.height == 0:
        return pl.DataFrame(
            schema={
                "hlo_op": pl.String,
                "median_ns": pl.Float64,
                "min_ns": I64,
                "max_ns": I64,
                "executions": pl.UInt32,
                "thunks": pl.Float64,
                "bytes": pl.Float64,
                "first_ns": pl.Float64,
            }
        )
    t0 = pl.col("start").min().over("execution")
    per = (
        spans.with_columns((pl.col("start") - t0).alias("_off"))
        .group_by("execution", "hlo_op")
        .agg(
            (pl.col("end") - pl.col("start")).sum().alias("ns"),
            pl.len().alias("n"),
            pl.col("bytes").sum().alias("b"),
            pl.col("bytes").is_not_null().any().alias("has_b"),
            pl.col("_off").min().alias("off"),
        )
    )
    return (
        per.group_by("hlo_op")
        .agg(
            pl.col("ns").median().alias("median_ns"),
            pl.col("ns").min().alias("min_ns"),
            pl.col("ns").max().alias("max_ns"),
            pl.len().alias("executions"),
            pl.col("n").median().alias("thunks"),
            pl.when(pl.col("has_b").any()).then(pl.col("b").median()).alias("bytes"),
            pl.col("off").median().alias("first_ns"),
        )
        .sort("first_ns", "hlo_op")
    )


def step_times(executions: pl.DataFrame) -> pl.DataFrame:
    """Per execution of the step module: ``duration_ns``, its range on the GPU (a projection's
    range; in an export, from the first start to the last end of the GPU ops launched inside its
    host range, as ``xla_steps.module_steps`` measures a step), else its host range."""
    if "gpu_start" in executions.columns:
        span = pl.coalesce("gpu_end", "end") - pl.coalesce("gpu_start", "start")
    else:
        span = pl.col("end") - pl.col("start")
    return executions.with_columns(span.alias("duration_ns"))


# --- copies ------------------------------------------------------------------------------------


def copy_bandwidth(copies: pl.DataFrame) -> pl.DataFrame:
    """Copies (``cls``: h2d/d2h/..., ``bytes``, ``start``, ``end``) by direction and size class
    (powers of two: ``size_lo`` <= bytes < 2 x ``size_lo``): ``copies``, ``median_bytes``,
    ``median_ns``, ``gbps`` (decimal GB/s: bytes per ns of the medians), ``p10_gbps``, ``p90_gbps``."""
    c = copies.filter((pl.col("bytes") > 0) & (pl.col("end") > pl.col("start"))).with_columns(
        (pl.col("end") - pl.col("start")).alias("ns"),
        (pl.lit(2, I64).pow(pl.col("bytes").cast(pl.Float64).log(2).floor().cast(I64))).alias("size_lo"),
    )
    rate = pl.col("bytes") / pl.col("ns")
    return (
        c.group_by("cls", "size_lo")
        .agg(
            pl.len().alias("copies"),
            pl.col("bytes").median().alias("median_bytes"),
            pl.col("ns").median().alias("median_ns"),
            rate.quantile(0.1).alias("p10_gbps"),
            rate.quantile(0.9).alias("p90_gbps"),
        )
        .with_columns((pl.col("median_bytes") / pl.col("median_ns")).alias("gbps"))
        .sort("cls", "size_lo")
    )


def link_fit(copies: pl.DataFrame) -> pl.DataFrame:
    """Per direction, the line ``ns = latency_ns + bytes / gbps`` fitted to the copies (least
    squares, copies of at least 1 byte): ``latency_ns``, ``gbps``, ``copies``; a direction with
    copies of one size only gets its median rate and no latency."""
    rows = []
    c = copies.filter((pl.col("bytes") > 0) & (pl.col("end") > pl.col("start")))
    for cls in sorted(c["cls"].unique().to_list()):
        d = c.filter(pl.col("cls") == cls)
        x = d["bytes"].to_numpy().astype(float)
        y = (d["end"] - d["start"]).to_numpy().astype(float)
        slope, icpt = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (np.median(y / x), 0.0)
        if slope <= 0:  # no size dependence visible: the median rate
            slope, icpt = float(np.median(y / x)), 0.0
        rows.append({"cls": cls, "latency_ns": max(float(icpt), 0.0), "gbps": 1.0 / float(slope), "copies": d.height})
    return pl.DataFrame(rows, schema={"cls": pl.String, "latency_ns": pl.Float64, "gbps": pl.Float64, "copies": I64})


def copy_ns(nbytes: np.ndarray, table: pl.DataFrame, cls: str, fallback_gbps: float) -> np.ndarray:
    """Predicted duration (ns) of copies of *nbytes* in direction *cls* from a ``copy_bandwidth``
    table: the measured rate of the size class; between two measured classes, the time interpolated
    between their medians (not the smaller class's rate: a few-byte class's rate is its latency, and
    priced a 32 MiB copy at 94 s); beyond them, the nearest class's rate; *fallback_gbps* where the
    direction was never measured."""
    t = table.filter(pl.col("cls") == cls).sort("size_lo")
    b = np.asarray(nbytes, dtype=float)
    if t.height == 0:
        return b / fallback_gbps
    lo = t["size_lo"].to_numpy().astype(float)
    rate = t["gbps"].to_numpy()
    k = np.clip(np.searchsorted(lo, np.maximum(b, 1.0), side="right") - 1, 0, len(lo) - 1)
    own = b / rate[k]
    mb, mns = t["median_bytes"].to_numpy().astype(float), t["median_ns"].to_numpy().astype(float)
    gap = (b >= 2 * lo[k]) & (b < lo[-1])  # in no measured class, with one above and one below
    return np.where(gap, np.interp(b, mb, mns), own)
