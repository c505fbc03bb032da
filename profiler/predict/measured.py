"""Read what a run measured of its compiled step: an nsys-jax archive (``.zip`` or its folder:
``nvtx_gpu_proj_trace/trace.parquet`` + ``dump/``), an nsys SQLite export, or a run folder
(``trace.sqlite`` + ``xla_dump/``).  The analysis is ``profiler.analysis.instruction_times``.
"""

from __future__ import annotations

import io
import lzma
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import polars as pl

from profiler.analysis import instruction_times as it
from profiler.conventions import TRACE_STEM, XLA_DUMP_DIR
from profiler.errors import InputError
from profiler.predict import roofline, schedule, tpu_trace
from profiler.stored.folder import compiled_of, device_kind, manifest_in, trace_in
from profiler.trace.jax_profile import find_tpu, is_jax_trace
from profiler.xla import dump
from profiler.xla.compiled import load_module
from profiler.xla.hlo import HloError, Module
from profiler.xla.step_program import StepProgram, module_flops

PROJECTION = "nvtx_gpu_proj_trace/trace.parquet"


@dataclass
class Measured:
    source: Path
    kind: str  # "nsys-jax archive" | "nsys export"
    module_name: str
    module: Module | None  # the step's optimized HLO, when found
    times: pl.DataFrame  # instruction_times, with opcode and op_class where the module names them
    steps: pl.DataFrame  # execution, start, end, duration_ns
    copies: pl.DataFrame  # cls, bytes, start, end: every h2d/d2h copy of the trace
    gpu: str | None = None
    notes: list[str] = field(default_factory=list)
    spec_text: str | None = None  # the GPU's GpuTargetConfigProto, when the source holds it (nsys-jax dumps)
    chosen_by: str | None = None  # how the step program was chosen (profiler.xla.step_program), one sentence

    @property
    def step_ns(self) -> float:
        """The median measured step (ns)."""
        return float(self.steps["duration_ns"].median() or 0.0)

    @cached_property
    def sched(self) -> schedule.Schedule | None:
        """The step module's schedule (``schedule.build``), built once for the replay, the calibration and
        ``plan --from``; None without the module."""
        return schedule.build(self.module) if self.module is not None else None


def with_classes(times: pl.DataFrame, module: Module | None, sched: schedule.Schedule | None = None) -> pl.DataFrame:
    """*times* with ``opcode``, ``site`` (the op of the replayed schedule that runs it: itself where
    its computation's instructions are ops, the entry's or a loop body's; else the fusion, async-start,
    loop or conditional around it: ``schedule.Schedule.site``), ``runs`` (how many times the schedule
    runs the site per step: a loop body's trips) and ``op_class``: the site's class in the replayed
    schedule (``roofline.op_classes``); without the module, the class XLA's instruction names suggest
    (``instruction_times.guess_class``) and one run. *sched*: the module's schedule when already built."""
    if module is None:
        return times.with_columns(
            pl.lit(None, pl.String).alias("opcode"),
            pl.col("hlo_op").alias("site"),
            pl.lit(1, pl.Int64).alias("runs"),
            it.guess_class(pl.lit(None, pl.String), pl.col("hlo_op")).alias("op_class"),
        )
    sched = sched or schedule.build(module)
    classes = roofline.op_classes(sched)
    rows = []
    for name in times["hlo_op"].to_list():
        ins = sched.instructions.get(name)
        site = sched.site(name) or name
        rows.append({"hlo_op": name, "opcode": ins.opcode if ins else None, "site": site,
                     "runs": max(sched.runs.get(site, 1), 1)})  # fmt: skip
    meta = pl.DataFrame(rows, schema={"hlo_op": pl.String, "opcode": pl.String, "site": pl.String, "runs": pl.Int64})
    return times.join(meta, on="hlo_op", how="left").with_columns(
        pl.col("site").fill_null(pl.col("hlo_op")),
        pl.col("runs").fill_null(1),
        pl.col("site").replace_strict(classes, default="other", return_dtype=pl.String).alias("op_class"),
    )


def load(path: Path, module: str | None = None, hlo: Path | None = None) -> Measured:
    """What *path* measured (see the module docstring); *module* picks the step module by name,
    *hlo* gives its optimized HLO when the source holds none."""
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if path.is_file() and zipfile.is_zipfile(path):
        return _archive_zip(path, module, hlo)
    if path.is_dir() and (path / PROJECTION).is_file():
        return _archive_dir(path, module, hlo)
    tpu = find_tpu(path) if path.is_dir() or path.name.endswith(".json.gz") else None
    if tpu is not None:
        return _tpu(path, tpu, module, hlo)
    if path.is_dir() and not is_jax_trace(path):
        # a run folder's trace (an export, a report, a JAX profiler trace), else an export in the folder
        found = trace_in(path, manifest_in(path))
        sqlite = [found] if found else sorted(path.glob(f"{TRACE_STEM}*.sqlite")) or sorted(path.glob("*.sqlite"))
        if not sqlite:
            raise InputError(path, "holds no trace (nsys export or report, JAX profiler trace) and no nsys-jax archive")
        dump_dir = path / XLA_DUMP_DIR
        return _export(sqlite[0], module, hlo, dump_dir if dump_dir.is_dir() else None)
    return _export(path, module, hlo, None)


def _step_hlo(dump_dir: Path | None, step: StepProgram, notes: list[str]) -> Module | None:
    """The optimized HLO of the step program: the dump's module of its program id, nothing else."""
    if dump_dir is None:
        notes.append("no XLA dump next to the trace: instructions are known by name only (--hlo FILE gives it)")
        return None
    mods = [m for m in dump.scan(dump_dir) if "after" in m.files or "after_proto" in m.files]
    hit = [m for m in mods if step.is_program(m.name, m.id)]
    if not hit:
        notes.append(f"no optimized module of {step.label} in {dump_dir}: instructions are known by name only")
        return None
    m = hit[-1]
    try:
        return load_module(m.files.get("after") or m.files["after_proto"])[0]
    except (HloError, OSError) as exc:
        notes.append(f"the optimized module could not be read: {exc}")
        return None


def _hlo_file(hlo: Path) -> Module:
    try:
        return load_module(hlo)[0]
    except (HloError, OSError) as exc:
        raise InputError(hlo, f"not a readable HLO module ({exc})") from None


def _from_projection(
    source: Path, proj: pl.DataFrame, module: str | None, hlo: Path | None, dump_dir: Path | None, spec: str | None
) -> Measured:
    try:
        spans, execs, step = it.projection_spans(proj, module)
    except ValueError as exc:
        raise InputError(source, str(exc)) from None
    name = str(step.name)
    notes: list[str] = []
    mod = _hlo_file(hlo) if hlo else _step_hlo(dump_dir, step, notes)
    times = with_classes(it.instruction_times(spans), mod)
    empty = pl.DataFrame(schema={"cls": pl.String, "bytes": pl.Int64, "start": pl.Int64, "end": pl.Int64})
    notes.append("the archive holds no copy rows (nvtx_gpu_proj_trace has ranges only): no copy bandwidth")
    gpu = _gpu_of_config(spec) if spec else None
    steps = it.step_times(execs)
    return Measured(source, "nsys-jax archive", name, mod, times, steps, empty, gpu, notes, spec, step.sentence)


def _gpu_of_config(text: str) -> str | None:
    m = re.search(r'device_description_str:\s*"([^"]*)"', text)
    return m.group(1) if m else None


def _archive_dir(path: Path, module: str | None, hlo: Path | None) -> Measured:
    proj = pl.read_parquet(path / PROJECTION)
    spec = None
    for cfg in sorted((path / "dump").glob("*gpu_target_config.pbtxt*")):
        data = lzma.decompress(cfg.read_bytes()) if cfg.suffix == ".xz" else cfg.read_bytes()
        spec = data.decode("utf-8", "replace")
        break
    return _from_projection(path, proj, module, hlo, path / "dump" if (path / "dump").is_dir() else None, spec)


def _archive_zip(path: Path, module: str | None, hlo: Path | None) -> Measured:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            proj_name = next((n for n in names if n.endswith(PROJECTION)), None)
            if proj_name is None:
                raise InputError(path, f"is a zip file but holds no {PROJECTION} (not an nsys-jax archive)")
            proj = pl.read_parquet(io.BytesIO(zf.read(proj_name)))
            # the step's dump files only: the archive's sources stay in the zip
            dumps = [n for n in names if "/dump/" in f"/{n}" and "after_optimizations" in n]
            configs = [n for n in names if n.endswith(("gpu_target_config.pbtxt.xz", "gpu_target_config.pbtxt"))]
            spec = None
            if configs:
                raw = zf.read(configs[0])
                spec = (lzma.decompress(raw) if configs[0].endswith(".xz") else raw).decode("utf-8", "replace")
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                try:
                    step = it.projection_spans(proj, module)[2]
                except ValueError as exc:
                    raise InputError(path, str(exc)) from None
                for n in dumps:
                    if f"module_{step.program_id:04d}.{step.name}." in n:
                        (d / Path(n).name).write_bytes(zf.read(n))
                return _from_projection(path, proj, module, hlo, d, spec)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(path, f"cannot be read as a zip archive ({exc})") from None


def _export(path: Path, module: str | None, hlo: Path | None, dump_dir: Path | None) -> Measured:
    from profiler.analysis import attribution
    from profiler.trace import load_trace

    trace = load_trace(path)  # an export, or a report or JAX profiler trace through its cached export
    ops = attribution.gpu_ops(trace)
    end = ops["end"].max() if ops.height else None
    rng = attribution.nvtx_ranges(trace.nvtx, int(end) if end is not None else None).ranges  # type: ignore[arg-type]
    pairs = attribution.attribute(ops, rng)
    compiled = compiled_of(path)
    declared = ((compiled or {}).get("handed_over") or {}).get("module")  # as Breakdown reads it
    try:
        own, execs, step = it.export_ops(rng, ops, pairs, module, declared, module_flops(compiled))
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
    name = str(step.name)
    if own.height == 0:
        raise InputError(path, f"no GPU work under XLA thunk ranges (Thunk:#...hlo_op=...#) in {step.label}")
    notes: list[str] = []
    mod = _hlo_file(hlo) if hlo else _step_hlo(dump_dir, step, notes)
    # a command buffer's kernels go to the instructions that ran them (the module's order says which)
    sched = schedule.build(mod) if mod is not None else None
    spans = it.spans_of(own, schedule.program_order(sched) if sched is not None else None)
    times = with_classes(it.instruction_times(spans), mod, sched)
    copies = ops.filter((pl.col("kind") == "copy") & pl.col("cls").is_in(["h2d", "d2h"])).select(
        "cls", "bytes", "start", "end"
    )
    gpus = trace.devices["name"].drop_nulls().to_list() if "name" in trace.devices.columns else []
    gpu = gpus[0] if gpus else None
    spec = _dump_spec(dump_dir, name)
    steps = it.step_times(execs)
    return Measured(
        path,
        "JAX profiler trace" if trace.source else "nsys export",
        name,
        mod,
        times,
        steps,
        copies,
        gpu,
        notes,
        spec,
        step.sentence,
    )


def _dump_spec(dump_dir: Path | None, name: str) -> str | None:
    """The target description XLA dumped with module *name* (``*.gpu_target_config.pbtxt``), if any."""
    if dump_dir is None:
        return None
    for cfg in sorted(dump_dir.glob(f"*.{name}.gpu_target_config.pbtxt*")):
        try:
            data = lzma.decompress(cfg.read_bytes()) if cfg.suffix == ".xz" else cfg.read_bytes()
        except (OSError, lzma.LZMAError):
            continue
        return data.decode("utf-8", "replace")
    return None


def copies_of_export(path: Path) -> pl.DataFrame:
    """Every h2d/d2h copy of an nsys export (cls, bytes, start, end), thunk ranges or not."""
    from profiler.trace.loader import open_trace

    c = open_trace(path, "all").copies
    return c.filter(pl.col("cls").is_in(["h2d", "d2h"])).select("cls", "bytes", "start", "end", "host_kind")


TPU_DUMPS = (XLA_DUMP_DIR, "dump")  # a run folder's dump, a recording folder's (benchmarks/tpu_record.sh)


def _tpu_hlo(folder: Path, name: str, notes: list[str]) -> Module | None:
    """The last optimized module named *name* in the folder's dump (a program compiled twice is
    dumped twice: the same program)."""
    for sub in TPU_DUMPS:
        mods = [m for m in dump.scan(folder / sub) if m.name.split(".")[0] == name and "after" in m.files]
        if mods:
            try:
                return load_module(mods[-1].files["after"])[0]
            except (HloError, OSError) as exc:
                notes.append(f"the optimized module could not be read: {exc}")
                return None
    notes.append(
        f"no optimized module of {name} in {folder}/{{{','.join(TPU_DUMPS)}}}: instructions known by name only"
    )
    return None


def _tpu(path: Path, trace: Path, module: str | None, hlo: Path | None) -> Measured:
    """A TPU's JAX profiler trace (``predict.tpu_trace``) beside its XLA dump."""
    t = tpu_trace.read(trace)
    spans, execs, name = tpu_trace.spans(t, module)
    notes: list[str] = []
    folder = path if path.is_dir() else path.parent
    mod = _hlo_file(hlo) if hlo else _tpu_hlo(folder, name, notes)
    times = with_classes(it.instruction_times(spans), mod)
    copies = t.transfers.filter(pl.col("execution").is_in(execs["execution"].implode())).drop("execution")
    steps = execs.select("execution", "start", "end", "duration_ns")
    notes.append("a TPU core runs its ops on one serial line; an async *-done's time is the core's wait for it")
    if mod is not None:
        untimed = _untimed(schedule.build(mod), set(times["hlo_op"].to_list()))
        if untimed:
            notes.append(
                f"{len(untimed)} ops of the program have no event in the trace (0 ns): " + ", ".join(untimed[:8])
            )
    device = t.device or device_kind(manifest_in(folder))
    return Measured(path, "JAX profiler trace (TPU)", name, mod, times, steps, copies, device, notes,
                    None, f"the program with the most device time in the trace ({name})")  # fmt: skip


def _untimed(sched: schedule.Schedule, timed: set[str]) -> list[str]:
    """The ops that run on the core (compute, copies, starts) of which the trace has no event (a TPU's
    scalar unit runs a loop's counter arithmetic without one)."""
    return sorted(
        {o.name for o in sched.ops if o.kind in ("compute", "copy", "start", "collective") and o.name not in timed}
    )
