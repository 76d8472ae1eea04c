#!/usr/bin/env bash
# ThreadSanitizer on the concurrency tests of the project's own structures:
# the TCP data plane (DataServer + pooled TcpDataClient), RangeAllocator,
# the metrics layer over prometheus-cpp (tests/fault/concurrency_test.cc),
# the allocator and metrics (common/prom.h) unit tests, and the client's
# call coalescer (client/call_coalescer.h). Built with clang
# -fsanitize=thread from a small CMake project generated here, from the sources alone: no gRPC, no
# RocksDB, no protobuf (Debian ships them uninstrumented, and TSan reports
# races it cannot see the synchronization of).
#
# Abseil is uninstrumented too, so TSan would not see absl::Mutex lock and
# unlock: the sources built here lock std::mutex (shelf::Mutex) instead, and
# the run has no suppressions at all: any report fails it.
#
#   bash tests/sanitize.sh          # build into build/tsan and run
# Exit status 0 only when every test passes with no report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHELF_TSAN_BUILD_DIR:-$root/build/tsan}
jobs=${SHELF_JOBS:-$(nproc)}
cc=$(command -v clang-14 || command -v clang || true)
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z "$cc" || -z "$cxx" ]]; then
  echo "sanitize: clang is not installed" >&2
  exit 2
fi
mkdir -p "$build/project"
cat >"$build/project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.22)
project(shelf_tsan LANGUAGES C CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(ROOT "$root")
add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g -O1)
add_link_options(-fsanitize=thread)
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
# prometheus-cpp-core is uninstrumented too: its counters are atomics and its
# families lock std::mutex, whose pthread calls TSan intercepts.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PROMETHEUS_CPP_CORE REQUIRED IMPORTED_TARGET prometheus-cpp-core)
add_library(shelf_tsan_lib STATIC
  \${ROOT}/common/flags.cc \${ROOT}/common/hmac.cc \${ROOT}/common/log.cc
  \${ROOT}/common/net.cc \${ROOT}/common/secret_file.cc \${ROOT}/common/sync_point.cc \${ROOT}/common/units.cc
  \${ROOT}/common/prom.cc \${ROOT}/storage/allocator.cc
  \${ROOT}/transport/wire.cc \${ROOT}/transport/session.cc \${ROOT}/transport/data_tls.cc
  \${ROOT}/transport/data_server.cc \${ROOT}/transport/tcp_client.cc)
target_include_directories(shelf_tsan_lib PUBLIC \${ROOT} \${ROOT}/common/include)
target_link_libraries(shelf_tsan_lib PUBLIC absl::status absl::statusor absl::strings
  absl::str_format absl::synchronization \${XXHASH_LIBRARY} OpenSSL::SSL OpenSSL::Crypto Threads::Threads
  PkgConfig::PROMETHEUS_CPP_CORE)
foreach(test concurrency_test:tests/fault/concurrency_test.cc
             allocator_test:tests/storage/allocator_test.cc
             prom_test:tests/metrics/prom_test.cc
             call_coalescer_test:tests/client/call_coalescer_test.cc)
  string(REPLACE ":" ";" parts \${test})
  list(GET parts 0 name)
  list(GET parts 1 src)
  add_executable(\${name} \${ROOT}/\${src})
  target_link_libraries(\${name} PRIVATE shelf_tsan_lib GTest::gtest GTest::gtest_main)
endforeach()
CMAKE
cmake -S "$build/project" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j"$jobs"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
status=0
for test in concurrency_test allocator_test prom_test call_coalescer_test; do
  # Death tests fork a threaded process; TSan and they do not mix.
  if "$build/$test" --gtest_filter='-*DeathTest*' >"$build/$test.log" 2>&1; then
    echo "tsan: $test: $(grep -c '^\[       OK \]' "$build/$test.log") tests passed, no report"
  else
    echo "tsan: $test FAILED:" >&2
    tail -80 "$build/$test.log" >&2
    status=1
  fi
done
exit $status
