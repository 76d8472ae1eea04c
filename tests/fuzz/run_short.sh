#!/usr/bin/env bash
# A short run of every fuzzer (part of tests/run.sh): builds them if needed,
# then runs each for SECONDS (default 10) from the committed corpus
# (tests/fuzz/corpus/<fuzzer>/, less its known-bug-* inputs), in a scratch
# folder so the committed corpus does not change. Prints each fuzzer's
# executions; a crash leaves its input under build/fuzz/artifacts/ and
# fails the run.
#
#   bash tests/fuzz/run_short.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-10}
build=${SHELF_FUZZ_BUILD_DIR:-$root/build/fuzz}
bash "$root/tests/fuzz/build.sh"
artifacts=$build/artifacts
mkdir -p "$artifacts"
scratch=$(mktemp -d /tmp/shelf-fuzz-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# LeakSanitizer is off: the fuzzers run many short inputs and Debian's
# uninstrumented libraries keep process-lifetime allocations.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
total=0
for fuzzer in wire_fuzzer shm_fuzzer config_fuzzer master_fuzzer resp_fuzzer; do
  seeds=$scratch/$fuzzer-seeds
  mkdir -p "$seeds" "$scratch/$fuzzer-new"
  find "$root/tests/fuzz/corpus/$fuzzer" -maxdepth 1 -type f ! -name 'known-bug-*' \
    -exec cp {} "$seeds/" \; 2>/dev/null || true
  log=$scratch/$fuzzer.log
  if "$build/$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$fuzzer-" \
      "$scratch/$fuzzer-new" "$seeds" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz: $fuzzer: ${runs:-?} executions in ${seconds}s, no crash"
    total=$((total + ${runs:-0}))
  else
    echo "fuzz: $fuzzer FAILED; its log:" >&2
    tail -60 "$log" >&2
    status=1
  fi
done
echo "fuzz: $total executions in all"
exit $status
