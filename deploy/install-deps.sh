#!/usr/bin/env bash
# Installs every build and test dependency of Shelf from Debian 12 packages.
# Idempotent: when everything is present it prints nothing and exits 0.
# Run as root (or through sudo). CUDA is never installed here: the build
# detects /usr/local/cuda and builds the CUDA-aware parts only when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev librocksdb-dev libcivetweb-dev libxxhash-dev prometheus-cpp-dev nlohmann-json3-dev
  libzmq3-dev libmsgpack-cxx-dev python3-zmq python3-msgpack
  libibverbs-dev librdmacm-dev rdma-core
  libgtest-dev libgmock-dev googletest
  libhiredis-dev redis-server redis-tools python3-redis
  etcd-server etcd-client
  prometheus
  python3 python3-dev python3-pytest python3-pybind11 pybind11-dev python3-numpy python3-xxhash python3-yaml
  clang libclang-rt-14-dev
  iproute2 openssl procps psmisc
  systemd
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's redis-server and etcd packages start services on install where an
# init system runs; the tests start their own on private ports, so stop them.
for svc in redis-server etcd prometheus; do
  $SUDO systemctl stop "$svc" >/dev/null 2>&1 || true
done
