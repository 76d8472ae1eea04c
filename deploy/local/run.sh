#!/usr/bin/env bash
# The main job: install what is missing, build, start a local cluster on
# loopback (one shelf-master, two shelf-store with a DRAM segment and an SSD
# tier each), replay the bundled trace through libshelf, print the report,
# and stop the cluster. Extra arguments go to `shelf-bench replay`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SHELF_BUILD_DIR:-$root/build/main}

bash "$root/deploy/install-deps.sh"
# Incremental: a no-op when the binaries are up to date.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHELF_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target shelf-master shelf-store shelfctl shelf-bench
# The replay starts and stops its own cluster (processes die with it).
exec "$build/bin/shelf-bench" replay "$root/deploy/local/traces/synthetic_trace.jsonl" \
  --plot "$build/replay-hit-ratio.svg" "$@"
