"""Plans compiled once for the whole session by the real GPU compiler (.venv-aot) and read by several
test files: each compilation takes 10 to 20 s on two cores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.test_compiled_step import TRAIN, aot_python

__all__ = ["SMALL", "aot_python", "qkv_plan"]

# the example's small step: 2 layers of d_model 256, 4 heads, ffn 512, sequence 512
SMALL = ["--layers", "2", "--d-model", "256", "--heads", "4", "--ffn", "512", "--seq", "512"]


@pytest.fixture(scope="session")
def qkv_plan(aot_python, tmp_path_factory) -> tuple[dict[str, Any], Path]:
    """``plan --target h100 --policy offload_qkv --batch 8 --json`` of the small step: its JSON and its
    folder (``offload_qkv-b8/step.hlo.txt``, ``plan.json``); read only."""
    out = tmp_path_factory.mktemp("qkv") / "plan"
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8", "--out", str(out),
                   "--json", str(TRAIN), *SMALL, timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), out
