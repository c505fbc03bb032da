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
