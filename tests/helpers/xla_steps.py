"""XLA module executions under the TSL domain's ranges, each launching one kernel."""

from __future__ import annotations

from profiler.synthetic.export import ExportBuilder

A, B = 100, 200  # the step loop's thread; a compiling thread
TSL, PS = 2, 1


def new() -> ExportBuilder:
    b = ExportBuilder()
    b.gpu(0)
    b.domain(PS, "profile-step", tid=A)
    b.domain(TSL, "TSL", tid=A)
    return b


def execution(b: ExportBuilder, t: int, module: str, pid_: int | None, gpu: tuple[int, int], tid: int = A) -> None:
    """One XlaModule execution at host time [t, t+100) launching one kernel that runs at *gpu*."""
    fields = f"hlo_module={module}" + (f",program_id={pid_}" if pid_ is not None else "")
    b.nvtx(t, t + 100, f"XlaModule:#{fields}#", tid=tid, domain_id=TSL)
    b.nvtx(t + 1, t + 90, "Thunk:#hlo_op=fusion.1#", tid=tid, domain_id=TSL)
    corr = b.kernel(*gpu, "fusion")
    b.runtime(t + 10, t + 15, corr, name="cuLaunchKernel", tid=tid)
