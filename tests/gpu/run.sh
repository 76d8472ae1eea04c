#!/usr/bin/env bash
# The GPU check (README.md): put/get GB/s from and into CUDA device memory
# through libshelf next to plain cudaMemcpy, every byte read back compared.
# Runs the bundle that tests/gpu/bundle.sh made (build/gpu-bundle, or
# $SHELF_GPU_BUNDLE), so the machine needs only a GPU, its driver and a C
# library. Arguments go to gpu_transfer_check (--help lists them).
#
#   bash tests/gpu/run.sh                    # the check; last line: JSON
#   bash tests/gpu/run.sh --host-memory      # no GPU: the bundle and harness only
#
# Exit status: gpu_transfer_check's (0 passed, 1 failed, 77 no CUDA device:
# skipped); 2 when there is no bundle; 124 when it ran past
# $SHELF_GPU_TIMEOUT seconds (default 290).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${SHELF_GPU_BUNDLE:-$root/build/gpu-bundle}
limit_s=${SHELF_GPU_TIMEOUT:-290}

for b in gpu_transfer_check shelf-master shelf-store; do
  if [[ ! -x $bundle/bin/$b ]]; then
    echo "run.sh: no bundle at $bundle (no bin/$b): make it where Shelf builds, with" \
      "'bash tests/gpu/bundle.sh [BUILD_DIR]', and bring build/gpu-bundle along" \
      "(tests/gpu/README.md)" >&2
    exit 2
  fi
done

# A bundle built against a newer glibc than this machine's cannot load:
# say so plainly instead of the loader's message.
need=$(sed -n 's/^glibc_required: //p' "$bundle/MANIFEST" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
if [[ -n $need && -n $have && $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
  echo "run.sh: the bundle needs glibc >= $need; this machine has $have: build the bundle on" \
    "an older system" >&2
  exit 1
fi

export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SHELF_BIN_DIR="$bundle/bin"
timeout -k 10 "$limit_s" "$bundle/bin/gpu_transfer_check" "$@"
rc=$?
if ((rc == 124 || rc == 137)); then
  echo "run.sh: gpu_transfer_check ran past ${limit_s} s and was stopped" >&2
fi
exit $rc
