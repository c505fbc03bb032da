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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.capture import step_module  # noqa: E402
from profiler.conventions import COMPILED_STEP, MANIFEST, RUNTIME_FACTS, XLA_DUMP_DIR  # noqa: E402
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
    vocab = 256
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
    args = ap.parse_args()
    args.into.mkdir(parents=True, exist_ok=True)
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
