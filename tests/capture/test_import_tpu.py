"""scripts/import_device_capture.py --tpu: what benchmarks/tpu_record.sh brings back from a TPU (a tar
per run: command.txt, stdout.log, the step's dump, the jax.profiler folder) becomes a run folder that
profile-step reads; a run that ran out of memory becomes a failed run folder with its reason."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.tpu_traces import built_events, write_trace

SIZE = "--layers 4 --d-model 2048 --heads 16 --ffn 8192 --seq 1024 --batch 8 --vocab 32000 --dtype bfloat16"
OOM = (
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
    "temporaries (17.95G) exceeds available HBM (15.75G)."
)


# what annotate.capture and annotate.compiled_step wrote into facts/ on the TPU (the H200 shape's scanned
# remat, 2026-12-06 09:21 UTC): memory_stats() at the end of the steps, XLA's memory analysis of the step
STATS = {"id": 0, "kind": "TPU v5 lite", "peak_bytes_in_use": 4834842624, "bytes_limit": 16909336064}
ANALYSIS = {
    "argument_size_in_bytes": 3223322624,
    "output_size_in_bytes": 3223322624,
    "alias_size_in_bytes": 3223322624,
    "temp_size_in_bytes": 18685428224,
    "host_argument_size_in_bytes": 0,
    "host_output_size_in_bytes": 0,
    "host_alias_size_in_bytes": 0,
    "host_temp_size_in_bytes": 0,
    "peak_memory_in_bytes": 14902796288,
}


def recorded(root: Path, policy: str, ok: bool, facts: bool = False) -> Path:
    """A tar as tpu_record.sh makes it (scanned, 4 layers): with a trace and the step's HLO, or out of memory;
    with *facts*, the facts/ folder the script's annotate calls write (recordings from 2026-12-06 09:20 UTC)."""
    run = root / policy
    (run / "dump").mkdir(parents=True)
    if facts:
        (run / "facts").mkdir()
        memory = {"available": True, "devices": [STATS]}
        (run / "facts" / "runtime.json").write_text(json.dumps({"policy": policy, "device_memory": memory}))
        (run / "facts" / "compiled_step.json").write_text(json.dumps({"module": "jit_step", "memory": ANALYSIS}))
    (run / "command.txt").write_text(f"== {policy} scan: {SIZE} --steps 5 --warmup 2\n")
    hlo = next((ROOT / "sample_traces" / "tpu-v5e-example").glob("*-remat-scan-l4-*/xla_dump/*.txt.xz"))
    (run / "dump" / "module_0123.jit_step.cl_933746096.after_optimizations.txt").write_bytes(
        lzma.decompress(hlo.read_bytes())
    )
    if ok:
        write_trace(run / "jax" / "plugins" / "profile" / "2026_12_06_01_55_37" / "vm.trace.json.gz", built_events())
        steps = "".join(f"step {i}: loss 14.0 (12{i}.5 ms)\n" for i in range(5))
        (run / "stdout.log").write_text(f"train.py: policy={policy}\n{steps}exit 0\n")
    else:
        (run / "stdout.log").write_text(
            f"train.py: policy={policy}\nTraceback (most recent call last):\n{OOM}\nexit 1\n"
        )
    tar = root / f"tpu-scan-l4-{policy}.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        tf.add(run, arcname=policy)
    return tar


def test_tars_become_run_folders_and_the_oom_a_failed_one(tmp_path):
    tars = [recorded(tmp_path / "src", "offload_mlp", ok=True), recorded(tmp_path / "src", "none", ok=False)]
    into = tmp_path / "runs"
    script = ROOT / "scripts" / "import_device_capture.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--tpu", *map(str, tars), "--into", str(into)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    (ok,) = into.glob("20261206T015537-offload_mlp-scan-l4-??????")
    assert sorted(p.name for p in ok.iterdir()) == [
        "compiled.json",
        "manifest.json",
        "runtime.json",
        "trace.json.gz",
        "xla_dump",
    ]
    assert [p.name for p in (ok / "xla_dump").iterdir()] == ["module_0123.jit_step.after_optimizations.txt.xz"]
    manifest = json.loads((ok / "manifest.json").read_text())
    assert manifest["loop_step_ms"] == [120.5, 121.5, 122.5, 123.5, 124.5] and manifest["status"] == "ok"
    assert (
        manifest["devices"][0]["kind"] == "TPU v5 lite"
        and manifest["compiled"]["step_module"] == "module_0123.jit_step"
    )
    (bad,) = [p for p in into.iterdir() if "-none-scan-l4-" in p.name]
    failed = json.loads((bad / "manifest.json").read_text())
    assert (failed["status"], failed["exit_code"]) == ("failed", 1) and not (bad / "trace.json.gz").exists()
    assert failed["no_trace_reason"] == OOM.split(": ", 1)[1]
    doc = json.loads(run_cli("analyze", "--json", str(into), env={"PROFILE_STEP_CACHE": str(tmp_path / "c")}).stdout)
    assert [r["policy"] for r in doc["policies"]["rows"]] == ["offload_mlp-scan-l4"]
    assert doc["policies"]["rows"][0]["median_step_ns"] == 100_000  # the built trace's one step
    assert [(n["policy"], n["reason"]) for n in doc["no_trace"]] == [("none-scan-l4", OOM.split(": ", 1)[1])]


def test_a_folder_that_is_no_recording_is_one_line_naming_its_file(tmp_path):
    run = tmp_path / "src" / "x"
    run.mkdir(parents=True)
    (run / "command.txt").write_text("something else\n")
    script = ROOT / "scripts" / "import_device_capture.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--tpu", str(run), "--into", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(run / "command.txt") in line and "not a tpu_record.sh command line" in line


def test_the_steps_memory_comes_from_xlas_analysis_not_from_memory_stats(tmp_path):
    """On a TPU ``memory_stats()``'s peak leaves out the program's temporaries (4.83 GB at the end of the
    H200 shape's scanned remat, whose step XLA sizes at 13.9 GiB at its peak): the step's memory is the
    analysis the script handed over; memory_stats is kept in the manifest for what it is, not as the peak."""
    tar = recorded(tmp_path / "src", "remat", ok=True, facts=True)
    into = tmp_path / "runs"
    script = ROOT / "scripts" / "import_device_capture.py"
    proc = subprocess.run([sys.executable, str(script), "--tpu", str(tar), "--into", str(into)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    (run,) = into.iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["memory_stats_at_end"] == {"available": True, "devices": [STATS]}
    assert json.loads((run / "compiled_step.json").read_text())["memory"] == ANALYSIS
    doc = json.loads(run_cli("analyze", "--json", str(into), env={"PROFILE_STEP_CACHE": str(tmp_path / "c")}).stdout)
    (row,) = doc["policies"]["rows"]
    # XLA's peak of the program, not arguments + outputs - aliased + temporaries (21.9 GB, more than the
    # chip's 16.9 GB, on which it ran)
    assert row["compiled_device_bytes"] == 14902796288 < STATS["bytes_limit"]
    assert row["peak_device_bytes"] is None
