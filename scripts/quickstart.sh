#!/usr/bin/env bash
# The main job on an embedded default: set everything up, profile the example training step under
# two offload policies (tiny, on whatever JAX backend this machine has), show the results per layer,
# and open the dashboard on them, on the SYNTHETIC demonstration runs of sample_traces/ and, where
# ../shared/traces exists, on the real public traces it lists under the Apache-2.0 licence.
#   bash scripts/quickstart.sh [extra profile-step options...]
#   QUICKSTART_NO_DASHBOARD=1 bash scripts/quickstart.sh     # everything but the dashboard
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
trace="$(ls -d runs/*-offload_qkv-* | grep -v '\.partial$' | tail -n1)/trace.sqlite"
if profile-step analyze --json "$trace" | python -c 'import json,sys; sys.exit(not json.load(sys.stdin)["devices"])'; then
  profile-step analyze --by layer "$trace"
else
  demo=sample_traces/demo-synthetic/synthetic-4-offload_all/synthetic-trace.sqlite
  echo "No GPU ran here, so nothing moved between host and device. The same view of a SYNTHETIC"
  echo "demonstration run (offload_all on two modelled H100s: a model of a step, not a measurement;"
  echo "see sample_traces/README.md):"
  echo
  profile-step analyze --by layer "$demo"
fi
if [ -z "${QUICKSTART_NO_DASHBOARD:-}" ]; then
  paths=(runs sample_traces)
  extra=()
  if [ -f ../shared/traces/CATALOG.tsv ]; then  # real public traces, shown where they lie, never copied
    paths+=(../shared/traces)
    extra=(--licence Apache-2.0)
  fi
  echo
  echo "The dashboard, on ${paths[*]}:"
  if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    ( sleep 3; python3 -m webbrowser -t http://127.0.0.1:8050/ >/dev/null 2>&1 || true ) &
  fi
  exec profile-step dashboard "${paths[@]}" "${extra[@]}"
fi
