#!/usr/bin/env bash
# The main job on an embedded default: set everything up, profile the example
# training step under two offload policies (tiny, on whatever JAX backend this
# machine has), and show the results.
#   bash scripts/quickstart.sh [extra profile-step options...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh
export PATH="$here/.venv/bin:$PATH"
dispatch=per-layer   # a CPU has no XLA thunk ranges: dispatch layers from Python to see them
if .venv/bin/python -c 'import jax,sys; sys.exit(jax.default_backend()!="gpu")' 2>/dev/null; then
  dispatch=fused
fi
profile-step --policies none,offload_qkv "$@" examples/train.py --layers 4 --steps 3 --dispatch "$dispatch"
