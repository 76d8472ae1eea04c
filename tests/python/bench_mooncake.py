"""A batch of 64 x 1 MiB reads into a registered buffer, through
shelf.mooncake (batch_get_into) and through shelf.Client (the same batch
with batch_get_into_async on a BufferHandle): prints both and their ratio.
Starts its own cluster. Not a test: nothing is asserted.

    PYTHONPATH=<build>/python SHELF_BIN_DIR=<build>/bin \\
        /usr/bin/python3 tests/python/bench_mooncake.py
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shelf  # noqa: E402
from conftest import Cluster  # noqa: E402
from shelf.mooncake import MooncakeDistributedStore  # noqa: E402

MiB = 1 << 20
N = 64
ROUNDS = 20


def best_gibps(fn):
    best = float("inf")
    for _ in range(ROUNDS):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return N * MiB / best / (1 << 30)


def main():
    cluster = Cluster(stores=2, dram_bytes=256 * MiB)
    try:
        client = shelf.Client([cluster.master], timeout_ms=20000)
        keys = [f"bench/{i}" for i in range(N)]
        client.batch_put([k.encode() for k in keys], [os.urandom(MiB) for _ in range(N)])
        buf = np.zeros(N * MiB, dtype=np.uint8)
        addr = buf.ctypes.data
        offsets = [i * MiB for i in range(N)]

        store = MooncakeDistributedStore()
        assert store.setup("bench", "P2PHANDSHAKE", 0, 0, "tcp", "", cluster.master) == 0
        assert store.register_buffer(addr, buf.nbytes) == 0
        ptrs = [addr + o for o in offsets]

        def compat():
            assert store.batch_get_into(keys, ptrs, [MiB] * N) == [MiB] * N

        handle = client.register_buffer(addr, size=buf.nbytes)
        bkeys = [k.encode() for k in keys]

        def native():
            assert client.batch_get_into_async(bkeys, handle, offsets, MiB).result() == [MiB] * N

        compat_gibps = best_gibps(compat)
        native_gibps = best_gibps(native)
        print(f"64 x 1 MiB batch_get_into: shelf.mooncake {compat_gibps:.2f} GiB/s, "
              f"shelf.Client {native_gibps:.2f} GiB/s, ratio {compat_gibps / native_gibps:.2f}")
        client.unregister_buffer(handle)
        store.close()
        client.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
