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
echo
profile-step analyze --by layer "$(ls -d runs/*-offload_qkv-* | grep -v '\.partial$' | tail -n1)/trace.sqlite"
if [ -z "${QUICKSTART_NO_DASHBOARD:-}" ]; then
  echo
  echo "Opening the dashboard on runs/ and sample_traces/ (Ctrl-C to stop)."
  ( sleep 3; python3 -m webbrowser -t http://127.0.0.1:8050/ >/dev/null 2>&1 || true ) &
  exec profile-step dashboard runs sample_traces
fi
