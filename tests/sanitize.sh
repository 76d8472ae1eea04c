#!/usr/bin/env bash
# ThreadSanitizer on the tests whose threads share the project's own
# structures, in this process: the TCP data plane (DataServer + pooled
# TcpDataClient), RangeAllocator and the metrics layer
# (tests/fault/concurrency_test.cc, allocator_test, prom_test), the
# client's call coalescer, thread pool and async calls (call_coalescer_test,
# client_unit_test), the master's index, placement, leases and long polls
# under threads (master_test, master_race_test), the etcd client's
# keepalives, watches and retries and the leader election against a real
# etcd (etcd_client_test, coord_unit_test, election_test), and shelf-resp's event loop, worker pool and pipelines
# in front of a real cluster (resp_server_test; the cluster's daemons are
# the uninstrumented ones of the test build, $SHELF_BIN_DIR).
#
# Built from the project's CMake with clang and -DSHELF_SANITIZE=thread
# into build/tsan, only these targets and what they link. Every lock in
# the tree is a shelf::Mutex or shelf::SharedMutex (common/mutex.h), so
# TSan sees each lock and unlock. Debian's gRPC, protobuf, Abseil and
# RocksDB are uninstrumented: tests/tsan_suppressions.txt lists what is
# suppressed in them and why; nothing of the project's own code is.
#
#   bash tests/sanitize.sh          # build into build/tsan and run
# Exit status 0 only when every test passes with no report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHELF_TSAN_BUILD_DIR:-$root/build/tsan}
jobs=${SHELF_JOBS:-$(nproc)}
export SHELF_BIN_DIR=${SHELF_BIN_DIR:-$root/build/test/bin}
cc=$(command -v clang-14 || command -v clang || true)
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z "$cc" || -z "$cxx" ]]; then
  echo "sanitize: clang is not installed" >&2
  exit 2
fi
for daemon in shelf-master shelf-store; do
  if [[ ! -x "$SHELF_BIN_DIR/$daemon" ]]; then
    echo "sanitize: $SHELF_BIN_DIR/$daemon is missing: build the test build first" \
      "(tests/run.sh does), or point SHELF_BIN_DIR at its bin folder" >&2
    exit 2
  fi
done
tests=(concurrency_test allocator_test prom_test call_coalescer_test client_unit_test
       master_test master_race_test coord_unit_test etcd_client_test election_test
       resp_server_test)
# A folder configured by something else (the small project this script
# generated before, another compiler) is configured afresh.
if [[ -f "$build/CMakeCache.txt" ]] &&
   ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
if [[ -f "$build/CMakeCache.txt" ]] &&
   ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$cxx" "$build/CMakeCache.txt"; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DSHELF_SANITIZE=thread -DSHELF_SYNC_POINTS=ON -DSHELF_BUILD_PYTHON=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  >/dev/null
cmake --build "$build" -j"$jobs" --target "${tests[@]}"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan_suppressions.txt"
status=0
for test in "${tests[@]}"; do
  bin=$(find "$build/tests" -type f -name "$test" -perm -u+x | head -1)
  # Death tests fork a threaded process; TSan and they do not mix.
  if "$bin" --gtest_filter='-*DeathTest*' >"$build/$test.log" 2>&1; then
    echo "tsan: $test: $(grep -c '^\[       OK \]' "$build/$test.log") tests passed, no report"
  else
    echo "tsan: $test FAILED:" >&2
    tail -80 "$build/$test.log" >&2
    status=1
  fi
done
exit $status
