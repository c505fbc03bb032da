#!/usr/bin/env bash
# The main job on an embedded default: set everything up, profile the example
# training step under every offload policy (tiny, on whatever JAX backend this
# machine has), show it per layer (or, where no GPU ran, a real public trace's
# hidden copies per stream, then the per-layer view of a SYNTHETIC demonstration
# run), the per-policy table, then the example compiled for an H100 without a
# GPU: which policy fits at which micro batch, and what each layer sends to host
# memory; and open the dashboard on the runs, sample_traces/ (real public traces
# first, then the demonstration runs) and, where ../shared/traces exists, the
# real public traces it lists under the Apache-2.0 or MIT licence.
#   bash scripts/quickstart.sh [extra profile-step options...]
#   QUICKSTART_NO_DASHBOARD=1 bash scripts/quickstart.sh     # everything but the dashboard
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh --aot
export PATH="$here/.venv/bin:$PATH"
dispatch=per-layer   # a CPU has no XLA thunk ranges: dispatch layers from Python to see them
if .venv/bin/python -c 'import jax,sys; sys.exit(jax.default_backend()!="gpu")' 2>/dev/null; then
  dispatch=fused
fi
policies=none,remat,offload_qkv,offload_mlp,offload_all
since=$(date -u +%Y%m%dT%H%M%S)
# a policy that ends without a trace (nsys can lose its agent under load) is listed, not fatal:
# profile-step exits 4 after every policy has run, and the steps below use the runs that have one
captured=0
profile-step --policies "$policies" --no-summary "$@" examples/train.py --layers 4 --steps 3 --dispatch "$dispatch" ||
  captured=$?
runs=()
traced=()
for d in runs/*/; do
  name=$(basename "$d")
  if [[ "$name" > "$since" || "$name" == "$since"* ]] && [[ "$name" != *.partial ]]; then
    runs+=("${d%/}")
    [ -f "$d/trace.sqlite" ] && traced+=("${d%/}")
  fi
done
if [ "${#traced[@]}" -eq 0 ]; then
  echo "quickstart: no policy ended with a trace (profile-step exited $captured); see the output above" >&2
  exit "$(( captured ? captured : 1 ))"
fi
if [ "$captured" -ne 0 ]; then
  echo "quickstart: profile-step exited $captured (see above); carrying on with the runs that have a trace"
fi
echo
# offload_qkv's run when it has a trace, else the last run that has one
pick=$(printf '%s\n' "${traced[@]}" | grep -- '-offload_qkv-' | tail -n1 || true)
trace="${pick:-${traced[-1]}}/trace.sqlite"
if profile-step analyze --json "$trace" | python -c 'import json,sys; sys.exit(not json.load(sys.stdin)["devices"])'; then
  profile-step analyze --by layer "$trace"
else
  h200=sample_traces/h200-example
  qkv=$(ls -d "$h200"/*-offload_qkv-??????/ | head -n1)
  echo "No GPU ran here, so nothing moved between host and device. Real copies of this same example"
  echo "instead, recorded by this project on an H200 (1.6 B parameters, bf16, jax.profiler;"
  echo "$h200/README.md): one row per policy, then offload_qkv per layer:"
  echo
  profile-step analyze "$h200"
  echo
  profile-step analyze --by layer "${qkv%/}/trace.json.gz"
fi
echo
echo "== the policy decision on this machine (measured) =="
profile-step analyze "${runs[@]}"
echo
# a step large enough for the choice to matter on an 80 GB device: 8 layers, sequence 4096, bf16
profile-step plan --target h100 --batch 4,16 --link pcie-gen5,nvlink-c2c --policies "$policies" examples/train.py \
  --layers 8 --d-model 1024 --heads 16 --ffn 4096 --seq 4096 --vocab 32000 --dtype bfloat16
if [ -z "${QUICKSTART_NO_DASHBOARD:-}" ]; then
  paths=(runs sample_traces)
  [ -d plans ] && paths+=(plans)  # the H100 plan above: the dashboard's Policy trade view shows it
  extra=()
  if [ -f ../shared/traces/CATALOG.tsv ]; then  # more public traces, shown where they lie, never copied
    paths+=(../shared/traces)
    extra=(--licence Apache-2.0 --licence MIT)  # those in sample_traces/public are shown once, from there
  fi
  echo
  echo "The dashboard, on ${paths[*]}:"
  if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    ( sleep 3; python3 -m webbrowser -t http://127.0.0.1:8050/ >/dev/null 2>&1 || true ) &
  fi
  exec profile-step dashboard "${paths[@]}" "${extra[@]}"
fi
