#!/usr/bin/env bash
# Installs every build and test dependency of Shelf from Debian 12 packages.
# Idempotent: when everything is present it prints nothing and exits 0.
# Run as root (or through sudo). CUDA is never installed here: the build
# detects /usr/local/cuda and builds the CUDA-aware parts only when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev libre2-dev librocksdb-dev libcivetweb-dev libxxhash-dev prometheus-cpp-dev nlohmann-json3-dev
  libssl-dev
  libzmq3-dev libmsgpack-cxx-dev python3-zmq python3-msgpack
  libibverbs-dev librdmacm-dev rdma-core
  libgtest-dev libgmock-dev googletest
  libhiredis-dev redis-server redis-tools python3-redis
  etcd-server etcd-client
  prometheus
  python3 python3-dev python3-pytest python3-pybind11 pybind11-dev python3-numpy python3-xxhash python3-yaml
  python3-build python3-wheel python3-setuptools python3-venv python3-pip-whl python3-setuptools-whl patchelf
  clang libclang-rt-14-dev clang-format clang-tidy
  iproute2 openssl procps psmisc
  systemd
)

# The Node.js client test of shelf-resp (tests/resp/test_ioredis.py) needs
# node and npm, and ioredis from the npm registry at the version
# tests/resp/node/package-lock.json pins. Only in a source tree holding
# that lock (the Docker builder runs this script alone and skips it).
# Debian's nodejs and npm, unless a node with its own npm (NodeSource's
# nodejs bundles npm and conflicts with Debian's) is there already.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_dir="$root/tests/resp/node"
if [ -f "$node_dir/package-lock.json" ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    packages+=(nodejs npm)
  fi
fi

# The engines' call sequences (tests/python/test_engine_sequences.py) and
# LMCache's connector calls (test_lmcache.py) are replayed with real
# tensors: Debian's CPU torch. Only in a source tree with
# the tests (the Docker builder, which builds alone, skips it).
# The KV event stream is decoded, too, as llm-d's indexer decodes it: a Go
# program (tests/python/llmd_decoder) on the msgpack library llm-d uses.
if [ -d "$root/tests/python" ]; then
  packages+=(python3-torch golang-go golang-github-vmihailenco-msgpack.v5-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's redis-server and etcd packages start services on install where
  # an init system runs; the tests start their own on private ports, so stop
  # them.
  for svc in redis-server etcd prometheus; do
    $SUDO systemctl stop "$svc" >/dev/null 2>&1 || true
  done
fi

# ioredis, exactly as locked (npm ci checks every package's integrity hash),
# into tests/resp/node/node_modules (ignored by git), then handed to the
# owner of the tree so the build user can read and remove it.
if [ -f "$node_dir/package-lock.json" ]; then
  want="$(sed -n 's/.*"ioredis": *"\([0-9][0-9.]*\)".*/\1/p' "$node_dir/package.json" | head -n1)"
  have=""
  if [ -f "$node_dir/node_modules/ioredis/package.json" ]; then
    have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' \
      "$node_dir/node_modules/ioredis/package.json" | head -n1)"
  fi
  if [ -z "$want" ] || [ "$want" != "$have" ]; then
    echo "install-deps: npm ci in $node_dir (ioredis $want)" >&2
    npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error >/dev/null
    if [ "$(id -u)" -eq 0 ]; then
      chown -R "$(stat -c %u:%g "$node_dir")" "$node_dir/node_modules"
    fi
  fi
fi
