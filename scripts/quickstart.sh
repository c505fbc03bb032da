#!/usr/bin/env bash
# The main job on an embedded default: set everything up, profile the example
# training step under every offload policy (tiny, on whatever JAX backend this
# machine has) and compile it for an H100 without a GPU; then print the answer
# first (== The answer ==: the one verdict over the runs just measured, the
# plan's line right after it), the details below it (the per-policy table; per
# layer, or where no GPU ran, the real H200 runs of this example; the plan in
# full), every command's whole output in runs/quickstart-TIME.log; and open the
# dashboard with the same runs selected (the same verdict) on the runs,
# sample_traces/ and, where ../shared/traces exists, the real public traces it
# lists under the Apache-2.0 or MIT licence.
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
mkdir -p runs
log="runs/quickstart-$since.log"  # every command's whole output; the terminal gets the answer, then the details
# a policy that ends without a trace (nsys can lose its agent under load) is listed, not fatal:
# profile-step exits 4 after every policy has run, and the steps below use the runs that have one
echo "Profiling the example under each policy ($policies), then compiling it for an H100 (a few minutes;"
echo "the whole output: $log)"
captured=0
profile-step --policies "$policies" --no-summary "$@" examples/train.py --layers 4 --steps 3 --dispatch "$dispatch" \
  >"$log" 2>&1 || captured=$?
grep -E '^== policy ' "$log" || true
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
  cat "$log" >&2
  echo "quickstart: no policy ended with a trace (profile-step exited $captured); see the output above" >&2
  exit "$(( captured ? captured : 1 ))"
fi
if [ "$captured" -ne 0 ]; then
  echo "quickstart: profile-step exited $captured ($log says why); carrying on with the runs that have a trace"
fi
# a step large enough for the choice to matter on an 80 GB device: 8 layers, sequence 4096, bf16
plan_out=$(mktemp)
trap 'rm -f "$plan_out"' EXIT
planned=0
plan_model=(--layers 8 --d-model 1024 --heads 16 --ffn 4096 --seq 4096 --vocab 32000 --dtype bfloat16)
plan_said="8 layers, d_model 1024, sequence 4096, batches 4 and 16"  # the same model, as the answer says it
profile-step plan --target h100 --batch 4,16 --link pcie-gen5,nvlink-c2c --policies "$policies" examples/train.py \
  "${plan_model[@]}" >"$plan_out" 2>>"$log" || planned=$?
cat "$plan_out" >>"$log"

# offload_qkv's run when it has a trace, else the last run that has one
pick=$(printf '%s\n' "${traced[@]}" | grep -- '-offload_qkv-' | tail -n1 || true)
trace="${pick:-${traced[-1]}}/trace.sqlite"
h200=sample_traces/h200-example
answered=("${runs[@]}")  # the runs the answer is over: those just measured, where a GPU ran
on_gpu=1
profile-step analyze --json "$trace" | python -c 'import json,sys; sys.exit(not json.load(sys.stdin)["devices"])' ||
  on_gpu=0
if [ "$on_gpu" = 0 ]; then  # a CPU step says nothing about a GPU: the answer is the example's real H200 runs'
  answered=("$h200")
fi

# the answer first: the one verdict, the plan's line right after it; then the details
echo
if [ "$on_gpu" = 1 ]; then
  echo "== The answer (the runs just measured) =="
else
  echo "== The answer (no GPU here: this example's 8 runs measured on an H200, $h200) =="
  echo "(that model: 8 layers, d_model 4096, sequence 2048, batch 4, bf16, about 1.6 B parameters)"
fi
profile-step analyze --verdict-only "${answered[@]}"
if head -n1 "$plan_out" | grep -q '^The plan ('; then
  echo "(the plan: another size of the example, $plan_said, compiled here for an H100"
  echo " without a GPU: another model than the runs above, so its pick may differ)"
  sed -n '1,/^$/p' "$plan_out" | sed '/^$/d'
  sed -i '1,/^$/d' "$plan_out"
else
  echo "The plan: profile-step plan exited $planned ($log says why)"
fi
echo "(the details follow; profile-step analyze --wide on the same runs prints each line whole)"

echo
echo "== The details: the policy table of the runs on this machine (measured) =="
profile-step analyze --no-verdict "${runs[@]}"
echo
if [ "$on_gpu" = 1 ]; then
  echo "== offload_qkv per layer =="
  profile-step analyze --no-verdict --by layer "$trace"
else
  # the run whose copies the answer above shows (the fastest that offloads), as the dashboard opens on it
  mlp=$(ls -d "$h200"/*-offload_mlp-??????/ | head -n1)
  echo "== Real copies of this example, measured on an H200 =="
  echo "No GPU ran here, so nothing moved between host and device. Real copies of this same example"
  echo "instead, recorded by this project on an H200 (1.6 B parameters, bf16, jax.profiler;"
  echo "$h200/README.md): one row per policy, then offload_mlp per layer (the run the answer shows):"
  echo
  profile-step analyze --no-verdict "$h200"
  echo
  profile-step analyze --no-verdict --by layer "${mlp%/}/trace.json.gz"
fi
echo
echo "== The plan for an H100 in full =="
cat "$plan_out"
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
  first=()  # the first view selects the runs the answer above is over: the same verdict
  for r in "${answered[@]}"; do first+=(--first "$r"); done
  rm -f "$plan_out"
  exec profile-step dashboard "${first[@]}" "${paths[@]}" "${extra[@]}"
fi
