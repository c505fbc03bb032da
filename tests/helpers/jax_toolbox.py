"""Exports built from the real XLA ranges of NVIDIA JAX-Toolbox's nsys-jax test archives
(``../shared/traces/jax-toolbox/``: Pax FSDP on A100s, see its README).

Every NVTX row is one the archive's ``nvtx_pushpop_trace`` holds: its real name (split into
domain and message), host start and end, process and thread.  GPU ops are what the archive's
``nvtx_gpu_proj_trace`` says each range launched: the ops a range launched itself (its
``NumGPUOps`` less its children's) are kernels launched at its start on its thread, spread over
its projection onto the GPU.  The archives hold no kernel names and no copies.
"""

from __future__ import annotations

import lzma
import zipfile
from io import BytesIO
from pathlib import Path

import polars as pl

from profiler.synthetic.export import ExportBuilder

ARCHIVES = ("NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip", "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc1.zip")
PUSHPOP = "report_nvtx_pushpop_trace.csv.xz"
PROJECTION = "nvtx_gpu_proj_trace/trace.parquet"


def _member(zf: zipfile.ZipFile, suffix: str) -> bytes:
    (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
    return zf.read(name)


def read_archive(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(host ranges, GPU projection) of one archive, read from the zip where it lies."""
    with zipfile.ZipFile(path) as zf:
        host = pl.read_csv(BytesIO(lzma.decompress(_member(zf, PUSHPOP))))
        proj = pl.read_parquet(BytesIO(_member(zf, PROJECTION)))
    proj = proj.filter(pl.col("RangeId").is_not_null()).with_columns(
        pl.col("RangeId").cast(pl.Int64), pl.col("ParentId").cast(pl.Int64)
    )
    return host, proj


def archive_export(path: Path) -> ExportBuilder:
    """An nsys-schema export holding the archive's ranges and the GPU ops they launched."""
    host, proj = read_archive(path)
    host = host.with_columns(
        pl.col("Name").str.extract(r"^([^:]*):", 1).alias("domain"),
        pl.col("Name").str.replace(r"^[^:]*:", "").alias("text"),
    )
    b = ExportBuilder()
    b.gpu(0, "NVIDIA A100-SXM4-40GB")
    pid, tid = host["PID"][0], host["TID"][0]
    domains = {d: i + 1 for i, d in enumerate(sorted(host["domain"].drop_nulls().unique()))}
    for d, i in domains.items():
        b.domain(i, d, pid=pid, tid=tid)
    for start, end, text, dom, p, t in host.select(
        "Start (ns)", "End (ns)", "text", "domain", "PID", "TID"
    ).iter_rows():
        b.nvtx(start, end, text, pid=p, tid=t, domain_id=domains.get(dom, 0), registered=True)
    children = proj.group_by("ParentId").agg(pl.col("NumGPUOps").sum().alias("child_ops"))
    own = (
        proj.join(children, left_on="RangeId", right_on="ParentId", how="left")
        .with_columns((pl.col("NumGPUOps") - pl.col("child_ops").fill_null(0)).alias("own"))
        .filter(pl.col("own") > 0)
        .join(host.select("RangeId", "Start (ns)", "TID", "PID"), on="RangeId")
    )
    for name, n, p0, pd, launch, p, t in own.select(
        "Name", "own", "Projected Start", "Projected Duration", "Start (ns)", "PID", "TID"
    ).iter_rows():
        kernel = "ncclDevKernel_Generic" if name.startswith("NCCL:") else "xla_fusion_kernel"
        step = max(pd // n, 1)
        for k in range(n):
            corr = b.kernel(p0 + k * step, p0 + (k + 1) * step, kernel, pid=p)
            b.runtime(launch, launch + 1, corr, name="cuLaunchKernel", pid=p, tid=t)
    return b
