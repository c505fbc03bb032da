"""GPU target descriptions for compiling without a GPU, and device peak FLOP/s for MFU.

A target description is XLA's ``GpuTargetConfigProto`` in text form, what
``jax.experimental.topologies.get_topology_desc(..., target_config=TEXT)``
takes.  The ones here are written from public device facts: SM count, compute
capability, memory size and bandwidth, boost clock, L2 size from NVIDIA's
product datasheets (H100 SXM5, H200 SXM, B200 in DGX B200, A100 SXM4); per-SM
and per-block limits from the CUDA C++ Programming Guide's table of compute
capabilities.  Memory sizes are the devices' real capacity, the total that
``nvidia-smi`` reports (an H100 80GB: 81,559 MiB = 85,520,809,984 bytes, not
80 x 10^9; H200 143,771 MiB; B200 183,359 MiB; A100 80GB 81,920 MiB).  The
compiler uses them for its cost models; the offload rewrite does not depend on
them.  A description of your own device is one command on a machine that has
it: ``jax.lib.xla_client.get_topology_for_devices(jax.local_devices()).target_config``
(pass the file with ``--target FILE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuTarget:
    key: str
    description: str  # what JAX reports as device_kind
    sm_count: int
    cc_major: int
    cc_minor: int
    memory_bytes: int
    bandwidth_bytes_s: float
    clock_ghz: float
    l2_bytes: int
    fp32_lanes_per_sm: int
    smem_per_sm: int
    smem_per_block_optin: int
    peak_bf16_tflops: float  # dense
    peak_fp32_tflops: float

    def spec_text(self) -> str:
        """The ``GpuTargetConfigProto`` text XLA takes."""
        return "\n".join(
            [
                f"# {self.description}: written by profile-step from public device facts",
                "gpu_device_info {",
                "  threads_per_block_limit: 1024",
                "  threads_per_warp: 32",
                "  shared_memory_per_block: 49152",
                f"  shared_memory_per_core: {self.smem_per_sm}",
                "  threads_per_core_limit: 2048",
                f"  core_count: {self.sm_count}",
                f"  fpus_per_core: {self.fp32_lanes_per_sm}",
                "  block_dim_limit_x: 2147483647",
                "  block_dim_limit_y: 65535",
                "  block_dim_limit_z: 65535",
                f"  memory_bandwidth: {int(self.bandwidth_bytes_s)}",
                f"  l2_cache_size: {self.l2_bytes}",
                f"  clock_rate_ghz: {self.clock_ghz}",
                f"  device_memory_size: {self.memory_bytes}",
                f"  shared_memory_per_block_optin: {self.smem_per_block_optin}",
                "  cuda_compute_capability {",
                f"    major: {self.cc_major}",
                f"    minor: {self.cc_minor}",
                "  }",
                "  registers_per_core_limit: 65536",
                "  registers_per_block_limit: 65536",
                "}",
                'platform_name: "CUDA"',
                "dnn_version_info {",
                "  major: 9",
                "  minor: 8",
                "}",
                "runtime_version {",
                "  major: 12",
                "  minor: 9",
                "}",
                f'device_description_str: "{self.description}"',
                "",
            ]
        )


MiB = 2**20
TARGETS: dict[str, GpuTarget] = {
    t.key: t
    for t in (
        GpuTarget("h100", "NVIDIA H100 80GB HBM3", 132, 9, 0, 81559 * MiB, 3.35e12, 1.98, 50 * 2**20, 128,
                  233472, 232448, 989.4, 66.9),
        GpuTarget("h200", "NVIDIA H200", 132, 9, 0, 143771 * MiB, 4.8e12, 1.98, 50 * 2**20, 128,
                  233472, 232448, 989.4, 66.9),
        GpuTarget("b200", "NVIDIA B200", 148, 10, 0, 183359 * MiB, 8.0e12, 1.965, 126 * 2**20, 128,
                  233472, 232448, 2250.0, 80.0),
        GpuTarget("a100", "NVIDIA A100-SXM4-80GB", 108, 8, 0, 81920 * MiB, 2.039e12, 1.41, 40 * 2**20, 64,
                  167936, 166912, 312.0, 19.5),
    )
}  # fmt: skip


def sm_count(name: str | None) -> int | None:
    """The SMs of the built-in GPU target of that name (``NVIDIA H200``), None for any other name."""
    key = (name or "").lower()
    return next((t.sm_count for t in TARGETS.values() if t.description.lower() == key), None)


@dataclass(frozen=True)
class TpuTarget:
    """A TPU chip as the roofline prices it (``profiler.predict.roofline.device_from_spec``). XLA takes
    no target description for a TPU and nothing here compiles for one: a TPU's program is the
    optimized HLO its recording dumped (``plan --from``)."""

    key: str
    description: str  # what JAX reports as device_kind
    memory_bytes: int
    bandwidth_bytes_s: float
    peak_bf16_tflops: float  # dense, the MXUs
    vector_tflops: float  # the VPU's elementwise rate
    interconnect_bytes_s: float  # ICI, per chip
    sources: str

    def spec_text(self) -> str:
        """The description as a small text (``platform_name: "TPU"``), read back by the roofline."""
        return "\n".join(
            [
                f"# {self.description}: written by profile-step; {self.sources}",
                'platform_name: "TPU"',
                f"memory_bandwidth: {int(self.bandwidth_bytes_s)}",
                f"device_memory_size: {self.memory_bytes}",
                f"peak_bf16_flops: {int(self.peak_bf16_tflops * 1e12)}",
                f"vector_flops: {int(self.vector_tflops * 1e12)}",
                f"interconnect_bandwidth: {int(self.interconnect_bytes_s)}",
                f'device_description_str: "{self.description}"',
                "",
            ]
        )


# TPU v5e (one chip): Google Cloud's "TPU v5e" system architecture page: 197 TFLOP/s bf16 peak,
# 16 GiB HBM2 at 819 GB/s, ICI 1,600 Gbps (200 GB/s) per chip. The chip this project recorded on
# reported 15.75 GiB usable (the recordings' OOM message) and reached 167 TFLOP/s on an 8192^3 bf16
# matmul (85% of the peak; measured on the device machine, not used here: the roofline takes the
# spec). Google publishes no VPU rate: the elementwise rate is the bf16 peak / 16, the same ratio the
# GPU descriptions assume when theirs is unknown (roofline.device_from_spec), an assumption that
# only matters for compute-bound elementwise fusions (the recordings' loop fusions are bound by HBM).
TPU_TARGETS: dict[str, TpuTarget] = {
    t.key: t
    for t in (
        TpuTarget("tpu-v5e", "TPU v5 lite", 16 * 2**30, 819e9, 197.0, 197.0 / 16, 200e9,
                  "Google Cloud TPU v5e spec: 197 TFLOP/s bf16, HBM 819 GB/s, ICI 1,600 Gbps"),
    )
}  # fmt: skip

# Dense BF16 peak FLOP/s per device, by what JAX reports as device_kind (first match wins):
# the denominator of MFU.  Sources: NVIDIA datasheets (H100 SXM5 989.4 TFLOP/s, H100 PCIe 756,
# H200 989.4, B200 2250, GB200 2500 per GPU, A100 312, L4 121, L40S 362; Google: TPU v5e 197).  Override with
# --peak-tflops.
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100", 989.4),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("TPU v5 lite", 197.0),  # TPU v5e (Google Cloud's spec)
)


def peak_source(device_kind: str | None) -> str:
    """Where ``PEAK_TFLOPS``'s number for a device kind comes from (its comment above)."""
    return "Google Cloud's TPU v5e spec" if "tpu" in (device_kind or "").lower() else "NVIDIA's datasheet"


def peak_tflops(device_kind: str | None) -> float | None:
    """The dense BF16 peak of a device kind, or None when it is not in the table (a CPU)."""
    if not device_kind:
        return None
    for key, value in PEAK_TFLOPS:
        if key.lower() in device_kind.lower():
            return value
    return None


def resolve(target: str, priced_only: bool = False) -> tuple[str, str, GpuTarget | None]:
    """(label, spec text, built-in target or None) for a name in TARGETS or a spec file."""
    key = target.lower()
    if key in TARGETS:
        t = TARGETS[key]
        return t.description, t.spec_text(), t
    if key in TPU_TARGETS:  # priced only (plan --from): nothing compiles for it
        if not priced_only:
            raise ValueError(f"{target} is a TPU: nothing compiles for it here; it prices a TPU's recorded "
                             f"program (plan --from RUN --target {key})")  # fmt: skip
        return TPU_TARGETS[key].description, TPU_TARGETS[key].spec_text(), None
    path = Path(target)
    if path.is_file():
        text = path.read_text(errors="replace")
        if "gpu_device_info" not in text:
            raise ValueError(f"{target}: not a GpuTargetConfigProto text file (no gpu_device_info)")
        label = path.stem
        for line in text.splitlines():
            if line.strip().startswith("device_description_str:"):
                label = line.split(":", 1)[1].strip().strip('"') or label
        return label, text, None
    raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)} or a GpuTargetConfigProto text file"
                     f" ({', '.join(TPU_TARGETS)}: with plan --from a TPU recording)")  # fmt: skip


def memory_of(spec_text: str) -> int | None:
    """``device_memory_size`` of a spec text."""
    for line in spec_text.splitlines():
        s = line.strip()
        if s.startswith("device_memory_size:"):
            try:
                return int(s.split(":", 1)[1].strip())
            except ValueError:
                return None
    return None
