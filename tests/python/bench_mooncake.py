"""The Mooncake layer's reads against shelf.Client's on the same bytes,
each row in one run, printed with their ratio:

- a batch of 64 x 1 MiB reads into a registered buffer: shelf.mooncake's
  batch_get_into, and shelf.Client's batch_get_into_async on a BufferHandle;
- vLLM's load path: batch_get_into_multi_buffers of 64 keys, each two
  pieces of 256 KiB (its K and V segments, far apart in the KV cache),
  against shelf.Client's batch_get_into_async of the same bytes as 128
  contiguous 256 KiB blocks;
- eight threads, each putting and then reading its share of 128 x 1 MiB
  through the Mooncake layer's single-key calls (put / get on bytes, and
  put_from / get_into on a registered buffer), against shelf.Client's
  batch calls on the same 128 MiB from one thread (batch_put; batch_get
  for get, batch_get_into_async for get_into).

Starts its own cluster (two stores). Not a test: nothing is asserted but
that every read returns its bytes.

    PYTHONPATH=<build>/python SHELF_BIN_DIR=<build>/bin \\
        /usr/bin/python3 tests/python/bench_mooncake.py
"""

import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shelf  # noqa: E402
from conftest import Cluster  # noqa: E402
from shelf.mooncake import MooncakeDistributedStore  # noqa: E402

MiB = 1 << 20
N = 64
ROUNDS = 20


def best_gibps(fn, nbytes=N * MiB):
    best = float("inf")
    for _ in range(ROUNDS):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / (1 << 30)


def vllm_load_row(cluster, client):
    """64 keys of 2 x 256 KiB through batch_get_into_multi_buffers, and the
    same 32 MiB as 128 blocks of 256 KiB through shelf.Client."""
    piece, keys_n = 256 << 10, 64
    total = keys_n * 2 * piece
    # The KV cache: K segment, then V segment, each keys_n blocks.
    cache = np.zeros(2 * keys_n * piece, dtype=np.uint8)
    base = cache.ctypes.data
    k_seg, v_seg = base, base + keys_n * piece
    store = MooncakeDistributedStore()
    assert store.setup("bench", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", cluster.master) == 0
    assert store.register_buffer(base, cache.nbytes) == 0
    keys = [f"bench/vllm/{i}" for i in range(keys_n)]
    addrs = [[k_seg + i * piece, v_seg + i * piece] for i in range(keys_n)]
    sizes = [[piece, piece] for _ in range(keys_n)]
    cache[:] = np.frombuffer(os.urandom(cache.nbytes), dtype=np.uint8)
    assert store.batch_put_from_multi_buffers(keys, addrs, sizes) == [0] * keys_n

    def mooncake_multi():
        assert store.batch_get_into_multi_buffers(keys, addrs, sizes) == [2 * piece] * keys_n

    blocks = [f"bench/vllm-blocks/{i}".encode() for i in range(2 * keys_n)]
    client.batch_put(blocks, [bytes(cache[i * piece:(i + 1) * piece]) for i in range(2 * keys_n)])
    handle = client.register_buffer(base, size=cache.nbytes)
    offsets = [i * piece for i in range(2 * keys_n)]

    def native():
        assert client.batch_get_into_async(blocks, handle, offsets, piece).result() == \
            [piece] * (2 * keys_n)

    compat_gibps = best_gibps(mooncake_multi, total)
    native_gibps = best_gibps(native, total)
    print(f"vLLM load, 64 keys x 2 x 256 KiB: batch_get_into_multi_buffers {compat_gibps:.2f} "
          f"GiB/s, shelf.Client 128 x 256 KiB {native_gibps:.2f} GiB/s, "
          f"ratio {compat_gibps / native_gibps:.2f}")
    client.unregister_buffer(handle)
    store.close()


def in_threads(count, work):
    """Runs work(t) in `count` threads at once; returns the wall seconds."""
    start = threading.Barrier(count + 1)
    errors = []

    def run(t):
        start.wait()
        try:
            work(t)
        except BaseException as e:  # reported once all threads end
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for th in threads:
        th.start()
    start.wait()
    began = time.perf_counter()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - began


def threads_rows(cluster, client, threads=8, keys_n=128, rounds=5):
    """Puts and gets of keys_n x 1 MiB from `threads` threads through the
    Mooncake layer's single-key calls, against shelf.Client's batch calls
    on the same bytes from one thread. Each round puts fresh keys and
    removes them afterwards (untimed); the two sides alternate which goes
    first; each reports its best round."""
    values = [os.urandom(MiB) for _ in range(keys_n)]
    src = np.frombuffer(b"".join(values), dtype=np.uint8).copy()
    dst = np.zeros(keys_n * MiB, dtype=np.uint8)
    store = MooncakeDistributedStore()
    assert store.setup("bench", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", cluster.master) == 0
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    handle = client.register_buffer(dst.ctypes.data, size=dst.nbytes)
    share = keys_n // threads
    best = {}

    def note(name, seconds):
        best[name] = min(best.get(name, float("inf")), seconds)

    def mooncake_round(r, zero_copy):
        keys = [f"bench/threads/{r}/{zero_copy}/{i}" for i in range(keys_n)]
        dst[:] = 0

        def put(t):
            for i in range(t * share, (t + 1) * share):
                if zero_copy:
                    rc = store.put_from(keys[i], src.ctypes.data + i * MiB, MiB)
                else:
                    rc = store.put(keys[i], values[i])
                assert rc == 0, rc

        got = [None] * keys_n

        def get(t):
            for i in range(t * share, (t + 1) * share):
                if zero_copy:
                    got[i] = store.get_into(keys[i], dst.ctypes.data + i * MiB, MiB)
                else:
                    got[i] = store.get(keys[i])

        tag = "put_from / get_into" if zero_copy else "put / get"
        note(f"{tag} put", in_threads(threads, put))
        note(f"{tag} get", in_threads(threads, get))
        # Checked once the clock has stopped, as the shelf.Client side is.
        if zero_copy:
            assert got == [MiB] * keys_n, got
            assert np.array_equal(dst, src)
        else:
            assert got == values
        store.batch_remove(keys)

    def client_round(r):
        keys = [f"bench/threads/{r}/client/{i}".encode() for i in range(keys_n)]
        dst[:] = 0
        t = time.perf_counter()
        statuses = client.batch_put(keys, values)
        note("client put", time.perf_counter() - t)
        assert all(s.ok for s in statuses), statuses
        t = time.perf_counter()
        sizes = client.batch_get_into_async(keys, handle, [i * MiB for i in range(keys_n)],
                                            MiB).result()
        note("client get_into", time.perf_counter() - t)
        assert sizes == [MiB] * keys_n
        assert np.array_equal(dst, src)
        t = time.perf_counter()
        got = client.batch_get(keys)
        note("client get", time.perf_counter() - t)
        assert got == values
        for k in keys:
            client.remove(k)

    for r in range(rounds):
        sides = [lambda: mooncake_round(r, False), lambda: mooncake_round(r, True),
                 lambda: client_round(r)]
        for side in sides[r % 3:] + sides[:r % 3]:
            side()
    gib = keys_n * MiB / (1 << 30)
    rows = [("put", "put / get put", "batch_put", "client put"),
            ("put_from", "put_from / get_into put", "batch_put", "client put"),
            ("get", "put / get get", "batch_get", "client get"),
            ("get_into", "put_from / get_into get", "batch_get_into_async", "client get_into")]
    for call, compat_name, native_call, native_name in rows:
        compat, native = gib / best[compat_name], gib / best[native_name]
        print(f"{threads} threads x {call}, {keys_n} x 1 MiB: shelf.mooncake {compat:.2f} GiB/s, "
              f"shelf.Client {native_call} {native:.2f} GiB/s, ratio {compat / native:.2f}")
    client.unregister_buffer(handle)
    store.close()


def main():
    cluster = Cluster(stores=2, dram_bytes=256 * MiB, wait_populated=True)
    try:
        client = shelf.Client([cluster.master], timeout_ms=20000)
        keys = [f"bench/{i}" for i in range(N)]
        client.batch_put([k.encode() for k in keys], [os.urandom(MiB) for _ in range(N)])
        buf = np.zeros(N * MiB, dtype=np.uint8)
        addr = buf.ctypes.data
        offsets = [i * MiB for i in range(N)]

        store = MooncakeDistributedStore()
        assert store.setup("bench", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", cluster.master) == 0
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
        vllm_load_row(cluster, client)
        threads_rows(cluster, client)
        client.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
