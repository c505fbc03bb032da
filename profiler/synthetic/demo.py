"""SYNTHETIC demonstration runs: a stated model of a JAX training step with host offloading.

Nothing here is measured.  ``demo_run`` writes an nsys-schema export (through
``ExportBuilder``, with nsys's real table and column names) of what the
model below says a data-parallel transformer step would look like on two
GPUs under one offload policy, so that the dashboard, ``analyze`` and
``compare`` can be shown on runs whose copies are not all zero on a machine
without a GPU.  Every name a reader sees says "synthetic": the run folders,
the trace files, the GPU name in the export and the manifest.

The model (``sample_traces/README.md`` states it for readers):

- A decoder layer's forward pass is XLA thunks on one compute stream: RMS
  norm, the q/k/v projections, flash attention, the output projection, norm,
  the MLP in and out projections with an activation between, the residual
  add.  Matmuls take ``2*m*n*k / gemm_tflops``, attention ``4*T*seq*d/2 /
  attention_tflops`` (causal), element-wise fusions the bytes they read and
  write over ``hbm_gbps``.  The backward pass runs the layers in reverse,
  each matmul as two (data and weight gradients), attention 2.5x its forward
  time, fusions 1.5x.
- Policies follow ``examples/train.py``: ``none`` keeps every activation on
  the device; ``remat`` keeps none and recomputes the layer's forward pass
  at the start of its backward pass; ``offload_qkv`` / ``offload_mlp`` /
  ``offload_all`` send the named activations (MaxText's ``checkpoint_name``s)
  to pinned host memory and recompute the rest.
- An offloaded activation leaves right after the kernel that made it: an
  event recorded on the compute stream, a wait on the D2H copy stream, the
  copy.  It comes back on the H2D copy stream one layer ahead (when the
  backward pass of the layer above starts; for the top layer, when the
  backward pass starts), after its D2H copy (an event and a wait), and the
  layer's backward pass waits for all of its copies (an event recorded on the
  H2D stream, a wait on the compute stream).  Copies run at ``link_gbps``
  each way, one at a time per direction.
- After each layer's backward pass its gradients are all-reduced by an NCCL
  kernel on its own stream (``nccl_busbw_gbps``); both GPUs start a
  collective together (the later one sets the start).  The optimizer update
  waits for the last all-reduce.
- The host launches every thunk of a step ahead of the GPU (``launch_ns``
  per CUDA call, inside XLA's ``XlaModule`` / ``Thunk`` NVTX ranges in the
  ``TSL`` domain) and blocks at the step's end; a GPU op starts when it is
  launched, its stream is free and what it waits for has ended.  GPU 1 runs
  kernels ``device_skew`` slower; every duration has a small seeded jitter.
- Device memory events (as ``--cuda-memory-usage=true`` records them) model
  each activation as its own allocation, from the start of the kernel that
  makes it (or of its H2D copy) to the end of its layer's backward pass, or of
  its D2H copy; memory held before the capture is not modelled.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.conventions import CAPTURE_RANGE, DOMAIN, MANIFEST, POLICY_PREFIX, STEP_PREFIX
from profiler.synthetic.export import ExportBuilder

SYNTHETIC = "synthetic"
TRACE_FILE = "synthetic-trace.sqlite"
FOLDER_PREFIX = "synthetic-"
QKV = ("query_proj", "key_proj", "value_proj")
MLP = ("mlpwi", "mlpwo")
ALL_NAMES = ("decoder_layer_input", *QKV, "out_proj", *MLP)
# None: no jax.checkpoint (everything kept); otherwise the names offloaded, everything else recomputed
POLICIES: dict[str, tuple[str, ...] | None] = {
    "none": None,
    "remat": (),
    "offload_qkv": QKV,
    "offload_mlp": MLP,
    "offload_all": ALL_NAMES,
}
PID = 4242  # the one process: its main thread dispatches and launches everything
STREAMS = {"compute": 13, "d2h": 14, "h2d": 15, "nccl": 16}
GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{}_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel"
    "__5x_cublas"
)
FLASH_FWD = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"
FLASH_BWD = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_5_64x128x128_1x1x1_kernel0_0"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


@dataclass(frozen=True)
class StepModel:
    """The numbers the model is built from (the defaults: a Llama-like layer on H100s over PCIe Gen5)."""

    layers: int = 4
    steps: int = 3
    devices: int = 2
    batch: int = 4
    seq: int = 2048
    d_model: int = 4096
    d_ff: int = 16384
    vocab: int = 32768
    dtype_bytes: int = 2
    gemm_tflops: float = 600.0
    attention_tflops: float = 400.0
    hbm_gbps: float = 2500.0
    link_gbps: float = 52.0  # achieved pinned-host copy rate, each direction
    nccl_busbw_gbps: float = 150.0
    launch_ns: int = 4_000
    launch_latency_ns: int = 3_000
    device_skew: float = 0.015
    jitter: float = 0.01
    gpu_name: str = "NVIDIA H100 80GB HBM3 (synthetic)"
    seed: int = 0

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def activation_bytes(self, name: str) -> int:
        """Bytes of one layer's activation *name* (T x d, or T x d_ff for the MLP's inner ones)."""
        width = self.d_ff if name in ("mlpwi", "act") else self.d_model
        return self.tokens * width * self.dtype_bytes


@dataclass
class Op:
    """One GPU op of the step's program, in launch order."""

    stream: str
    kind: str  # kernel, nccl, d2h, h2d
    path: str  # the op_name path of its thunk
    hlo_op: str
    name: str  # kernel name (copies: none)
    base_ns: float
    nbytes: int = 0
    deps: list[int] = field(default_factory=list)
    allocs: list[tuple[str, int]] = field(default_factory=list)  # buffers allocated at its start
    frees: list[str] = field(default_factory=list)  # buffers freed at its end
    wait_only: bool = False  # copy-done thunks carry only the wait


class Program:
    """The ops of one step under one policy, built layer by layer."""

    def __init__(self, m: StepModel, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
        self.m, self.policy = m, policy
        self.ops: list[Op] = []
        self._hlo: dict[str, int] = {}
        self.offloaded = POLICIES[policy]
        self.build()

    def hlo(self, kind: str) -> str:
        self._hlo[kind] = self._hlo.get(kind, 0) + 1
        return f"{kind}.{self._hlo[kind]}"

    def add(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def gemm(self, path: str, mnk: tuple[int, int, int], layout: str = "tn", scale: float = 1.0) -> Op:
        m, n, k = mnk
        ns = 2 * m * n * k / (self.m.gemm_tflops * 1e3) * scale
        return Op("compute", "kernel", path, self.hlo("custom-call"), GEMM.format(layout), ns)

    def fusion(self, path: str, kind: str, nbytes: int, scale: float = 1.0) -> Op:
        hlo = self.hlo(kind)
        return Op("compute", "kernel", path, hlo, hlo.replace(".", "_"), nbytes / self.m.hbm_gbps * scale)

    def attention(self, path: str, backward: bool) -> Op:
        m = self.m
        ns = 4 * m.tokens * m.seq * m.d_model / 2 / (m.attention_tflops * 1e3) * (2.5 if backward else 1.0)
        return Op("compute", "kernel", path, self.hlo("custom-call"), FLASH_BWD if backward else FLASH_FWD, ns)

    def forward_ops(self, layer: int, prefix: str) -> list[tuple[str, Op]]:
        """(output activation, op) of one layer's forward pass; *prefix* is its op_name path."""
        t, d, f, b = self.m.tokens, self.m.d_model, self.m.d_ff, self.m.dtype_bytes
        p = f"{prefix}/layer_{layer}"
        return [
            ("normed1", self.fusion(f"{p}/attention_norm/rms_norm", "input_multiply_reduce_fusion", 2 * t * d * b)),
            ("query_proj", self.gemm(f"{p}/attention/query_proj/dot_general", (t, d, d))),
            ("key_proj", self.gemm(f"{p}/attention/key_proj/dot_general", (t, d, d))),
            ("value_proj", self.gemm(f"{p}/attention/value_proj/dot_general", (t, d, d))),
            ("context", self.attention(f"{p}/attention/dot_product_attention", backward=False)),
            ("out_proj", self.gemm(f"{p}/attention/out_proj/dot_general", (t, d, d))),
            ("normed2", self.fusion(f"{p}/mlp_norm/rms_norm", "input_add_reduce_fusion", 3 * t * d * b)),
            ("mlpwi", self.gemm(f"{p}/mlp/mlpwi/dot_general", (t, f, d))),
            ("act", self.fusion(f"{p}/mlp/gelu", "loop_multiply_fusion", 2 * t * f * b)),
            ("mlpwo", self.gemm(f"{p}/mlp/mlpwo/dot_general", (t, d, f))),
            ("decoder_layer_input", self.fusion(f"{p}/residual/add", "loop_add_fusion", 3 * t * d * b)),
        ]

    def backward_ops(self, layer: int) -> list[Op]:
        """One layer's backward pass (reverse order), without recomputation."""
        t, d, f, b = self.m.tokens, self.m.d_model, self.m.d_ff, self.m.dtype_bytes
        p = f"jit(train_step)/transpose(jvp(layer_{layer}))"
        ops: list[Op] = [self.fusion(f"{p}/residual/add", "loop_add_fusion", 3 * t * d * b, 1.5)]
        for name, mnk in (("mlpwo", (t, d, f)), ("mlpwi", (t, f, d))):
            ops += [
                self.gemm(f"{p}/mlp/{name}/dot_general", mnk, "nn"),
                self.gemm(f"{p}/mlp/{name}/dot_general", mnk, "nt"),
            ]
            if name == "mlpwo":
                ops.append(self.fusion(f"{p}/mlp/gelu", "loop_multiply_fusion", 2 * t * f * b, 1.5))
        ops.append(self.fusion(f"{p}/mlp_norm/rms_norm", "input_add_reduce_fusion", 3 * t * d * b, 1.5))
        ops += [
            self.gemm(f"{p}/attention/out_proj/dot_general", (t, d, d), "nn"),
            self.gemm(f"{p}/attention/out_proj/dot_general", (t, d, d), "nt"),
            self.attention(f"{p}/attention/dot_product_attention", backward=True),
        ]
        for name in ("value_proj", "key_proj", "query_proj"):
            ops += [
                self.gemm(f"{p}/attention/{name}/dot_general", (t, d, d), "nn"),
                self.gemm(f"{p}/attention/{name}/dot_general", (t, d, d), "nt"),
            ]
        ops.append(self.fusion(f"{p}/attention_norm/rms_norm", "input_multiply_reduce_fusion", 2 * t * d * b, 1.5))
        return ops

    def copy(self, kind: str, layer: int, name: str, dep: int, after: int | None = None) -> int:
        phase = f"jvp(layer_{layer})" if kind == "d2h" else f"transpose(jvp(layer_{layer}))"
        nbytes = self.m.activation_bytes(name)
        op = Op(
            kind,
            kind,
            f"jit(train_step)/{phase}/checkpoint_name[{name}]",
            self.hlo("copy-start"),
            "",
            nbytes / self.m.link_gbps,
            nbytes,
            [dep] + ([after] if after is not None else []),
        )
        buf = f"L{layer}.{name}"
        if kind == "d2h":
            op.frees.append(buf)
        else:
            op.allocs.append((buf, nbytes))
        return self.add(op)

    def build(self) -> None:
        m = self.m
        t, d, b = m.tokens, m.d_model, m.dtype_bytes
        kept_all = self.offloaded is None
        offloaded = self.offloaded or ()
        embed = self.fusion("jit(train_step)/jvp(embed)/take", "loop_gather_fusion", 2 * t * d * b)
        embed.allocs.append(("L0.decoder_layer_input", t * d * b))
        last = self.add(embed)
        d2h: dict[tuple[int, str], int] = {}
        for layer in range(m.layers):
            fwd = self.forward_ops(layer, "jit(train_step)/jvp")
            if "decoder_layer_input" in offloaded:
                d2h[(layer, "decoder_layer_input")] = self.copy("d2h", layer, "decoder_layer_input", last)
            for out, op in fwd:
                op.deps.append(last)
                if out == "decoder_layer_input":  # the next layer's input
                    op.allocs.append((f"L{layer + 1}.decoder_layer_input", t * d * b))
                elif kept_all or out in offloaded:
                    op.allocs.append((f"L{layer}.{out}", m.activation_bytes(out)))
                last = self.add(op)
                if out in offloaded and out != "decoder_layer_input":
                    d2h[(layer, out)] = self.copy("d2h", layer, out, last)
        head = self.gemm("jit(train_step)/jvp(lm_head)/dot_general", (t, m.vocab, d))
        loss = self.fusion("jit(train_step)/jvp(loss)/log_softmax", "input_reduce_fusion", 2 * t * m.vocab * b)
        for op in (head, loss):
            op.deps.append(last)
            last = self.add(op)
        h2d: dict[int, list[int]] = {}

        def prefetch(layer: int) -> None:
            """Bring layer *layer*'s activations back, issued at this point of the compute stream's order."""
            if layer >= 0:
                h2d[layer] = [
                    self.copy("h2d", layer, n, d2h[(layer, n)], after=last) for n in offloaded if (layer, n) in d2h
                ]

        prefetch(m.layers - 1)
        for op in (
            self.gemm("jit(train_step)/transpose(jvp(lm_head))/dot_general", (t, m.vocab, d), "nn"),
            self.gemm("jit(train_step)/transpose(jvp(lm_head))/dot_general", (t, m.vocab, d), "nt"),
        ):
            op.deps.append(last)
            last = self.add(op)
        self.ops[last].frees.append(f"L{m.layers}.decoder_layer_input")
        nccl_last = None
        for layer in reversed(range(m.layers)):
            copies = h2d.get(layer, [])
            prefetch(layer - 1)
            if copies:  # copy-done: the compute stream waits for the layer's activations
                done = Op("compute", "wait", f"jit(train_step)/transpose(jvp(layer_{layer}))", "", "", 0)
                done.hlo_op, done.wait_only, done.deps = self.hlo("copy-done"), True, list(copies)
                self.add(done)
            recompute = []
            if not kept_all:
                prefix = f"jit(train_step)/transpose(jvp(layer_{layer}))/rematted_computation"
                for out, op in self.forward_ops(layer, prefix)[:-1]:
                    if out not in offloaded:
                        op.path = op.path.replace(f"/layer_{layer}/", "/", 1)
                        op.allocs.append((f"L{layer}.{out}", m.activation_bytes(out)))
                        recompute.append(op)
            for op in [*recompute, *self.backward_ops(layer)]:
                op.deps.append(last)
                last = self.add(op)
            names = ["decoder_layer_input"] + [
                n for n in ("normed1", *QKV, "context", "out_proj", "normed2", "mlpwi", "act", "mlpwo")
            ]
            self.ops[last].frees += [f"L{layer}.{n}" for n in names]
            nbytes = (4 * d * d + 2 * d * m.d_ff) * b
            nccl = Op(
                "nccl",
                "nccl",
                f"jit(train_step)/transpose(jvp(layer_{layer}))/psum",
                self.hlo("all-reduce-start"),
                NCCL,
                nbytes / m.nccl_busbw_gbps * 2 * (m.devices - 1) / m.devices,
                deps=[last],
            )
            nccl_last = self.add(nccl)
        opt = self.fusion("jit(train_step)/adam/update", "loop_fusion", 16 * m.layers * (4 * d * d + 2 * d * m.d_ff))
        opt.deps += [last] + ([nccl_last] if nccl_last is not None else [])
        self.add(opt)


@dataclass
class Placed:
    """An op of one step on one device: launch call, GPU interval, host calls, its thunk's range."""

    launch: int
    start: int
    end: int
    thunk: tuple[int, int]
    calls: list[tuple[str, int]]  # (API name, start): waits before the launch, the record after


@dataclass
class StepTimes:
    """Host times of one step (dispatch start, last launch) and the end of its last GPU op."""

    start: int
    launched: int
    end: int


def simulate(m: StepModel, program: Program) -> tuple[list[list[list[Placed]]], list[StepTimes]]:
    """Every op of every step on every device, placed in time; and the steps' host times.

    One host thread launches each thunk on every GPU in turn (XLA's ``Thunk`` ranges per launch).
    """
    rng = np.random.default_rng(m.seed)
    ops = program.ops
    cross = [sorted({i for i in op.deps if ops[i].stream != op.stream}) for op in ops]
    recorded = {i for deps in cross for i in deps}
    free = [dict.fromkeys(STREAMS, 0) for _ in range(m.devices)]
    out: list[list[list[Placed]]] = []
    times: list[StepTimes] = []
    host = 1_000_000
    for _ in range(m.steps):
        start = host
        per_dev: list[list[Placed]] = [[] for _ in range(m.devices)]
        for i, op in enumerate(ops):
            cand = []
            for d in range(m.devices):
                enter = host
                h = enter + 2_000  # the thunk's own bookkeeping
                calls = []
                for _dep in cross[i]:
                    calls.append(("cuStreamWaitEvent", h))
                    h += m.launch_ns
                launch = h
                ready = 0
                if not op.wait_only:
                    ready = max(
                        [launch + m.launch_latency_ns, free[d][op.stream]] + [per_dev[d][j].end for j in op.deps]
                    )
                    h += m.launch_ns
                if i in recorded:
                    calls.append(("cuEventRecord", h))
                    h += m.launch_ns
                host = h + 1_000
                cand.append((launch, ready, calls, (enter, h + 500)))
            # a collective ends when the last GPU has joined it: the earlier ones wait inside the kernel
            joined = max(c[1] for c in cand)
            for d, (launch, ready, calls, thunk) in enumerate(cand):
                if op.wait_only:  # copy-done: holds back the compute stream's next op
                    per_dev[d].append(Placed(launch, 0, 0, thunk, calls))
                    free[d]["compute"] = max([free[d]["compute"]] + [per_dev[d][j].end for j in op.deps])
                    continue
                slow = 1 + m.device_skew * d if op.kind == "kernel" else 1.0
                noise = 1 + (m.jitter if op.kind == "kernel" else m.jitter / 2) * rng.standard_normal()
                dur = max(int(op.base_ns * slow * max(noise, 0.5)), 1_000)
                end = (joined if op.kind == "nccl" else ready) + dur
                per_dev[d].append(Placed(launch, ready, end, thunk, calls))
                free[d][op.stream] = end
        end = max(p.end for dev in per_dev for p in dev)
        times.append(StepTimes(start, host, end))
        out.append(per_dev)
        host = end + 400_000  # the Python loop between steps
    return out, times


def demo_run(m: StepModel, policy: str, path: Path) -> Path:
    """Write the SYNTHETIC export of *policy* under model *m* to *path* (which must not exist)."""
    program = Program(m, policy)
    placed, steps = simulate(m, program)
    b = ExportBuilder()
    b.rows["META_DATA_EXPORT"].append(
        {
            "name": "PROFILE_STEP_SYNTHETIC",
            "value": "made by profiler/synthetic/demo.py from a model; not a measurement",
        }
    )
    ops = program.ops
    cross = [sorted({i for i in op.deps if ops[i].stream != op.stream}) for op in ops]
    pid = tid = PID
    b.domain(1, DOMAIN, pid=pid, tid=tid)
    b.domain(2, "TSL", pid=pid, tid=tid)
    first, last = steps[0].start - 50_000, steps[-1].end + 100_000
    b.nvtx(first, last, CAPTURE_RANGE, pid=pid, tid=tid, domain_id=1, registered=True)
    b.nvtx(first + 1_000, last - 1_000, POLICY_PREFIX + policy, pid=pid, tid=tid, domain_id=1, registered=True)
    for d in range(m.devices):
        b.gpu(d, m.gpu_name, total_memory=80 * 2**30)
    event_id = 0
    held: list[dict[str, int]] = [{} for _ in range(m.devices)]
    address = 1 << 40
    module = "XlaModule:#hlo_module=jit_train_step,program_id=17#"
    for s, st in enumerate(steps):
        b.nvtx(st.start - 20_000, st.end + 60_000, f"{STEP_PREFIX}{s}", pid=pid, tid=tid, domain_id=1, registered=True)
        b.nvtx(st.start - 5_000, st.launched + 5_000, module, pid=pid, tid=tid, domain_id=2)
        events: dict[tuple[int, int], int] = {}
        for i, op in enumerate(ops):
            for d in range(m.devices):
                p = placed[s][d][i]
                b.nvtx(*p.thunk, f"Thunk:#name={op.path},hlo_op={op.hlo_op}#", pid=pid, tid=tid, domain_id=2)
                waits = [t for name, t in p.calls if name == "cuStreamWaitEvent"]
                for dep, t in zip(cross[i], waits, strict=True):
                    b.stream_wait(
                        t, events[(d, dep)], STREAMS[op.stream], device=d, pid=pid, tid=tid, duration=m.launch_ns
                    )
                stream = STREAMS[op.stream]
                if not op.wait_only:
                    if op.kind in ("d2h", "h2d"):
                        corr = b.copy(p.start, p.end, op.kind, op.nbytes, device=d, stream=stream, pid=pid)
                        api = "cuMemcpyDtoHAsync_v2" if op.kind == "d2h" else "cuMemcpyHtoDAsync_v2"
                    else:
                        sig = "(ncclDevComm*, unsigned long, ncclWork*)" if op.kind == "nccl" else ""
                        corr = b.kernel(
                            p.start, p.end, op.name, device=d, stream=stream, demangled=op.name + sig, pid=pid
                        )
                        api = "cuLaunchKernel"
                    b.runtime(p.launch, p.launch + m.launch_ns, corr, name=api, pid=pid, tid=tid)
                    for buf, nbytes in op.allocs:
                        held[d][buf] = nbytes
                        b.memory(p.start, nbytes, device=d, address=address, pid=pid)
                        address += nbytes
                    for buf in op.frees:
                        if buf in held[d]:
                            b.memory(p.end, held[d].pop(buf), free=True, device=d, pid=pid)
                for name, t in p.calls:
                    if name == "cuEventRecord":
                        event_id += 1
                        events[(d, i)] = event_id
                        b.event_record(t, event_id, device=d, stream=stream, pid=pid, tid=tid, duration=m.launch_ns)
        t = st.launched
        for d in range(m.devices):  # block_until_ready: the host waits for each GPU's compute stream in turn
            wait = max(st.end - t, 0) + 10_000
            b.sync(t, "stream_sync", stream=STREAMS["compute"], device=d, pid=pid, tid=tid, duration=wait)
            t += wait + 1_000
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def manifest(m: StepModel, policy: str) -> dict[str, Any]:
    """The run folder's manifest: what made it, from which model, and that it is synthetic."""
    return {
        "tool": "profile-step demo generator (profiler/synthetic/demo.py)",
        "synthetic": True,
        "status": SYNTHETIC,
        "policy": policy,
        "note": "SYNTHETIC: made from a stated model of a step (sample_traces/README.md); not a measurement",
        "model": asdict(m),
        "offloaded_activations": list(POLICIES[policy] or ()),
        "files": {"sqlite": TRACE_FILE},
    }


def write_demo_runs(
    folder: Path, m: StepModel | None = None, policies: tuple[str, ...] = tuple(POLICIES)
) -> list[Path]:
    """One run folder per policy under *folder*: ``synthetic-<n>-<policy>/`` with its export and manifest.

    Existing run folders are left alone (nothing a user has is overwritten): remove them to remake.
    """
    m = m or StepModel()
    made = []
    for policy in policies:
        order = list(POLICIES).index(policy) if policy in POLICIES else len(POLICIES)
        run = folder / f"{FOLDER_PREFIX}{order}-{policy}"  # numbered: listed in the order of POLICIES
        if (run / TRACE_FILE).exists():
            raise FileExistsError(run / TRACE_FILE)
        run.mkdir(parents=True, exist_ok=True)
        demo_run(m, policy, run / TRACE_FILE)
        (run / MANIFEST).write_text(json.dumps(manifest(m, policy), indent=2) + "\n")
        made.append(run)
    return made
