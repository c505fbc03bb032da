"""The compiled step recorded into run folders, and the example compiled for an H100 without a GPU.

- Under the real nsys on the CPU: the example under every policy records memory analysis,
  cost analysis and the plan parse, both ways (XLA dump, annotate.compiled_step), and they
  agree; a script that never compiles keeps its run with a note.
- ``profile-step plan`` with the project's .venv-aot (jax[cuda12]): the real GPU compiler's
  plan per policy (CI installs it; elsewhere the test skips when it is absent).
"""

from __future__ import annotations

import json
import re

import pytest

from profiler.capture.plan import has_cuda_plugin
from profiler.conventions import EXAMPLE_POLICIES
from tests.helpers.cli import run_cli, runs_in
from tests.helpers.paths import ROOT, TRAIN

STEPS = ROOT / "tests" / "scripts" / "steps.py"


@pytest.mark.nsys
def test_example_every_policy_records_its_compiled_step(nsys, tmp_path):
    runs = tmp_path / "runs"
    proc = run_cli(
        "run",
        "--policies",
        ",".join(EXAMPLE_POLICIES),
        "--runs-dir",
        str(runs),
        "--no-summary",
        str(TRAIN),
        "--layers",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folders = runs_in(runs)
    assert len(folders) == len(EXAMPLE_POLICIES)
    flops = {}
    for folder in folders:
        man = json.loads((folder / "manifest.json").read_text())
        policy = man["policy"]
        compiled = json.loads((folder / "compiled.json").read_text())
        handed = compiled["handed_over"]
        assert handed["module"] == "jit_step" and handed["cost"]["flops"] > 0
        assert handed["memory"]["temp_size_in_bytes"] > 0
        assert compiled["agreement"] == {"compared": True, "agree": True, "differences": []}, policy
        assert compiled["dump_pruned"] and man["compiled"]["step_module"].endswith("jit_step")
        step = next(m for m in compiled["modules"] if m["label"] == compiled["step_module"])
        assert step["plan"] is not None and step["plan"]["movements"] == []
        assert step["platform"] == "cpu" and step["plan"]["host_placements"]["layouts"] == 0
        assert step["plan_note"].startswith(
            "no host placement (memory space 5, S(5) in HLO text) in the step"
        )  # XLA:CPU drops offloading
        dump = {p.name for p in (folder / "xla_dump").iterdir()}
        assert dump and all("after_optimizations" in n for n in dump), dump
        mem = man["device_memory"]
        assert mem["available"] is False and "cpu backend" in mem["note"]
        flops[policy] = handed["cost"]["flops"]
    # recomputation shows in FLOPs: remat recomputes everything, offloading recomputes the rest
    assert flops["remat"] > flops["offload_qkv"] > flops["none"]
    assert flops["remat"] > flops["offload_all"] >= flops["none"]
    table = run_cli("analyze", *map(str, folders))
    assert table.returncode == 0, table.stderr
    assert "no measured peak: jax.Device.memory_stats() returned nothing on the cpu backend" in table.stdout
    assert (
        "no host placement (memory space 5, S(5) in HLO text) in the step" in table.stdout
        and "no offload in this program" not in table.stdout
    )
    doc = json.loads(run_cli("analyze", "--json", str(runs)).stdout)
    rows = {r["policy"]: r for r in doc["policies"]["rows"]}
    assert rows["remat"]["recompute_overhead"] == pytest.approx(flops["remat"] / flops["none"] - 1)
    assert all(r["flops_per_step"] == flops[p] and r["tflops"] > 0 for p, r in rows.items())


@pytest.mark.nsys
def test_script_that_never_compiles_keeps_its_run(nsys, tmp_path):
    """No JAX at all: the run is ok, compiled.json says why there is nothing, the table shows '-'."""
    runs = tmp_path / "runs"
    proc = run_cli("run", "--runs-dir", str(runs), "--no-summary", str(STEPS), "--steps", "2")
    assert proc.returncode == 0, proc.stderr
    (folder,) = runs_in(runs)
    man = json.loads((folder / "manifest.json").read_text())
    assert man["status"] == "ok"
    notes = " ".join(man["compiled"]["notes"])
    assert "handed no step" in notes
    assert "no XLA dump in xla_dump/ in the run folder: the script never imported JAX" in notes
    table = run_cli("analyze", str(folder))
    assert table.returncode == 0, table.stderr
    assert "handed no step" in table.stdout


def test_plan_for_h100_without_a_gpu(aot_python, tmp_path):
    out = tmp_path / "plan"
    proc = run_cli(
        "plan",
        "--target",
        "h100",
        "--batch",
        "4",
        "--out",
        str(out),
        "--json",
        str(TRAIN),
        "--layers",
        "2",
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)["plan"]
    assert doc["label"] == "compiled for NVIDIA H100 80GB HBM3, not measured"
    rows = {r["policy"]: r for r in doc["rows"]}
    assert set(rows) == set(EXAMPLE_POLICIES)
    for policy, r in rows.items():
        assert r["status"] == "ok" and r["batch"] == 4 and r["fits"] is True, policy
        assert r["device_bytes"] > 0 and r["flops_per_step"] > 0
        offloads = policy.startswith("offload")
        assert (r["planned_d2h_bytes_per_step"] > 0) is offloads, policy
        assert (r["host_bytes"] > 0) is offloads, policy
        assert r["planned_h2d_bytes_per_step"] == r["planned_d2h_bytes_per_step"]
        assert r["remat_clones"] == 0, policy  # small enough: XLA recomputes nothing of its own
    assert rows["remat"]["recompute_overhead"] > rows["offload_qkv"]["recompute_overhead"] > 0
    layers = {(e["policy"]): e["layers"] for e in doc["layers"]}
    # batch 4, sequence 32, d_model 64, float32: each q/k/v projection is 4*32*64*4 bytes
    qkv = {(x["layer"], x["activation"]): x["d2h_bytes"] for x in layers["offload_qkv"]}
    expected = {(f"layer_{i}", a): 4 * 32 * 64 * 4 for i in range(2) for a in ("query_proj", "key_proj", "value_proj")}
    assert qkv == expected
    mlp = {(x["layer"], x["activation"]) for x in layers["offload_mlp"]}
    assert mlp == {("layer_0", "mlpwi"), ("layer_1", "mlpwi")}  # mlpwo's value is not needed backward
    assert (out / "offload_qkv-b4" / "step.hlo.txt").read_text().count("S(5)") > 0
    # layers under lax.scan: slices into a host buffer inside the while loop, repeated per layer, brought
    # back by slices in the backward loop; the text output, one row for the scanned layers
    # (one compilation: the command's text, and its table from the plan.json it writes, as --json prints it)
    scan = ("plan", "--target", "h100", "--policy", "offload_qkv", str(TRAIN), "--scan", "--layers", "3")
    text = run_cli(*scan[:-4], "--out", str(tmp_path / "p3"), *scan[-4:])
    assert text.returncode == 0, text.stderr
    from profiler.analysis.policies import plan_table

    doc = plan_table(json.loads((tmp_path / "p3" / "plan.json").read_text()))
    (entry,) = doc["layers"]
    per_layer = 2 * 32 * 64 * 4  # the example's default batch 2
    got = {(x["layer"], x["activation"]): (x["d2h_bytes"], x["h2d_bytes"], x["exact"]) for x in entry["layers"]}
    acts = ("query_proj", "key_proj", "value_proj")
    assert got == {("layers", a): (3 * per_layer, 3 * per_layer, True) for a in acts}
    assert "compiled for NVIDIA H100 80GB HBM3, not measured" in text.stdout
    assert re.search(r"^layer\s+query_proj\s+key_proj\s+value_proj\s+total$", text.stdout, re.M)
    assert re.search(r"^layers\s+48\.00 KiB\s+48\.00 KiB\s+48\.00 KiB\s+144\.00 KiB$", text.stdout, re.M)


def test_plan_of_a_script_that_never_hands_over(aot_python, tmp_path):
    proc = run_cli("plan", "--policy", "a", "--out", str(tmp_path / "p"), str(STEPS), "--steps", "1")
    assert proc.returncode == 1
    assert "never handed its step to annotate.compiled_step()" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    again = run_cli("plan", "--policy", "a", "--out", str(tmp_path / "p"), str(STEPS))
    assert again.returncode == 2 and "never overwrites" in again.stderr


def test_plan_without_the_cuda_plugin_says_how_to_get_it(tmp_path):
    """The test environment itself has no CUDA plugin: one clear line, exit 2, nothing created."""
    import sys

    if has_cuda_plugin(sys.executable):
        pytest.skip("this Python has the CUDA plugin")
    proc = run_cli("plan", "--python", sys.executable, "--plans-dir", str(tmp_path / "plans"), str(TRAIN))
    assert proc.returncode == 2
    assert "has no JAX CUDA plugin" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "plans").exists()
    bad = run_cli("plan", "--target", "h900", str(TRAIN))
    assert bad.returncode == 2 and "unknown target 'h900'" in bad.stderr


def test_plan_says_when_xla_rematerialized_the_baseline(aot_python, tmp_path):
    """'none' too big for an H100: XLA's own rematerialization recomputes to fit, and the plan says so."""
    big = ("--layers", "2", "--d-model", "1024", "--heads", "16", "--ffn", "4096", "--seq", "4096")
    args = ("plan", "--target", "h100", "--batch", "32", "--policies", "none", "--out", str(tmp_path / "p"))
    proc = run_cli(*args, str(TRAIN), *big, "--vocab", "32000", "--dtype", "bfloat16", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hlo = (tmp_path / "p" / "none-b32" / "step.hlo.txt").read_text()
    clones = len(re.findall(r"^\s+(?:ROOT )?%?[\w.\-]+\.remat\d* = ", hlo, re.M))
    assert clones > 0
    assert f"note: none batch 32: XLA rematerialized {clones} instructions to fit the memory limit" in proc.stdout
