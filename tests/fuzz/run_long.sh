#!/usr/bin/env bash
# A long fuzzing session: every fuzzer for MINUTES each (default 30), with
# JOBS parallel workers (default 1), growing a corpus kept in the build
# folder (build/fuzz/corpus/<fuzzer>/, seeded from the committed one).
# With --merge, the new inputs that add coverage are merged (minimized)
# into the committed corpus under tests/fuzz/corpus/ to review and commit.
# Crashes land in build/fuzz/artifacts/: turn each into a regression input
# (tests/fuzz/README.md).
#
#   bash tests/fuzz/run_long.sh [MINUTES] [JOBS] [--merge]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
minutes=${1:-30}
jobs=${2:-1}
merge=${3:-}
build=${SHELF_FUZZ_BUILD_DIR:-$root/build/fuzz}
bash "$root/tests/fuzz/build.sh"
mkdir -p "$build/artifacts"
# libFuzzer writes its workers' logs (fuzz-N.log) into the working folder.
cd "$build"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for fuzzer in wire_fuzzer shm_fuzzer config_fuzzer master_fuzzer resp_fuzzer; do
  corpus=$build/corpus/$fuzzer
  mkdir -p "$corpus"
  find "$root/tests/fuzz/corpus/$fuzzer" -maxdepth 1 -type f ! -name 'known-bug-*' \
    -exec cp -n {} "$corpus/" \; 2>/dev/null || true
  echo "fuzz: $fuzzer for $minutes min with $jobs job(s)"
  rm -f "$build"/fuzz-*.log
  parallel=()
  ((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
  if ! "$build/$fuzzer" -max_total_time=$((minutes * 60)) -timeout=20 -rss_limit_mb=2048 \
      -print_final_stats=1 "${parallel[@]}" \
      -artifact_prefix="$build/artifacts/$fuzzer-" "$corpus" \
      >"$build/$fuzzer.long.log" 2>&1; then
    echo "fuzz: $fuzzer found a crash: see $build/$fuzzer.long.log and $build/artifacts/" >&2
    status=1
  fi
  cat "$build/$fuzzer.long.log" "$build"/fuzz-*.log 2>/dev/null |
    awk -v f="$fuzzer" '/^stat::number_of_executed_units/ {n += $2}
                        END {print "fuzz: " f ": " n + 0 " executions"}'
  if [[ "$merge" == "--merge" ]]; then
    "$build/$fuzzer" -merge=1 "$root/tests/fuzz/corpus/$fuzzer" "$corpus" \
      >"$build/$fuzzer.merge.log" 2>&1
  fi
done
exit $status
