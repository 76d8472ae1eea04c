"""shelf.lmcache.ShelfConnector, driven as LMCache's multiprocess mode drives
a native_plugin connector (lmcache_bridge.py), against shelf.Client's batch
calls on the same bytes in the same run: 1,000 chunks of 256 KiB, stored
with one submit_batch_set and loaded with one submit_batch_get, against one
batch_put and one batch_get_into of the same views. Every load is checked
byte for byte; the mismatches are printed.

Each row alternates the two sides for ROUNDS rounds and keeps each side's
best; puts use fresh keys every round and remove them afterwards (untimed),
so no put is a no-op of a present key. Starts its own cluster (two stores).

    PYTHONPATH=<build>/python SHELF_BIN_DIR=<build>/bin \\
        /usr/bin/python3 tests/python/bench_lmcache.py
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shelf  # noqa: E402
from conftest import Cluster  # noqa: E402
from lmcache_bridge import Bridge, byte_view, load_native_plugin  # noqa: E402

MiB = 1 << 20
CHUNKS = 1000
CHUNK = 256 << 10
ROUNDS = 10


def main():
    cluster = Cluster(stores=2, dram_bytes=768 * MiB, wait_populated=True)
    try:
        client = shelf.Client([cluster.master], timeout_ms=20000)
        bridge = Bridge(load_native_plugin({
            "type": "native_plugin", "module_path": "shelf.lmcache",
            "class_name": "ShelfConnector",
            "adapter_params": {"master": cluster.master, "timeout_ms": 20000}}))
        src = torch.randint(0, 256, (CHUNKS, CHUNK), dtype=torch.uint8)
        dst = torch.zeros_like(src)
        src_views = [byte_view(src[i]) for i in range(CHUNKS)]
        dst_views = [byte_view(dst[i]) for i in range(CHUNKS)]
        best = {"set plugin": 1e9, "set client": 1e9, "get plugin": 1e9, "get client": 1e9}
        mismatches = 0

        def timed(name, fn):
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)

        def check():
            nonlocal mismatches
            mismatches += sum(not torch.equal(src[i], dst[i]) for i in range(CHUNKS))
            dst.zero_()

        def plugin_set(keys):
            ok, error, _ = bridge.set(keys, src_views)
            assert ok, error

        def plugin_get(keys):
            ok, error, loaded = bridge.get(keys, dst_views)
            assert ok and loaded == [True] * CHUNKS, error

        def client_set(keys):
            assert all(client.batch_put(keys, src_views))

        def client_get(keys):
            assert client.batch_get_into(keys, dst_views) == [CHUNK] * CHUNKS

        for r in range(ROUNDS):
            # Alternate which side goes first, so neither always meets a
            # warmer (or colder) cluster.
            sides = [("plugin", plugin_set, plugin_get), ("client", client_set, client_get)]
            if r % 2:
                sides.reverse()
            for name, put, get in sides:
                keys = [f"bench-lmc/{name}/{r}@{i:064x}" for i in range(CHUNKS)]
                if name == "client":  # its keys are bytes: encoded before the clock starts
                    keys = [k.encode() for k in keys]
                timed(f"set {name}", lambda: put(keys))
                timed(f"get {name}", lambda: get(keys))
                check()
                client.batch_remove(keys)

        gib = CHUNKS * CHUNK / (1 << 30)
        print(f"{CHUNKS} chunks x {CHUNK >> 10} KiB, best of {ROUNDS}, mismatches {mismatches}")
        for op in ("set", "get"):
            plugin = gib / best[f"{op} plugin"]
            native = gib / best[f"{op} client"]
            print(f"{op}: ShelfConnector {plugin:.2f} GiB/s, shelf.Client {native:.2f} GiB/s, "
                  f"ratio {plugin / native:.2f}")
        bridge.close()
        client.close()
        if mismatches:
            sys.exit(1)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
