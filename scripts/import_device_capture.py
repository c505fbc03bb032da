"""Turn what ``scripts/device_capture.py`` brought back from a GPU machine into run folders.

    .venv/bin/python scripts/import_device_capture.py OUT_DIR [OUT_DIR ...] --into sample_traces/h200-example
        [--call-note TEXT]

Each ``run<N>-<label>-jax.tar.xz`` (a run recorded with ``jax.profiler``) becomes
``<into>/<UTC>-<label>-<id>/``, a run folder as ``profile-step run`` writes one:

- ``trace.json.gz``: the JAX profiler trace, byte for byte (``<host>.trace.json.gz``);
- ``xla_dump/``: the step's optimized HLO (``.txt.xz``) and the GPU's target description, as XLA
  dumped them in that process (the step module is the newest ``jit_step`` of the dump);
- ``compiled.json``: the step module read from that dump by profile-step's own capture code;
- ``runtime.json``: what ``examples/train.py`` hands over under profile-step (its model facts and
  model FLOPs, by its own formula), read from the capture's command line;
- ``manifest.json``: the command, XLA flags, versions and GPU as the capture log printed them,
  ``capture.tool = jax.profiler``.

``capture.log`` of each call is copied beside, as ``capture-<N>.log``.  Nothing is measured here.

With ``--tpu`` the inputs are what ``benchmarks/tpu_record.sh`` brought back from a TPU
(``tpu-<form>[<tag>]-<policy>.tar.gz``, or the folders they hold: ``command.txt``, ``stdout.log``,
``dump/``, ``jax/plugins/profile/<run>/<host>.trace.json.gz``); each becomes
``<into>/<UTC>-<policy>[-scan][-l<N>]-<id>/`` (``-l<N>`` where the layers are not 8) with the trace
byte for byte, the step's optimized HLO (the newest ``jit_step`` of the dump; a run that compiled
it twice dumped the same program twice), ``compiled.json``, ``runtime.json`` and a manifest whose
device is the TPU (``--tpu-kind``, as JAX names it) and whose ``loop_step_ms`` are the loop's own
step times (``stdout.log``).  A run that ended without a trace (out of memory) becomes a failed run
folder: status ``failed``, its exit code and the error's line as ``no_trace_reason``, its output
as ``output.log``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import secrets
import shutil
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.capture import step_module  # noqa: E402
from profiler.conventions import COMPILED_STEP, LOG, MANIFEST, RUNTIME_FACTS, XLA_DUMP_DIR  # noqa: E402
from profiler.stored.no_trace import NO_TRACE_KEY  # noqa: E402
from scripts.device_capture import FULL, RUNS, jax_flags  # noqa: E402

STEP_HLO = re.compile(r"^module_(\d+)\.(jit_step)\.(.+)_after_optimizations\.txt$")
TARGET = "gpu_target_config.pbtxt"


def log_facts(log: str) -> dict[str, str]:
    """GPU, driver, memory and versions as the capture log printed them."""
    facts = {}
    gpu = re.search(r"^(NVIDIA [^,\n]+), ([\d.]+), (\d+) MiB, (\d+) MHz, (\d+), (\d+)$", log, re.M)
    if gpu:
        facts |= dict(
            zip(("gpu", "driver", "memory_mib", "max_sm_mhz", "pcie_gen", "pcie_width"), gpu.groups(), strict=True)
        )
    jax = re.search(r"^jax ([\w.]+) jaxlib ([\w.]+)", log, re.M)
    if jax:
        facts |= {"jax": jax.group(1), "jaxlib": jax.group(2)}
    nsys = re.search(r"Nsight Systems version ([\w.-]+)", log)
    if nsys:
        facts["nsys_carried"] = nsys.group(1)
    return facts


def started(profile_dir: str) -> str | None:
    """When the captured steps began (UTC), from jax.profiler's folder name (2026_12_04_16_59_07)."""
    m = re.fullmatch(r"(\d{4})_(\d\d)_(\d\d)_(\d\d)_(\d\d)_(\d\d)", profile_dir)
    return "{}-{}-{}T{}:{}:{}+00:00".format(*m.groups()) if m else None


def model_facts(args: list[str]) -> dict[str, object]:
    """examples/train.py's runtime facts for these arguments (its own parser and FLOP formula)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import train  # examples/train.py

    ap_args = dict(zip(args[::2], args[1::2], strict=False))
    layers, d, ffn = int(ap_args["--layers"]), int(ap_args["--d-model"]), int(ap_args["--ffn"])
    seq, batch = int(ap_args["--seq"]), int(ap_args["--batch"])
    vocab = int(ap_args.get("--vocab", 256))  # the H200 calls ran at train.py's default vocabulary, 256
    return {
        "model_flops_per_step": train.model_flops(batch, seq, d, ffn, layers, vocab),
        "tokens_per_step": batch * seq,
    }


def import_run(
    tar: Path, into: Path, facts: dict[str, str], call: int, note: str, call_flags: str = "script"
) -> Path | None:
    label = re.sub(r"^run\d+-|-jax\.tar\.xz$", "", tar.name)
    spec = {r[0]: r for r in RUNS}.get(label)
    if spec is None:
        print(f"{tar.name}: no run {label!r} in scripts/device_capture.py's RUNS, skipped", file=sys.stderr)
        return None
    _, policy, xla, script_args = spec
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tar) as tf:
            tf.extractall(tmp, filter="data")
        base = Path(tmp) / label
        traces = sorted((base / "jax_trace").glob("plugins/profile/*/*.trace.json.gz"))
        if not traces:
            print(f"{tar.name}: no JAX profiler trace in it, skipped", file=sys.stderr)
            return None
        trace = traces[-1]
        stamp = re.sub(r"^(\d{4})_(\d\d)_(\d\d)_(\d\d)_(\d\d)_(\d\d)$", r"\1\2\3T\4\5\6", trace.parent.name)
        hlo = [
            p for p in (base / "xla_dump").glob("module_*.jit_step.*after_optimizations.txt") if STEP_HLO.match(p.name)
        ]
        run = into / f"{stamp}-{label}-{secrets.token_hex(3)}"
        (run / XLA_DUMP_DIR).mkdir(parents=True)
        shutil.copyfile(trace, run / "trace.json.gz")
        if hlo:
            step = max(hlo, key=lambda p: p.stat().st_mtime)
            (run / XLA_DUMP_DIR / f"{step.name}.xz").write_bytes(lzma.compress(step.read_bytes(), preset=9))
            m = STEP_HLO.match(step.name)
            target = base / "xla_dump" / f"module_{m.group(1)}.jit_step.{TARGET}"
            if target.is_file():
                shutil.copyfile(target, run / XLA_DUMP_DIR / target.name)
        args = [*FULL, *script_args]
        # the calls of 2026-12-04 ran before the script turned command buffers off (jax_flags): their
        # XLA_FLAGS were the dump's and these
        flags = " ".join(xla) if call_flags == "as-run" else jax_flags(xla)
        model = {k.lstrip("-").replace("-", "_"): v for k, v in zip(args[::2], args[1::2], strict=False)}
        devices = [{"id": 0, "kind": facts.get("gpu"), "platform": "gpu"}]
        runtime = {"policy": policy, "model": model, "jax": facts.get("jax"), "jaxlib": facts.get("jaxlib"),
                   "backend": "gpu", "devices": devices, **model_facts(args)}  # fmt: skip
        (run / RUNTIME_FACTS).write_text(json.dumps(runtime, indent=2) + "\n")
        (run / COMPILED_STEP).unlink(missing_ok=True)
        manifest = {
            "tool": "profile-step",
            "status": "ok",
            "policy": label,
            "script": "examples/train.py",
            "script_args": args,
            "program": ["python3", "examples/train.py", "--policy", policy, *args, "--jax-trace", "DIR"],
            "capture": {
                "tool": "jax.profiler",
                "mode": "auto",
                "records": "the captured steps (jax.profiler.trace around them; warm-up before it)",
                "analysis_window": "auto",
            },
            "xla_flags": {"final": flags.strip()},
            "devices": [{"id": 0, "kind": facts.get("gpu"), "memory_total_mib": int(facts.get("memory_mib", 0))}],
            "runtime": runtime,
            "versions": {k: facts[k] for k in ("jax", "jaxlib", "driver") if k in facts} | {"cuda": "13.0.2"},
            "host_link": f"PCIe Gen{facts.get('pcie_gen')} x{facts.get('pcie_width')}"
            if facts.get("pcie_gen")
            else None,
            "device_capture": {"call": call, "script": "scripts/device_capture.py", "note": note},
            "started": started(trace.parent.name),
        }
        (run / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        short = step_module.record(run, run / XLA_DUMP_DIR, own_dump=True, hook=None)
        manifest["compiled"] = short
        (run / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return run


# --- a TPU's recordings (benchmarks/tpu_record.sh) ---------------------------------------------
COMMAND = re.compile(r"^== (\S+) (scan|unrolled): (.*)$", re.M)
LOOP_STEP = re.compile(r"^step \d+: loss \S+ \(([\d.]+) ms\)$", re.M)
ERROR_LINE = re.compile(r"^(?:\w+\.)*\w+(?:Error|Exception): (.*)$", re.M)
EXIT = re.compile(r"^exit (\d+)$", re.M)
TPU_HLO = re.compile(r"^module_(\d+)\.jit_step\..*after_optimizations\.txt$")


def tpu_sources(paths: list[Path], tmp: Path) -> list[Path]:
    """The run folders (``command.txt`` in them) of *paths*: tars extracted under *tmp*, folders as
    they are (a folder of runs or of tars is walked one level)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file() and path.name.endswith(".tar.gz"):
            dest = tmp / path.name.removesuffix(".tar.gz")
            with tarfile.open(path) as tf:
                tf.extractall(dest, filter="data")
            found += sorted(p.parent for p in dest.glob("*/command.txt"))
        elif (path / "command.txt").is_file():
            found.append(path)
        elif path.is_dir():
            found += tpu_sources(sorted(path.iterdir()), tmp)
    return found


def tpu_label(command: str) -> tuple[str, bool, list[str]]:
    """(policy, scanned, train.py's size arguments) from ``command.txt`` (``== P scan: ARGS``)."""
    m = COMMAND.search(command)
    if m is None:
        raise ValueError(f"not a tpu_record.sh command line: {command.strip()[:80]!r}")
    return m.group(1), m.group(2) == "scan", m.group(3).split()


def recorded_memory(src: Path) -> dict | None:
    """The device's ``memory_stats()`` at the end of the captured steps, as the script's
    ``annotate.capture`` wrote it (``facts/runtime.json``: recordings from 2026-12-06 09:20 UTC on), else None."""
    facts = src / "facts" / RUNTIME_FACTS
    try:
        return json.loads(facts.read_text()).get("device_memory") if facts.is_file() else None
    except (OSError, ValueError):
        return None


def import_tpu_run(src: Path, into: Path, kind: str, jax_version: str, memory_mib: int) -> Path:
    """One run folder under *into* from the recorded run *src* (``command.txt``, ``stdout.log``,
    ``dump/``, ``jax/``)."""
    try:
        policy, scanned, size = tpu_label((src / "command.txt").read_text())
    except ValueError as exc:
        raise ValueError(f"{src / 'command.txt'}: {exc}") from None
    sizes = dict(zip(size[::2], size[1::2], strict=False))
    label = policy + ("-scan" if scanned else "") + ("" if sizes.get("--layers") == "8" else f"-l{sizes['--layers']}")
    log = (src / "stdout.log").read_text(errors="replace") if (src / "stdout.log").is_file() else ""
    traces = sorted(src.glob("jax/plugins/profile/*/*.trace.json.gz"))
    when = traces[-1].parent.name if traces else None
    stamp = (
        re.sub(r"^(\d{4})_(\d\d)_(\d\d)_(\d\d)_(\d\d)_(\d\d)$", r"\1\2\3T\4\5\6", when)
        if when
        else datetime.fromtimestamp((src / "command.txt").stat().st_mtime, UTC).strftime("%Y%m%dT%H%M%S")
    )
    run = into / f"{stamp}-{label}-{secrets.token_hex(3)}"
    (run / XLA_DUMP_DIR).mkdir(parents=True)
    if traces:
        shutil.copyfile(traces[-1], run / "trace.json.gz")
    hlo = [p for p in (src / "dump").glob("module_*.jit_step.*after_optimizations.txt") if TPU_HLO.match(p.name)]
    if hlo:
        step = max(hlo, key=lambda p: int(TPU_HLO.match(p.name).group(1)))
        # libtpu adds its build to the dump's names (module_0266.jit_step.cl_933746096.after_...): kept
        # by the module's own name (HloModule jit_step), as XLA names a GPU's dump, so the trace's
        # executions of jit_step find it
        name = re.sub(r"\.cl_\d+\.", ".", step.name)
        (run / XLA_DUMP_DIR / f"{name}.xz").write_bytes(lzma.compress(step.read_bytes(), preset=9))
    args = [*size]
    model = {k.lstrip("-").replace("-", "_"): v for k, v in zip(args[::2], args[1::2], strict=False)}
    devices = [{"id": 0, "kind": kind, "platform": "tpu"}]
    runtime = {"policy": policy, "model": model, "scan": scanned, "jax": jax_version, "jaxlib": jax_version,
               "backend": "tpu", "devices": devices, **model_facts(args)}  # fmt: skip
    (run / RUNTIME_FACTS).write_text(json.dumps(runtime, indent=2) + "\n")
    code = int(m.group(1)) if (m := EXIT.search(log)) else None
    script_args = [*(["--scan"] if scanned else []), *args]
    manifest: dict[str, object] = {
        "tool": "profile-step",
        "status": "ok" if traces and code == 0 else "failed",
        "exit_code": code,
        "policy": label,
        "script": "examples/train.py",
        "script_args": script_args,
        "program": ["python3", "examples/train.py", "--policy", policy, *script_args, "--jax-trace", "DIR"],
        "capture": {
            "tool": "jax.profiler",
            "mode": "auto",
            "records": "the captured steps (jax.profiler.trace around them; warm-up before it)",
            "analysis_window": "auto",
        },
        "xla_flags": {"final": "--xla_dump_to=DUMP --xla_dump_hlo_as_text"},
        "devices": [{"id": 0, "kind": kind, "memory_total_mib": memory_mib}],
        "runtime": runtime,
        "versions": {"jax": jax_version, "jaxlib": jax_version},
        "host_link": None,
        "device_capture": {"script": "benchmarks/tpu_record.sh", "command": (src / "command.txt").read_text().strip()},
        "loop_step_ms": [float(t) for t in LOOP_STEP.findall(log)],
        # not the run's device_memory: on a TPU memory_stats()'s peak leaves out the program's temporaries
        # (4.70 GB at the end of the H200-shape steps, where XLA's memory analysis of the same step, handed
        # over in compiled_step.json, says 7.7 to 14.6 GiB); kept for what it is
        "memory_stats_at_end": recorded_memory(src),
        "dump_file": step.name if hlo else None,  # as libtpu named it
        "started": started(when) if when else None,
    }
    if not traces:
        errors = ERROR_LINE.findall(log)
        manifest[NO_TRACE_KEY] = errors[-1].strip() if errors else f"the run ended with exit code {code} and no trace"
        (run / LOG).write_text(log)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    handed = src / "facts" / COMPILED_STEP  # the step the script handed over: XLA's memory analysis of it
    if handed.is_file():
        shutil.copyfile(handed, run / COMPILED_STEP)
    manifest["compiled"] = step_module.record(run, run / XLA_DUMP_DIR, own_dump=True, hook=None)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return run


def import_tpu(paths: list[Path], into: Path, kind: str, jax_version: str, memory_mib: int) -> list[Path]:
    """Run folders under *into* from every recorded TPU run in *paths* (tars or folders)."""
    with tempfile.TemporaryDirectory() as tmp:
        return [import_tpu_run(src, into, kind, jax_version, memory_mib) for src in tpu_sources(paths, Path(tmp))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outs", nargs="+", type=Path, help="folders the device tool brought back, in call order")
    ap.add_argument("--into", type=Path, required=True)
    ap.add_argument("--call-note", action="append", default=[], help="a note per call, in order")
    ap.add_argument(
        "--flags",
        choices=("script", "as-run"),
        default="script",
        help="XLA flags of the runs: the script's (command buffers off), or as-run (only each run's own flags: "
        "captures made before the script turned command buffers off)",
    )
    ap.add_argument("--tpu", action="store_true", help="the inputs are benchmarks/tpu_record.sh's tars or folders")
    ap.add_argument("--tpu-kind", default="TPU v5 lite", help="the TPU as JAX names it (jax.devices()[0].device_kind)")
    ap.add_argument("--tpu-jax", default="0.10.2", help="the jax/jaxlib version the TPU runs used")
    ap.add_argument("--tpu-memory-mib", type=int, default=16128, help="the TPU's HBM (15.75 GiB on a v5e)")
    args = ap.parse_args()
    args.into.mkdir(parents=True, exist_ok=True)
    if args.tpu:
        try:
            runs = import_tpu(args.outs, args.into, args.tpu_kind, args.tpu_jax, args.tpu_memory_mib)
        except (ValueError, OSError, tarfile.TarError) as exc:
            print(f"import_device_capture: {exc}", file=sys.stderr)
            return 2
        for run in runs:
            print(run)
        return 0
    for call, out in enumerate(args.outs, start=1):
        log = (out / "capture.log").read_text() if (out / "capture.log").is_file() else ""
        if log:
            shutil.copyfile(out / "capture.log", args.into / f"capture-{call}.log")
        note = args.call_note[call - 1] if call <= len(args.call_note) else ""
        for tar in sorted(out.glob("run*-jax.tar.xz")):
            run = import_run(tar, args.into, log_facts(log), call, note, args.flags)
            if run is not None:
                print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
