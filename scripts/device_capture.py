"""On a lent GPU machine: profile examples/train.py under several offload policies with profile-step
(nsys), inside a fixed time budget, packing each run into $OUT as soon as it ends (what is there
comes back even when the call runs out of time).

    python3 scripts/device_capture.py [--tiny] [--budget SECONDS]

``scripts/device_capture.sh`` unpacks the carried nsys and nvtx wheel first, then runs this.  By
default every run is recorded with ``jax.profiler`` (XLA's command buffers off, so that each kernel
keeps its instruction): on 2026-12-04 the carried Nsight Systems 2023.4.4 lost the CUDA activity of
the H200's CUDA 13 driver (17 kernels of a whole run; ``sample_traces/h200-example/README.md``), at a
cost of 140 s of device time.  ``--nsys`` tries nsys first again (a newer carried nsys, say); when its
first run records no GPU kernel the remaining policies fall back to ``jax.profiler``.  Bring the
results home with ``scripts/import_device_capture.py``.  At most 8 files come back: one ``.tar.xz``
per run, ``jax_trace.tar.xz`` and ``capture.log``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FULL = [  # d 4096, MLP 16384, 8 layers, 8192 tokens, bf16: about 1.6 B parameters, copies of 200 MB a layer
    "--layers", "8", "--d-model", "4096", "--heads", "32", "--ffn", "16384",
    "--seq", "2048", "--batch", "4", "--dtype", "bfloat16", "--steps", "3", "--warmup", "2",
]  # fmt: skip
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "256", "--seq", "32", "--batch", "2"]
LHS_PIPELINED = ["--xla_gpu_enable_latency_hiding_scheduler=true", "--xla_gpu_enable_pipelined_host_offloading=true"]
# (label, policy, extra XLA flags, extra script arguments), most wanted first
RUNS = [
    ("offload_qkv", "offload_qkv", [], []),
    ("none", "none", [], []),
    ("remat", "remat", [], []),
    ("offload_qkv-scan", "offload_qkv", [], ["--scan"]),
    ("offload_mlp", "offload_mlp", [], []),
    ("offload_qkv-lhs-pipelined", "offload_qkv", LHS_PIPELINED, []),
    ("offload_qkv-scan-lhs-pipelined", "offload_qkv", LHS_PIPELINED, ["--scan"]),
    ("offload_all", "offload_all", [], []),
]
RESERVE_S = 25  # kept for packing after the last run


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.monotonic()

    def __call__(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {text}"
        print(line, flush=True)
        with self.path.open("a") as f:
            f.write(line + "\n")


def run_group(cmd: list[str], timeout: float, log: Log, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run *cmd* in its own process group; on timeout interrupt the whole group, then kill it."""
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
        )
    except OSError as exc:
        return 127, str(exc)
    try:
        out, _ = proc.communicate(timeout=max(timeout, 1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        log(f"timed out after {timeout:.0f}s: interrupting {cmd[:4]}...")
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return 124, out


def gpu_rows(sqlite: Path) -> dict[str, int]:
    """How many kernels and copies an export holds (0 where the table is missing)."""
    out = {}
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS"):
            try:
                out[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                out[table] = 0
    finally:
        con.close()
    return out


def pack(out: Path, name: str, members: list[tuple[Path, str]]) -> Path:
    path = out / f"{name}.tar.xz"
    with tarfile.open(path, "w:xz", preset=6) as tar:
        for src, arc in members:
            if src.exists():
                tar.add(src, arcname=arc, filter=lambda ti: None if ti.name.endswith(".nsys-rep") else ti)
    return path


def jax_flags(xla: list[str]) -> str:
    """XLA_FLAGS for a jax.profiler run: command buffers off, as profile-step sets them for nsys, so
    that each kernel keeps its own instruction (``hlo_op``) instead of ``command_buffer_N``."""
    return " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_gpu_enable_command_buffer=", *xla]).strip()


def keep_final_hlo(dump: Path) -> None:
    """Only the optimized HLO and the GPU's target description stay from XLA's dump."""
    for f in dump.rglob("*"):
        if f.is_file() and not (f.name.endswith("after_optimizations.txt") or "target_config" in f.name):
            f.unlink()


def one_run(
    n: int,
    label: str,
    policy: str,
    xla: list[str],
    script_args: list[str],
    use_nsys: bool,
    deadline: float,
    work: Path,
    out: Path,
    log: Log,
    py: str,
    size: list[str],
    env: dict[str, str],
    tiny: bool,
) -> bool:
    """One policy's run, packed into $OUT; returns whether nsys is still worth using."""
    left = deadline - time.monotonic() - RESERVE_S
    if left < 45:
        log(f"skipped {label}: {left:.0f}s left")
        return use_nsys
    dump = work / "hlo" / label
    runs_dir = work / "runs" / label
    if use_nsys:
        cmd = [py, "-m", "profiler.cli", "run", "--policy", policy, "--runs-dir", str(runs_dir), "--no-summary",
               str(ROOT / "examples/train.py"), *size, *script_args]  # fmt: skip
        flags = f"{os.environ.get('XLA_FLAGS', '')} {' '.join(xla)} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
        rc, text = run_group(cmd, min(150, left), log, {**env, "XLA_FLAGS": flags})
        log(f"nsys run {label} -> {rc}\n{text.strip()[-3000:]}")
        keep_final_hlo(dump) if dump.exists() else None
        exports = sorted(runs_dir.rglob("trace.sqlite"))
        counts = gpu_rows(exports[0]) if exports else {}
        log(f"{label}: export {exports[0] if exports else 'none'} {counts}")
        pack(out, f"run{n}-{label}", [(runs_dir, label), (dump, f"{label}/xla_dump")])
        if n == 0 and not tiny and not counts.get("CUPTI_ACTIVITY_KIND_KERNEL"):
            log("no GPU kernel in the first nsys export: recording the rest with jax.profiler")
            use_nsys = False
    if not use_nsys:
        trace_dir = work / "jax" / label
        cmd = [py, str(ROOT / "examples/train.py"), "--policy", policy, *size, *script_args,
               "--jax-trace", str(trace_dir)]  # fmt: skip
        left = deadline - time.monotonic() - RESERVE_S
        flags = f"{jax_flags(xla)} --xla_dump_to={dump} --xla_dump_hlo_as_text"
        rc, text = run_group(cmd, min(120, left), log, {**env, "XLA_FLAGS": flags})
        log(f"jax.profiler run {label} -> {rc}\n{text.strip()[-2000:]}")
        keep_final_hlo(dump) if dump.exists() else None
        pack(out, f"run{n}-{label}-jax", [(trace_dir, f"{label}/jax_trace"), (dump, f"{label}/xla_dump")])
    return use_nsys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="CPU-sized model and two runs: try the script anywhere")
    ap.add_argument("--budget", type=float, default=400.0, help="seconds for the whole capture")
    ap.add_argument("--only", default="", help="comma-separated labels of RUNS to record (default: all)")
    ap.add_argument("--nsys", action="store_true", help="profile-step run under nsys first (see the docstring)")
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget
    out = Path(os.environ["OUT"])
    out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("CAPTURE_WORK", "/tmp/capture"))
    work.mkdir(parents=True, exist_ok=True)
    log = Log(out / "capture.log")
    py = os.environ.get("PYTHON", sys.executable)
    size = TINY if args.tiny else FULL
    runs = RUNS[:2] if args.tiny else RUNS
    if args.only:
        runs = [r for r in RUNS if r[0] in args.only.split(",")]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1"}

    query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max"
    for cmd in (["nsys", "--version"], ["nvidia-smi", "-L"], ["nvidia-smi", query, "--format=csv"]):
        rc, text = run_group(cmd, 20, log)
        log(f"$ {' '.join(cmd)} -> {rc}\n{text.strip()}")
    probe = (
        "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices());"
        "d = jax.devices()[0]; print('memory kinds', [m.kind for m in d.addressable_memories()])"
    )
    rc, text = run_group([py, "-c", probe], 60, log, env)
    log(f"jax probe -> {rc}\n{text.strip()}")

    use_nsys = args.nsys
    for n, (label, policy, xla, script_args) in enumerate(runs):
        try:
            use_nsys = one_run(
                n, label, policy, xla, script_args, use_nsys, deadline, work, out, log, py, size, env, args.tiny
            )
        except Exception as exc:  # one run's failure never stops the others
            log(f"{label}: {type(exc).__name__}: {exc}")

    # one jax.profiler record of the first policy beside its nsys run, for a second clock on the same step
    left = deadline - time.monotonic() - RESERVE_S
    if use_nsys and left > 40:
        label, policy, _, script_args = runs[0]
        trace_dir = work / "jax" / label
        cmd = [py, str(ROOT / "examples/train.py"), "--policy", policy, *size, *script_args,
               "--jax-trace", str(trace_dir)]  # fmt: skip
        rc, text = run_group(cmd, min(100, left), log, {**env, "XLA_FLAGS": jax_flags([])})
        log(f"jax.profiler run {label} -> {rc}\n{text.strip()[-1500:]}")
        pack(out, "jax_trace", [(trace_dir, f"{label}/jax_trace")])
    log(f"done; files: {sorted(p.name for p in out.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
