#!/usr/bin/env bash
# Mutation testing of one core module with mutmut 3 (docs/testing.md): not part of CI, it is slow.
#
#   bash scripts/mutation.sh MODULE [mutant name globs]     e.g. bash scripts/mutation.sh units
#   bash scripts/mutation.sh MODULE --report                 the score and the survivors of the last run again
#
# MODULE is one of the names below; each mutates its source files and runs only its tests.  The run
# happens in .mutation/MODULE/ (a copy of the checkout's files; mutmut writes its mutants/ there), one
# mutant at a time and niced, so that the shared machine keeps a core free.  The score is printed at
# the end; every mutant's status is kept in .mutation/MODULE/results.txt (`mutmut show NAME` there
# prints a mutant's diff).  Each mutant the tests do not kill is then run on the shared real traces
# (scripts/mutation_golden.py): .mutation/MODULE/survivors.txt says whether it changes their
# `analyze --json` (and for the replay, `whatif --json`) documents.
set -euo pipefail

main() {
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
module=${1:?usage: bash scripts/mutation.sh MODULE [--report] (units, intervals, overlap, stalls, kernels_slowed, replay, findings_config, findings_rules, savings, findings_savings, predict, command_buffers, roofline, step, schedule, from_recording, replay_rules, calibrate, plan_costs, recorded, measured)}
shift
report_only=0
if [ "${1:-}" = --report ]; then report_only=1; shift; fi

skip=""  # a regular expression: lines that match it are not mutated
case "$module" in
  units)
    sources="profiler/units.py"
    tests="tests/cli/test_units_edges.py tests/cli/test_presentation.py" ;;
  intervals)
    sources="profiler/analysis/intervals.py"
    tests="tests/analysis/test_intervals.py tests/analysis/test_device_reference.py" ;;
  overlap)
    sources="profiler/analysis/overlap.py"
    # the per-range, step and layer numbers (offload_metrics, stall_ns) are read by attribution and costs
    tests="tests/analysis/test_device_reference.py tests/analysis/test_metrics_synthetic.py tests/analysis/test_attribution.py tests/analysis/test_costs.py" ;;
  stalls)
    sources="profiler/analysis/stalls.py profiler/analysis/dependencies.py"
    # the reference, the scenarios derived by hand (per-range stalls too) and rule 4 at its limits
    tests="tests/analysis/test_costs_reference.py tests/analysis/test_costs.py tests/analysis/test_stalls_boundaries.py" ;;
  kernels_slowed)
    sources="profiler/analysis/kernels_slowed.py"
    tests="tests/analysis/test_kernels_slowed.py" ;;
  replay)
    sources="profiler/analysis/replay.py"
    # the reference, the what-ifs derived by hand, and the savings (the replay's changes)
    tests="tests/analysis/test_costs_reference.py tests/analysis/test_costs.py tests/analysis/test_savings.py tests/analysis/test_replay_cases.py tests/analysis/test_stalls_boundaries.py" ;;
  findings_config)  # the thresholds, their comparisons and the configuration file
    sources="profiler/analysis/findings/config.py"
    tests="tests/findings/test_findings_thresholds.py tests/findings/test_findings.py" ;;
  findings_rules)  # in the rules, the lines that compare with a threshold (not their verdicts' words)
    sources="profiler/analysis/findings/rules/*.py"
    skip='^(?!.*config\[)'
    tests="tests/findings/test_findings_thresholds.py tests/findings/test_findings.py" ;;
  savings)  # the savings of a change: windows, capture, per-step medians, the copy-free bound
    sources="profiler/analysis/savings.py"
    # the cases derived by hand first, then the findings' savings and the generated exports
    tests="tests/analysis/test_savings_cases.py tests/analysis/test_savings_ops.py tests/analysis/test_keyed_by_position.py tests/analysis/test_savings.py tests/findings/test_findings_cost.py" ;;
  findings_savings)  # the change each finding asks the replay for, and the saving attached to it
    sources="profiler/analysis/findings/saving.py profiler/analysis/findings/changes.py"
    tests="tests/findings/test_findings_saving.py tests/findings/test_findings_changes.py tests/analysis/test_savings.py tests/findings/test_findings.py tests/findings/test_findings_cost.py tests/findings/test_findings_thresholds.py" ;;
  command_buffers)  # a command buffer's kernels given to their instructions (instruction_times.py's own mutants too)
    sources="profiler/analysis/instruction_times.py"
    tests="tests/predict/test_command_buffers.py tests/predict/test_measured.py tests/predict/test_replay_invariants.py" ;;
  roofline)  # the cost model alone: FLOPs, bytes, collectives, the device from its description
    sources="profiler/predict/roofline.py"
    tests="tests/predict/test_roofline_cases.py tests/predict/test_roofline_gemm.py tests/predict/test_roofline_attention.py tests/predict/test_predict_reference.py tests/predict/test_calibrate_cases.py tests/predict/test_xla_estimates.py" ;;
  step)  # predict_file: the predictions per link, the device, the notes
    sources="profiler/predict/step.py"
    tests="tests/predict/test_predict_file.py tests/predict/test_predict_reference.py tests/capture/test_hlo_tuple_reads.py tests/predict/test_xla_estimates.py" ;;
  schedule)  # the unrolled schedule the simulator replays: ops, kinds, loops, calls, async pairs, payloads
    sources="profiler/predict/schedule.py"
    tests="tests/predict/test_schedule_cases.py tests/predict/test_simulate_cases.py tests/predict/test_replay_invariants.py tests/predict/test_command_buffers.py" ;;
  from_recording)  # plan --from's document: the replay, the roofline, the largest gaps, each prediction's error
    sources="profiler/predict/from_recording.py"
    tests="tests/predict/test_from_recording_cases.py tests/predict/test_plan_from.py tests/predict/test_cross_device.py" ;;
  replay_rules)  # the rules both replays keep: the op before each on its stream, rows too early, streams too short
    sources="profiler/analysis/replay_rules.py"
    tests="tests/analysis/test_replay_rules_cases.py tests/predict/test_replay_invariants.py" ;;
  calibrate)  # costs from a run: the class scales, the measured durations, XLA's estimates of a carried fit
    sources="profiler/predict/calibrate.py"
    tests="tests/predict/test_calibrate_cases.py tests/predict/test_xla_estimates.py" ;;
  plan_costs)  # a run's costs in a plan: the PGLE profile, the results' modules and links, plan --pgle and --calibrate
    sources="profiler/predict/plan_costs.py"
    tests="tests/predict/test_plan_costs_cases.py tests/predict/test_host_link.py tests/predict/test_measured.py" ;;
  recorded)  # a run's own step predicted against what it measured: the policy table's predicted columns
    sources="profiler/predict/recorded.py"
    tests="tests/predict/test_recorded_cases.py tests/predict/test_predict.py" ;;
  measured)  # what a recording measured: archives, exports, run folders, TPU traces; the op classes of its times
    sources="profiler/predict/measured.py profiler/predict/tpu_trace.py"
    tests="tests/predict/test_measured_cases.py tests/predict/test_measured.py tests/predict/test_tpu_recordings.py" ;;
  predict)  # the step's prediction: schedule, roofline, the replay of a schedule, calibration, recordings
    sources="profiler/predict/*.py profiler/analysis/replay_rules.py"
    # in-process tests, fast ones first; plan's compiles (.venv-aot, subprocesses) count for nothing here
    tests="tests/predict/test_replay_invariants.py tests/predict/test_predict.py tests/predict/test_predict_reference.py tests/predict/test_measured.py tests/predict/test_roofline_gemm.py tests/predict/test_roofline_attention.py tests/capture/test_hlo_tuple_reads.py tests/predict/test_late_copies.py tests/traces/test_jax_toolbox.py" ;;
  *) echo "mutation.sh: unknown module $module" >&2; exit 2 ;;
esac

.venv/bin/python -c 'import mutmut' 2>/dev/null || {
  echo "mutation.sh: mutmut is not installed: .venv/bin/pip install 'mutmut==3.8.1'" >&2; exit 1; }
shared=$(cd .. && pwd)/shared
work=.mutation/$module
export PROFILE_STEP_SHARED=${PROFILE_STEP_SHARED:-$shared}
export HYPOTHESIS_PROFILE=mutation  # tests/conftest.py: fixed examples, no shrinking
if [ "$report_only" = 1 ]; then
  cd "$work"
  report
  return
fi
rm -rf "$work"
mkdir -p "$work/mutants"
# the checkout as it is (tracked and new files), without the environments and nsys (linked instead)
git ls-files -z --cached --others --exclude-standard | grep -zv '^\.mutation/' | xargs -0 cp --parents -t "$work"
if [ "$module" = findings_rules ]; then  # mutmut 3 skips decorated functions: the rules' @rule moved
  # shellcheck disable=SC2086 # the glob of the sources is meant
  (cd "$work" && "$here/.venv/bin/python" "$here/scripts/mutation_undecorate.py" $sources)
fi
for link in .tools .venv-aot; do
  if [ -e "$link" ]; then ln -s "$here/$link" "$work/mutants/$link"; fi
done
list() { for x in "$@"; do printf '\n    %s' "$x"; done; }
# shellcheck disable=SC2086 # word splitting of the lists is meant
{
  echo "[mutmut]"
  echo "source_paths = profiler"
  echo "only_mutate =$(list $sources)"
  echo "pytest_add_cli_args_test_selection =$(list $tests)"
  echo "pytest_add_cli_args =$(list -p no:cacheprovider -x -q)"
  # workers forked from a fresh server, not from the process that ran the tests: polars' and numpy's
  # threads there can hold a lock at the fork, and the worker then waits forever (every mutant a timeout)
  echo "process_isolation = forkserver"
  echo "also_copy =$(list $(cd "$work" && ls -A | grep -vx -e profiler -e mutants))"
  if [ -n "$skip" ]; then echo "do_not_mutate_patterns =$(list "$skip")"; fi
} >"$work/setup.cfg"
cd "$work"
if [ "${MUTATION_GENERATE_ONLY:-}" = 1 ]; then  # mutants/ and their .meta files only (run them elsewhere)
  "$here/.venv/bin/python" "$here/scripts/mutation_generate.py"
  return
fi
echo "mutation.sh: $module: mutating $sources; tests: $tests (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
start=$(date +%s)
nice -n 10 "$here/.venv/bin/python" -m mutmut run --max-children 1 "$@" >run.log 2>&1 || {
  tail -n 30 run.log >&2
  exit 1
}
echo "mutation.sh: $module: mutmut ran in $(($(date +%s) - start)) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
report
}

report() {
"$here/.venv/bin/python" -m mutmut results --all true >results.txt 2>&1 || true
total=$(grep -v ': not checked' results.txt | grep -c ': ' || true)
killed=$(grep -c ': killed' results.txt || true)
echo "mutation.sh: $module: $killed of $total mutants killed"
# The rest: does each change what users see on the shared real traces (scripts/mutation_golden.py)?
extra=""
[ "$module" = replay ] && extra=whatif
golden() { (cd mutants && nice -n 10 timeout 900 "$here/.venv/bin/python" "$here/scripts/mutation_golden.py" "$@"); }
unset MUTANT_UNDER_TEST
golden write "$PWD/golden" $extra >/dev/null
: >survivors.txt
grep -v -e ': killed' -e ': not checked' results.txt | while read -r name status; do
  name=${name%:}
  if MUTANT_UNDER_TEST=$name golden check "$PWD/golden" $extra >/dev/null 2>&1; then
    seen="same output on the shared traces"
  else
    seen="CHANGES the output on the shared traces"
  fi
  echo "$name $status $seen" | tee -a survivors.txt
done
}

main "$@"
exit
