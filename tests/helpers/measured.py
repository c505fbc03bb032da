"""The Pax archives read once, and run folders whose export ran a compiled step."""

from __future__ import annotations

import functools
from pathlib import Path

from profiler.predict.measured import load
from profiler.synthetic.export import ExportBuilder
from profiler.xla import pgle
from profiler.xla.compiled import load_module
from tests.helpers.paths import SHARED_TRACES

TID, TSL = 100, 2


def thunk_export(
    instrs: list[tuple[str, int, str, int]], executions: int = 3, module: str = "jit_step", slower: int = 0
) -> ExportBuilder:
    """*executions* runs of *module*; each runs *instrs* (name, ns, "kernel"/"d2h"/"h2d", bytes) one
    after the other, each under its thunk range; execution k adds k x *slower* ns to every kernel."""
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    b.domain(TSL, "TSL", tid=TID)
    t = 1_000_000
    for k in range(executions):
        host, gpu = t, t + 5_000
        for name, ns, kind, nbytes in instrs:
            dur = ns + (k * slower if kind == "kernel" else 0)
            b.nvtx(host, host + 100, f"Thunk:#name=jit(step)/x,hlo_op={name}#", tid=TID, domain_id=TSL)
            corr = b.kernel(gpu, gpu + dur, f"k_{name}") if kind == "kernel" else b.copy(gpu, gpu + dur, kind, nbytes)
            b.runtime(host + 10, host + 20, corr, name="cuLaunchKernel", tid=TID)
            host += 200
            gpu += dur + 1_000
        b.nvtx(t, max(host, gpu) + 10, f"XlaModule:#hlo_module={module},program_id=7#", tid=TID, domain_id=TSL)
        t = max(host, gpu) + 100_000
    return b


@functools.cache
def pax(archive: str = "proc0"):
    """A real Pax archive, read once for all the tests here (reading one takes seconds; nothing changes it)."""
    return load(SHARED_TRACES / f"jax-toolbox/NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_{archive}.zip")


def measured_run(hlo: Path, folder: Path, compute_ns: int, copy_ns: int) -> tuple[Path, list]:
    """A run folder (trace.sqlite + xla_dump/) whose export ran the compiled step *hlo* twice, its
    instructions one after another under their thunk ranges: kernels of *compute_ns*, copies of 1 MiB
    taking *copy_ns*; returns the folder and the instructions measured."""
    module = load_module(hlo)[0]
    entry = module.computations[module.entry].instructions
    work = [i for i in entry if i.opcode not in pgle.NO_WORK or i.opcode == "copy-start"]
    instrs = [(i.name, copy_ns, pgle.schedule_copies(module)[0]["direction"], 1 << 20) if i.opcode == "copy-start"
              else (i.name, compute_ns, "kernel", 0) for i in work]  # fmt: skip
    folder.mkdir()
    thunk_export(instrs, executions=2, module=module.name).write(folder / "trace.sqlite")
    (folder / "xla_dump").mkdir()
    (folder / "xla_dump" / f"module_0007.{module.name}.sm_9.0_gpu_after_optimizations.txt").write_text(hlo.read_text())
    return folder, work
