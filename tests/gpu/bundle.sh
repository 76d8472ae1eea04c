#!/usr/bin/env bash
# Builds the GPU check and the two servers, and assembles a self-contained
# bundle for a machine that has a GPU, CUDA's driver and a C library but
# none of Shelf's dependencies (gRPC, protobuf, Abseil, ...):
#
#   bash tests/gpu/bundle.sh [BUILD_DIR]     # here, on the build machine
#   bash tests/gpu/run.sh                    # there (README.md)
#
# BUILD_DIR: default $SHELF_BUILD_DIR, else build/test (tests/run.sh's),
# configured here when it has no CMakeCache.txt; it must have found a CUDA
# toolkit. The bundle, build/gpu-bundle/ (git-ignored), holds
#   bin/  gpu_transfer_check, shelf-master, shelf-store, debug info stripped
#   lib/  every shared library they load (ldd), except the C library's own
#         (libc, libm, libpthread, libdl, librt, the loader), which the
#         target has, and never libcuda: the driver must be the target's.
#         libstdc++ and libgcc_s travel, in case the target's are older.
#   MANIFEST  what was built, from which commit, and the glibc it needs.
# run.sh starts the binaries with LD_LIBRARY_PATH=lib. The script fails when
# a library cannot be found or the bundle and the tracked tree together
# exceed what may be sent to a device machine (64 MiB).
# SHELF_JOBS: build jobs (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath -m "${1:-${SHELF_BUILD_DIR:-$root/build/test}}")
out=$root/build/gpu-bundle
limit_mib=64
bins=(gpu_transfer_check shelf-master shelf-store)

if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "bundle.sh: configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if ! grep -q 'gpu_transfer_check' "$build/build.ninja" 2>/dev/null; then
  # The build may predate tests/gpu/ (the test folders are globbed at
  # configure time): configure again, then look once more.
  cmake "$build" >/dev/null
fi
if ! grep -q 'gpu_transfer_check' "$build/build.ninja"; then
  echo "bundle.sh: $build has no gpu_transfer_check target: CMake found no CUDA toolkit" \
    "(install one at /usr/local/cuda and configure again)" >&2
  exit 1
fi
echo "bundle.sh: building ${bins[*]} in $build"
nice -n 10 cmake --build "$build" -j"${SHELF_JOBS:-$(nproc)}" --target "${bins[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "${bins[@]}"; do
  strip --strip-debug -o "$out/bin/$b" "$build/bin/$b"
done

# The libraries the binaries load, as the loader names them (the soname),
# copied from the file each link resolves to.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libcuda\.so|libnvidia-)'
missing=()
while read -r name arrow path _; do
  [[ $arrow == "=>" ]] || continue
  if [[ $path == not ]]; then
    [[ $name =~ $skip ]] || missing+=("$name")
    continue
  fi
  [[ $name =~ $skip ]] && continue
  [[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name"
done < <(for b in "${bins[@]}"; do ldd "$out/bin/$b"; done)
if ((${#missing[@]})); then
  echo "bundle.sh: libraries not found here: ${missing[*]}" >&2
  exit 1
fi

# What the bundle needs of the target: the newest glibc symbol version used.
glibc=$(for f in "$out"/bin/* "$out"/lib/*; do objdump -T "$f"; done 2>/dev/null |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
nvcc=$(sed -n 's/^CUDAToolkit_NVCC_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
cuda=$("${nvcc:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)
libs=("$out"/lib/*)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), commit $commit"
  echo "build: $build ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"))"
  echo "cuda_runtime: static, toolkit ${cuda:-unknown}: the target's driver must support it"
  echo "glibc_required: $glibc"
  echo "binaries: ${bins[*]}"
  echo "libraries: ${libs[*]##*/}"
} >"$out/MANIFEST"

# Proof that nothing is missing with only the bundle on the library path
# (libcuda is loaded by the CUDA runtime at run time, never linked).
bad=$(for b in "${bins[@]}"; do env -i LD_LIBRARY_PATH="$out/lib" ldd "$out/bin/$b"; done |
  grep 'not found' | grep -v 'libcuda' || true)
if [[ -n $bad ]]; then
  echo "bundle.sh: unresolved with LD_LIBRARY_PATH=$out/lib alone:" >&2
  echo "$bad" >&2
  exit 1
fi
for b in "${bins[@]}"; do
  env -i LD_LIBRARY_PATH="$out/lib" "$out/bin/$b" --help >/dev/null
done

bundle_bytes=$(du -sb "$out" | cut -f1)
tree_bytes=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 du -cb 2>/dev/null) |
  awk '$2 == "total" { t += $1 } END { print t + 0 }')
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "bundle.sh: $out: ${#bins[@]} binaries, ${#libs[@]} libraries," \
  "$(mib "$bundle_bytes") MiB (bin $(mib "$(du -sb "$out/bin" | cut -f1)") MiB," \
  "lib $(mib "$(du -sb "$out/lib" | cut -f1)") MiB); with the tracked tree" \
  "$(mib $((bundle_bytes + tree_bytes))) MiB of the ${limit_mib} MiB a device machine takes"
echo "bundle.sh: needs glibc >= $glibc and a driver for CUDA ${cuda:-?} on the target"
if ((bundle_bytes + tree_bytes > limit_mib * 1048576)); then
  echo "bundle.sh: too large to send (over $limit_mib MiB)" >&2
  exit 1
fi
