"""benchmarks/writeup_mesh.py and writeup_causes.py at a toy size: the 8-GPU DeepSeek step compiled by the
real GPU compiler (deviceless, .venv-aot) and predicted by the roofline replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAUSES = ROOT / "benchmarks" / "writeup_causes.py"
TOY = ["--layers", "2", "--batch", "1", "--seq", "256", "--width", "256", "--states-gb", "0.5"]


def _causes(aot_python: str, out: Path, rows: str, *script_args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROFILE_STEP_AOT_PYTHON": aot_python}
    cmd = [sys.executable, str(CAUSES), "--rows", rows, "--out", str(out), "--", *script_args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)


@pytest.fixture(scope="module")
def toy(aot_python, tmp_path_factory) -> dict[str, dict]:
    """causes.json of the toy step with its all-to-alls and without (remat and the write-up's offload)."""
    docs = {}
    for key, extra in (("a2a", []), ("none", ["--no-all-to-all"])):
        out = tmp_path_factory.mktemp("causes") / key
        proc = _causes(aot_python, out, "remat:on,writeup:on", *TOY, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        docs[key] = json.loads((out / "causes.json").read_text())
    return docs


def test_every_collective_kind_is_compiled_and_costed_on_nvlink(toy):
    remat = toy["a2a"]["rows"]["remat:on"]
    for kind in ("all-to-all", "all-gather", "reduce-scatter"):
        assert remat["collectives"].get(kind, 0) > 0, remat["collectives"]
    assert toy["a2a"]["interconnect_gbps"] == 900.0  # NVLink 5 per direction, the B200's
    assert remat["collective_ms"] > 0


def test_without_all_to_all_the_step_moves_no_tokens_and_costs_less(toy):
    with_, without = toy["a2a"]["rows"]["remat:on"], toy["none"]["rows"]["remat:on"]
    assert "all-to-all" not in without["collectives"]
    assert without["collectives"].get("all-gather", 0) > 0
    assert without["collective_ms"] < with_["collective_ms"]
    # same compute either way: the all-to-all only moves the dispatched tokens
    assert without["compute_ms"] == pytest.approx(with_["compute_ms"], rel=0.05)


def test_writeup_policy_offloads_and_the_states_are_in_device_memory(toy):
    rows = toy["a2a"]["rows"]
    assert rows["remat:on"]["copy_ms"]["d2h"] == 0
    # mla_q (256 x 48), mla_kv (256 x 16), moe_mlpwi_0/1 (8 x 256 x 64) in bf16, 2 layers, at 450 GB/s
    nbytes = 2 * 2 * (256 * 48 + 256 * 16 + 2 * 8 * 256 * 64)
    assert rows["writeup:on"]["copy_ms"]["d2h"] == pytest.approx(nbytes / 450e9 * 1e3, rel=0.02)
    assert rows["writeup:on"]["copy_ms"]["h2d"] > 0
    for row in rows.values():
        assert 0.5e9 <= row["device_bytes"] < 0.5e9 + 50e6


def test_a_bad_row_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(CAUSES), "--rows", "remat:fast", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "remat:fast" in proc.stderr and "Traceback" not in proc.stderr


def test_two_layers_per_iteration_copy_the_same_bytes(aot_python, toy, tmp_path):
    proc = _causes(aot_python, tmp_path / "u2", "writeup:on8", *TOY, "--unroll", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((tmp_path / "u2" / "causes.json").read_text())["rows"]["writeup:on8"]
    one = toy["a2a"]["rows"]["writeup:on"]
    assert row["copy_ms"] == pytest.approx(one["copy_ms"], rel=1e-6)
    assert row["collectives"]["all-to-all"] > 0


def test_llama_is_tensor_parallel_and_offloads_qkv(aot_python, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(CAUSES), "--model", "llama", "--rows", "remat:on,writeup:on", "--out",
         str(tmp_path / "llama"), "--", *TOY],
        capture_output=True, text=True, env={**os.environ, "PROFILE_STEP_AOT_PYTHON": aot_python}, timeout=900,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "llama" / "causes.json").read_text())["rows"]
    assert rows["remat:on"]["collectives"].get("all-reduce", 0) > 1  # attention and MLP outputs, per layer
    assert "all-to-all" not in rows["remat:on"]["collectives"]
    # query (256 x 2 heads x 128), key and value (256 x 128 each) in bf16, 2 layers, at 450 GB/s
    nbytes = 2 * 2 * 256 * (256 + 128 + 128)
    assert rows["writeup:on"]["copy_ms"]["d2h"] == pytest.approx(nbytes / 450e9 * 1e3, rel=0.02)


COMPARE = ROOT / "benchmarks" / "writeup_compare.py"


def _compare(aot_python: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROFILE_STEP_AOT_PYTHON": aot_python}
    env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)  # JAX's default share, 0.75
    cmd = [sys.executable, str(COMPARE), "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)


@pytest.fixture(scope="module")
def mesh_compare(aot_python, tmp_path_factory) -> dict:
    """writeup.json of ``writeup_compare.py --mesh`` on the toy DeepSeek step: the rows and a search of 1 compile."""
    out = tmp_path_factory.mktemp("compare") / "ds"
    proc = _compare(aot_python, out, "--mesh", "--model", "deepseek", "--names", "out_proj", "--max-compiles", "3",
                    "--", *TOY)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "writeup_mesh.py (8 GPUs)" in proc.stdout
    return json.loads((out / "writeup.json").read_text())


def test_compare_mesh_rows_come_from_the_8_gpu_program(mesh_compare):
    from benchmarks.writeup_causes import ALL

    doc = mesh_compare
    assert doc["program"] == "writeup_mesh.py (8 GPUs)"
    assert doc["script_args"] == ["--model", "deepseek", *TOY]
    # tune's name search stops at shard_map: the names are the ones the mesh tags, the input kept
    assert [n["name"] for n in doc["names"]] == ALL["deepseek"]
    rows = doc["rows"]
    assert rows["remat"]["copy_bytes"]["d2h"] == 0
    # the write-up's names reached inside shard_map: exactly their bytes go to host, with the flags on and off
    nbytes = 2 * 2 * (256 * 48 + 256 * 16 + 2 * 8 * 256 * 64)
    for key in ("write-up policy (LHS + pipelining)", "write-up policy (neither)"):
        assert rows[key]["copy_bytes"]["d2h"] == nbytes, key
        assert rows[key]["step_ns"] > 0
    # the other layers' states (--states-gb 0.5) are in every program's peak: nothing to take off the limit
    for row in rows.values():
        assert 0.5e9 <= row["device_bytes"] < 0.5e9 + 50e6


def test_compare_mesh_limit_is_a_gb200s_usable_memory_and_tune_searches(mesh_compare):
    doc = mesh_compare
    assert doc["limit_bytes"] == int(186e9 * 0.75)
    assert "GB200" in doc["limit_why"] and "states are in the program" in doc["limit_why"]
    tune = doc["tune"]
    # 3 compiles under the flags on: the two rows, then the search's other bound (every name kept)
    assert tune["compiles"] == 1 and "budget" in tune["stop"]
    assert doc["compiles"] == 5  # and the write-up policy and remat with the flags off
    assert tune["label"] in ("recompute all", "keep all")
    assert tune["outcome"]["fits"]


def test_compare_bad_memory_limit_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(COMPARE), "--mesh", "--model", "llama", "--memory-limit", "lots",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "--memory-limit" in proc.stderr and "lots" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_mesh_limit_is_a_gb200s_on_the_b200_and_the_targets_elsewhere(monkeypatch):
    from benchmarks.writeup_compare import mesh_limit

    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    target = (60 * 2**30, "the target's memory x 0.75")
    assert mesh_limit(None, "NVIDIA B200", target)[0] == int(186e9 * 0.75)
    assert mesh_limit(None, "NVIDIA H100 80GB HBM3", target) == target
    assert mesh_limit(10**9, "NVIDIA B200", (10**9, "--memory-limit")) == (10**9, "--memory-limit")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    assert mesh_limit(None, "NVIDIA B200", target)[0] == int(186e9 * 0.9)
