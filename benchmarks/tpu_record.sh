#!/usr/bin/env bash
# Issue 42: a second accelerator's recording with its HLO.  Records examples/train.py on the device
# machine's TPU, per policy: the step's times as the loop saw them, a jax.profiler trace (Perfetto
# and XPlane) of the captured steps and XLA's optimized HLO of the step; and the host link's copy
# rate each way.  Run there from the checkout's root:
#
#     bash benchmarks/tpu_record.sh OUT FORM [POLICY...]     # FORM: scan or unrolled
#
# OUT gets tpu-<form>-<policy>.tar.gz per policy and the link's rates.  $SIZE replaces the model's size
# below; TAG names that size in the files (tpu-<form><TAG>-<policy>); LINK=0 skips the link's rates.
set -u
out=${1:?OUT}
form=${2:?FORM (scan or unrolled)}
shift 2
policies=${*:-none remat offload_mlp offload_all}
size=${SIZE:---layers 8 --d-model 2048 --heads 16 --ffn 8192 --seq 1024 --batch 8 --vocab 32000 --dtype bfloat16 --steps 5 --warmup 2}
work=$(mktemp -d)/tpu-$form
mkdir -p "$out" "$work"
export PYTHONUNBUFFERED=1
python3 -c 'import jax, platform; print("jax", jax.__version__, jax.devices(), "glibc", platform.libc_ver()[1])'
[ "${LINK:-1}" = 1 ] && python3 benchmarks/tpu_link.py | tee "$work/link.txt"
scan=""
[ "$form" = scan ] && scan=--scan
for pol in $policies; do
    run=$work/$pol
    mkdir -p "$run/facts"
    echo "== $pol $form: $size" | tee "$run/command.txt"
    # PROFILE_STEP_RUN_DIR: annotate.capture writes facts/runtime.json, with each device's memory_stats()
    # (peak, limit) at the end of the captured steps, as under `profile-step run`
    # shellcheck disable=SC2086
    PROFILE_STEP_RUN_DIR="$run/facts" XLA_FLAGS="--xla_dump_to=$run/dump --xla_dump_hlo_as_text" timeout 200 \
        python3 examples/train.py --policy "$pol" $scan $size --jax-trace "$run/jax" >"$run/stdout.log" 2>&1
    echo "exit $?" >>"$run/stdout.log"
    grep -E "^(step|train.py|exit)" "$run/stdout.log"
    tail -3 "$run/stdout.log" | grep -iE "error|killed" || true
    # keep the step module's optimized HLO; drop the rest of the dump
    find "$run/dump" -type f ! -name '*jit_step*after_optimizations.txt' -delete
    find "$run/dump" -type d -empty -delete
    rm -f "$run/facts/compiled_step.hlo.txt" # the dump has it
    tar -C "$work" -czf "$out/tpu-$form${TAG:-}-$pol.tar.gz" "$pol"
    du -sh "$run" "$out/tpu-$form${TAG:-}-$pol.tar.gz"
    sleep 5 # the chip can refuse a program started just after another ended
done
[ -f "$work/link.txt" ] && cp "$work/link.txt" "$out/link-$form.txt"
ls -la "$out"
