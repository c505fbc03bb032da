#!/usr/bin/env bash
# Stands in for nsys in ONE failure mode only, one the real nsys shows under load and cannot be made to
# show on demand: `nsys profile` runs the program, then its importer crashes while turning the raw capture
# into a report ("Importer error status: Importation failed." and an exception block of about 30 lines,
# as nsys 2023.4 and 2024.x print it), leaves the raw capture OUTPUT.qdstrm, writes no report and exits 0.
# Every other call, and every profile call it does not fail, is the real nsys.
#   REAL_NSYS              the real nsys binary (required)
#   IMPORT_FAILS_POLICY    fail every `profile` of this $PROFILE_STEP_POLICY
#   IMPORT_FAILS_COUNT_FILE with IMPORT_FAILS_TIMES (default 1): fail the first N `profile` calls
set -u
. "$(dirname "${BASH_SOURCE[0]}")/nsys_fails_here.sh"
if [ "${1:-}" = profile ] && fails_here IMPORT_FAILS; then
  shift
  out=report1
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
    case "$1" in --output=*) out="${1#--output=}" ;; esac
    shift
  done
  echo "Collecting data..."
  "$@"
  echo "Generating '${TMPDIR:-/tmp}/nsys-report-1f2e.qdstrm'"
  printf '\n[1/2] [0%%                          ] %s.nsys-rep\n' "$(basename "$out")"
  printf '[1/2] [==========47%%               ] %s.nsys-rep\n' "$(basename "$out")"
  cat "$(dirname "${BASH_SOURCE[0]}")/nsys_importer_crash.txt"  # as nsys 2023.4 and 2024.x print it
  printf 'raw capture (this stand-in)\n' >"$out.qdstrm"
  printf 'Generated:\n    %s.qdstrm\n' "$out"
  exit 0
fi
exec "$REAL_NSYS" "$@"
