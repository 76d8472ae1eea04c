#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into a build folder of their own
# (default build/fuzz; override with SHELF_FUZZ_BUILD_DIR), configuring
# tests/fuzz/CMakeLists.txt as a project of its own. The main build uses
# GCC; this one instruments only the project's code (address, undefined,
# fuzzer coverage) and links Debian's uninstrumented gRPC/protobuf/Abseil.
#
#   bash tests/fuzz/build.sh            # all fuzzers
#   bash tests/fuzz/build.sh wire_fuzzer
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SHELF_FUZZ_BUILD_DIR:-$root/build/fuzz}
jobs=${SHELF_JOBS:-$(nproc)}
cc=${SHELF_FUZZ_CC:-$(command -v clang-14 || command -v clang)}
cxx=${SHELF_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++)}
if [[ -z "$cc" || -z "$cxx" ]]; then
  echo "fuzz build: clang is not installed (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(wire_fuzzer shm_fuzzer config_fuzzer master_fuzzer resp_fuzzer)
fi
cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
