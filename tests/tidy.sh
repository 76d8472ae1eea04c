#!/usr/bin/env bash
# clang-tidy with the checked-in .clang-tidy over the project's C++ sources.
#
#   tests/tidy.sh                 the .cc files changed against main's merge
#                                 base (or HEAD~1 on main), plus the .cc files
#                                 next to changed headers
#   tests/tidy.sh --all           every .cc file the build compiles, through
#                                 tests/tidy_all.py: files found clean before,
#                                 with nothing they read changed since, are
#                                 not checked again (tests/run.sh runs this)
#   tests/tidy.sh FILE.cc ...     those files
#
# Needs a configured build with compile_commands.json (SHELF_BUILD_DIR,
# default build/test; the generated protobuf headers must exist, so build
# once first). Exit status 0 only when clang-tidy reports nothing: run it
# clean before a change lands.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHELF_BUILD_DIR:-$root/build/test}
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
if [[ -z "$tidy" ]]; then
  echo "tidy.sh: clang-tidy not found (deploy/install-deps.sh installs clang-tidy)" >&2
  exit 2
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "tidy.sh: no $build/compile_commands.json: configure and build first" >&2
  exit 2
fi
cd "$root"

files=()
if [[ $# -eq 1 && "$1" == --all ]]; then
  exec /usr/bin/python3 "$root/tests/tidy_all.py" "$build"
elif [[ $# -gt 0 ]]; then
  files=("$@")
else
  base=$(git merge-base HEAD main 2>/dev/null || true)
  if [[ -z "$base" || "$base" == "$(git rev-parse HEAD)" ]]; then base=HEAD~1; fi
  mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.h')
  for f in "${changed[@]}"; do
    case "$f" in
      *.cc) files+=("$f") ;;
      *.h) [[ -f "${f%.h}.cc" ]] && files+=("${f%.h}.cc") ;;
    esac
  done
  mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u | sed '/^$/d')
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "tidy.sh: nothing to check"
  exit 0
fi

echo "tidy.sh: ${#files[@]} file(s), $(nproc) at a time" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The commands without the tests' precompiled header (tests/tidy_db.py).
db=$(/usr/bin/python3 "$root/tests/tidy_db.py" "$build")
# clang-tidy exits non-zero on a file it cannot parse; that is a finding too.
rc=0
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 1 "$tidy" -p "$db" --quiet 2>/dev/null >"$log" || rc=$?
if ((rc != 0)) && ! grep -qE '(warning|error):' "$log"; then
  echo "tidy.sh: clang-tidy failed (status $rc) without a finding" >&2
  exit 1
fi
if grep -qE '(warning|error):' "$log"; then
  grep -E -A3 '(warning|error):' "$log"
  echo "tidy.sh: $(grep -cE '(warning|error):' "$log") finding(s)" >&2
  exit 1
fi
echo "tidy.sh: clean"
