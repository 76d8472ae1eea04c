#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test.
#   1. the RelWithDebInfo build (build/test) and its CTest suite (unit,
#      cluster, fault, security, Python tests against real processes), in
#      parallel;
#   2. clang-tidy's curated checks (.clang-tidy, less the static
#      analyzer) over every C++ file stage 1 compiled (tests/tidy_all.py;
#      files found clean before, with nothing they read changed since,
#      come from its cache in ~/.cache/shelf-tidy); any finding fails;
#   3. a short run of every libFuzzer target (tests/fuzz/run_short.sh:
#      clang build in build/fuzz, SHELF_FUZZ_SECONDS each, default 10);
#   4. the suite again, built by clang with AddressSanitizer and UBSan
#      (-DSHELF_SANITIZE=address,undefined, build/asan), ctest -j2, on the
#      labels in SHELF_ASAN_LABELS (default: all), less the packaging tests
#      and the clang thread-safety check, which stage 1 ran
#      (SHELF_ASAN_EXCLUDE, default ^deploy_|^thread_safety_).
#   5. ThreadSanitizer on the concurrency tests of the data plane,
#      allocator, metrics and call coalescer (tests/sanitize.sh: clang
#      build in build/tsan, no suppressions);
#   6. every skipped test, printed with its reason (tests/skips.sh); a skip
#      tests/allowed_skips.txt does not list fails the run.
# Logs of failing tests are printed. Exit status 0 only when all pass.
# SHELF_SKIP_TIDY=1 / SHELF_SKIP_FUZZ=1 / SHELF_SKIP_ASAN=1 /
# SHELF_SKIP_TSAN=1 leave out stages 2 / 3 / 4 / 5.
#
# Each stage's time, and how many compilations ccache answered, are
# printed at the end of every run; docs/testing.md has typical times. The
# whole run fits CI's 90 minutes with the entire ASan suite, so no label
# subset is needed by default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHELF_BUILD_DIR:-$root/build/test}
asan_build=${SHELF_ASAN_BUILD_DIR:-$root/build/asan}
jobs=${SHELF_JOBS:-$(nproc)}
asan_labels=${SHELF_ASAN_LABELS:-}
# ccache keyed by paths relative to the tree, not where it was cloned: a
# fresh clone in another folder (CI's) hits what an earlier one compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
command -v ccache >/dev/null 2>&1 && ccache -z >/dev/null 2>&1 || true
timings=()
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  timings+=("$(printf '%-20s %4d s%s' "$name" $((SECONDS - t0)) "$( ((rc)) && echo ", FAILED")")")
  return $rc
}
report() {
  echo "run.sh: stage times:"
  for t in "${timings[@]}"; do echo "  $t"; done
  # Cold or warm: how many compilations ccache answered.
  if command -v ccache >/dev/null 2>&1; then
    ccache --print-stats 2>/dev/null | awk '
      /^(direct|preprocessed)_cache_hit\t/ { hits += $2 }
      /^cache_miss\t/ { misses += $2 }
      END { total = hits + misses
            printf "run.sh: ccache: %d hits of %d compilations (%.0f%%)\n", hits, total,
                   total ? 100 * hits / total : 0 }'
  fi
}
trap report EXIT

stage install-deps bash "$root/deploy/install-deps.sh"
# Test builds compile the named sync points the race tests drive. -g1:
# line tables, all a failing test's report and a backtrace need; full
# debug info took a third of each compilation (docs/testing.md).
stage configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHELF_SYNC_POINTS=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" >/dev/null
stage build cmake --build "$build" -j"$jobs"
# CTest's output is kept (ctest-output.log) for tests/skips.sh.
ctest_logged() {
  local dir=$1
  shift
  ctest --test-dir "$dir" "$@" 2>&1 | tee "$dir/ctest-output.log"
}
stage ctest ctest_logged "$build" -j"$jobs" --output-on-failure --timeout 600

if [[ "${SHELF_SKIP_TIDY:-0}" != 1 ]]; then
  stage tidy /usr/bin/python3 "$root/tests/tidy_all.py" --no-analyzer "$build"
fi

if [[ "${SHELF_SKIP_FUZZ:-0}" != 1 ]]; then
  stage fuzz env SHELF_FUZZ_BUILD_DIR="${SHELF_FUZZ_BUILD_DIR:-$root/build/fuzz}" \
    bash "$root/tests/fuzz/run_short.sh" "${SHELF_FUZZ_SECONDS:-10}"
fi

if [[ "${SHELF_SKIP_ASAN:-0}" != 1 ]]; then
  # Debian's gRPC, protobuf and RocksDB are not instrumented; leaks they
  # keep for the life of a process are not ours, so LeakSanitizer is off.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # No Python module: an ASan extension cannot load into an uninstrumented
  # python3.
  # -O1 -g1: ASan's own advice for speed, and line tables are all its
  # reports need (file:line in every frame). Clang, as the fuzz and TSan
  # builds: the same sanitizers compile in two thirds of GCC's time, and
  # this build is the longest stage of a cold run (docs/testing.md).
  asan_cc=$(command -v clang-14 || command -v clang)
  asan_cxx=$(command -v clang++-14 || command -v clang++)
  # A folder configured with another compiler is configured afresh.
  if [[ -f "$asan_build/CMakeCache.txt" ]] &&
     ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$asan_cxx" "$asan_build/CMakeCache.txt"; then
    rm -rf "$asan_build/CMakeCache.txt" "$asan_build/CMakeFiles"
  fi
  stage asan-configure cmake -S "$root" -B "$asan_build" -G Ninja \
    -DCMAKE_C_COMPILER="$asan_cc" -DCMAKE_CXX_COMPILER="$asan_cxx" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHELF_SANITIZE=address,undefined -DSHELF_SYNC_POINTS=ON \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DSHELF_BUILD_PYTHON=OFF >/dev/null
  stage asan-build cmake --build "$asan_build" -j"$jobs"
  label_args=()
  [[ -n "$asan_labels" ]] && label_args=(-L "$asan_labels")
  # The deploy tests check packaging (which Debian packages the binaries
  # need), which instrumented binaries change; they run in stage 1.
  stage asan-ctest ctest_logged "$asan_build" -j"${SHELF_ASAN_JOBS:-2}" \
    --output-on-failure --timeout 900 -E "${SHELF_ASAN_EXCLUDE:-^deploy_|^thread_safety_}" "${label_args[@]}"
fi

if [[ "${SHELF_SKIP_TSAN:-0}" != 1 ]]; then
  stage tsan env SHELF_TSAN_BUILD_DIR="${SHELF_TSAN_BUILD_DIR:-$root/build/tsan}" \
    bash "$root/tests/sanitize.sh"
fi

# Every skipped test, with its reason; a skip that tests/allowed_skips.txt
# does not list (only the hardware tests are) fails the run.
skip_dirs=("$build")
[[ "${SHELF_SKIP_ASAN:-0}" != 1 ]] && skip_dirs+=("$asan_build")
stage skips bash "$root/tests/skips.sh" "${skip_dirs[@]}"
