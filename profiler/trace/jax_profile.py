"""A JAX profiler trace read as an Nsight Systems export.

``jax.profiler.trace(DIR)`` writes ``DIR/plugins/profile/<run>/<host>.trace.json.gz`` (and the
same events as ``perfetto_trace.json.gz``): Chrome trace events of what CUPTI saw on the GPUs
(kernels, copies, memsets, each with XLA's ``hlo_module`` and ``hlo_op``), the CUDA calls that
launched them, and XLA's host annotations (one range per module execution, one per thunk).
``convert`` writes them into an SQLite file with nsys's table and column names
(``nsys_schema``), so that every analysis reads one format:

- a process ``/device:GPU:N`` is device N, its thread ``Stream #S(...)`` stream S; its events are
  kernels (``CUPTI_ACTIVITY_KIND_KERNEL``, launch shape from ``kernel_details``), copies
  (``Memcpy*``: kind, host memory kind and bytes from ``memcpy_details``) and memsets;
- the host process's events with a ``correlation_id`` are the CUDA calls
  (``CUPTI_ACTIVITY_KIND_RUNTIME``, named as the trace names them), which join the GPU ops by
  correlation id as nsys's do;
- XLA's annotations become its NVTX ranges in the domain ``TSL``: a module execution
  (``jit_step:XLA GPU module``) ``XlaModule:#hlo_module=jit_step[,program_id=N]#``, and each
  thunk inside it (a direct child named by its instruction: ``copy-start.23.0``,
  ``command_buffer_1``) ``Thunk:#[name=<op_name>,]hlo_op=<instruction>#``, the ``op_name`` read
  from the step's optimized HLO when it is given, as XLA builds the same range's name.

A TPU's trace (``/device:TPU:N``, libtpu) is converted too, into the same tables (``_tpu_rows``):

- its ``XLA Ops`` line, the core's one in-order queue, is one stream (``TPU_COMPUTE_STREAM``) of
  kernels, one per executed HLO instruction, named by it (``fusion.12``);
- host transfers, async pairs whose start's text holds host memory ``S(5)``
  (``dynamic-update-slice-start/done``: device to host, ``dynamic-slice-start/done``: host to
  device, ``copy-start/done``: by which side is in ``S(5)``: the done's result there is device to
  host), are copies: pinned host and device, the slice's bytes, from the start's begin to the
  done's end, on a stream of their own per direction (``TPU_D2H_STREAM``, ``TPU_H2D_STREAM``: the
  TPU's DMA engines are not CUDA streams; these streams only keep the two directions apart);
- a host transfer's ``*-done`` is the time the core stood still waiting for it: it is no kernel,
  so the core runs no kernel then and the copy's time there is its exposed time (METRICS.md): a
  step's exposed transfer time is its waits.  It is a stream wait too (``CUPTI_ACTIVITY_KIND_
  SYNCHRONIZATION`` on the core's stream, for an event recorded just after the copy's start):
  the op after the waits is issued when the core reached them (its launch call then), so that
  METRICS.md's stall of that op is the waits' time, blocked by the copy; and the sequencer (the
  ranges' thread) is blocked in it, a ``cuEventSynchronize`` (``TPU_BLOCKED``) from the done's
  begin to its end, with which a replay moves the later ops' launches when the copy ends sooner
  (``profiler.analysis.hostsync``).  Waits that end an execution stall nothing in the next;
- a ``while`` is no kernel either: its span holds its body's ops (each trip's), which are; it is
  kept as a thunk range around theirs, as XLA's GPU while thunk is, so nothing counts twice;
- each execution on the ``XLA Modules`` line is XLA's module range
  (``XlaModule:#hlo_module=jit_step,program_id=N#``: the run folder's program id, else each
  ``jit_step(<fingerprint>)`` numbered as it first ran) and each op a thunk range in it (op_name
  from the op's ``tf_op``; a kernel's from when it was issued; a wait has none, as a GPU's
  copy-done thunk launches nothing), on a thread of their own in the host process, on the
  device's clock; each kernel and copy has a zero-length launch call there (``TPU_LAUNCH``, when
  it was issued) so that ops are attributed to these ranges as a GPU's are through their CUDA
  calls.

Times are the trace's microseconds as nanoseconds.  What the trace does not hold is left out and
the export says so (``META_DATA_EXPORT``): a GPU's CUDA event records and stream waits (so no
stalls; a TPU's are its done waits, ``WAITS_KEY``), and the GPU's name unless it is given.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from profiler.conventions import JAX_TRACE_SUFFIXES, is_jax_trace_name
from profiler.errors import InputError
from profiler.trace import nsys_schema
from profiler.xla.hlo import Module
from profiler.xla.shapes import DTYPE_BYTES

I64 = pl.Int64
TRACE_SUFFIXES = JAX_TRACE_SUFFIXES
PERFETTO_NAME = "perfetto_trace.json.gz"
PROFILE_SUBDIR = Path("plugins") / "profile"
SOURCE_KEY = "PROFILE_STEP_SOURCE"  # META_DATA_EXPORT: what the export was converted from
SOURCE = "jax.profiler trace"
DEVICE_KIND_KEY = "PROFILE_STEP_DEVICE_KIND"  # META_DATA_EXPORT: TPU when the devices were TPUs (converted)
MISSING_NOTE = (
    "converted from a JAX profiler trace: no CUDA event records or stream waits (no stalls can be "
    "measured), no CUDA graph or context facts beyond what the trace names"
)
# what a converted trace cannot say, in the words every report uses
NO_WAITS = "a JAX profiler trace holds no stream waits: stalls and the copies' cost to the step need an nsys capture"
# what prices another link for such a trace instead: the compiled schedule's own order, at the measured durations
PLAN_FROM = (
    "for another host link, profile-step plan --from RUN --link LINK replays the step's compiled schedule at its "
    "measured durations (docs/plan.md)"
)
XLA_DOMAIN_ID = 1
MODULE_SUFFIX = ":XLA GPU module"
COPY_KIND = {"MemcpyH2D": 1, "MemcpyD2H": 2, "MemcpyD2D": 8, "MemcpyP2P": 10}
MEM_KIND = {"pageable": 0, "pinned": 1, "device": 2, "array": 3, "managed": 4}
UNKNOWN_MEM_KIND = 7
ARG_KEYS = (
    "correlation_id",
    "hlo_op",
    "hlo_module",
    "kernel_details",
    "memcpy_details",
    "Memset_details",
    "memset_details",
    "context_id",
    "cuda_graph_node_id",
    "hlo_category",
    "long_name",
    "shape_with_layout",
    "tf_op",
)
# a TPU's device clock (integer picoseconds), kept as numbers: what the prediction times ops by
DEVICE_TIME_KEYS = ("device_offset_ps", "device_duration_ps")
# a TPU's trace: its device line of ops, the streams the conversion gives them, its launch calls
TPU_PROCESS = "/device:TPU:"  # a TPU device process: /device:TPU:<ordinal>
TPU_OPS_THREAD = "XLA Ops"
TPU_MODULES_THREAD = "XLA Modules"
TPU_COMPUTE_STREAM, TPU_D2H_STREAM, TPU_H2D_STREAM = 1, 2, 3
TPU_LAUNCH = "XLA TPU op (device clock)"
TPU_RECORD = "XLA TPU copy issued (device clock)"  # a host transfer's event record, at its start
TPU_WAIT = "XLA TPU done wait (device clock)"  # the core's wait for it, a stream wait
TPU_BLOCKED = "cuEventSynchronize"  # the sequencer blocked in a wait: the blocking call the replay knows
WAITS_KEY = "PROFILE_STEP_WAITS"  # META_DATA_EXPORT: where the waits come from, when a converted trace has them
TPU_RANGE_THREAD = 1 << 23  # the host thread (low 24 bits) of the TPU's ranges and launch calls
TPU_NAME = "TPU"  # the device's name when the run folder names none
TPU_WAITS = "a TPU's host-transfer done waits: the core's stream waiting for the copy"
TPU_NOTE = (
    "converted from a JAX profiler trace of a TPU: its XLA Ops line is one stream of kernels; host "
    "transfers (S(5) async pairs) are copies on one stream per direction (DMA engines, not CUDA "
    "streams), their done waits stream waits of the core on them (the stalls)"
)


def is_jax_trace(path: Path) -> bool:
    """Whether *path* names a JAX profiler trace: a ``*trace.json[.gz]`` file (``host.trace.json.gz``,
    ``perfetto_trace.json.gz``), or a ``jax.profiler.trace`` folder (``plugins/profile`` in it, or one
    of its runs)."""
    if path.is_dir():
        return (path / PROFILE_SUBDIR).is_dir() or (
            path.parent.name == "profile" and any(p.name.endswith(TRACE_SUFFIXES) for p in path.iterdir())
        )
    return is_jax_trace_name(path.name)


def find(path: Path) -> Path:
    """The trace file *path* names: itself, or in a folder (a ``jax.profiler.trace`` folder's newest
    run, else the folder itself) its ``<host>.trace.json.gz`` (a run folder's ``trace.json.gz``),
    else its ``perfetto_trace.json.gz``."""
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if path.is_file():
        return path
    runs = (
        sorted(p for p in (path / PROFILE_SUBDIR).glob("*") if p.is_dir()) if (path / PROFILE_SUBDIR).is_dir() else []
    )
    folder = runs[-1] if runs else path
    files = sorted(p for p in folder.glob("*trace.json.gz") if p.name != PERFETTO_NAME)
    files = files or sorted(folder.glob(PERFETTO_NAME))
    if not files:
        raise InputError(path, "holds no JAX profiler trace (plugins/profile/<run>/*.trace.json.gz)")
    if len(files) > 1:
        names = ", ".join(f.name for f in files)
        raise InputError(folder, f"holds {len(files)} host traces ({names}): name one of them")
    return files[0]


def is_tpu(path: Path) -> bool:
    """Whether the trace file at *path* names a TPU device process (``/device:TPU:N``) in its first MiB."""
    try:
        with path.open("rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else path.open("rb") as f:
            head = f.read(1 << 20)
    except (OSError, EOFError, zlib.error):
        return False
    return TPU_PROCESS.encode() in head


def find_tpu(path: Path) -> Path | None:
    """The TPU trace *path* is or holds, or None: ``find`` of the folder, else of its subfolders (a
    run folder's ``jax.profiler.trace`` folder), the first that is a TPU's (``is_tpu``)."""
    if path.is_file():
        return path if is_tpu(path) else None
    if not path.is_dir():
        return None
    for folder in (path, *sorted(p for p in path.iterdir() if p.is_dir())):
        try:
            trace = find(folder)
        except InputError:
            continue
        if is_tpu(trace):
            return trace
    return None


@dataclass(frozen=True)
class Events:
    """A trace's complete events (``ph: X``), one row each: pid, tid, start, end (ns), name, has_args
    and the arguments read (``ARG_KEYS`` as text, ``DEVICE_TIME_KEYS`` as numbers; NULL where
    absent); with the process and thread names."""

    events: pl.DataFrame
    processes: dict[int, str]
    threads: dict[tuple[int, int], str]


def _load_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"cannot be read as a JAX profiler trace ({type(exc).__name__}: {exc})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(path, "is JSON but not a Chrome trace (no traceEvents list)")
    return data


def read(path: Path) -> Events:
    """The complete events of the trace file *path*."""
    data = _load_json(path)
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    complete = []
    for e in data["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "X":
            complete.append(e)
        elif ph == "M" and isinstance(e.get("args"), dict):
            if e.get("name") == "process_name":
                processes[int(e["pid"])] = str(e["args"].get("name"))
            elif e.get("name") == "thread_name":
                threads[(int(e["pid"]), int(e["tid"]))] = str(e["args"].get("name"))
    cols: dict[str, list[Any]] = {
        "pid": [int(e.get("pid", -1)) for e in complete],
        "tid": [int(e.get("tid", -1)) for e in complete],
        "ts": [float(e.get("ts", 0.0)) for e in complete],
        "dur": [float(e.get("dur", 0.0)) for e in complete],
        "name": [str(e.get("name", "")) for e in complete],
        "has_args": [bool(e.get("args")) for e in complete],
    }
    args = [a if isinstance(a, dict) else {} for a in (e.get("args") for e in complete)]
    for key in (*ARG_KEYS, *DEVICE_TIME_KEYS):
        cols[key] = [a.get(key) for a in args]
    schema = {"pid": I64, "tid": I64, "ts": pl.Float64, "dur": pl.Float64, "name": pl.String, "has_args": pl.Boolean}
    # argument values are strings in the trace (numbers too: "correlation_id": "12"); anything else as text
    schema |= dict.fromkeys(ARG_KEYS, pl.String) | dict.fromkeys(DEVICE_TIME_KEYS, I64)
    frame = pl.DataFrame(cols, schema=schema, strict=False)
    # microseconds with nanosecond decimals -> integer nanoseconds; a span keeps its own rounding
    start = (pl.col("ts") * 1000).round().cast(I64)
    frame = frame.with_columns(start.alias("start"), (start + (pl.col("dur") * 1000).round().cast(I64)).alias("end"))
    return Events(frame.drop("ts", "dur"), processes, threads)


def device_ordinals(processes: dict[int, str], kind: str = "GPU") -> dict[int, int]:
    """trace pid -> device ordinal, for processes named ``/device:<kind>:N``."""
    out = {}
    for pid, name in processes.items():
        head, _, ordinal = name.rpartition(":")
        if head.endswith(f"/device:{kind}") and ordinal.isdigit():
            out[pid] = int(ordinal)
    return out


def _streams(threads: dict[tuple[int, int], str], devices: dict[int, int]) -> pl.DataFrame:
    """pid, tid, stream: the GPU threads named ``Stream #S(...)``."""
    rows = [
        (pid, tid, int(name.split("#", 1)[1].split("(", 1)[0]))
        for (pid, tid), name in threads.items()
        if pid in devices and name.startswith("Stream #") and name.split("#", 1)[1].split("(", 1)[0].isdigit()
    ]
    return pl.DataFrame(rows, schema={"pid": I64, "tid": I64, "stream": I64}, orient="row")


def _number(col: str, pattern: str) -> pl.Expr:
    return pl.col(col).str.extract(pattern, 1).cast(I64)


def _gpu_ops(ev: Events, devices: dict[int, int], host_pid: int) -> dict[str, pl.DataFrame]:
    """Kernels, copies and memsets with their export columns."""
    streams = _streams(ev.threads, devices)
    dev = pl.DataFrame({"pid": list(devices), "deviceId": list(devices.values())}, schema={"pid": I64, "deviceId": I64})
    ops = ev.events.join(streams, on=["pid", "tid"]).join(dev, on="pid")
    ops = ops.with_columns(
        pl.col("stream").alias("streamId"),
        pl.col("correlation_id").cast(I64, strict=False).alias("correlationId"),
        pl.col("context_id").str.extract(r"(\d+)", 1).cast(I64).fill_null(1).alias("contextId"),
        pl.lit(nsys_schema.global_tid(host_pid, 0)).alias("globalPid"),
        pl.col("cuda_graph_node_id").cast(I64, strict=False).alias("graphNodeId"),
    )
    is_copy = pl.col("name").str.starts_with("Memcpy")
    is_set = pl.col("name").str.starts_with("Memset")
    copies = ops.filter(is_copy).with_columns(
        pl.col("name").replace_strict(COPY_KIND, default=0, return_dtype=I64).alias("copyKind"),
        _number("memcpy_details", r"size:(\d+)").fill_null(0).alias("bytes"),
        *(
            pl.col("memcpy_details")
            .str.extract(rf"kind_{side}:(\w+)", 1)
            .replace_strict(MEM_KIND, default=UNKNOWN_MEM_KIND, return_dtype=I64)
            .alias(f"{side}Kind")
            for side in ("src", "dst")
        ),
    )
    set_bytes = pl.coalesce("Memset_details", "memset_details").str.extract(r"num_bytes:(\d+)", 1).cast(I64)
    sets = ops.filter(is_set).with_columns(set_bytes.fill_null(0).alias("bytes"), pl.lit(0).alias("value"))
    shape = {
        "registersPerThread": r"regs:(\d+)",
        "staticSharedMemory": r"static_shared:(\d+)",
        "dynamicSharedMemory": r"dynamic_shared:(\d+)",
        "gridX": r"grid:(\d+),",
        "gridY": r"grid:\d+,(\d+),",
        "gridZ": r"grid:\d+,\d+,(\d+)",
        "blockX": r"block:(\d+),",
        "blockY": r"block:\d+,(\d+),",
        "blockZ": r"block:\d+,\d+,(\d+)",
    }
    kernels = ops.filter(~is_copy & ~is_set).with_columns(
        *(_number("kernel_details", p).fill_null(0).alias(c) for c, p in shape.items()),
        pl.lit(0).alias("localMemoryPerThread"),
        pl.lit(0).alias("localMemoryTotal"),
        pl.col("correlationId").fill_null(0).alias("gridId"),
    )
    return {"kernels": kernels, "copies": copies, "memsets": sets}


def _host(processes: dict[int, str]) -> int | None:
    """The trace pid of the host process (``/host:CPU``), if any."""
    return next((pid for pid, name in processes.items() if name.startswith("/host:CPU")), None)


def _depth(events: pl.DataFrame) -> pl.DataFrame:
    """*events* (tid, start, end) with ``depth``: how many events of the same thread contain each
    (a thread's events nest as a call tree): its position in (start, longest first) order on its
    thread less the events of the thread that ended by its start."""
    f = events.sort("tid", "start", "end", descending=[False, False, True])
    f = f.with_columns(pl.int_range(pl.len()).over("tid").alias("_pos"))
    ends = (
        f.select("tid", pl.col("end").alias("_end"))
        .sort("tid", "_end")
        .with_columns((pl.int_range(pl.len()).over("tid") + 1).alias("_ended"))
        .unique(["tid", "_end"], keep="last")
        .sort("_end")
    )
    f = f.sort("start").join_asof(
        ends, left_on="start", right_on="_end", by="tid", strategy="backward", check_sortedness=False
    )
    depth = (pl.col("_pos") - pl.col("_ended").fill_null(0)).cast(I64)
    return f.with_columns(depth.alias("depth")).drop("_pos", "_end", "_ended")


def _is_module(name: pl.Expr) -> pl.Expr:
    return name.str.ends_with(MODULE_SUFFIX) | name.str.starts_with("XlaModule:#")


def _module_text(name: pl.Expr, program_id: int | None) -> pl.Expr:
    """XLA's NVTX name of a module execution: the trace's own when it is one, else built from the
    module name (with the program id when known)."""
    pid = f",program_id={program_id}" if program_id is not None else ""
    built = pl.concat_str(pl.lit("XlaModule:#hlo_module="), name.str.strip_suffix(MODULE_SUFFIX), pl.lit(f"{pid}#"))
    return pl.when(name.str.starts_with("XlaModule:#")).then(name).otherwise(built)


def _thunks(host: pl.DataFrame) -> pl.DataFrame:
    """Host events that are thunks: direct children of a module execution on its thread, named
    by an instruction (no arguments, no spaces, no ``::``): tid, start, end, name."""
    # the CUDA calls (CUPTI's clock) are left out of the nesting: a launch can end a few hundred ns after
    # the thunk (XLA's clock) that made it, and would then seem to contain the next one
    timed = _depth(host.filter((pl.col("end") > pl.col("start")) & pl.col("correlation_id").is_null()))
    modules = timed.filter(_is_module(pl.col("name"))).select(
        "tid", pl.col("start").alias("_ms"), pl.col("end").alias("_me"), pl.col("depth").alias("_md")
    )
    if modules.height == 0:
        return timed.clear().select("tid", "start", "end", "name")
    inside = (
        timed.filter(~_is_module(pl.col("name")))
        .sort("start")
        .join_asof(
            modules.sort("_ms"), left_on="start", right_on="_ms", by="tid", strategy="backward", check_sortedness=False
        )
    )
    named = ~pl.col("has_args") & ~pl.col("name").str.contains(r"\s|::|\(")
    child = (pl.col("end") <= pl.col("_me")) & (pl.col("depth") == pl.col("_md") + 1)
    return inside.filter(child & named).select("tid", "start", "end", "name")


def _op_names(module: Module | None) -> pl.DataFrame:
    rows = [(i.name, i.op_name) for i in module.instructions() if i.op_name] if module is not None else []
    return pl.DataFrame(rows, schema={"name": pl.String, "op_name": pl.String}, orient="row")


def _host_rows(ev: Events, host_pid: int, module: Module | None, program_id: int | None) -> dict[str, pl.DataFrame]:
    """The host process's CUDA calls, XLA's ranges and thread names, with their export columns."""
    host = ev.events.filter(pl.col("pid") == host_pid)
    tids = host.select("tid").unique().sort("tid").with_row_index("_small", offset=1)
    base = nsys_schema.global_tid(host_pid, 0)  # a GlobalId's thread bits are its low 24: added
    host = host.join(tids, on="tid").with_columns((pl.lit(base) + pl.col("_small").cast(I64)).alias("globalTid"))
    calls = host.filter(pl.col("correlation_id").is_not_null()).with_columns(
        pl.col("correlation_id").cast(I64, strict=False).alias("correlationId"),
        pl.lit(1).alias("eventClass"),
        pl.lit(0).alias("returnValue"),
    )
    modules = host.filter(_is_module(pl.col("name"))).with_columns(
        _module_text(pl.col("name"), program_id).alias("text")
    )
    thunks = _thunks(host).join(_op_names(module), on="name", how="left")
    op = pl.col("op_name")
    text = pl.when(op.is_not_null()).then(
        pl.concat_str(pl.lit("Thunk:#name="), op, pl.lit(",hlo_op="), "name", pl.lit("#"))
    )
    thunks = thunks.with_columns(
        text.otherwise(pl.concat_str(pl.lit("Thunk:#hlo_op="), "name", pl.lit("#"))).alias("text")
    ).join(host.select("tid", "globalTid").unique("tid"), on="tid")
    ranges = pl.concat(
        [modules.select("start", "end", "text", "globalTid"), thunks.select("start", "end", "text", "globalTid")]
    )
    ranges = ranges.with_columns(pl.lit(59).alias("eventType"), pl.lit(XLA_DOMAIN_ID).alias("domainId")).sort("start")
    names = pl.DataFrame(
        [(name, tid) for (pid, tid), name in ev.threads.items() if pid == host_pid],
        schema={"name": pl.String, "tid": I64},
        orient="row",
    ).join(host.select("tid", "globalTid").unique("tid"), on="tid")
    return {"calls": calls, "ranges": ranges, "threads": names}


# --- a TPU's trace ---------------------------------------------------------------------------
SHAPE = r"\w+\[[\d,]*\](?:\{[^}]*\})?"
HOST_SPACE = "S(5)"


def tpu_lines(ev: Events, devices: dict[int, int]) -> pl.DataFrame:
    """The events of each TPU's ``XLA Ops`` and ``XLA Modules`` lines (of *devices*: trace pid ->
    ordinal), in the trace's order, with ``deviceId`` and ``line``."""
    rows = [
        (pid, tid, name)
        for (pid, tid), name in ev.threads.items()
        if pid in devices and name in (TPU_OPS_THREAD, TPU_MODULES_THREAD)
    ]
    lines = pl.DataFrame(rows, schema={"pid": I64, "tid": I64, "line": pl.String}, orient="row")
    dev = pl.DataFrame({"pid": list(devices), "deviceId": list(devices.values())}, schema={"pid": I64, "deviceId": I64})
    return ev.events.join(lines, on=["pid", "tid"], maintain_order="left").join(dev, on="pid", maintain_order="left")


def _shapes_bytes(text: pl.Expr, host: bool) -> pl.Expr:
    """Per row, the byte sizes of the array shapes in *text* in host memory (``S(5)``, *host*) or
    not, as a list (XLA's dense sizes, ``profiler.xla.shapes.DTYPE_BYTES``)."""
    size = pl.element().str.extract(r"^(\w+)\[", 1).replace_strict(DTYPE_BYTES, default=0, return_dtype=I64)
    dims = pl.element().str.extract(r"\[([\d,]*)\]", 1).str.split(",")
    count = dims.list.eval(pl.element().cast(I64, strict=False).fill_null(1).product()).list.first()
    in_host = pl.element().str.contains(HOST_SPACE, literal=True)
    keep = in_host if host else ~in_host
    return text.str.extract_all(SHAPE).list.eval((size * count).filter(keep))


def tpu_transfers(ops: pl.DataFrame) -> pl.DataFrame:
    """The host transfers among a TPU's *ops* (its ``XLA Ops`` events: deviceId, name, start, end,
    hlo_category, long_name): one row per start/done pair whose start's text holds host memory
    ``S(5)``: deviceId, kind (``d2h`` when the done's result is in host memory, else ``h2d``),
    start (the start's begin), end (the done's end), bytes (the slice moved: to the host the
    largest device operand of the start, from it the done's result), start_name, done_name,
    wait_start (the done's begin)."""
    cat = pl.col("hlo_category")
    text = pl.col("long_name").fill_null("")
    starts = ops.filter(cat.is_in(["async-start", "copy-start"]) & text.str.contains(HOST_SPACE, literal=True))
    starts = starts.select(
        "deviceId",
        pl.col("name").alias("start_name"),
        pl.col("start").alias("t_start"),
        pl.col("start"),
        _shapes_bytes(text.str.extract(r"(?:async|copy)-start\((.*)$", 1), host=False).list.max().alias("_to_host"),
    )
    dones = ops.filter(cat.is_in(["async-done", "copy-done"])).select(
        "deviceId",
        pl.col("name").alias("done_name"),
        pl.col("start").alias("wait_start"),
        "end",
        text.str.extract(r"%([^\s%()]+)\)\s*$", 1).alias("start_name"),
        text.str.extract(r"^\S+ = (.*?) (?:async|copy)-done\(", 1).alias("_result"),
    )
    pairs = dones.sort("wait_start").join_asof(
        starts.sort("t_start"),
        left_on="wait_start",
        right_on="t_start",
        by=["deviceId", "start_name"],
        strategy="backward",
        check_sortedness=False,
    )
    pairs = pairs.filter(pl.col("t_start").is_not_null())
    to_host = pl.col("_result").str.contains(HOST_SPACE, literal=True)
    from_host = _shapes_bytes(pl.col("_result"), host=False).list.sum()
    return pairs.select(
        "deviceId",
        pl.when(to_host).then(pl.lit("d2h")).otherwise(pl.lit("h2d")).alias("kind"),
        "start",
        "end",
        pl.when(to_host).then(pl.col("_to_host")).otherwise(from_host).fill_null(0).cast(I64).alias("bytes"),
        "start_name",
        "done_name",
        "wait_start",
    ).sort("deviceId", "start")


def tpu_line(ops: pl.DataFrame, transfers: pl.DataFrame, modules: pl.DataFrame) -> pl.DataFrame:
    """A TPU's *ops* but its ``while`` spans, in the core's order, with ``wait`` (a host transfer's
    done: *transfers*' ``done_name`` at ``wait_start``) and ``issued``: when the core reached the
    op, the start of the waits right before it in the same execution of *modules* (its own start
    where none are; waits that end an execution stall nothing)."""
    waits = transfers.select(
        "deviceId", pl.col("done_name").alias("name"), pl.col("wait_start").alias("start"), pl.lit(True).alias("wait")
    )
    line = (
        ops.filter(pl.col("hlo_category").fill_null("") != "while")
        .join(waits, on=["deviceId", "name", "start"], how="left")
        .with_columns(pl.col("wait").fill_null(False))
        .sort("deviceId", "start", maintain_order=True)
    )
    execs = modules.select("deviceId", pl.col("start").alias("_exec")).sort("_exec")
    line = line.join_asof(execs, left_on="start", right_on="_exec", by="deviceId", check_sortedness=False)
    # an op and the waits just before it share a key: the number of other ops before them
    ran = (~pl.col("wait")).cast(I64)
    key = (ran.cum_sum() - ran).over("deviceId")
    return line.with_columns(pl.col("start").min().over("deviceId", "_exec", key).alias("issued")).drop("_exec")


def _tpu_rows(ev: Events, devices: dict[int, int], small_pid: int, program_id: int | None) -> dict[str, pl.DataFrame]:
    """Kernels, copies, event records and stream waits, their calls, module and thunk ranges and the
    ranges' threads of the TPUs *devices* (trace pid -> ordinal), as ``_gpu_ops`` and ``_host_rows``
    give a GPU's."""
    lines = tpu_lines(ev, devices)
    ops = lines.filter(pl.col("line") == TPU_OPS_THREAD)
    transfers = tpu_transfers(ops)
    modules = lines.filter(pl.col("line") == TPU_MODULES_THREAD).sort("start")
    line = tpu_line(ops, transfers, modules)
    n_k, n_c = line.filter(~pl.col("wait")).height, transfers.height
    gtid = pl.lit(nsys_schema.global_tid(small_pid, TPU_RANGE_THREAD)) + pl.col("deviceId")
    common = (pl.lit(1).alias("contextId"), pl.lit(nsys_schema.global_tid(small_pid, 0)).alias("globalPid"))
    kernels = line.filter(~pl.col("wait")).with_row_index("correlationId", offset=1)
    kernels = kernels.with_columns(
        pl.col("correlationId").cast(I64),
        pl.lit(TPU_COMPUTE_STREAM).alias("streamId"),
        *common,
        *(pl.lit(0).alias(c) for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")),
        *(pl.lit(0).alias(c) for c in ("registersPerThread", "staticSharedMemory", "dynamicSharedMemory")),
        *(pl.lit(0).alias(c) for c in ("localMemoryPerThread", "localMemoryTotal")),
    ).with_columns(pl.col("correlationId").alias("gridId"))
    # each wait is the core's stream waiting, from when it reached the waits, for its copy's record
    issued = line.filter(pl.col("wait")).select(
        "deviceId", pl.col("name").alias("done_name"), pl.col("start").alias("wait_start"), pl.col("issued")
    )
    transfers = transfers.join(issued, on=["deviceId", "done_name", "wait_start"], how="left")
    d2h = pl.col("kind") == "d2h"
    copies = transfers.with_row_index("_i").with_columns(
        (pl.col("_i").cast(I64) + n_k + 1).alias("correlationId"),
        (pl.col("_i").cast(I64) + n_k + n_c + 1).alias("_record"),
        (pl.col("_i").cast(I64) + n_k + 2 * n_c + 1).alias("_wait"),
        (pl.col("_i").cast(I64) + n_k + 3 * n_c + 1).alias("_sync"),
        (pl.col("_i").cast(I64) + 1).alias("eventId"),
        pl.when(d2h).then(TPU_D2H_STREAM).otherwise(TPU_H2D_STREAM).cast(I64).alias("streamId"),
        pl.col("kind").replace_strict(nsys_schema.COPY_KINDS, return_dtype=I64).alias("copyKind"),
        pl.when(d2h).then(nsys_schema.DEVICE).otherwise(nsys_schema.PINNED).cast(I64).alias("srcKind"),
        pl.when(d2h).then(nsys_schema.PINNED).otherwise(nsys_schema.DEVICE).cast(I64).alias("dstKind"),
        *common,
    )
    records = copies.select(
        "deviceId",
        pl.lit(1).alias("contextId"),
        "streamId",
        pl.col("_record").alias("correlationId"),
        "globalPid",
        "eventId",
    )

    def sync_rows(start: str, stream: pl.Expr, corr: str, sync: str) -> pl.DataFrame:
        """One synchronization row per copy, from its *start* column to the copy's end."""
        return copies.select(
            pl.col(start).alias("start"),
            "end",
            "deviceId",
            pl.lit(1).alias("contextId"),
            stream.alias("streamId"),
            pl.col(corr).alias("correlationId"),
            "globalPid",
            pl.lit(nsys_schema.REAL_SYNC_TYPE[sync]).alias("syncType"),
            "eventId",
        )

    # the core's stream waiting for the copy's record, from when the core reached the waits; and the
    # core's sequencer (the ranges' thread) blocked in it, from the done's begin to its end: what a
    # replay moves the later ops' launches with when the copy ends sooner (profiler.analysis.hostsync)
    syncs = pl.concat(
        [
            sync_rows("issued", pl.lit(TPU_COMPUTE_STREAM), "_wait", "stream_wait"),
            sync_rows("wait_start", pl.lit(nsys_schema.UNSET, I64), "_sync", "event_sync"),
        ],
        how="vertical_relaxed",
    )
    # the calls: each kernel issued when the core reached it, each copy at its start; a copy's record
    # just after its start (it completes that copy), its wait when the core reached the waits
    rec_t = pl.min_horizontal(pl.col("start") + 1, pl.col("issued"))

    def call(frame: pl.DataFrame, corr: str, t: pl.Expr, name: str) -> pl.DataFrame:
        return frame.select(pl.col(corr).alias("correlationId"), t.alias("t"), "deviceId", pl.lit(name).alias("name"))

    calls = pl.concat(
        [
            call(kernels, "correlationId", pl.col("issued"), TPU_LAUNCH),
            call(copies, "correlationId", pl.col("start"), TPU_LAUNCH),
            call(copies, "_record", rec_t, TPU_RECORD),
            call(copies, "_wait", pl.col("issued"), TPU_WAIT),
            call(copies, "_sync", pl.col("wait_start"), TPU_BLOCKED).with_columns(copies["end"].alias("t_end")),
        ],
        how="diagonal",
    ).select(
        "correlationId",
        pl.col("t").alias("start"),
        pl.coalesce("t_end", "t").alias("end"),
        gtid.alias("globalTid"),
        "name",
        pl.lit(1).alias("eventClass"),
        pl.lit(0).alias("returnValue"),
    )
    # a TPU names an execution ``jit_step(<fingerprint>)``, with no program id: without the run
    # folder's, each fingerprint is numbered in the order it first ran (1, 2, ...)
    first_run = {n: i for i, n in enumerate(modules["name"].unique(maintain_order=True).to_list(), start=1)}
    seen = pl.col("name").replace_strict(first_run, return_dtype=I64)
    number = pl.lit(program_id, I64) if program_id is not None else seen
    bare = pl.col("name").str.replace(r"\(\d+\)$", "")
    built = pl.concat_str(
        pl.lit("XlaModule:#hlo_module="), bare, pl.lit(",program_id="), number.cast(pl.String), pl.lit("#")
    )
    modules = modules.with_columns(built.alias("text"))
    op_name = pl.col("tf_op").str.strip_suffix(":")
    thunk = pl.concat_str(pl.lit("Thunk:#hlo_op="), "name", pl.lit("#"))
    named = pl.concat_str(pl.lit("Thunk:#name="), op_name, pl.lit(",hlo_op="), "name", pl.lit("#"))
    # a kernel's range from when the core reached it (its launch lies in it); a while's its own span;
    # a wait has none (no op of its own, as a GPU's copy-done thunk launches none)
    whiles = ops.filter(pl.col("hlo_category").fill_null("") == "while")
    thunks = pl.concat(
        [kernels.with_columns(pl.col("issued").alias("start")).select(ops.columns), whiles.select(ops.columns)]
    ).with_columns(pl.when(op_name.fill_null("") != "").then(named).otherwise(thunk).alias("text"))
    ranges = pl.concat([f.select("start", "end", "text", gtid.alias("globalTid")) for f in (modules, thunks)])
    ranges = ranges.with_columns(pl.lit(59).alias("eventType"), pl.lit(XLA_DOMAIN_ID).alias("domainId"))
    base = nsys_schema.global_tid(small_pid, TPU_RANGE_THREAD)
    threads = pl.DataFrame(
        [(f"{ev.processes[pid]} {TPU_OPS_THREAD} (device clock)", base + d) for pid, d in devices.items()],
        schema={"name": pl.String, "globalTid": I64},
        orient="row",
    )
    return {
        "kernels": kernels,
        "copies": copies.drop("_i", "_record", "_wait", "_sync", "eventId"),
        "records": records,
        "syncs": syncs,
        "calls": calls,
        "ranges": ranges.sort("start"),
        "threads": threads,
    }


def convert(
    src: Path,
    dst: Path,
    module: Module | None = None,
    gpu_name: str | None = None,
    program_id: int | None = None,
) -> Path:
    """Write the JAX profiler trace *src* (a file or a ``jax.profiler.trace`` folder) as an nsys-schema
    SQLite export at *dst* (which must not exist).  *module* (the step's optimized HLO) gives the
    thunk ranges their ``op_name``; *gpu_name* names the GPUs; *program_id* goes into the module
    ranges of the step (XLA's ``program_id``, the number of its dump's ``module_NNNN``)."""
    path = find(src)
    ev = read(path)
    devices = device_ordinals(ev.processes)
    tpus = device_ordinals(ev.processes, "TPU")
    host_pid = _host(ev.processes)
    small_pid = (host_pid if host_pid is not None else 0) % (1 << 24)
    ops = _gpu_ops(ev, devices, small_pid)
    tpu = _tpu_rows(ev, tpus, small_pid, program_id) if tpus else None
    rows: dict[str, nsys_schema.Rows] = {"StringIds": [], "META_DATA_EXPORT": []}
    strings: dict[str, int] = {}

    def string_ids(values: pl.Series) -> pl.Series:
        for v in values.unique().drop_nulls().to_list():
            if v not in strings:
                strings[v] = len(strings) + 1
        return values.replace_strict(strings, default=None, return_dtype=I64)

    k = pl.concat([ops["kernels"], tpu["kernels"]], how="diagonal_relaxed") if tpu else ops["kernels"]
    name_id = string_ids(k["name"])
    rows["CUPTI_ACTIVITY_KIND_KERNEL"] = k.with_columns(name_id.alias("shortName"), name_id.alias("demangledName"))
    copies = pl.concat([ops["copies"], tpu["copies"]], how="diagonal_relaxed") if tpu else ops["copies"]
    rows["CUPTI_ACTIVITY_KIND_MEMCPY"] = copies
    rows["CUPTI_ACTIVITY_KIND_MEMSET"] = ops["memsets"]
    if tpu:
        rows["CUPTI_ACTIVITY_KIND_CUDA_EVENT"] = tpu["records"]
        rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"] = tpu["syncs"]
    calls, ranges, threads = [], [], []
    if host_pid is not None:
        host = _host_rows(ev, host_pid, module, program_id)
        calls, ranges, threads = [host["calls"]], [host["ranges"]], [host["threads"]]
    if tpu:
        calls, ranges, threads = [*calls, tpu["calls"]], [*ranges, tpu["ranges"]], [*threads, tpu["threads"]]
    if calls:
        call = pl.concat(calls, how="diagonal_relaxed")
        rows["CUPTI_ACTIVITY_KIND_RUNTIME"] = call.with_columns(string_ids(call["name"]).alias("nameId"))
        rng = pl.concat(ranges, how="diagonal_relaxed").sort("start")
        main_tid = rng["globalTid"].first() if rng.height else nsys_schema.global_tid(small_pid, 1)
        domain = {
            "start": 0,
            "end": None,
            "eventType": 75,
            "domainId": XLA_DOMAIN_ID,
            "text": "TSL",
            "globalTid": main_tid,
        }
        rows["NVTX_EVENTS"] = pl.concat([pl.DataFrame([domain]), rng], how="diagonal_relaxed")
        names = pl.concat(threads, how="diagonal_relaxed")
        rows["ThreadNames"] = names.with_columns(string_ids(names["name"]).alias("nameId"))
    named = [(d, gpu_name) for d in sorted(devices.values()) if gpu_name]
    named += [(d, gpu_name or TPU_NAME) for d in sorted(tpus.values())]
    if named:
        rows["TARGET_INFO_GPU"] = [{"vmId": nsys_schema.VM_BITS, "id": d, "name": n, "cuDevice": d} for d, n in named]
    rows["StringIds"] = [{"id": i, "value": v} for v, i in strings.items()]
    rows["META_DATA_EXPORT"] = [
        {"name": SOURCE_KEY, "value": SOURCE},
        {"name": "PROFILE_STEP_SOURCE_FILE", "value": path.name},
        {"name": "PROFILE_STEP_NOTE", "value": TPU_NOTE if tpus else MISSING_NOTE},
        *([{"name": DEVICE_KIND_KEY, "value": "TPU"}, {"name": WAITS_KEY, "value": TPU_WAITS}] if tpus else []),
    ]
    return nsys_schema.create(dst, rows)


# --- the export a profile-step command reads ---------------------------------------------------
CONVERTER_VERSION = "6"  # a new conversion makes new cache entries


@dataclass(frozen=True)
class Context:
    """What a run folder says about a JAX trace inside it: the file of the step's optimized HLO (its
    thunks' op_name paths), the GPU's name and the step's program id; and the files it was read from
    (the cache key: nothing here is parsed until a conversion needs it)."""

    hlo: Path | None = None
    gpu_name: str | None = None
    program_id: int | None = None
    files: tuple[Path, ...] = ()

    def module(self) -> Module | None:
        """The step's optimized HLO, parsed (None without one, or when it does not read)."""
        from profiler.xla.compiled import load_module
        from profiler.xla.hlo import HloError

        if self.hlo is None:
            return None
        try:
            return load_module(self.hlo)[0]
        except (HloError, OSError):
            return None


def run_folder_of(trace_file: Path) -> Path | None:
    """The run folder holding *trace_file*: its own folder, or the one above a ``jax.profiler.trace``
    folder (``RUN/<dir>/plugins/profile/<run>/<file>``)."""
    from profiler.stored import folder

    for up in (trace_file.parent, *trace_file.parents[3:5]):
        if folder.is_run(up):
            return up
    return None


def context_of(trace_file: Path) -> Context:
    """The facts of the run folder holding *trace_file* (none outside one): the step module that
    ``compiled.json`` names, from the run's XLA dump; the GPU of its manifest."""
    from profiler.conventions import COMPILED, XLA_DUMP_DIR
    from profiler.stored import folder
    from profiler.xla import dump

    run = run_folder_of(trace_file)
    if run is None:
        return Context()
    compiled = folder.compiled_in(run) or {}
    step = str(compiled.get("step_module") or "")
    mods = dump.scan(run / XLA_DUMP_DIR) if (run / XLA_DUMP_DIR).is_dir() else []
    hit = [m for m in mods if step == f"module_{m.id:04d}.{m.name}" and "after" in m.files]
    hlo = hit[0].files["after"] if hit else None
    files = (run / folder.MANIFEST, run / COMPILED, *([hlo] if hlo else []))
    return Context(hlo, folder.device_kind(folder.manifest_in(run)), hit[0].id if hit else None, files)


def export(path: Path) -> Path:
    """The nsys-schema export of the JAX profiler trace *path* (a file or a ``jax.profiler.trace``
    folder), converted once into profile-step's cache (``exports``: ``profiler.cache_dir``) and
    reused while the trace and its run folder's files are unchanged; nothing is written beside it."""
    import hashlib
    import os

    from profiler.trace.nsys import exports_cache_dir

    src = find(path)
    ctx = context_of(src)
    stamp = [f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (src, *ctx.files) if p.exists()]
    key = hashlib.sha1("|".join([CONVERTER_VERSION, *stamp]).encode()).hexdigest()[:12]
    stem = src.name.removesuffix(".gz").removesuffix(".json")
    target = exports_cache_dir() / f"{stem}.{key}.sqlite"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.partial.sqlite")
    tmp.unlink(missing_ok=True)
    try:
        convert(src, tmp, ctx.module(), ctx.gpu_name, ctx.program_id)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
