"""A roofline cost per instruction, from the target's peak FLOP/s and HBM bandwidth.

``cost = max(matmul FLOPs / matmul peak + other FLOPs / vector peak, HBM bytes / HBM bandwidth)``
per kernel (a fusion, a custom call, an unfused instruction); collectives are
their payload over the GPU interconnect with a ring's factor.  Host copies are
not costed here: the simulator prices them over the chosen host link (or takes
a measured cost).  The assumptions, in docs/plan.md ("Prediction"):

- FLOPs: a dot, and a cuBLAS GEMM custom call (``__cublas$gemm``, ``__cublas$lt$matmul``: what XLA
  makes of most dots on a real GPU) by the dimension numbers of its backend config, is
  ``2 x result elements x contracted size``, a convolution
  ``2 x result elements x kernel elements / output features``; an elementwise
  instruction one FLOP per result element, a reduce one per input element;
  dots in bf16/f16 run at the dense tensor-core peak, f32 dots at half of it
  (TF32, JAX's default precision on GPUs), fp8 at twice; everything else at the
  FP32 vector peak (SMs x FP32 lanes x 2 x clock, from the target description).
- Bytes: a kernel reads its operands and writes its result once from HBM, but
  a fusion parameter read only through slices counts the slices' bytes, and an
  in-place ``dynamic-update-slice`` writes only its update; nothing stays in L2.
- No launch overhead, no tail effects, no autotuning (deviceless compilation
  picks default kernels); copies do not slow kernels down.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from profiler.predict.schedule import COLLECTIVES, FREE, Schedule
from profiler.units import whole_ns
from profiler.xla.hlo import GEMM_TARGETS, Computation, Instruction, Module
from profiler.xla.shapes import Shape
from profiler.xla.targets import TARGETS, peak_tflops

ELEMENTWISE = {
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "negate", "abs",
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "sqrt", "rsqrt", "cbrt",
    "sine", "cosine", "tan", "atan2", "erf", "compare", "select", "clamp", "and", "or", "xor", "not", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even", "sign", "convert", "is-finite",
}  # fmt: skip
SLICES = {"slice", "dynamic-slice", "gather"}
NO_HBM = {"parameter", "constant", "bitcast", "get-tuple-element", "tuple", "after-all", "opt-barrier"}
# GPU-to-GPU bandwidth per direction (decimal GB/s) by device name fragment (lower case), first match
# wins: NVLink 5 (B200), NVLink 4 (H100/H200 SXM: 18 links x 25 GB/s), NVLink 3 (A100 SXM4)
INTERCONNECT_GBPS: tuple[tuple[str, float], ...] = (("b200", 900.0), ("gb200", 900.0), ("h100", 450.0),
                                                    ("h200", 450.0), ("a100", 300.0))  # fmt: skip
DEFAULT_INTERCONNECT_GBPS = 450.0
_DIMS = re.compile(r"\d+")


@dataclass(frozen=True)
class Device:
    """What the roofline needs of a GPU (rates in per second)."""

    name: str
    matmul_flops: float  # dense bf16/f16 tensor-core FLOP/s
    vector_flops: float  # FP32 non-tensor FLOP/s
    hbm_bytes_s: float
    interconnect_bytes_s: float  # per direction, to another GPU
    on_chip_spaces: frozenset[int] = frozenset()  # memory spaces that are no HBM traffic (a TPU's VMEM, S(1))


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"^\s*{key}:\s*\"?([^\"\n]*)\"?\s*$", text, re.M)
    return m.group(1).strip() if m else None


def device_from_spec(spec_text: str, peak_bf16_tflops: float | None = None) -> Device:
    """A Device from a ``GpuTargetConfigProto`` text (``../shared/hlo/gpu_specs/``, ``targets.py``):
    HBM bandwidth, SMs, FP32 lanes and clock from the description; the tensor-core peak from
    *peak_bf16_tflops*, else the built-in target of the same name, else ``targets.PEAK_TFLOPS``."""
    name = _field(spec_text, "device_description_str") or "GPU"
    if _field(spec_text, "platform_name") == "TPU":
        return _tpu_device(spec_text, name, peak_bf16_tflops)
    try:
        bw = float(_field(spec_text, "memory_bandwidth") or "nan")
        sms = int(_field(spec_text, "core_count") or "0")
        lanes = int(_field(spec_text, "fpus_per_core") or "0")
        clock = float(_field(spec_text, "clock_rate_ghz") or "nan")
    except ValueError:
        raise ValueError("the target description's memory_bandwidth, core_count or clock is not a number") from None
    if not bw > 0:
        raise ValueError("the target description has no memory_bandwidth")
    vector = sms * lanes * 2 * clock * 1e9 if sms and lanes and clock > 0 else float("nan")
    peak = peak_bf16_tflops
    if peak is None:
        peak = next((t.peak_bf16_tflops for t in TARGETS.values() if t.description == name), None) or peak_tflops(name)
    if peak is None:
        raise ValueError(f"no tensor-core peak known for {name!r}: pass one (peak_bf16_tflops)")
    if not vector > 0:
        vector = peak * 1e12 / 16  # the ratio of an H100's dense bf16 to FP32 vector peak, about 15
    low = name.lower()
    ic = next((g for k, g in INTERCONNECT_GBPS if k in low), DEFAULT_INTERCONNECT_GBPS)
    return Device(name, peak * 1e12, vector, bw, ic * 1e9)


def _tpu_device(spec_text: str, name: str, peak_bf16_tflops: float | None) -> Device:
    """A Device from a TPU description (``targets.TpuTarget.spec_text``)."""
    try:
        vals = {k: float(_field(spec_text, k) or "nan") for k in
                ("memory_bandwidth", "peak_bf16_flops", "vector_flops", "interconnect_bandwidth")}  # fmt: skip
    except ValueError:
        raise ValueError("the TPU description's rates are not numbers") from None
    if not all(v > 0 for v in vals.values()):
        raise ValueError("the TPU description lacks memory_bandwidth, peak_bf16_flops, vector_flops or interconnect")
    peak = peak_bf16_tflops * 1e12 if peak_bf16_tflops else vals["peak_bf16_flops"]
    # S(1) is a TensorCore's VMEM on a TPU (on a GPU the same number is a device-side pool in HBM)
    return Device(name, peak, vals["vector_flops"], vals["memory_bandwidth"], vals["interconnect_bandwidth"],
                  frozenset({1}))  # fmt: skip


def _prod(xs: tuple[int, ...] | list[int]) -> int:
    return math.prod(xs) if xs else 1


def _elems(shape: Shape) -> int:
    return sum(_prod(a.dims) for a in shape.arrays())


class Costs:
    """Roofline costs of a module's instructions on one device (cached per computation)."""

    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        self.by_comp = {c.name: {i.name: i for i in c.instructions} for c in module.computations.values()}
        self._comp_flops: dict[str, tuple[float, float, float]] = {}

    def operand(self, ins: Instruction, k: int) -> Instruction | None:
        return self.by_comp.get(ins.computation, {}).get(ins.operands[k]) if k < len(ins.operands) else None

    # --- FLOPs ----------------------------------------------------------------------------------
    def flops(self, ins: Instruction) -> tuple[float, float, float]:
        """(matmul FLOPs weighted to bf16-peak equivalents, vector FLOPs, matmul FLOPs) of one
        instruction (the last as XLA's cost analysis counts them)."""
        op = ins.opcode
        gemm = op == "custom-call" and (ins.custom_call_target or "").startswith(GEMM_TARGETS)
        if op in ("dot", "convolution") or gemm:
            lhs, rhs = self.operand(ins, 0), self.operand(ins, 1)
            arrays = ins.shape.arrays()
            out = _prod(arrays[0].dims) if gemm and arrays else _elems(ins.shape)  # a GEMM's: (result, workspace)
            k = self._kernel_size(ins, rhs) if op == "convolution" else self._contracted(ins, lhs, rhs)
            dtype = (lhs.shape.dtype if lhs is not None else None) or ins.shape.dtype or "f32"
            return 2.0 * out * k * _matmul_weight(dtype), 0.0, 2.0 * out * k
        if op in ("fusion", "call", "async-start") and ins.called:
            m = v = r = 0.0
            for c in ins.called:
                cm, cv, cr = self.computation_flops(c)
                m, v, r = m + cm, v + cv, r + cr
            return m, v, r
        if op == "custom-call" and "$fmha" in (ins.custom_call_target or ""):
            return self._attention(ins)
        if op in ELEMENTWISE:
            return 0.0, float(_elems(ins.shape)), 0.0
        if op in ("reduce", "reduce-window", "scatter", "select-and-scatter"):
            src = self.operand(ins, 0)
            return 0.0, float(_elems(src.shape) if src is not None else _elems(ins.shape)), 0.0
        return 0.0, 0.0, 0.0

    def _attention(self, ins: Instruction) -> tuple[float, float, float]:
        """cuDNN's fused attention (``__cudnn$fmha*``): the forward is 2 B H Sq Sk (Dqk + Dv) FLOPs, half
        of it with a causal mask; the backward 2.5 times the forward (five matmuls against two), as
        FlashAttention's papers count them.  Shapes: the first result is [B, H, Sq, Dv] (the
        backward's: dQ), operand 1 (K) is [B, Sk, Hk, Dqk]."""
        out = ins.shape.arrays()[0] if ins.shape.arrays() else None
        k = self.operand(ins, 1)
        if out is None or k is None or len(out.dims) != 4 or len(k.shape.dims) != 4:
            return 0.0, 0.0, 0.0
        b, h, sq, dv = out.dims
        sk, dqk = k.shape.dims[1], k.shape.dims[3]
        if "Backward" in (ins.custom_call_target or ""):
            v = self.operand(ins, 2)
            dv = v.shape.dims[3] if v is not None and len(v.shape.dims) == 4 else dv
        fwd = 2.0 * b * h * sq * sk * (dqk + dv)
        if ins.attrs.get("mask_type", "").startswith("CAUSAL"):
            fwd /= 2
        total = fwd * (2.5 if "Backward" in (ins.custom_call_target or "") else 1.0)
        return total * _matmul_weight(out.dtype or "bf16"), 0.0, total

    def computation_flops(self, name: str) -> tuple[float, float, float]:
        if name not in self._comp_flops:
            self._comp_flops[name] = (0.0, 0.0, 0.0)  # a cycle (never in valid HLO) costs nothing
            m = v = r = 0.0
            comp = self.module.computations.get(name)
            for i in comp.instructions if comp else []:
                fm, fv, fr = self.flops(i)  # a reduce's applied computation is counted by its elements
                m, v, r = m + fm, v + fv, r + fr
            self._comp_flops[name] = (m, v, r)
        return self._comp_flops[name]

    def _contracted(self, ins: Instruction, lhs: Instruction | None, rhs: Instruction | None) -> float:
        dims = ins.attrs.get("lhs_contracting_dims")
        if lhs is not None and dims is not None:
            idx = [int(d) for d in _DIMS.findall(dims)]
            return float(_prod([lhs.shape.dims[i] for i in idx if i < len(lhs.shape.dims)]))
        if lhs is None or rhs is None:
            return 1.0
        # no dimension numbers (a proto): K from sizes, with the leading result dimension as batch
        out = _elems(ins.shape)
        batch = ins.shape.dims[0] if len(ins.shape.dims) >= 3 else 1
        return math.sqrt(max(_elems(lhs.shape) * _elems(rhs.shape) / max(out * batch, 1), 1.0))

    def _kernel_size(self, ins: Instruction, rhs: Instruction | None) -> float:
        """Multiply-adds per result element of a convolution: the kernel's input features times, per
        spatial dimension, the window taps that land on a real input element (not on padding or
        between dilated elements) per output position, as XLA's cost analysis counts them (TPU
        modules write batched matmuls as convolutions whose window covers the batch with
        dilation: one real tap of each window)."""
        if rhs is None:
            return 1.0
        labels = ins.attrs.get("dim_labels", "")
        parts = labels.replace("->", "_").split("_")
        if len(parts) != 3:
            return _elems(rhs.shape) / max(rhs.shape.dims[0] if rhs.shape.dims else 1, 1)
        lhs_l, rhs_l, out_l = parts
        lhs = self.operand(ins, 0)
        i = rhs_l.find("i")
        k = float(rhs.shape.dims[i]) if 0 <= i < len(rhs.shape.dims) else 1.0
        win = _window(ins.attrs.get("window", ""))
        for n, d in enumerate(sorted(c for c in rhs_l if c.isdigit())):
            at_in, at_k, at_out = lhs_l.find(d), rhs_l.find(d), out_l.find(d)
            if lhs is None or min(at_in, at_k, at_out) < 0 or max(at_in, at_out) >= len(ins.shape.dims):
                continue
            size = rhs.shape.dims[at_k] if at_k < len(rhs.shape.dims) else 1
            w = {key: v[n] if n < len(v) else dflt for key, (v, dflt) in
                 {k2: (win.get(k2, []), dv) for k2, dv in _WINDOW_DEFAULTS.items()}.items()}  # fmt: skip
            valid = _valid_taps(lhs.shape.dims[at_in], ins.shape.dims[at_out], size, w)
            k *= valid / max(ins.shape.dims[at_out], 1)
        return k

    # --- bytes ----------------------------------------------------------------------------------
    def hbm_bytes(self, ins: Instruction) -> int:
        """Device-memory bytes a kernel reads and writes (see the module docstring)."""
        if ins.opcode in NO_HBM:
            return 0
        off = self.device.on_chip_spaces
        arrays = [a for a in ins.shape.arrays() if not a.on_host and a.memory_space not in off]
        if ins.opcode == "custom-call" and (ins.custom_call_target or "").startswith(GEMM_TARGETS):
            arrays = arrays[:1]  # a GEMM's result; its workspace (the tuple's last array) is scratch
        out = sum(a.bytes for a in arrays)
        reads = 0
        fused = self.module.computations.get(ins.called[0]) if ins.opcode == "fusion" and ins.called else None
        params = {i.parameter_number: i for i in fused.instructions if i.opcode == "parameter"} if fused else {}
        users: dict[str, list[Instruction]] = {}
        if fused is not None:
            for i in fused.instructions:
                for o in i.operands:
                    users.setdefault(o, []).append(i)
            out = self._fused_out(fused, ins, out)
        for k, name in enumerate(ins.operands):
            src = self.by_comp.get(ins.computation, {}).get(name)
            if src is None:
                continue
            size = sum(a.bytes for a in src.shape.arrays() if not a.on_host and a.memory_space not in off)
            p = params.get(k)
            if p is not None and size:
                us = users.get(p.name, [])
                if us and all(u.opcode in SLICES or _narrowing(u, p) for u in us):
                    size = min(size, sum(u.shape.bytes for u in us))
                elif us and all(u.opcode == "dynamic-update-slice" and u.operands[0] == p.name for u in us):
                    size = 0  # the buffer updated in place: only the update is written
            reads += size
        return reads + out

    def _fused_out(self, fused: Computation, ins: Instruction, out: int) -> int:
        """Bytes a fusion writes: its result, but only the update of each result that is an in-place
        ``dynamic-update-slice`` (also through a bitcast, and each element of a tuple root)."""
        by = self.by_comp[fused.name]
        root = next((i for i in fused.instructions if i.is_root), None)
        if root is None:
            return out
        elems = [by.get(o) for o in root.operands] if root.opcode == "tuple" else [root]
        shapes = ins.shape.tuple if root.opcode == "tuple" and ins.shape.tuple is not None else (ins.shape,)
        if len(elems) != len(shapes) or not any(_dus(e, by) for e in elems):
            return out
        total = 0
        for e, shape in zip(elems, shapes, strict=True):
            d = _dus(e, by)
            if d is not None and len(d.operands) > 1 and d.operands[1] in by:
                total += by[d.operands[1]].shape.bytes
            elif not shape.on_host and shape.memory_space not in self.device.on_chip_spaces:
                total += sum(a.bytes for a in shape.arrays())
        return total

    # --- time -----------------------------------------------------------------------------------
    def kernel_ns(self, ins: Instruction) -> int:
        m, v, _ = self.flops(ins)
        d = self.device
        return whole_ns(1e9 * max(m / d.matmul_flops + v / d.vector_flops, self.hbm_bytes(ins) / d.hbm_bytes_s))

    def conditional_ns(self, ins: Instruction) -> int:
        """A ``conditional`` (which branch runs is decided on the device): its costliest branch, the
        roofline times of the branch's kernels added up; its own bytes where no branch has any."""
        best = 0
        for c in ins.called:
            comp = self.module.computations.get(c)
            work = [i for i in comp.instructions if i.opcode not in FREE] if comp else []
            best = max(best, sum(self.kernel_ns(i) for i in work))
        return best or self.kernel_ns(ins)

    def collective_ns(self, ins: Instruction, payload: int) -> int:
        kind = ins.opcode.removesuffix("-start")
        if kind not in COLLECTIVES:
            kind = next((s.opcode.removesuffix("-start") for c in ins.called for s in
                         (self.module.computations[c].instructions if c in self.module.computations else [])
                         if s.opcode.removesuffix("-start") in COLLECTIVES), kind)  # fmt: skip
        n = group_size(ins, self.module)
        share = (n - 1) / n if n else 1.0
        factor = 2 * share if kind == "all-reduce" else (1.0 if kind == "collective-permute" else share)
        return whole_ns(1e9 * payload * factor / self.device.interconnect_bytes_s)


_WINDOW_DEFAULTS = {"stride": 1, "pad_lo": 0, "lhs_dilate": 1, "rhs_dilate": 1}


def _window(text: str) -> dict[str, list[int]]:
    """A convolution's ``window={size=8x16 stride=7x15 pad=7_7x15_15 lhs_dilate=8x16}`` by field
    (``pad`` as ``pad_lo``), one number per spatial dimension."""
    out: dict[str, list[int]] = {}
    for key, val in re.findall(r"(\w+)=([\d_x-]+)", text):
        if key == "pad":
            out["pad_lo"] = [int(p.split("_")[0]) for p in val.split("x")]
        elif key in _WINDOW_DEFAULTS or key == "size":
            out[key] = [int(v) for v in val.split("x")]
    return out


def _valid_taps(n_in: int, n_out: int, size: int, w: dict[str, int]) -> int:
    """(output position, window position) pairs of one spatial dimension whose input position is a
    real element: inside the (dilated) input and not between two dilated elements."""
    o = np.arange(n_out)[:, None]
    k = np.arange(size)[None, :]
    pos = o * w["stride"] - w["pad_lo"] + k * w["rhs_dilate"]
    ok = (pos >= 0) & (pos <= (n_in - 1) * w["lhs_dilate"]) & (pos % w["lhs_dilate"] == 0)
    return int(ok.sum())


def _dus(ins: Instruction | None, by: dict[str, Instruction]) -> Instruction | None:
    """*ins* when it is a dynamic-update-slice, or a bitcast of one; else None."""
    for _ in range(4):
        if ins is None or ins.opcode != "bitcast" or not ins.operands:
            break
        ins = by.get(ins.operands[0])
    return ins if ins is not None and ins.opcode == "dynamic-update-slice" else None


def _narrowing(user: Instruction, param: Instruction) -> bool:
    """A nested fusion that reads *param* and yields less than it (a slice of it: a TPU wraps its
    dynamic slices of a stacked buffer in a nested loop fusion)."""
    return user.opcode == "fusion" and user.shape.tuple is None and user.shape.bytes < param.shape.bytes


def group_size(ins: Instruction, module: Module) -> int | None:
    """Devices in one replica group (``{{0,1,2,3}}`` or the iota form ``[2,4]<=[8]``), looking inside
    an async wrapper; None when the instruction does not say."""
    cands = [ins] + [s for c in ins.called for s in (module.computations[c].instructions
                                                     if c in module.computations else [])]  # fmt: skip
    for i in cands:
        g = i.attrs.get("replica_groups")
        if not g:
            continue
        if g.startswith("["):
            nums = _DIMS.findall(g.split("]")[0])
            return int(nums[-1]) if nums else None
        first = g.strip("{}").split("}")[0]
        nums = _DIMS.findall(first)
        return len(nums) or None
    return None


def _matmul_weight(dtype: str) -> float:
    """How many bf16-peak FLOPs one FLOP of a dot in *dtype* costs."""
    if dtype in ("bf16", "f16"):
        return 1.0
    if dtype.startswith("f8") or dtype.startswith("f4"):
        return 0.5
    if dtype == "f32":
        return 2.0  # TF32 tensor cores: half the bf16 rate
    return 32.0  # f64 / integer dots: far from the tensor-core peak


def totals(schedule: Schedule, device: Device) -> dict[str, float]:
    """FLOPs (matmul and other) and HBM bytes of one step: every compute execution of *schedule*
    added up (the numbers to hold against XLA's own cost analysis of the module)."""
    c = Costs(schedule.module_ref, device)
    out = {"matmul_flops": 0.0, "other_flops": 0.0, "hbm_bytes": 0.0}
    for op in schedule.ops:
        if op.kind != "compute":
            continue
        ins = schedule.instructions.get(op.name)
        if ins is None:
            continue
        _, v, r = c.flops(ins)
        out["matmul_flops"] += r
        out["other_flops"] += v
        out["hbm_bytes"] += c.hbm_bytes(ins)
    return out


def op_classes(schedule: Schedule) -> dict[str, str]:
    """``matmul``, ``reduction``, ``fusion``, ``collective``, ``copy`` or ``other`` for every instruction
    that runs in *schedule* (the classes the accuracy is reported by); free instructions and dones are
    left out.  ``reduction``: a fusion that reduces (softmax, norms, sums), apart from the other
    fusions because its efficiency is the one that differs between accelerators (benchmarks/README.md,
    "one step on two accelerators": the H200's 2.98 against 1.41 for its other fusions)."""
    out: dict[str, str] = {}
    for op in schedule.ops:
        if op.name in out or op.kind in ("free", "done", "region"):
            continue
        ins = schedule.instructions.get(op.name)
        if op.kind == "copy" or op.stream in ("d2h", "h2d"):
            out[op.name] = "copy"
        elif op.kind == "collective" or op.stream == "collective":
            out[op.name] = "collective"
        elif ins is None:
            out[op.name] = "other"
        elif ins.opcode in ("dot", "convolution") or (ins.custom_call_target or "").startswith(("__cublas", "__cudnn")):
            out[op.name] = "matmul"
        elif ins.opcode == "fusion":
            comp = schedule.module_ref.computations.get(ins.called[0]) if ins.called else None
            inner = {i.opcode for i in comp.instructions} if comp is not None else set()
            out[op.name] = (
                "matmul" if inner & {"dot", "convolution"} else "reduction" if "reduce" in inner else "fusion"
            )
        else:
            out[op.name] = "other"
    return out


def op_class(schedule: Schedule, name: str) -> str:
    """One instruction's class (``op_classes``; for many, call that once)."""
    return op_classes(schedule).get(name, "other")


# XLA's own estimate of an instruction's time, taken per op class where the compiled module carries
# one (plan and tune compile with --xla_gpu_collect_cost_model_stats): a GEMM's by XLA's latency
# estimator ("sol"), a fusion that reduces by its tiled indexing cost model.  On the H200 example's
# GEMMs the first was 1.01x the measured time (median of 227; the roofline 0.81x), on its softmax
# fusions the second 0.48x (the roofline 0.25x); XLA's other estimates were 13-47x off on GEMMs and
# no nearer than the roofline on the other fusions (benchmarks/README.md, "XLA's own estimates").
XLA_MODELS = {"matmul": "sol", "reduction": "indexing-cost-model"}
# an estimate is taken between the roofline (a lower bound on the target's peaks) and this many
# times it: the most any instruction class ran over its roofline on a real device was 4.2x (the
# H200's softmax); one f32 GEMM's "sol" was 84x its roofline and 54x its measured time
XLA_MAX_OVER_ROOFLINE = 4.0


def with_xla(schedule: Schedule, roof: dict[str, int], launch_ns: int = 0) -> tuple[dict[str, int], list[str]]:
    """*roof* (``costs`` without XLA's estimates) with XLA's own estimate in place of the roofline
    where the module carries one of its class's model (``XLA_MODELS``) above the roofline and at most
    ``XLA_MAX_OVER_ROOFLINE`` times it (*launch_ns* added, as to *roof*'s kernels); and the instructions
    so costed."""
    if not any(i.xla_us for i in schedule.instructions.values()):
        return roof, []
    classes = op_classes(schedule)
    out, taken = dict(roof), []
    for name, ns in roof.items():  # each an instruction of the schedule (costs skips the others)
        model = XLA_MODELS.get(classes.get(name))
        if model is None:
            continue
        us = schedule.instructions[name].xla_us.get(model)
        if us is None:
            continue
        est = whole_ns(us * 1e3) + launch_ns
        if ns < est <= XLA_MAX_OVER_ROOFLINE * ns:  # a kernel the roofline prices at nothing takes none
            out[name] = est
            taken.append(name)
    return out, taken


def costs(schedule: Schedule, device: Device, launch_ns: int = 0, xla: bool = True) -> dict[str, int]:
    """Roofline ns per execution of every instruction in *schedule* that runs on a stream, host
    copies left out (the simulator prices them over a link); *launch_ns* is added to each kernel.
    With *xla*, XLA's own estimate where the module carries one (``with_xla``)."""
    roof = _roofline_costs(schedule, device, launch_ns)
    return with_xla(schedule, roof, launch_ns)[0] if xla else roof


def _roofline_costs(schedule: Schedule, device: Device, launch_ns: int) -> dict[str, int]:
    c = Costs(schedule.module_ref, device)
    out: dict[str, int] = {}
    for op in schedule.ops:
        if op.name in out or op.kind in ("free", "done", "copy", "region") or op.stream in ("d2h", "h2d"):
            continue
        ins = schedule.instructions.get(op.name)
        if ins is None:
            continue
        if op.kind == "collective" or op.stream == "collective":
            out[op.name] = c.collective_ns(ins, op.bytes)
        elif op.opcode == "conditional":
            out[op.name] = c.conditional_ns(ins) + launch_ns
        else:
            out[op.name] = c.kernel_ns(ins) + launch_ns
    return out
