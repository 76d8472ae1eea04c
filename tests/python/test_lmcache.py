"""shelf.lmcache.ShelfConnector driven as LMCache's multiprocess mode drives
a native_plugin connector (lmcache_bridge.py): built from the plugin config,
batches submitted without blocking, completions taken from the eventfd and
matched by future id, buffers as byte views over torch CPU tensors in one
arena (LMCache's L1), eviction through submit_batch_delete. Against real
clusters: one of two stores (one killed mid-batch in its own test), and one
with two tenants."""

import json
import os
import pathlib
import re
import shutil
import tempfile
import threading

import pytest
import torch

import shelf
from conftest import ENGINE_PRINCIPALS, Cluster, principals_cluster, private_file
from lmcache_bridge import Bridge, byte_view, load_native_plugin

KiB = 1 << 10
CHUNK = 256 * KiB


def _config(cluster, **params):
    return {"type": "native_plugin", "module_path": "shelf.lmcache",
            "class_name": "ShelfConnector",
            "adapter_params": {"master": cluster.master, "timeout_ms": 20000, **params}}


def _arena(chunks, chunk_bytes=CHUNK, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (chunks, chunk_bytes), dtype=torch.uint8, generator=g)


def _keys(prefix, n):
    # LMCache's ObjectKey string: model@kv_rank@group@chunk_hash[@salt].
    return [f"{prefix}@0000000{i % 2}@0@{i:064x}" for i in range(n)]


@pytest.fixture(scope="module")
def big_cluster():
    c = Cluster(stores=2, dram_bytes=320 << 20)
    yield c
    c.stop()


@pytest.fixture
def bridge(big_cluster):
    b = Bridge(load_native_plugin(_config(big_cluster)))
    yield b
    b.close()


def test_the_configuration_in_the_docs_loads_and_moves_a_chunk(big_cluster):
    # docs/integrations.md's --l2-adapter JSON, with this cluster's master.
    doc = (pathlib.Path(os.environ["SHELF_SOURCE_DIR"]) / "docs" / "integrations.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.S)]
    config = next(b for b in blocks if b.get("type") == "native_plugin")
    assert config["adapter_params"]["master"] == "10.0.0.1:7000"
    config["adapter_params"]["master"] = big_cluster.master
    b = Bridge(load_native_plugin(config))
    try:
        src, dst = _arena(1, 4 * KiB, seed=12), torch.zeros(4 * KiB, dtype=torch.uint8)
        key = _keys("lmc-docs", 1)
        assert b.set(key, [byte_view(src[0])])[0]
        assert b.get(key, [byte_view(dst)])[2] == [True] and torch.equal(dst, src[0])
    finally:
        b.close()


def test_a_thousand_chunks_round_trip_through_the_plugin(bridge):
    src = _arena(1000)
    dst = torch.zeros_like(src)
    keys = _keys("lmc-roundtrip", 1000)
    ok, error, results = bridge.set(keys, [byte_view(src[i]) for i in range(1000)])
    assert ok, error
    assert results is None
    ok, error, present = bridge.exists(keys + ["lmc-roundtrip@absent"])
    assert ok, error
    assert present == [True] * 1000 + [False]
    ok, error, loaded = bridge.get(keys, [byte_view(dst[i]) for i in range(1000)])
    assert ok, error
    assert loaded == [True] * 1000
    mismatches = [i for i in range(1000) if not torch.equal(src[i], dst[i])]
    assert mismatches == []
    assert bridge.unknown_ids == []


def test_a_miss_fails_its_key_alone(bridge):
    src = _arena(3, 4 * KiB, seed=1)
    keys = _keys("lmc-miss", 3)
    assert bridge.set([keys[0], keys[2]], [byte_view(src[0]), byte_view(src[2])])[0]
    dst = torch.zeros_like(src)
    ok, error, loaded = bridge.get(keys, [byte_view(dst[i]) for i in range(3)])
    assert not ok
    assert "1 of 3 keys failed" in error and keys[1] in error and "NOT_FOUND" in error
    assert loaded == [True, False, True]
    assert torch.equal(dst[0], src[0]) and torch.equal(dst[2], src[2])
    assert int(dst[1].count_nonzero()) == 0


def test_a_block_of_another_size_is_not_loaded(bridge):
    src = _arena(1, 8 * KiB, seed=2)
    key = _keys("lmc-size", 1)
    assert bridge.set(key, [byte_view(src[0])])[0]
    for size in (4 * KiB, 16 * KiB):
        dst = torch.zeros(size, dtype=torch.uint8)
        ok, error, loaded = bridge.get(key, [byte_view(dst)])
        assert not ok and loaded == [False]
        assert "OUT_OF_RANGE" in error


def test_delete_evicts_and_reports_what_it_removed(bridge):
    src = _arena(2, 4 * KiB, seed=3)
    keys = _keys("lmc-delete", 2)
    assert bridge.set(keys, [byte_view(src[0]), byte_view(src[1])])[0]
    ok, error, removed = bridge.delete(keys + ["lmc-delete@never-stored"])
    assert ok, error
    assert removed == [True, True, False]
    assert bridge.exists(keys)[2] == [False, False]


def test_scattered_buffers_load_in_parts_within_the_registration_budget(big_cluster):
    # 64 workers leave each get slice 32 registrations: 100 chunks, every
    # other one of an arena, are 100 runs, so they load in 4 parts.
    b = Bridge(load_native_plugin(_config(big_cluster, workers=64)))
    try:
        src = _arena(100, 4 * KiB, seed=10)
        dst = torch.zeros(200, 4 * KiB, dtype=torch.uint8)
        keys = _keys("lmc-scattered", 100)
        assert b.set(keys, [byte_view(src[i]) for i in range(100)])[0]
        ok, error, loaded = b.get(keys, [byte_view(dst[2 * i]) for i in range(100)])
        assert ok, error
        assert loaded == [True] * 100
        assert all(torch.equal(dst[2 * i], src[i]) for i in range(100))
        assert int(dst[1::2].count_nonzero()) == 0
    finally:
        b.close()


def test_overlapping_targets_share_a_registration(bridge):
    # Two keys of the same chunk read into the same memory: one run, one
    # registration. The reads of a batch run in parallel, so targets that
    # overlap must receive the same bytes; two different blocks copied into
    # one place at once would leave a mix (and fail the checksum check).
    src = _arena(1, 4 * KiB, seed=11)
    keys = _keys("lmc-overlap", 2)
    assert bridge.set(keys, [byte_view(src[0]), byte_view(src[0])])[0]
    dst = torch.zeros(4 * KiB, dtype=torch.uint8)
    ok, error, loaded = bridge.get(keys, [byte_view(dst), byte_view(dst)])
    assert ok, error
    assert loaded == [True, True]
    assert torch.equal(dst, src[0])


def test_a_key_set_twice_keeps_its_first_bytes(bridge):
    first, second = _arena(1, 4 * KiB, seed=4), _arena(1, 4 * KiB, seed=5)
    key = _keys("lmc-twice", 1)
    assert bridge.set(key, [byte_view(first[0])])[0]
    assert bridge.set(key, [byte_view(second[0])])[0]
    dst = torch.zeros(4 * KiB, dtype=torch.uint8)
    assert bridge.get(key, [byte_view(dst)])[2] == [True]
    assert torch.equal(dst, first[0])


def test_bad_input_is_refused_at_submit(bridge):
    c = bridge.connector
    buf = bytearray(16)
    with pytest.raises(ValueError, match="2 keys and 1 memoryviews"):
        c.submit_batch_set(["a", "b"], [memoryview(buf)])
    with pytest.raises(BufferError):
        c.submit_batch_get(["a"], [memoryview(bytes(16))])  # read-only target
    with pytest.raises(TypeError):
        c.submit_batch_exists("a-single-key")
    # An oversized key fails its item, with the limit in the message.
    long_key = "k" * (shelf.KEY_BYTES_MAX + 1)
    ok, error, present = bridge.exists([long_key, "lmc-bad@short"])
    assert not ok and present == [False, False]
    assert str(shelf.KEY_BYTES_MAX) in error


def test_submissions_never_wait_for_the_cluster(bridge):
    # 64 batches submitted back to back from one thread, each answered once.
    src = _arena(64, 4 * KiB, seed=6)
    keys = _keys("lmc-many", 64)
    ids = [bridge.connector.submit_batch_set([keys[i]], [byte_view(src[i])]) for i in range(64)]
    assert len(set(ids)) == 64
    assert all(bridge.wait(i)[0] for i in ids)
    assert bridge.unknown_ids == []


def test_a_closed_connector_answers_at_once(big_cluster):
    b = Bridge(load_native_plugin(_config(big_cluster, workers=1)))
    b.connector.close()
    ok, error, present = b.exists(["lmc-closed@k"])
    assert not ok and "closed" in error and present == [False]
    b.close()


def test_options_are_checked(big_cluster):
    with pytest.raises(ValueError, match="workers"):
        load_native_plugin(_config(big_cluster, workers=0))
    with pytest.raises(TypeError):
        load_native_plugin(_config(big_cluster, no_such_option=1))
    with pytest.raises(PermissionError, match="tenant"):
        load_native_plugin(_config(big_cluster, tenant="team-a"))


def test_a_store_killed_mid_batch_fails_only_its_keys():
    cluster = Cluster(stores=2, dram_bytes=128 << 20)
    try:
        # Over tcp: a client keeps a same-host store's shared segment
        # mapped, so it could go on reading a dead store's blocks.
        b = Bridge(load_native_plugin(_config(cluster, timeout_ms=5000, allow_shm=False)))
        src = _arena(200, 64 * KiB, seed=7)
        keys = _keys("lmc-kill", 200)
        assert b.set(keys, [byte_view(src[i]) for i in range(200)])[0]
        with shelf.Client([cluster.master]) as client:
            nodes = client.locate(keys)["nodes"]
        # Both stores hold chunks (each node's run counts from keys[0]).
        assert len(nodes) >= 1 and nodes[0]["blocks"] < 200, nodes
        dst = torch.zeros_like(src)
        # Kill one store while a load of every chunk is in flight.
        future = b.connector.submit_batch_get(keys, [byte_view(dst[i]) for i in range(200)])
        killer = threading.Thread(target=cluster.kill_store, args=(0,))
        killer.start()
        ok, error, loaded = b.wait(future)
        killer.join()
        assert len(loaded) == 200
        # What is reported loaded is the chunk's own bytes. (A chunk cut off
        # mid-read may hold part of its bytes: it is reported failed, and
        # LMCache does not use it.)
        for i in range(200):
            if loaded[i]:
                assert torch.equal(dst[i], src[i]), f"chunk {i} loaded wrong bytes"
        # After the kill: the survivor's chunks load, the dead store's fail.
        dst.zero_()
        ok, error, loaded = b.get(keys, [byte_view(dst[i]) for i in range(200)])
        assert 0 < loaded.count(True) < 200
        assert not ok and f"{loaded.count(False)} of 200 keys failed" in error
        for i in range(200):
            assert torch.equal(dst[i], src[i]) == loaded[i]
        b.close()
    finally:
        cluster.stop()


# ------------------------------------------------------------------ tenants

SECRET = "lmcache-plugin-data-plane-secret"
PRINCIPALS = ENGINE_PRINCIPALS


@pytest.fixture(scope="module")
def tenants():
    d = pathlib.Path(tempfile.mkdtemp(prefix="shelf-lmcache-"))
    lines = "".join(f"{p} engine {t} {s}\n" for p, (t, s) in PRINCIPALS.items())
    c, secret = principals_cluster(d, lines, SECRET)
    own = {p: private_file(d / p, f"{p} engine {t} {s}\n") for p, (t, s) in PRINCIPALS.items()}
    yield c, secret, own
    c.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_a_tenant_reads_only_its_own_chunks(tenants):
    cluster, secret, own = tenants
    a = Bridge(load_native_plugin(_config(cluster, secret_file=secret, credentials=own["eng-a"],
                                          tenant="team-a")))
    b = Bridge(load_native_plugin(_config(cluster, secret_file=secret, credentials=own["eng-b"])))
    try:
        mine, theirs = _arena(1, 4 * KiB, seed=8), _arena(1, 4 * KiB, seed=9)
        key = _keys("lmc-tenant", 1)
        assert a.set(key, [byte_view(mine[0])])[0]
        assert b.exists(key)[2] == [False]
        dst = torch.zeros(4 * KiB, dtype=torch.uint8)
        assert b.get(key, [byte_view(dst)])[2] == [False]
        assert int(dst.count_nonzero()) == 0
        # Nor by naming the other tenant's key.
        ok, error, loaded = b.get(["@team-a/" + key[0]], [byte_view(dst)])
        assert loaded == [False] and "PERMISSION_DENIED" in error
        assert b.delete(key)[2] == [False]
        # The same key string in b's tenant is b's own block.
        assert b.set(key, [byte_view(theirs[0])])[0]
        assert b.get(key, [byte_view(dst)])[2] == [True] and torch.equal(dst, theirs[0])
        assert a.get(key, [byte_view(dst)])[2] == [True] and torch.equal(dst, mine[0])
    finally:
        a.close()
        b.close()
    with pytest.raises(PermissionError, match="team-b"):
        load_native_plugin(_config(cluster, secret_file=secret, credentials=own["eng-a"],
                                   tenant="team-b"))
