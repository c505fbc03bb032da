#!/usr/bin/env bash
# The test command: set-up (idempotent, with the browser and .venv-aot for `profile-step plan`) then the whole suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh --browser --aot
export PATH="$here/.venv/bin:$PATH"
.venv/bin/ruff check profiler dashboards tests examples benchmarks
# the suite spends most of its time in one process at a time (nsys, XLA's compiles, Chromium): a worker a
# core, at most 4, each taking whole test modules (their module-scoped fixtures are built once);
# PROFILE_STEP_TEST_WORKERS=0 runs it in this process alone
workers=${PROFILE_STEP_TEST_WORKERS:-$(n=$(nproc); echo $((n < 4 ? n : 4)))}
if [ "$workers" -gt 1 ]; then
  exec .venv/bin/python -m pytest -n "$workers" --dist loadfile "$@"
fi
exec .venv/bin/python -m pytest "$@"
