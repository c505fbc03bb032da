# Sourced by the nsys stand-ins (nsys_import_fails.sh, nsys_loses_agent.sh): whether this `nsys profile`
# call is one to fail, by the stand-in's variables, named by the prefix in $1:
#   ${1}_POLICY      fail every call of this $PROFILE_STEP_POLICY
#   ${1}_COUNT_FILE  with ${1}_TIMES (default 1): fail the first N calls, counted in the file
fails_here() {
  local policy="${1}_POLICY" count="${1}_COUNT_FILE" times="${1}_TIMES" n
  if [ -n "${!policy:-}" ]; then
    [ "${PROFILE_STEP_POLICY:-}" = "${!policy}" ]
    return
  fi
  [ -n "${!count:-}" ] || return 1
  n=$(cat "${!count}" 2>/dev/null || echo 0)
  [ "$n" -lt "${!times:-1}" ] || return 1
  echo $((n + 1)) >"${!count}"
}
