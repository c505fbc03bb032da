#!/usr/bin/env bash
# Stands in for nsys in ONE failure mode only, the one the real nsys shows under load and cannot be made
# to show on demand: `nsys profile` prints "Connection to Agent lost ... 'End of file'", writes no
# report and exits 0. Every other call, and every profile call it does not fail, is the real nsys.
#   REAL_NSYS             the real nsys binary (required)
#   LOSE_AGENT_POLICY     fail every `profile` of this $PROFILE_STEP_POLICY
#   LOSE_AGENT_COUNT_FILE with LOSE_AGENT_TIMES (default 1): fail the first N `profile` calls, counted in the file
set -u
. "$(dirname "${BASH_SOURCE[0]}")/nsys_fails_here.sh"
if [ "${1:-}" = profile ] && fails_here LOSE_AGENT; then
  echo "Collecting data..."
  echo "Connection to Agent lost. This is most likely a bug. Internal reason: 'End of file'."
  exit 0
fi
exec "$REAL_NSYS" "$@"
