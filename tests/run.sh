#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test.
#   1. the RelWithDebInfo build and its CTest suite (unit, cluster, fault,
#      Python tests against real processes), in parallel;
# Logs of failing tests are printed. Exit status 0 only when all pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHELF_BUILD_DIR:-$root/build/test}
jobs=${SHELF_JOBS:-$(nproc)}

bash "$root/deploy/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 600
