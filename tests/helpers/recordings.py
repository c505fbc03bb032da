"""SYNTHETIC recordings of a compiled program: nsys-schema exports of its steps as XLA runs them,
built where no GPU ran the program, as ground truth for the replays (issue 42).

Nothing here is measured.  ``record`` lays out executions of a scheduled module's program (its
``profiler.predict.schedule``: the entry's instructions in order, a loop's body once per trip)
the way XLA's GPU runtime runs it, with its own timing model, and writes what nsys would record:

- the host thread launches every thunk in program order, ``call_ns`` per CUDA call, inside
  ``Thunk:#name=<op_name>,hlo_op=<instruction>#`` ranges (domain ``TSL``) inside one
  ``XlaModule:#hlo_module=<module>,program_id=<id>#`` range per execution, and blocks at the end
  of the step (the module range ends when the GPU is done);
- kernels run on one compute stream, in launch order, each after the one before it, a random
  ``gap_ns`` apart (the GPU's own gap between kernels) and at least ``latency_ns`` after their
  launch; an instruction is one kernel, every fourth two kernels;
- an async start (``copy-start`` of an offloaded activation, an async fusion, a collective) runs
  on a stream of its own (``STREAM``): the host records an event on the compute stream, makes
  that stream wait for it, launches the work, and records an event after it; its ``*-done``
  makes the compute stream wait for that event.  Host copies move ``copy_gbps`` bytes per ns,
  in at least 2 us;
- durations: each instruction's *base* time, at least ``min_ns``, times ``1 + noise`` drawn
  anew for every run of it (every trip of a loop, every execution), ``noise`` uniform in
  ``[-jitter, jitter]``.

Two forms of a loop (``while``, ``call``) are recorded, as real recordings hold them:

- ``body``: the loop's own range holds one thunk range per body instruction on every trip
  (what XLA's while thunk records when its body's thunks are annotated); with *predicate*, the
  loop's range also launches a one-byte copy of its condition to the host before each trip, on
  the compute stream (a loop with no known trip count);
- ``loop``: the loop is one range and nothing inside it is named (its thunks run as one command
  buffer, or were not annotated): its time is all its thunks know of it.

``Recording.steps`` is each execution's measured step (its module range); ``runs`` the
durations the GPU gave every op of the schedule in each execution.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from profiler.predict.schedule import Schedule
from profiler.synthetic.export import ExportBuilder

STREAM = {"compute": 7, "d2h": 20, "h2d": 21, "async": 22, "collective": 23}
TSL = 2
TID = 100
FORMS = ("body", "loop")


@dataclass
class Recording:
    builder: ExportBuilder
    steps: list[int]  # each execution's module range (ns)
    module: str
    program_id: int
    form: str
    kernels: int = 0
    copies: int = 0
    ranges: list[tuple[int, int | None, int, int, str]] = field(default_factory=list)  # id, parent, start, end, text

    def write(self, folder: Path, hlo_text: str) -> Path:
        """A run folder: ``trace.sqlite`` and ``xla_dump/`` with the module's optimized HLO, as
        ``profiler.predict.measured.load`` reads one."""
        folder.mkdir(parents=True)
        self.builder.write(folder / "trace.sqlite")
        dump = folder / "xla_dump"
        dump.mkdir()
        (dump / self._dump_name()).write_text(hlo_text)
        return folder

    def write_archive(self, folder: Path, hlo_text: str) -> Path:
        """An nsys-jax archive folder: ``nvtx_gpu_proj_trace/trace.parquet`` (``projection``) and
        ``dump/`` with the module's optimized HLO."""
        (folder / "nvtx_gpu_proj_trace").mkdir(parents=True)
        self.projection().write_parquet(folder / "nvtx_gpu_proj_trace" / "trace.parquet")
        (folder / "dump").mkdir()
        (folder / "dump" / self._dump_name()).write_text(hlo_text)
        return folder

    def _dump_name(self) -> str:
        return f"module_{self.program_id:04d}.{self.module}.sm_9.0_gpu_after_optimizations.txt"

    def projection(self) -> pl.DataFrame:
        """The recording as nsys's ``nvtx_gpu_proj_trace`` (what nsys-jax archives hold): every range
        projected onto the GPU, from the first start to the last end of the GPU ops launched inside
        it (nested ranges' included), with its parent range."""
        rows = self.builder.rows
        gpu = {r["correlationId"]: (r["start"], r["end"]) for t in ("CUPTI_ACTIVITY_KIND_KERNEL",
               "CUPTI_ACTIVITY_KIND_MEMCPY") for r in rows[t]}  # fmt: skip
        launches = sorted((r["start"], *gpu[r["correlationId"]]) for r in rows["CUPTI_ACTIVITY_KIND_RUNTIME"]
                          if r["correlationId"] in gpu)  # fmt: skip
        at = np.array([x[0] for x in launches], dtype=np.int64)
        starts = np.array([x[1] for x in launches], dtype=np.int64)
        ends = np.array([x[2] for x in launches], dtype=np.int64)
        out = []
        for rid, parent, s, e, text in self.ranges:
            lo, hi = np.searchsorted(at, s, "left"), np.searchsorted(at, e, "left")
            if hi <= lo:
                continue
            p0, p1 = int(starts[lo:hi].min()), int(ends[lo:hi].max())
            out.append({"Name": f"TSL:{text}", "Projected Start": p0, "Projected Duration": p1 - p0,
                        "Orig Start": float(s), "Orig Duration": float(e - s), "TID": TID,
                        "NumGPUOps": int(hi - lo), "RangeId": float(rid),
                        "ParentId": None if parent is None else float(parent)})  # fmt: skip
        schema = {"Name": pl.String, "Projected Start": pl.Int64, "Projected Duration": pl.Int64,
                  "Orig Start": pl.Float64, "Orig Duration": pl.Float64, "TID": pl.Int64, "NumGPUOps": pl.Int64,
                  "RangeId": pl.Float64, "ParentId": pl.Float64}  # fmt: skip
        return pl.DataFrame(out, schema=schema)


@dataclass(frozen=True)
class Timing:
    """The recording's timing model (see the module docstring)."""

    min_ns: int = 5_000
    jitter: float = 0.1
    gap_ns: tuple[int, int] = (300, 1_500)
    latency_ns: int = 3_000
    call_ns: int = 1_000
    copy_gbps: float = 25.0


def record(
    schedule: Schedule,
    base_ns: Mapping[str, int],
    form: str = "body",
    *,
    executions: int = 3,
    seed: int = 0,
    program_id: int = 7,
    timing: Timing = Timing(),
    predicate: bool = False,
    gpu: str = "NVIDIA H100 80GB HBM3",
) -> Recording:
    """The recording described in the module docstring; *base_ns*: each instruction's time per run
    (ns; e.g. ``roofline.costs``), host copies priced over ``timing.copy_gbps`` instead."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    b = ExportBuilder()
    b.gpu(0, gpu)
    b.domain(TSL, "TSL", tid=TID)
    rec = Recording(b, [], schedule.module, program_id, form)
    run = _Run(schedule, base_ns, form, timing, predicate, rec, np.random.default_rng(seed))
    t0 = 1_000_000
    for _ in range(executions):
        t0 = run.execution(t0) + 200_000
    return rec


class _Run:
    """The host thread and the GPU's streams while one recording is made."""

    def __init__(self, schedule: Schedule, base_ns: Mapping[str, int], form: str, timing: Timing, predicate: bool,
                 rec: Recording, rng: np.random.Generator) -> None:  # fmt: skip
        self.sched, self.base, self.form, self.tm, self.predicate = schedule, base_ns, form, timing, predicate
        self.rec, self.b, self.rng = rec, rec.builder, rng
        self.thunk_name = _thunk_names(schedule)
        # the regions whose bodies begin at each op, outermost first
        self.opens: dict[int, list[int]] = {}
        for op in schedule.ops:
            if op.kind == "region" and op.body is not None:
                self.opens.setdefault(op.body[0], []).append(op.index)
        for lst in self.opens.values():
            lst.sort(key=lambda r: schedule.ops[r].body[0] - r)  # type: ignore[index]
        self.event = 0
        self.ids = 0

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def add_range(self, rid: int, parent: int | None, start: int, stop: int, text: str) -> None:
        self.b.nvtx(start, stop, text, tid=TID, domain_id=TSL, range_id=rid)
        self.rec.ranges.append((rid, parent, start, stop, text))

    def call(self) -> int:
        """A CUDA call of the host thread: its start."""
        at = self.host
        self.host += self.tm.call_ns
        return at

    def on_compute(self, dur: int, launch: int) -> int:
        """Where the compute stream's next op of *dur* launched at *launch* starts (and takes it)."""
        s = max(self.free["compute"] + int(self.rng.integers(*self.tm.gap_ns)), launch + self.tm.latency_ns,
                *self.pending)  # fmt: skip
        self.pending.clear()
        self.free["compute"] = self.last_compute = s + dur
        return s

    def kernel(self, name: str, dur: int) -> int:
        launch = self.call()
        s = self.on_compute(dur, launch)
        corr = self.b.kernel(s, s + dur, name.replace(".", "_"), stream=STREAM["compute"])
        self.b.runtime(launch, launch + self.tm.call_ns // 2, corr, name="cuLaunchKernel", tid=TID)
        self.rec.kernels += 1
        return s + dur

    def copy(self, kind: str, nbytes: int) -> int:
        """A host copy on the compute stream."""
        launch = self.call()
        dur = max(2_000, int(nbytes / self.tm.copy_gbps))
        s = self.on_compute(dur, launch)
        corr = self.b.copy(s, s + dur, kind, max(nbytes, 1), stream=STREAM["compute"])
        self.b.runtime(launch, launch + self.tm.call_ns // 2, corr, name="cuMemcpyAsync", tid=TID)
        self.rec.copies += 1
        return s + dur

    def duration(self, name: str) -> int:
        noise = self.rng.uniform(-self.tm.jitter, self.tm.jitter)
        return max(self.tm.min_ns, int(self.base.get(name, 0) * (1.0 + noise)))

    def start(self, op) -> int:
        """An async start: its work on its own stream, after the compute stream's work before it."""
        stream = op.stream
        b, tm = self.b, self.tm
        self.event += 1
        b.event_record(self.call(), self.event, stream=STREAM["compute"], tid=TID)
        b.stream_wait(self.call(), self.event, stream=STREAM[stream], tid=TID)
        launch = self.call()
        s = max(self.free[stream], launch + tm.latency_ns, self.last_compute)
        if stream in ("d2h", "h2d"):
            dur = max(2_000, int(op.bytes / tm.copy_gbps))
            corr = b.copy(s, s + dur, stream, max(op.bytes, 1), stream=STREAM[stream])
            b.runtime(launch, launch + tm.call_ns // 2, corr, name="cuMemcpyAsync", tid=TID)
            self.rec.copies += 1
        else:
            dur = self.duration(op.name)
            corr = b.kernel(s, s + dur, self.thunk_name[op.name].replace(".", "_"), stream=STREAM[stream])
            b.runtime(launch, launch + tm.call_ns // 2, corr, name="cuLaunchKernel", tid=TID)
            self.rec.kernels += 1
        self.free[stream] = s + dur
        self.event += 1
        b.event_record(self.call(), self.event, stream=STREAM[stream], tid=TID)
        self.event_of[op.index] = self.event
        return s + dur

    def execution(self, t0: int) -> int:
        """One execution of the step from *t0*; its module range's end."""
        ops, form = self.sched.ops, self.form
        self.host = t0 + self.tm.call_ns
        self.free = dict.fromkeys(STREAM, t0)
        self.pending: list[int] = []  # ends the compute stream's next op waits for
        self.last_compute = t0  # end of the last op launched on the compute stream
        self.event_of: dict[int, int] = {}
        end: dict[int, int] = {}
        stack: list[tuple[int, int, int | None, int]] = []  # open regions: (op, host start, range id, parent)
        silent = 0  # > 0: inside a loop recorded as one range
        module_id = self.next_id()
        parents = [module_id]  # the open ranges' ids
        trip: dict[int, int | None] = {}
        for op in ops:
            for r in self.opens.get(op.index, []):
                rid = self.next_id() if not silent else None
                stack.append((r, self.host, rid, parents[-1]))
                self.host += self.tm.call_ns // 4  # the loop thunk's own host work before its body
                if rid is not None:
                    parents.append(rid)
                if form == "loop":
                    silent += 1
                trip[r] = None
            if self.predicate and form == "body" and stack and op.kind != "region":
                r = stack[-1][0]
                if ops[r].opcode == "while" and op.iteration != trip[r]:
                    trip[r] = op.iteration
                    self.copy("d2h", 1)  # the loop's condition, copied to the host before the trip
            kind = op.kind
            if kind in ("region", "free"):
                if kind == "region":
                    self.host += self.tm.call_ns // 4
                    r, began, rid, parent = stack.pop()
                    silent -= form == "loop"
                    if rid is not None:
                        parents.pop()
                        self.add_range(rid, parent, began, self.host, _thunk(op, op.name))
                end[op.index] = max([end.get(d, 0) for d in op.deps], default=0)
                continue
            if kind == "done":
                self.pending.append(end.get(op.pair, 0))  # type: ignore[arg-type]
                self.b.stream_wait(self.call(), self.event_of[op.pair], stream=STREAM["compute"], tid=TID)  # type: ignore[index]
                end[op.index] = end.get(op.pair, 0)  # type: ignore[arg-type]
                continue
            began = self.host
            if kind == "start":
                end[op.index] = self.start(op)
            elif kind == "copy":
                end[op.index] = self.copy(op.stream, op.bytes)
            else:  # compute, synchronous collective
                dur = self.duration(op.name)
                if op.index % 4 == 3:  # two kernels
                    self.kernel(op.name, dur // 3)
                    end[op.index] = self.kernel(op.name + ".1", dur - dur // 3)
                else:
                    end[op.index] = self.kernel(op.name, dur)
            if not silent:
                self.add_range(self.next_id(), parents[-1], began, self.host, _thunk(op, self.thunk_name[op.name]))
        done = max([self.host, *self.free.values()]) + 2_000
        self.b.sync(self.host, "device_sync", duration=max(100, done - self.host), tid=TID)
        text = f"XlaModule:#hlo_module={self.sched.module},program_id={self.rec.program_id}#"
        self.add_range(module_id, None, t0, done, text)
        self.rec.steps.append(done - t0)
        return done


def _thunk(op, name: str) -> str:
    return f"Thunk:#name={op.op_name or ''},hlo_op={name}#"


def _thunk_names(schedule: Schedule) -> dict[str, str]:
    """The instruction each op's thunk range names: itself, or for an async start that wraps one
    instruction (an async fusion), the wrapped instruction, as XLA names that thunk."""
    out = {}
    module = schedule.module_ref
    for name in schedule.runs:
        out[name] = name
        ins = schedule.instructions.get(name)
        if ins is None or not ins.opcode.endswith("-start") or len(ins.called) != 1:
            continue
        comp = module.computations.get(ins.called[0])
        work = [i for i in comp.instructions if i.opcode != "parameter"] if comp else []
        if len(work) == 1:
            out[name] = work[0].name
    return out


FORMS = ("body", "body+predicate", "loop", "archive")


def h200_scanned_programs(runs: Path) -> dict[str, tuple[str, str]]:
    """The example's scanned steps as XLA compiled them on the H200 (sample_traces/h200-example):
    ``<policy>`` -> (optimized HLO text, the H200's own target description)."""
    import lzma

    out = {}
    for run in sorted(runs.glob("*-scan-*")):
        hlo = next((run / "xla_dump").glob("*after_optimizations.txt.xz"))
        spec = next((run / "xla_dump").glob("*gpu_target_config.pbtxt")).read_text()
        out[run.name.split("-", 1)[1]] = (lzma.decompress(hlo.read_bytes()).decode(), spec)
    return out


def record_forms(programs: dict[str, tuple[str, str]], root: Path) -> dict[str, Path]:
    """Each program recorded in each of ``FORMS`` under *root*: ``<program>/<form>`` -> a run folder
    (``trace.sqlite`` + ``xla_dump/``) or an nsys-jax archive folder; the kernels' base times the
    roofline's on the program's target (at least 30 us each: the small step's kernels take a few us on
    an H100, and this keeps it GPU-bound)."""
    from profiler.predict import roofline, schedule
    from profiler.xla.hlo import parse_text

    out = {}
    for label, (text, spec) in programs.items():
        sched = schedule.build(parse_text(text))
        base = roofline.costs(sched, roofline.device_from_spec(spec))
        for form in FORMS:
            rec = record(sched, base, "loop" if form == "loop" else "body", executions=2,
                         predicate=form == "body+predicate", timing=Timing(min_ns=30_000))  # fmt: skip
            folder = root / label / form
            (rec.write_archive if form == "archive" else rec.write)(folder, text)
            out[f"{label}/{form}"] = folder
    return out
