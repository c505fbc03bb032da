#!/usr/bin/env bash
# The test command: set-up (idempotent, with the browser) then the whole suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh --browser
export PATH="$here/.venv/bin:$PATH"
.venv/bin/ruff check profiler dashboards tests examples benchmarks
exec .venv/bin/python -m pytest "$@"
