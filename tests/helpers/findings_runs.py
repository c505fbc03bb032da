"""Small nsys-schema runs for the findings' rules: launched ops, waited copies, steps, a run folder."""

from __future__ import annotations

import json
from pathlib import Path

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.stored.folder import manifest_of
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace

MIB = 1 << 20
H100 = "NVIDIA H100 80GB HBM3"  # PCIe Gen5 x16: 63 GB/s per direction


TID = 100


def launched(b: ExportBuilder, t: int, op: str, *args, **kw) -> int:
    corr = getattr(b, op)(*args, **kw)
    b.runtime(t, t + 5, corr, name={"kernel": "cuLaunchKernel", "copy": "cuMemcpyAsync"}[op], tid=TID)
    return corr


def waited_copy(b: ExportBuilder, copy: tuple[int, int], kernel: tuple[int, int], launch: int, **copy_kw) -> None:
    """A copy launched at 0 running over *copy*, recorded on its stream; the compute stream waits
    for it, and a kernel launched at *launch* runs over *kernel* (its slack after the copy: 0 when it
    starts as the copy ends)."""
    cls, nbytes = copy_kw.pop("cls", "h2d"), copy_kw.pop("nbytes", MIB)
    launched(b, 0, "copy", *copy, cls, nbytes, stream=20, **copy_kw)
    b.event_record(50, 1, stream=20, tid=TID)
    b.stream_wait(60, 1, stream=7, tid=TID)
    launched(b, launch, "kernel", *kernel, "consumer")


def write_run(tmp_path: Path, b: ExportBuilder, manifest: dict | None = None, name: str = "run") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    if manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return b.write(folder / "trace.sqlite")


def findings_of(path: Path, **thresholds) -> dict:
    cfg = FindingsConfig({**FindingsConfig().thresholds, **thresholds})
    trace = open_trace(path)
    return run_findings(trace, manifest_of(trace.path), cfg, Breakdown(trace))


def fired(doc: dict, rule: str) -> list[dict]:
    return [f for f in doc["findings"] if f["id"] == rule]


def skipped(doc: dict, rule: str) -> str | None:
    return next((s["why"] for s in doc["skipped"] if s["rule"] == rule), None)


def steps(b: ExportBuilder, spans: list[tuple[int, int]]) -> None:
    b.domain(1, "profile-step", tid=TID)
    for i, (s, e) in enumerate(spans):
        b.nvtx(s, e, f"step={i}", tid=TID, domain_id=1)


def edges_case(b: ExportBuilder, k0_stream: int = 20, h2d_stream: int = 20) -> None:
    """One step, [0, 1000) us: k0 [0, 150) us; an h2d copy [150, 190) us that K (stream 7, launched at
    5 us) waits for; a 1 ns d2h copy at 10 us, beside k0 (in the first edge); a d2h copy [500, 510) us
    that k2 (stream 22) waits for, stalled 4 us in the middle.  The h2d copy is queued behind k0 when
    both are on one stream (the default, 20)."""
    steps(b, [(0, 1_000_000)])
    launched(b, 1_000, "kernel", 0, 150_000, "k0", stream=k0_stream)
    launched(b, 2_000, "copy", 150_000, 190_000, "h2d", MIB, stream=h2d_stream)
    b.event_record(3_000, 1, stream=h2d_stream, tid=TID)
    b.stream_wait(4_000, 1, stream=7, tid=TID)
    launched(b, 5_000, "kernel", 190_000, 1_000_000, "K")  # ready at its launch, 5 us: waits for the copy
    launched(b, 6_000, "copy", 10_000, 10_001, "d2h", 1024, stream=21)  # 1 ns, in the first edge, beside k0
    launched(b, 7_000, "copy", 500_000, 510_000, "d2h", MIB, stream=21)  # in the middle, beside K
    b.event_record(8_000, 2, stream=21, tid=TID)
    b.stream_wait(9_000, 2, stream=22, tid=TID)
    launched(b, 506_000, "kernel", 510_000, 520_000, "k2", stream=22)  # stalled 4 us by it, in the middle


def offload_run(
    tmp_path: Path, per_step: int, evidence: str = "compiled", backend: str = "gpu", policy: str = "offload_qkv"
) -> Path:
    """Two steps each moving *per_step* bytes to the host; what says the step offloads: *evidence*
    ``compiled`` (its program places 2 values in host memory), ``not-compiled`` (its program places
    none), ``declared`` (MaxText's remat_policy=qkv_proj_offloaded on the command line), ``nothing``."""
    b = ExportBuilder()
    steps(b, [(0, 10_000), (20_000, 30_000)])
    for t in (0, 20_000):
        launched(b, t + 10, "copy", t + 100, t + 200, "d2h", per_step)
        launched(b, t + 20, "kernel", t + 100, t + 900, "k")
    manifest = {
        "policy": policy,
        "devices": [{"id": 0, "kind": "NVIDIA H100 80GB HBM3" if backend == "gpu" else "cpu", "platform": backend}],
        "versions": {"jax": "0.10.2", "jaxlib": "0.10.2"},
        "program": ["python", "train.py"] + (["remat_policy=qkv_proj_offloaded"] if evidence == "declared" else []),
    }
    path = write_run(tmp_path, b, manifest, name=f"{policy}-{per_step}-{backend}-{evidence}")
    if evidence in ("compiled", "not-compiled"):
        placed = 2 if evidence == "compiled" else 0
        plan = {"host_placements": {"entry_parameters": placed, "entry_outputs": 0, "instructions": 0}, "movements": []}
        module = {"name": "jit_step", "id": 3, "label": "module_0003.jit_step", "plan": plan, "notes": []}
        compiled = {"modules": [module], "step_program": {"name": "jit_step", "program_id": 3}, "chosen_by": "x"}
        (path.parent / "compiled.json").write_text(json.dumps(compiled))
    return path


def exposed_run(tmp_path: Path, exposed: int, flags: str, name: str) -> Path:
    # one 10 ms copy, hidden by a kernel but for `exposed` ns
    b = ExportBuilder()
    b.copy(0, 10_000_000, "d2h", MIB)
    b.kernel(0, 10_000_000 - exposed, "k")
    return write_run(tmp_path, b, {"versions": {"jax": "0.10.2"}, "xla_flags": {"final": flags}}, name=name)


def boundary_run(tmp_path: Path, at_edges: bool, flags: str | None = None) -> Path:
    b = ExportBuilder()
    steps(b, [(0, 200_000)])
    if at_edges:  # h2d [0,5000) before the kernel, d2h [95000,100000) after it: 10 us exposed, all at the edges
        launched(b, 10, "copy", 0, 5_000, "h2d", MIB, stream=20)
        launched(b, 20, "kernel", 5_000, 95_000, "k")
        launched(b, 30, "copy", 95_000, 100_000, "d2h", MIB, stream=20)
    else:  # a 10 us copy exposed between two kernels, in the middle
        launched(b, 10, "kernel", 0, 45_000, "k")
        launched(b, 20, "copy", 45_000, 55_000, "d2h", MIB, stream=20)
        launched(b, 30, "kernel", 55_000, 100_000, "k")
    manifest = None if flags is None else {"xla_flags": {"final": flags}}
    return write_run(tmp_path, b, manifest, name=f"edges-{at_edges}-{flags}-{len(list(tmp_path.iterdir()))}")


def stall_layers(tmp_path: Path, stalls: list[int], name: str) -> Path:
    """One layer per entry; its h2d copy makes a kernel on stream 7 wait that many ns."""
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i, stall in enumerate(stalls):
        t = i * 1_000_000
        b.nvtx(t, t + 500, f"layer={i}", tid=TID, domain_id=1)
        launched(b, t + 100, "copy", t + 1000, t + 200_000, "h2d", MIB, stream=20)
        b.event_record(t + 150, 10 + i, stream=20, tid=TID)
        b.stream_wait(t + 160, 10 + i, stream=7, tid=TID)
        # nothing before the kernel on stream 7 in this layer: ready = launch; dep = copy end
        launch = t + 200_000 - stall
        launched(b, launch, "kernel", t + 200_000, t + 210_000, "consumer")
    return write_run(tmp_path, b, name=name)


def warmup_in_capture(tmp_path: Path, name: str = "run") -> tuple[Path, dict]:
    """A run whose capture holds a 5 us warm-up=0 range before step=0, and its findings with the
    warm-up ranges read as steps (``--step-range '^(step|warmup)='``)."""
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    b.nvtx(0, 5000, "warmup=0", tid=TID, domain_id=1)
    b.nvtx(6000, 7000, "step=0", tid=TID, domain_id=1)
    b.kernel(0, 10, "k")
    path = write_run(tmp_path, b, name=name)
    trace = open_trace(path)
    return path, run_findings(trace, None, FindingsConfig(), Breakdown(trace, step_range="^(step|warmup)="))


def slowed_group(
    b: ExportBuilder, name: str, slow: int, t0: int = 0, stream: int = 9, grid: tuple[int, int, int] = (1, 1, 1)
) -> None:
    """3 kernels of *name* alone (1000 ns), then 3 wholly under a d2h copy (*slow* ns), launched on *grid*."""
    for i in range(3):
        t = t0 + i * 10_000
        b.kernel(t, t + 1000, name, stream=stream, grid=grid)
        u = t0 + 100_000 + i * 10_000
        b.kernel(u, u + slow, name, stream=stream, grid=grid)
        b.copy(u, u + slow, "d2h", MIB, stream=20)


def median_group(b: ExportBuilder, name: str = "k", t0: int = 0) -> None:
    """3 kernels of *name* alone (0.8, 1.0 and 1.2 us: lower median 1 us) from *t0*, then 3 of 1.5 us
    from *t0* + 10 us, 10 us apart, each beside a 1 us d2h copy."""
    for i in range(3):
        t = t0 + i * 2_000
        b.kernel(t, t + 800 + 200 * i, name)
        u = t0 + 10_000 + i * 10_000
        b.kernel(u, u + 1_500, name)
        b.copy(u, u + 1_000, "d2h", MIB)
