"""The checkout, the shared real data beside it, and whether this is CI."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the project's shared real data: ../shared beside the checkout (PROFILE_STEP_SHARED: elsewhere)
SHARED = Path(os.environ.get("PROFILE_STEP_SHARED") or ROOT.parent / "shared")
SHARED_TRACES = SHARED / "traces"
SHARED_HLO = SHARED / "hlo"
AOT_HLO = SHARED_HLO / "aot_h100__two_layer_offload_step_after_opt.hlo.txt"  # the real H100 step
TRAIN = ROOT / "examples" / "train.py"  # the project's example training step
SCRIPTS = ROOT / "tests" / "scripts"  # the tests' own training scripts
# examples/train.py at a size that compiles in seconds
SMALL_STEP = ["--layers", "2", "--d-model", "256", "--heads", "4", "--ffn", "512", "--seq", "512"]


def in_ci() -> bool:
    """Whether this is CI (``CI`` set, as CI services do): what CI installs must be there, not skipped."""
    return bool(os.environ.get("CI"))
