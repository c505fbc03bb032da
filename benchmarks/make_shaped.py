"""Write a benchmark export shaped like a real capture of an offloaded training step.

    python benchmarks/make_shaped.py OUT.sqlite [--steps 100] [--layers 48] [--gpus 2] [--seed 0]

``make_export.py`` spreads ops at random over a timeline, each launched 2 us before it runs;
this one plays a training step's program through a host thread and the GPUs' streams, the way
a JAX step on two local GPUs reaches nsys:

- one process, one host thread that launches every op (a runtime row per launch:
  ``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``), 2 to 5 us per call;
- per GPU a compute stream, a NCCL stream and four copy streams (two device-to-host, two
  host-to-device); copies of one direction share the GPU's copy engine;
- per step and GPU: a memset, then per layer a forward (47 kernels, then its activations
  offloaded: an event recorded on the compute stream, waited for by a device-to-host stream, 15
  copies, a record on the copy stream), a backward in reverse order (the next layer's
  activations prefetched one layer ahead: 14 host-to-device copies that wait for the compute
  stream and for their offload; the compute stream waits for the prefetch; 93 kernels and a
  NCCL reduce-scatter on the NCCL stream, after a record/wait from the compute stream), an
  optimizer (32 kernels after a wait for the last reduce-scatter) and a record that ends the step;
- the host runs ahead of the GPUs (kernels take longer than their launches: the GPUs are the
  bottleneck, as in a real training run) by at most two steps: each step begins with a
  ``cudaEventSynchronize`` per GPU on the end of the step two before (a blocking call), and
  the script waits for its last step before the capture range ends;
- NVTX ranges as profile-step's annotations write them: the capture range, the policy, a
  ``step=N`` range per step and a ``layer=N`` range around each layer's launches, forward and
  backward (``2 * layers + 1`` ranges per step);
- kernel names repeat with their place in the layer (the same program every layer), each name
  with its own launch shape; each name's duration log-normal over names (median 10 us),
  each launch within about 10% of it, a reduce-scatter 150 us; copy sizes log-normal (median
  2 MiB) at 45 GB/s device-to-host and 50 GB/s host-to-device; event ids from a pool of 256 per
  GPU, reused.

The defaults give the proportions of the capture in issue 34 (1.36M kernels, 282k copies,
1.67M runtime rows, 10k NVTX ranges: here 1.36M kernels, 278k copies, 1.74M runtime rows, 9,702
ranges); ``--steps 296`` gives its 4.03M-kernel export.  The GPU times follow from the program,
the launches and the dependencies (a per-op simulation in program order), not from a rule
of the tool's.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, as the docstring says

from benchmarks.make_export import add_enums_and_meta, create, export_parser, partial_db, refuse_existing
from profiler.conventions import CAPTURE_RANGE, DOMAIN
from profiler.synthetic.export import REAL_SYNC_TYPE, UNSET, global_tid

FWD_KERNELS, BWD_KERNELS, OPT_KERNELS = 47, 93, 32
D2H_COPIES, H2D_COPIES = 15, 14
POOL = 256  # event ids per GPU, reused
PID = global_tid(100, 0)
TID = global_tid(100, 100)
COMPUTE, NCCL, D2H_STREAMS, H2D_STREAMS = 7, 13, (21, 22), (23, 24)
NCCL_NAME = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
FLUSH = 200_000  # rows kept before they are written


class Writer:
    """Rows per table, written in batches."""

    def __init__(self, con: sqlite3.Connection, tables: list[str]) -> None:
        self.con = con
        self.cols = {t: create(con, t) for t in tables}
        self.rows: dict[str, list[tuple]] = {t: [] for t in tables}
        self.count = dict.fromkeys(tables, 0)

    def add(self, table: str, row: dict[str, object]) -> None:
        self.rows[table].append(tuple(row.get(c) for c in self.cols[table]))
        if len(self.rows[table]) >= FLUSH:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        for t in [table] if table else list(self.rows):
            rows = self.rows[t]
            if rows:
                marks = ", ".join("?" for _ in self.cols[t])
                self.con.executemany(f'INSERT INTO "{t}" VALUES ({marks})', rows)
                self.count[t] += len(rows)
                rows.clear()


def on_stream(g: Gpu, stream: int, corr: int) -> dict[str, int]:
    """The columns that place a CUPTI activity row: its GPU, context, stream, correlation and process."""
    return {
        "deviceId": g.device,
        "contextId": g.device + 1,
        "streamId": stream,
        "correlationId": corr,
        "globalPid": PID,
    }


class Gpu:
    """One GPU's streams, copy engines and events, simulated in the order work is enqueued."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.ready: dict[int, int] = {}  # stream -> end of its last op (or the time a wait lets it go)
        self.engine = {"d2h": 0, "h2d": 0}
        self.event_time: dict[int, int] = {}
        self.next_event = 0

    def event(self) -> int:
        e = 1000 * (self.device + 1) + self.next_event % POOL
        self.next_event += 1
        return e


class Program:
    """The host thread: it launches the step's work on the GPUs and writes the rows."""

    def __init__(self, w: Writer, rng: np.random.Generator, names: dict[str, int]) -> None:
        self.w, self.rng, self.names = w, rng, names
        # each kernel's typical duration (log-normal, median 10 us); every launch varies about it by ~10%
        self.base = np.clip(rng.lognormal(np.log(10_000), 1.0, len(names) + 1), 1_500, 2_000_000).tolist()
        self.base[names[NCCL_NAME]] = 150_000
        self.t = 1_000_000_000  # host clock, ns
        self.corr = 0
        self.buf: dict[str, list] = {}
        self.pos: dict[str, int] = {}

    def draw(self, what: str) -> Any:
        """The next value of a stream of random numbers drawn in blocks."""
        if self.pos.get(what, FLUSH) >= FLUSH:
            self.pos[what] = 0
            if what == "call":
                self.buf[what] = self.rng.integers(2_000, 5_000, FLUSH)
            elif what == "gap":
                self.buf[what] = self.rng.integers(200, 1_500, FLUSH)
            elif what == "jitter":
                self.buf[what] = np.clip(self.rng.lognormal(0.0, 0.1, FLUSH), 0.5, 2.0)
            elif what == "bytes":
                self.buf[what] = np.clip(self.rng.lognormal(np.log(2 << 20), 0.8, FLUSH), 4096, 1 << 30).astype(int)
            elif what == "lag":
                self.buf[what] = self.rng.integers(1_000, 6_000, FLUSH)
            self.buf[what] = self.buf[what].tolist()
        v = self.buf[what][self.pos[what]]
        self.pos[what] += 1
        return v

    def call(self, name: str, returns: int = 0) -> tuple[int, int, int]:
        """A runtime call on the host thread, returning no sooner than *returns*: (start, end,
        correlation id)."""
        start = self.t
        end = max(start + self.draw("call"), returns)
        self.t = end + self.draw("gap")
        self.corr += 1
        self.w.add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            {
                "start": start,
                "end": end,
                "eventClass": 1,
                "globalTid": TID,
                "correlationId": self.corr,
                "nameId": self.names[name],
                "returnValue": 0,
            },
        )
        return start, end, self.corr

    def _start(self, g: Gpu, stream: int, launched: int) -> int:
        return max(g.ready.get(stream, 0) + 300, launched + 3_000)

    def kernel(self, g: Gpu, name: int, stream: int = COMPUTE) -> None:
        _, end, corr = self.call("cudaLaunchKernel")
        start = self._start(g, stream, end)
        stop = start + int(self.base[name] * self.draw("jitter"))
        g.ready[stream] = stop
        grid = 64 + (name * 37) % 4000
        self.w.add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            {
                "start": start,
                "end": stop,
                **on_stream(g, stream, corr),
                "demangledName": name,
                "shortName": name,
                "registersPerThread": 32 + name % 96,
                "gridX": grid,
                "gridY": 1,
                "gridZ": 1,
                "blockX": 128 * (1 + name % 4),
                "blockY": 1,
                "blockZ": 1,
                "staticSharedMemory": 0,
                "dynamicSharedMemory": 0,
                "localMemoryPerThread": 0,
                "localMemoryTotal": 0,
                "gridId": corr,
            },
        )

    def copy(self, g: Gpu, stream: int, kind: str) -> None:
        _, end, corr = self.call("cudaMemcpyAsync")
        nbytes = self.draw("bytes")
        start = max(self._start(g, stream, end), g.engine[kind] + 500)
        stop = start + 1_500 + nbytes // (45 if kind == "d2h" else 50)  # bytes per ns = GB/s
        g.ready[stream] = g.engine[kind] = stop
        h2d = kind == "h2d"
        self.w.add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            {
                "start": start,
                "end": stop,
                **on_stream(g, stream, corr),
                "bytes": nbytes,
                "copyKind": 1 if h2d else 2,
                "srcKind": 1 if h2d else 2,  # pinned host memory <-> device
                "dstKind": 2 if h2d else 1,
            },
        )

    def memset(self, g: Gpu) -> None:
        _, end, corr = self.call("cudaMemsetAsync")
        start = self._start(g, COMPUTE, end)
        g.ready[COMPUTE] = start + 2_000
        self.w.add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            {
                "start": start,
                "end": start + 2_000,
                **on_stream(g, COMPUTE, corr),
                "value": 0,
                "bytes": 1 << 20,
            },
        )

    def record(self, g: Gpu, stream: int) -> int:
        """``cuEventRecord`` on *stream*: the event completes when the stream reaches it."""
        e = g.event()
        _, end, corr = self.call("cuEventRecord")
        g.event_time[e] = max(g.ready.get(stream, 0), end)
        self.w.add(
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            {
                **on_stream(g, stream, corr),
                "eventId": e,
            },
        )
        return e

    def wait(self, g: Gpu, stream: int, e: int) -> None:
        """``cuStreamWaitEvent``: *stream*'s later work waits for the event."""
        start, end, corr = self.call("cuStreamWaitEvent")
        g.ready[stream] = max(g.ready.get(stream, 0), g.event_time[e])
        self.sync_row(g, start, end, corr, stream, e, "stream_wait")

    def synchronize(self, g: Gpu, e: int) -> None:
        """``cudaEventSynchronize``: the host waits until the event completes."""
        start, end, corr = self.call("cudaEventSynchronize", g.event_time[e] + self.draw("lag"))
        self.sync_row(g, start, end, corr, UNSET, e, "event_sync")

    def sync_row(self, g: Gpu, start: int, end: int, corr: int, stream: int, e: int, what: str) -> None:
        self.w.add(
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            {
                "start": start + 10,
                "end": max(start + 20, end - 10),
                **on_stream(g, stream, corr),
                "syncType": REAL_SYNC_TYPE[what],
                "eventId": e,
            },
        )

    def nvtx(self, start: int, end: int, text: str) -> None:
        self.w.add(
            "NVTX_EVENTS",
            {"start": start, "end": end, "eventType": 59, "text": text, "globalTid": TID, "domainId": 1},
        )


def prefetch(p: Program, g: Gpu, i: int, offload: int) -> int:
    """Layer *i*'s activations back to the device, after the compute stream's work so far and after
    their offload (*offload*: its record); the record that ends the prefetch."""
    stream = H2D_STREAMS[i % 2]
    p.wait(g, stream, p.record(g, COMPUTE))
    p.wait(g, stream, offload)
    for _ in range(H2D_COPIES):
        p.copy(g, stream, "h2d")
    return p.record(g, stream)


def make(path: Path, steps: int = 100, layers: int = 48, gpus: int = 2, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with partial_db(path) as con:
        create(con, "StringIds")
        kernel_names = (
            [f"loop_fusion_{i}" for i in range(FWD_KERNELS - 7)]
            + [f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_{i}" for i in range(7)]
            + [f"input_transpose_fusion_{i}" for i in range(BWD_KERNELS - 14)]
            + [f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_cluster1x2x1_{i}" for i in range(14)]
            + [f"adam_update_fusion_{i}" for i in range(OPT_KERNELS)]
            + [NCCL_NAME]
        )
        calls = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cuEventRecord", "cuStreamWaitEvent"]
        calls += ["cudaEventSynchronize"]
        strings = kernel_names + calls
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", enumerate(strings, start=1))
        names = {s: i for i, s in enumerate(strings, start=1)}
        fwd = list(range(1, FWD_KERNELS + 1))
        bwd = list(range(FWD_KERNELS + 1, FWD_KERNELS + BWD_KERNELS + 1))
        opt = list(range(FWD_KERNELS + BWD_KERNELS + 1, FWD_KERNELS + BWD_KERNELS + OPT_KERNELS + 1))
        nccl = len(kernel_names)
        add_enums_and_meta(con)
        create(con, "TARGET_INFO_GPU")
        con.executemany(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, ?, 'NVIDIA H200')", [(d,) for d in range(gpus)]
        )
        tables = [
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "NVTX_EVENTS",
        ]
        w = Writer(con, tables)
        w.add("NVTX_EVENTS", {"start": 999_999_000, "eventType": 75, "text": DOMAIN, "globalTid": TID, "domainId": 1})
        p = Program(w, rng, names)
        gs = [Gpu(d) for d in range(gpus)]
        step_end: list[list[int]] = []
        capture_start = p.t
        p.t += 5_000
        for s in range(steps):
            if s >= 2:
                for g, e in zip(gs, step_end[s - 2], strict=True):
                    p.synchronize(g, e)
            t_step = p.t
            for g in gs:
                p.memset(g)
            offloaded: dict[tuple[int, int], int] = {}  # (gpu, layer) -> the offload's record
            for i in range(layers):
                t0 = p.t
                for g in gs:
                    for k in fwd:
                        p.kernel(g, k)
                    e = p.record(g, COMPUTE)
                    stream = D2H_STREAMS[i % 2]
                    p.wait(g, stream, e)
                    for _ in range(D2H_COPIES):
                        p.copy(g, stream, "d2h")
                    offloaded[g.device, i] = p.record(g, stream)
                p.nvtx(t0, p.t, f"layer={i}")
            prefetched: dict[tuple[int, int], int] = {}
            last_rs: dict[int, int] = {}
            for i in reversed(range(layers)):
                t0 = p.t
                for g in gs:
                    if i == layers - 1:
                        prefetched[g.device, i] = prefetch(p, g, i, offloaded[g.device, i])
                    if i > 0:
                        prefetched[g.device, i - 1] = prefetch(p, g, i - 1, offloaded[g.device, i - 1])
                    p.wait(g, COMPUTE, prefetched[g.device, i])
                    for k in bwd:
                        p.kernel(g, k)
                    p.wait(g, NCCL, p.record(g, COMPUTE))
                    p.kernel(g, nccl, NCCL)
                    last_rs[g.device] = p.record(g, NCCL)
                p.nvtx(t0, p.t, f"layer={i}")
            ends = []
            for g in gs:
                p.wait(g, COMPUTE, last_rs[g.device])
                for k in opt:
                    p.kernel(g, k)
                ends.append(p.record(g, COMPUTE))
            step_end.append(ends)
            p.nvtx(t_step, p.t, f"step={s}")
        for g, e in zip(gs, step_end[-1], strict=True):  # the script waits for its last step
            p.synchronize(g, e)
        p.nvtx(capture_start - 2, p.t, "policy=offload_qkv")
        p.nvtx(capture_start - 4, p.t + 2, CAPTURE_RANGE)
        w.flush()
    return path


def main() -> None:
    p = export_parser(__doc__)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    refuse_existing(a.out)
    make(a.out, a.steps, a.layers, a.gpus, a.seed)
    print(a.out)


if __name__ == "__main__":
    main()
