#!/usr/bin/env bash
# Lists every skipped test of the CTest runs in the given build folders,
# with its reason, and fails when a skip is not allowed.
#
#   bash tests/skips.sh build/test [build/asan ...]
#
# CTest counts a GoogleTest that called GTEST_SKIP() (or a pytest skip) as
# passed, so a test that cannot run here would pass unseen. This reads each
# build's Testing/Temporary/LastTest.log, finds the skipped GoogleTest cases
# ("[  SKIPPED ] Suite.Name (N ms)", with the reason printed above it) and
# pytest's "SKIPPED [n] file:line: reason" lines (pytest runs with -rs),
# and the tests CTest itself reports skipped (from ctest-output.log, the
# run's output that tests/run.sh keeps), prints them all, and compares
# each against tests/allowed_skips.txt: one
# line per allowed skip, "PATTERN  reason", where PATTERN is a shell glob
# over "CTEST_NAME/CASE" (the GoogleTest Suite.Name, "pytest" and the
# skip's location, or "ctest" for a whole test CTest skipped). Exit status 0 when every skip is allowed (or none
# happened), 1 otherwise, 2 when a build folder has no CTest log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
allowed_file=${SHELF_ALLOWED_SKIPS:-$root/tests/allowed_skips.txt}
if [[ $# -eq 0 ]]; then
  echo "usage: skips.sh BUILD_DIR [BUILD_DIR ...]" >&2
  exit 2
fi

patterns=()
reasons=()
if [[ -f "$allowed_file" ]]; then
  while IFS= read -r line; do
    [[ -z "${line// /}" || "$line" == \#* ]] && continue
    patterns+=("${line%%[[:space:]]*}")
    reasons+=("$(sed -E 's/^[^[:space:]]+[[:space:]]+//' <<<"$line")")
  done <"$allowed_file"
fi

# Prints "CTEST_NAME/ctest<TAB>reason" for each test CTest itself marked
# skipped (SKIP_RETURN_CODE; the log says "Test Passed." for those, so the
# list comes from ctest's own summary, which tests/run.sh keeps in
# ctest-output.log), with the test's last line of output as the reason.
list_ctest_skips() {
  local summary=$1 log=$2 name why
  [[ -f "$summary" ]] || return 0
  sed -nE 's/^[[:space:]]+[0-9]+ - ([^ ]+) \((Skipped|Not Run|Disabled)\)$/\1/p' "$summary" |
    while read -r name; do
      why=$(awk -v t="$name" '
        $0 == "Output:" && cur == t { on = 1; last = ""; next }
        /^[0-9]+\/[0-9]+ Test: / { cur = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", cur) }
        on && /^<end of output>$/ { print last; exit }
        on && $0 != "" && $0 !~ /^-+$/ { last = $0 }
      ' "$log")
      printf "%s/ctest\t%s\n" "$name" "${why:-(no output)}"
    done
}

# Prints "CTEST_NAME/CASE<TAB>reason" for each skip in a LastTest.log.
list_skips() {
  awk '
    /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); test = $0; next }
    /^\[ RUN      \] / { reason = ""; grab = 0; next }
    /: Skipped$/ { grab = 1; reason = ""; next }
    grab && /^\[  SKIPPED \] / { grab = 0 }
    grab { if ($0 != "") reason = reason (reason == "" ? "" : " ") $0; next }
    /^\[  SKIPPED \] .* \([0-9]+ ms\)$/ {
      name = $0; sub(/^\[  SKIPPED \] /, "", name); sub(/ \([0-9]+ ms\)$/, "", name)
      printf "%s/%s\t%s\n", test, name, (reason == "" ? "(no reason given)" : reason)
      reason = ""
      next
    }
    /^SKIPPED \[[0-9]+\] / {
      line = $0; sub(/^SKIPPED \[[0-9]+\] /, "", line)
      where = line; sub(/: .*$/, "", where)
      why = line; sub(/^[^ ]*: /, "", why)
      printf "%s/pytest %s\t%s\n", test, where, why
    }
  ' "$1"
}

status=0
total=0
for dir in "$@"; do
  log="$dir/Testing/Temporary/LastTest.log"
  if [[ ! -f "$log" ]]; then
    echo "skips: no CTest log in $dir" >&2
    exit 2
  fi
  while IFS=$'\t' read -r id why; do
    [[ -z "$id" ]] && continue
    total=$((total + 1))
    verdict="NOT ALLOWED"
    for i in "${!patterns[@]}"; do
      # shellcheck disable=SC2053
      if [[ "$id" == ${patterns[$i]} ]]; then
        verdict="allowed: ${reasons[$i]}"
        break
      fi
    done
    [[ "$verdict" == "NOT ALLOWED" ]] && status=1
    echo "skipped ($(basename "$dir")): $id"
    echo "    reason: $why"
    echo "    $verdict"
  done < <(list_skips "$log"; list_ctest_skips "$dir/ctest-output.log" "$log")
done
if [[ $total -eq 0 ]]; then
  echo "skips: no test skipped"
elif [[ $status -ne 0 ]]; then
  echo "skips: a test skipped that tests/allowed_skips.txt does not allow: make it run here, or list it there with the reason" >&2
else
  echo "skips: $total skipped, each allowed by tests/allowed_skips.txt"
fi
exit $status
