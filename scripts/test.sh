#!/usr/bin/env bash
# The test command: set-up (idempotent, with the browser and .venv-aot for `profile-step plan`) then the whole suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh --browser --aot
export PATH="$here/.venv/bin:$PATH"
.venv/bin/ruff check profiler dashboards tests examples benchmarks
exec .venv/bin/python -m pytest "$@"
