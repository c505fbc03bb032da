#!/usr/bin/env bash
# On a lent GPU machine (see scripts/make_device_kit.sh): profile examples/train.py per
# policy under nsys with profile-step, record each policy once with jax.profiler too,
# keep XLA's optimized HLO (host-memory buffers show as S(5)), and pack what comes back
# into $OUT (at most 8 files of 16 MiB).
#   bash scripts/device_capture.sh [--tiny]     (--tiny: CPU-sized, to try the script anywhere)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:?set OUT to the folder whose files come back}
tiny=0; [ "${1:-}" = --tiny ] && tiny=1
if [ -f .device/nsys.tar.xz ] && ! command -v nsys >/dev/null; then
  mkdir -p /opt/nsys && tar -xJf .device/nsys.tar.xz -C /opt/nsys && export PATH=/opt/nsys/target-linux-x64:$PATH
fi
if [ -d .device/wheels ] && ! python3 -c 'import nvtx' 2>/dev/null; then
  python3 -m pip install --quiet --no-index --find-links .device/wheels nvtx || echo "nvtx wheel did not install"
fi
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
work=$(mktemp -d)
{
  nsys --version || echo "no nsys"
  nvidia-smi -L || echo "no nvidia-smi"
  "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
} 2>&1 | tee "$work/machine.txt"
if [ "$tiny" = 1 ]; then
  size=(--layers 2 --d-model 64 --heads 4 --ffn 256 --seq 32 --batch 2 --dispatch per-layer)
  policies=(none offload_qkv)
else  # big enough on an H200 that copies are not lost in launch overhead
  size=(--layers 8 --d-model 4096 --heads 32 --ffn 16384 --seq 2048 --batch 4 --dtype bfloat16)
  policies=(none remat offload_qkv offload_mlp)
fi
status=0
for p in "${policies[@]}"; do
  XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=$work/hlo/$p --xla_dump_hlo_as_text" \
    timeout 150 "$py" -m profiler.cli --policy "$p" --runs-dir "$work/runs" --no-summary \
    examples/train.py "${size[@]}" --steps 3 --warmup 2 2>&1 | tail -n 40 | tee -a "$work/profile.log" || status=1
done
# jax.profiler for the first offload policy, in case nsys 2023.4 cannot trace this CUDA
timeout 120 "$py" examples/train.py --policy "${policies[1]}" "${size[@]}" --steps 3 --warmup 2 \
  --jax-trace "$work/jax_trace" > "$work/jax_trace.log" 2>&1 || status=1
# keep only the final optimized HLO of the training step
find "$work/hlo" -type f ! -name '*after_optimizations.txt' -delete 2>/dev/null
mkdir -p "$out"
for d in "$work"/runs/*/; do
  name=$(basename "$d")
  tar -C "$work/runs" -cJf "$out/$name.tar.xz" --exclude='*.nsys-rep' "$name"
done
tar -C "$work" -cJf "$out/hlo_jaxtrace_logs.tar.xz" machine.txt profile.log jax_trace.log \
  $(cd "$work" && ls -d hlo jax_trace 2>/dev/null)
ls -l "$out"
exit $status
