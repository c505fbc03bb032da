"""Exports of policy runs with known steps, copies and memory."""

from __future__ import annotations

from profiler.synthetic.export import ExportBuilder
from tests.helpers.paths import AOT_HLO

AOT = AOT_HLO


MiB = 2**20


A = 100


STEP_NS = 1_000_000


TSL = 2  # the domain id of XLA's NVTX domain in these exports


def launch(b: ExportBuilder, t: int, kind: str, nbytes: int) -> None:
    corr = b.copy(t + 5, t + 45, kind, nbytes)
    b.runtime(t, t + 5, corr, name="cudaMemcpyAsync", tid=A)


def step_trace(b: ExportBuilder, t0: int, s: int) -> None:
    """One step of the plan's module: copies inside the thunks of the real instruction names.

    layer_1 goes out and comes back as planned; layer_0's activation never goes out
    (copy-start.4 is absent) but comes back; an extra 1 MiB leaves inside fusion.9.
    """
    b.nvtx(t0, t0 + STEP_NS, f"step={s}", tid=A, domain_id=1)
    b.nvtx(t0 + 10, t0 + STEP_NS - 10, "XlaModule:#hlo_module=jit_train_step,program_id=1#", tid=A, domain_id=TSL)
    for k, (hlo, kind) in enumerate(
        [("copy-start.1.0", "d2h"), ("copy-start.2.0", "h2d"), ("copy-start.3.0", "h2d"), ("fusion.9", "d2h")]
    ):
        t = t0 + 1000 + 1000 * k
        name = f"Thunk:#hlo_op={hlo}#" if hlo.startswith("copy") else f"Thunk:#name=jit(s)/x,hlo_op={hlo}#"
        b.nvtx(t, t + 100, name, tid=A, domain_id=TSL)  # XLA's ranges are in its own domain
        launch(b, t + 1, kind, 4 * MiB if hlo.startswith("copy") else MiB)
