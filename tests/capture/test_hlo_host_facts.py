"""What the step's HLO says about host memory and about the policy, with the real XLA compiler.

- Host placements (``S(5)``) are counted on every backend: XLA:CPU prints them only in the
  module header's ``entry_computation_layout`` (parameters and optimizer state kept in
  ``pinned_host``), and the notes say that XLA:CPU keeps host memory in the device's space
  instead of claiming that there is no offload.
- The HLO fingerprint: a script that ignores the policy compiles the same step under every
  policy, one that reads it does not; names renumbered do not change it.
- Under the real nsys: the run line and the policy table say which policies compiled to the
  same step.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.xla import dump
from profiler.xla.compiled import describe, platform_of
from profiler.xla.fingerprint import normalized_text, text_fingerprint
from profiler.xla.hlo import parse_text
from profiler.xla.plan import offload_plan, plan_note
from tests.helpers.cli import run_cli
from tests.helpers.paths import AOT_HLO, ROOT

SCRIPT = ROOT / "tests" / "scripts" / "host_placed.py"
SHARED_AOT = AOT_HLO
LAYERS, WIDTH = 2, 64

ACTIVATIONS_ONLY = r"""
import jax, jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
pol = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=["h"], offload_src="device", offload_dst="pinned_host")
def layer(x, w):
    return jnp.sin(checkpoint_name(jnp.sin(x @ w), "h") @ w)
def loss(w, x):
    for _ in range(2):
        x = jax.checkpoint(layer, policy=pol)(x, w)
    return x.sum()
print(jax.jit(jax.grad(loss))(jnp.ones((32, 32)), jnp.ones((8, 32))).sum())
"""


def compile_dump(tmp: Path, args: list[str], env: dict[str, str] | None = None, code: str | None = None) -> Path:
    """Run a script (or *code*) under the installed JAX on the CPU with an XLA dump; the dump folder."""
    pytest.importorskip("jax")
    out = tmp / f"dump{len(list(tmp.iterdir()))}"
    full = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_dump_to={out} --xla_dump_hlo_as_text",
        **(env or {}),
    }
    cmd = [sys.executable, "-c", code] if code else [sys.executable, str(SCRIPT), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def module(folder: Path, name: str) -> dump.DumpModule:
    (m,) = [m for m in dump.scan(folder) if m.name == name]
    return m


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("hostfacts")
    return {
        "ignores-none": compile_dump(tmp, ["--policy", "none"], {"PROFILE_STEP_POLICY": "none"}),
        "ignores-remat": compile_dump(tmp, ["--policy", "remat"], {"PROFILE_STEP_POLICY": "remat"}),
        "reads-remat": compile_dump(tmp, ["--reads-policy"], {"PROFILE_STEP_POLICY": "remat"}),
        "reads-offload": compile_dump(tmp, ["--reads-policy"], {"PROFILE_STEP_POLICY": "offload"}),
        "activations": compile_dump(tmp, [], code=ACTIVATIONS_ONLY),
    }


def test_cpu_host_placements_from_the_entry_layout(dumps):
    """Parameters and optimizer state in pinned_host: S(5) in the header only; counted, and the note
    says XLA:CPU keeps them in the device's memory (memory_analysis counts them as device memory)."""
    step = module(dumps["ignores-none"], "jit_update")
    text = step.files["after"].read_text()
    assert platform_of(step.files["after"]) == "cpu"
    doc = describe(step)
    hp = doc["plan"]["host_placements"]
    nbytes = LAYERS * WIDTH * WIDTH * 4
    assert (hp["entry_parameters"], hp["entry_parameter_bytes"]) == (2, 2 * nbytes)
    assert (hp["entry_outputs"], hp["entry_output_bytes"]) == (2, 2 * nbytes)
    assert hp["layouts"] == text.count("S(5)") == 4  # every S(5) of the text, none missed
    assert {b["instruction"] for b in doc["plan"]["host_buffers"]} == {"ws.1", "mom.1"}
    note = doc["plan_note"]
    assert (
        "4 host placements (memory space 5, S(5) in HLO text)" in note
        and "XLA:CPU keeps host memory in the device's" in note
    )
    assert "no offload in this program" not in note
    # what the note claims about memory_analysis: host 0 B, the host-placed arguments counted as device ones
    mem = doc["memory"]
    assert mem["host_argument_size_in_bytes"] == 0 and mem["argument_size_in_bytes"] >= 2 * nbytes


def test_cpu_activation_offload_leaves_nothing_in_the_hlo(dumps):
    """A checkpoint offload policy lowers to nothing on XLA:CPU: no S(5) at all, and the note says
    a CPU run cannot show the GPU's offload (not 'no offload in this program')."""
    step = module(dumps["activations"], "jit_loss")
    assert "S(5)" not in step.files["after"].read_text()
    note = describe(step)["plan_note"]
    assert note.startswith("no host placement (memory space 5, S(5) in HLO text) in the step") and "cannot show" in note


def test_gpu_plan_keeps_its_movements_and_counts_host_values():
    if not SHARED_AOT.is_file():
        pytest.skip("../shared/hlo is absent")
    text = SHARED_AOT.read_text()
    plan = offload_plan(parse_text(text))
    assert plan["movements"] and plan_note(plan, "gpu") is None
    hp = plan["host_placements"]
    assert hp["instructions"] == plan["host_values"] > 0 and hp["layouts"] >= hp["instructions"]
    empty = offload_plan(
        parse_text("HloModule m\n\nENTRY %e (p: f32[4]) -> f32[4] {\n  ROOT %p = f32[4]{0} parameter(0)\n}\n")
    )
    assert (
        plan_note(empty, "gpu")
        == "the compiler placed nothing in host memory (memory space 5): no offload in this program"
    )


def test_fingerprint_same_program_same_value(dumps):
    """A script that never reads the policy compiles one step for every policy; one that reads it does not."""
    fp = {k: describe(module(v, "jit_update"))["fingerprint"]["value"] for k, v in dumps.items() if k != "activations"}
    assert fp["ignores-none"] == fp["ignores-remat"]
    assert fp["reads-remat"] != fp["reads-offload"]  # remat recomputes: another program
    assert fp["reads-offload"] == fp["ignores-none"]  # the script's own default is offload: the same program


def test_fingerprint_ignores_names_and_metadata(dumps):
    text = module(dumps["reads-remat"], "jit_update").files["after"].read_text()
    names = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", text, re.M))
    renamed = re.sub(
        r"(?<![\w.\-])(%?)([\w.\-]+)",
        lambda m: m.group(1) + ("r_" + m.group(2) if m.group(2) in names else m.group(2)),
        text,
    )
    renamed = renamed.replace('op_name="', 'op_name="other/')
    assert renamed != text and normalized_text(renamed) == normalized_text(text)
    assert text_fingerprint(renamed) == text_fingerprint(text)
    changed = text.replace(" tanh(", " exponential(", 1)
    assert changed != text and text_fingerprint(changed) != text_fingerprint(text)


@pytest.mark.nsys
def test_run_line_and_table_say_which_policies_compiled_the_same_step(nsys, tmp_path):
    runs = tmp_path / "runs"
    proc = run_cli(
        "run", "--policies", "none,offload", "--runs-dir", str(runs), "--no-summary", str(SCRIPT), timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "same step as policy none (HLO fingerprint " in out
    assert out.count("same step as policy") == 1  # said once, for the second policy
    folders = sorted(p for p in runs.iterdir() if p.is_dir())
    fps = {json.loads((f / "manifest.json").read_text())["compiled"]["fingerprint"] for f in folders}
    assert len(fps) == 1 and None not in fps
    doc = json.loads(run_cli("analyze", "--json", str(runs)).stdout)["policies"]
    assert doc["same_hlo"] == [{"fingerprint": fps.pop(), "policies": ["none", "offload"], "cpu": True}]
    assert {r["policy"]: r["same_hlo_as"] for r in doc["rows"]} == {"none": ["offload"], "offload": ["none"]}
    assert doc["cpu_runs"] == ["none", "offload"]
    assert all(r["host_placements"] == 4 and r["host_in_device_memory"] for r in doc["rows"])
    table = run_cli("analyze", str(runs)).stdout
    # '=' marks the same step; '~' may follow when the two medians also differ by less than their spread
    assert re.search(r"^none =~?\s", table, re.M) and re.search(r"^offload =~?\s", table, re.M)
    assert "=: none, offload compiled to the same step" in table
    assert "(CPU: in device memory)" in table and "no offload in this program" not in table
    assert "ran on a CPU, which does not stand for a GPU" in table


def test_platform_of_dump_names():
    assert platform_of(Path("module_0001.jit_step.sm_9.0a_gpu_after_optimizations.txt")) == "gpu"
    assert platform_of(Path("module_0001.jit_step.cpu_after_optimizations.txt")) == "cpu"
    assert platform_of(Path("module_0001.jit_step.after_optimizations.txt")) is None
