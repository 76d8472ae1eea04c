"""shelf.mooncake (Mooncake Store's Python API over Shelf) against a real
cluster: every supported method, its return codes on misses and misuse, the
call sequences of vLLM, SGLang and LMCache, and the `mooncake.store` shim."""

import json
import os
import subprocess
import sys
import time
import pathlib

import numpy as np
import pytest

import shelf
from shelf.mooncake import (MooncakeDistributedStore, ObjectDataType, ReplicateConfig,
                            SoftPinAction)

from conftest import BIN_DIR, Cluster

OK = 0
BUFFER_OVERFLOW = -10
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
RPC_FAIL = -900
NOT_SUPPORTED = -1012
MiB = 1 << 20


@pytest.fixture(scope="module")
def big_cluster():
    # Room for 64 MiB values on each store.
    c = Cluster(stores=2, dram_bytes=256 * MiB)
    yield c
    c.stop()


def new_store(cluster, hostname="localhost"):
    store = MooncakeDistributedStore()
    rc = store.setup(hostname, "P2PHANDSHAKE", 512 * MiB, 128 * MiB, "tcp", "",
                     cluster.master)
    assert rc == OK
    return store


@pytest.fixture
def store(big_cluster):
    s = new_store(big_cluster)
    yield s
    s.close()


@pytest.fixture
def pool(store):
    """A registered 80 MiB host buffer (numpy) and its address."""
    arr = np.zeros(80 * MiB, dtype=np.uint8)
    addr = arr.ctypes.data
    assert store.register_buffer(addr, arr.nbytes) == OK
    yield arr, addr
    store.unregister_buffer(addr)


def rand(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_setup_errors_and_health(big_cluster):
    s = MooncakeDistributedStore()
    assert s.get("k") == b""                      # not set up
    assert s.put("k", b"v") == INVALID_PARAMS
    assert s.health_check() == INVALID_PARAMS
    assert s.setup("h", "P2PHANDSHAKE", 1, 1, "udp", "", big_cluster.master) == INVALID_PARAMS
    assert s.setup("h", "P2PHANDSHAKE", -1, 1, "tcp", "", big_cluster.master) == INVALID_PARAMS
    assert s.setup("h", "P2PHANDSHAKE", 1, 1, "tcp", "", "127.0.0.1:1") == RPC_FAIL
    # Keywords with Mooncake's names; a list of masters.
    assert s.setup(local_hostname="h1", metadata_server="http://meta:8080/metadata",
                   global_segment_size=0, local_buffer_size=0, protocol="tcp",
                   rdma_devices="", master_server_addr=big_cluster.master + ",127.0.0.1:1") == OK
    assert s.health_check() == OK
    assert s.get_hostname() == "h1"
    assert s.close() == OK
    assert s.close() == OK
    assert s.put("k", b"v") == INVALID_PARAMS
    assert s.get("k") == b""
    assert s.batch_is_exist(["k"]) == [INVALID_PARAMS]
    assert s.setup_dummy(1, 1, "127.0.0.1:1") == RPC_FAIL
    assert s.setup_dummy(-1, 1, big_cluster.master) == INVALID_PARAMS
    assert s.init_all("tcp", "") == NOT_SUPPORTED


@pytest.mark.parametrize("size", [1, 4095, 1 * MiB + 7, 64 * MiB])
def test_put_get_sizes(store, pool, size):
    key = f"size/{size}"
    data = rand(size, size).tobytes()
    assert store.put(key, data) == OK
    assert store.get_size(key) == size
    assert store.get(key) == data
    arr, addr = pool
    assert store.get_into(key, addr + 3, size) == size
    assert arr[3:3 + size].tobytes() == data
    if size > 1:
        assert store.get_into(key, addr, size - 1) == BUFFER_OVERFLOW
    assert store.remove(key) == OK


def test_misses_and_bad_arguments(store, pool):
    arr, addr = pool
    assert store.get("absent") == b""
    assert store.get_size("absent") == OBJECT_NOT_FOUND
    assert store.is_exist("absent") == 0
    assert store.remove("absent") == OBJECT_NOT_FOUND
    assert store.get_into("absent", addr, 100) == OBJECT_NOT_FOUND
    assert store.get_buffer("absent") is None
    assert store.put("", b"v") == INVALID_KEY
    assert store.put("k" * 300, b"v") == INVALID_KEY
    assert store.is_exist("") == INVALID_KEY
    assert store.put("empty", b"") == INVALID_PARAMS
    assert store.put("rc", b"v", ReplicateConfig(replica_num=0)) == INVALID_PARAMS
    assert store.put("rc", b"v", ReplicateConfig(replica_num=9)) == INVALID_PARAMS
    # Negative sizes, unregistered or too-small buffers.
    assert store.put_from("neg", addr, -1) == INVALID_PARAMS
    assert store.get_into("neg", addr, -5) == INVALID_PARAMS
    other = np.zeros(4096, dtype=np.uint8)
    assert store.put_from("unreg", other.ctypes.data, 4096) == INVALID_PARAMS
    assert store.get_into("unreg", other.ctypes.data, 4096) == INVALID_PARAMS
    assert store.put_from("past", addr + arr.nbytes - 10, 20) == INVALID_PARAMS
    assert store.unregister_buffer(other.ctypes.data) == INVALID_PARAMS
    assert store.register_buffer(other.ctypes.data, -1) == INVALID_PARAMS
    assert store.register_buffer(addr, 10) == INVALID_PARAMS  # already registered
    # Lists of unequal length: every item INVALID_PARAMS.
    assert store.batch_get_into(["a", "b"], [addr], [10, 10]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from(["a", "b"], [addr, addr], [10]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from_multi_buffers(["a"], [[addr], [addr]], [[1]]) == [INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers(["a"], [[addr, addr]], [[1]]) == [INVALID_PARAMS]
    assert store.put_batch(["a", "b"], [b"x"]) == INVALID_PARAMS
    assert store.remove_by_regex("(") == INVALID_PARAMS
    assert store.remove_by_regex("a" * 300) == INVALID_PARAMS
    # Not supported: a code, never wrong data.
    assert store.put_from_with_metadata("a", addr, addr, 1, 1) == NOT_SUPPORTED
    assert store.put_tensor("a", None) == NOT_SUPPORTED


def test_replicate_config_fields(store):
    # Mooncake's enums with its values; the fields are accepted and the put
    # succeeds (hard pins and data types have no effect on Shelf: see the
    # docs; soft pins, below).
    assert int(SoftPinAction.PRESERVE) == 0 and int(SoftPinAction.ENABLE) == 1
    assert int(SoftPinAction.DISABLE) == 2 and int(ObjectDataType.KVCACHE) == 1
    c = ReplicateConfig()
    assert c.soft_pin_action == SoftPinAction.PRESERVE and c.replica_num == 1
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 1000
    c.with_hard_pin = True
    c.data_type = ObjectDataType.KVCACHE
    c.replica_num = 2
    assert c.soft_pin_action == SoftPinAction.ENABLE and c.data_type == ObjectDataType.KVCACHE
    assert store.put("cfg/k", b"c" * 100, c) == OK
    assert store.get("cfg/k") == b"c" * 100
    c.replica_num = 9
    assert store.put("cfg/k9", b"c", c) == INVALID_PARAMS


def _pin_of(cluster, key):
    """(pinned, seconds until the pin expires or None) as the master has it."""
    out = subprocess.run([str(BIN_DIR / "shelfctl"), "--master", cluster.master, "--json",
                          "stat", key], check=True, capture_output=True, text=True).stdout
    st = json.loads(out)
    expires = st["pin_expires_unix_ms"]
    return st["pinned"], (expires / 1000 - time.time()) if expires else None


def test_soft_pins_follow_mooncakes_actions(store, big_cluster):
    # ENABLE pins at the commit for soft_pin_ttl_ms, or Mooncake's default
    # of 30 minutes; a TTL of 0, PRESERVE and DISABLE pin nothing; the
    # older with_soft_pin is ENABLE with the default.
    def put(key, action=None, ttl=None, legacy=False):
        c = ReplicateConfig()
        if action is not None:
            c.soft_pin_action = action
        if ttl is not None:
            c.soft_pin_ttl_ms = ttl
        c.with_soft_pin = legacy
        assert store.put(key, b"p" * 4096, c) == OK

    put("pin/ttl", SoftPinAction.ENABLE, ttl=60_000)
    pinned, left = _pin_of(big_cluster, "pin/ttl")
    assert pinned and 50 < left <= 60
    put("pin/default", SoftPinAction.ENABLE)
    pinned, left = _pin_of(big_cluster, "pin/default")
    assert pinned and 1790 < left <= 1800
    put("pin/legacy", legacy=True)
    assert _pin_of(big_cluster, "pin/legacy")[0]
    put("pin/zero", SoftPinAction.ENABLE, ttl=0)
    put("pin/preserve", SoftPinAction.PRESERVE)
    put("pin/disable", SoftPinAction.DISABLE)
    for key in ("pin/zero", "pin/preserve", "pin/disable"):
        assert _pin_of(big_cluster, key) == (False, None), key
    negative = ReplicateConfig()
    negative.soft_pin_action = SoftPinAction.ENABLE
    negative.soft_pin_ttl_ms = -1
    assert store.put("pin/negative", b"p", negative) == INVALID_PARAMS
    # A pin shapes eviction only, as in Mooncake: remove takes the key, where
    # Shelf's own remove (shelfctl rm) refuses a pinned one.
    rm = subprocess.run([str(BIN_DIR / "shelfctl"), "--master", big_cluster.master, "rm",
                         "pin/ttl"], capture_output=True, text=True)
    assert rm.returncode != 0 and "FAILED_PRECONDITION" in rm.stderr, rm.stderr
    assert store.remove("pin/ttl") == OK
    assert store.batch_remove(["pin/default", "pin/legacy"]) == [OK, OK]
    assert store.is_exist("pin/ttl") == 0 and store.is_exist("pin/default") == 0


def test_values_batches_and_buffers(store, pool):
    arr, addr = pool
    keys = [f"vb/{i}" for i in range(5)]
    values = [rand(1000 + i, i).tobytes() for i in range(5)]
    assert store.put_batch(keys[:3], values[:3]) == OK
    assert store.batch_is_exist(keys + [""]) == [1, 1, 1, 0, 0, INVALID_KEY]
    assert store.get_batch(keys) == values[:3] + [b"", b""]
    h = store.get_buffer(keys[0])
    assert h.size() == len(values[0]) and len(h) == len(values[0])
    assert bytes(memoryview(h)) == values[0] and h.ptr() != 0
    bufs = store.batch_get_buffer(keys[:4])
    assert [bytes(memoryview(b)) for b in bufs[:3]] == values[:3] and bufs[3] is None
    assert store.put_parts("parts", b"ab", bytearray(b"cd"), memoryview(b"ef")) == OK
    assert store.get("parts") == b"abcdef"
    assert store.upsert("parts", b"new") == OK
    assert store.get("parts") == b"new"
    assert store.upsert("upsert-new", b"v", ReplicateConfig()) == OK
    assert store.get("upsert-new") == b"v"
    # An upsert that cannot be placed (three replicas, two stores) fails and
    # leaves the old value: the replace happens only at its commit.
    assert store.upsert("upsert-new", b"w", ReplicateConfig(replica_num=3)) != OK
    assert store.get("upsert-new") == b"v"
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    cfg.with_soft_pin = True
    cfg.preferred_segment = "localhost"
    assert store.put("two", b"2" * 100, cfg) == OK
    assert store.get("two") == b"2" * 100
    assert "replica_num: 2" in str(cfg)
    # put_from / batch_put_from / batch_get_into through the registered pool.
    data = rand(3 * 8192, 7)
    arr[:data.size] = data
    assert store.put_from("pf", addr, 8192) == OK
    assert store.batch_put_from(["pf1", "pf2"], [addr + 8192, addr + 16384],
                                [8192, 8192]) == [OK, OK]
    arr[:3 * 8192] = 0
    got = store.batch_get_into(["pf", "pf1", "pf2", "absent", "pf"],
                               [addr, addr + 8192, addr + 16384, addr + 30000, addr + 40000],
                               [8192, 8192, 8192, 8192, 100])
    assert got == [8192, 8192, 8192, OBJECT_NOT_FOUND, BUFFER_OVERFLOW]
    assert arr[:3 * 8192].tobytes() == data.tobytes()
    assert store.batch_remove(["pf", "absent", "", "pf1"]) == [OK, OBJECT_NOT_FOUND, INVALID_KEY, OK]
    many = [f"brm/{i}" for i in range(1500)]  # over one batch: split
    assert store.put_batch(many, [b"v"] * len(many)) == OK
    assert store.batch_remove(many) == [OK] * len(many)
    assert store.batch_is_exist(many) == [0] * len(many)
    assert store.is_exist("pf") == 0


def test_get_into_ranges(store, pool):
    arr, addr = pool
    a = rand(4096, 1).tobytes()
    b = rand(1000, 2).tobytes()
    assert store.put_batch(["rng/a", "rng/b"], [a, b]) == OK
    arr[:8192] = 0
    # Two buffers (both inside the registered pool): a's bytes 100..300 and
    # 4000..4096 to the first, b's 0..1000 to the second; then a miss and a
    # range past b's end.
    first, second = addr, addr + 4096
    got = store.get_into_ranges(
        [first, second],
        [["rng/a"], ["rng/b", "rng/absent", "rng/b"]],
        [[[0, 200]], [[0], [0], [10]]],
        [[[100, 4000]], [[0], [0], [990]]],
        [[[200, 96]], [[1000], [5], [20]]])
    assert got == [[[200, 96]], [[1000], [OBJECT_NOT_FOUND], [INVALID_PARAMS]]]
    assert arr[0:200].tobytes() == a[100:300]
    assert arr[200:296].tobytes() == a[4000:4096]
    assert arr[4096:5096].tobytes() == b
    # A target outside every registered buffer, negative offsets, ragged
    # lists: INVALID_PARAMS for that key, nothing copied.
    other = np.zeros(64, dtype=np.uint8)
    assert store.get_into_ranges([other.ctypes.data], [["rng/a"]], [[[0]]], [[[0]]],
                                 [[[64]]]) == [[[INVALID_PARAMS]]]
    assert not other.any()
    assert store.get_into_ranges([addr], [["rng/a"]], [[[-1]]], [[[0]]],
                                 [[[1]]]) == [[[INVALID_PARAMS]]]
    assert store.get_into_ranges([addr], [["rng/a"]], [[[0, 1]]], [[[0]]],
                                 [[[1]]]) == [[[INVALID_PARAMS]]]
    assert store.get_into_ranges([addr, addr], [["rng/a"]], [[[0]]], [[[0]]],
                                 [[[1]]]) == [[[INVALID_PARAMS]]]


def test_remove_by_regex_and_remove_all(store):
    keys = [f"rx/{p}/{i}" for p in ("keep", "drop") for i in range(5)]
    assert store.put_batch(keys, [b"v" * 10] * len(keys)) == OK
    assert store.remove_by_regex("^rx/drop/[0-3]$") == 4
    assert store.batch_is_exist(keys) == [1] * 5 + [0, 0, 0, 0, 1]
    assert store.remove_by_regex("^rx/drop/") == 1
    assert store.remove_by_regex("^rx/drop/") == 0
    assert store.remove_all() >= 5
    assert store.batch_is_exist(keys) == [0] * 10


def test_multi_buffers(store, pool):
    arr, addr = pool
    # Three pieces per key, scattered over the pool.
    pieces = [(0, 1000), (5000, 3000), (20000, 24)]
    keys = ["mb/0", "mb/1"]
    src = rand(64 * 1024, 3)
    arr[:src.size] = src
    ptrs = [[addr + off + k * 30000 for off, _ in pieces] for k in range(2)]
    sizes = [[n for _, n in pieces] for _ in range(2)]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [OK, OK]
    expect = [b"".join(src[off + k * 30000: off + k * 30000 + n].tobytes() for off, n in pieces)
              for k in range(2)]
    assert store.get(keys[0]) == expect[0] and store.get(keys[1]) == expect[1]
    dst = [[addr + 1_000_000 + k * 10_000 + 3000 * j for j in range(3)] for k in range(2)]
    assert store.batch_get_into_multi_buffers(keys + ["absent"], dst + [[addr]],
                                              sizes + [[10]]) == [4024, 4024, OBJECT_NOT_FOUND]
    for k in range(2):
        got = b"".join(arr[dst[k][j] - addr: dst[k][j] - addr + n].tobytes()
                       for j, (_, n) in enumerate(pieces))
        assert got == expect[k]
    # Pieces smaller than the block: INVALID_PARAMS, as in Mooncake, and
    # nothing written.
    arr[:100] = 7
    assert store.batch_get_into_multi_buffers([keys[0]], [[addr]], [[100]]) == [INVALID_PARAMS]
    assert (arr[:100] == 7).all()
    # One piece per key (a packed cross-layer cache): straight from and into
    # the piece.
    one = [[addr + 3_000_000]]
    arr[3_000_000:3_004_000] = src[:4000]
    assert store.batch_put_from_multi_buffers(["mb/one"], one, [[4000]]) == [OK]
    arr[3_000_000:3_004_000] = 0
    assert store.batch_get_into_multi_buffers(["mb/one"], one, [[4000]]) == [4000]
    assert arr[3_000_000:3_004_000].tobytes() == src[:4000].tobytes()
    # Pieces larger: the block fills them in order, its size is the answer.
    big = [[addr + 2_000_000, addr + 2_100_000]]
    assert store.batch_get_into_multi_buffers([keys[0]], big, [[4000, 4000]]) == [4024]
    assert arr[2_000_000:2_004_000].tobytes() + arr[2_100_000:2_100_024].tobytes() == expect[0]


def test_sglang_hicache_sequence(store):
    # HiCache: a registered host KV pool; per page `<hash>_k` / `<hash>_v`
    # keys; write only the pages missing, read pages into the pool.
    page = 64 * 1024
    host = np.zeros(16 * page * 2, dtype=np.uint8)
    base = host.ctypes.data
    assert store.register_buffer(base, host.nbytes) == OK
    hashes = [f"sg{i:04x}" for i in range(16)]
    keys = [k for h in hashes for k in (h + "_k", h + "_v")]
    host[:] = rand(host.size, 11)
    want = host.tobytes()
    assert store.put_batch(keys[:4], [want[:page], want[page:2 * page]] * 2) == OK
    exist = store.batch_is_exist(keys)
    missing = [i for i, e in enumerate(exist) if e != 1]
    assert missing == list(range(4, 32))
    rc = store.batch_put_from([keys[i] for i in missing], [base + i * page for i in missing],
                              [page] * len(missing))
    assert rc == [OK] * len(missing)
    host[:] = 0
    got = store.batch_get_into(keys[4:], [base + i * page for i in range(4, 32)],
                               [page] * 28)
    assert got == [page] * 28
    assert host[4 * page:].tobytes() == want[4 * page:]
    assert store.unregister_buffer(base) == OK


def test_vllm_connector_sequence(store):
    # MooncakeStoreConnector: per block, one key whose bytes are the K and V
    # slices of every layer (multi buffers).
    layers, block = 4, 16 * 1024
    kv = [np.zeros(8 * block, dtype=np.uint8) for _ in range(2 * layers)]
    for t in kv:
        assert store.register_buffer(t.ctypes.data, t.nbytes) == OK
    for i, t in enumerate(kv):
        t[:] = rand(t.size, 100 + i)
    before = [t.copy() for t in kv]
    keys = [f"vllm/blk{b}" for b in range(8)]
    ptrs = [[t.ctypes.data + b * block for t in kv] for b in range(8)]
    sizes = [[block] * len(kv) for _ in range(8)]
    assert store.batch_is_exist(keys) == [0] * 8
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()) == [OK] * 8
    assert store.batch_is_exist(keys) == [1] * 8
    for t in kv:
        t[:] = 0
    assert store.batch_get_into_multi_buffers(keys, ptrs, sizes) == [block * len(kv)] * 8
    assert all(np.array_equal(a, b) for a, b in zip(kv, before))
    assert store.remove_all() >= 8
    assert store.batch_is_exist(keys) == [0] * 8
    for t in kv:
        assert store.unregister_buffer(t.ctypes.data) == OK


def test_lmcache_sequence(big_cluster):
    store = MooncakeDistributedStore()
    assert store.setup("lmcache-host", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "",
                       big_cluster.master) == OK
    buf = np.zeros(4 * MiB, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == OK
    chunk = rand(MiB, 5)
    buf[:MiB] = chunk
    key = "lmcache@model@1@0@abcdef"
    assert store.is_exist(key) == 0
    assert store.put_from(key, buf.ctypes.data, MiB) == OK
    assert store.is_exist(key) == 1
    buf[:] = 0
    assert store.batch_get_into([key], [buf.ctypes.data + MiB], [2 * MiB]) == [MiB]
    assert np.array_equal(buf[MiB:2 * MiB], chunk)
    assert store.close() == OK


def test_shim_in_subprocess(big_cluster):
    # <build>/python holds the shelf package and the compat directory; a
    # run against the wheel's package names the shim's folder.
    shelf_dir = pathlib.Path(shelf.__file__).resolve().parent.parent
    compat = pathlib.Path(os.environ.get("SHELF_MOONCAKE_COMPAT_DIR", shelf_dir / "compat"))
    assert (compat / "mooncake" / "store.py").exists()
    code = f"""
import sys
from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,
                            ReplicateConfig)
s = MooncakeDistributedStore()
assert s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", {big_cluster.master!r}) == 0
assert s.put("shim/none", b"x", ReplicateConfig(prefer_alloc_in_same_node=True)) == -600
assert s.put("shim/a", b"x" * 1000, ReplicateConfig()) == 0
assert s.put_batch(["shim/b", "shim/c"], [b"b", b"c"]) == 0
assert s.get("shim/a") == b"x" * 1000
assert s.get_batch(["shim/b", "shim/c", "shim/z"]) == [b"b", b"c", b""]
assert s.batch_is_exist(["shim/a", "shim/z"]) == [1, 0]
assert s.close() == 0
print("shim ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{compat}{os.pathsep}{shelf_dir}"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "shim ok" in out.stdout


def test_space_of_keys_removed_right_after_a_read_comes_back():
    # A reader gives its lease back a moment after its read; a remove that
    # comes first (here from another client, Mooncake's batch_remove) leaves
    # the block's space waiting for that release, not for the whole lease.
    # 12 rounds of 32 MiB through a 64 MiB store: every put finds room.
    cluster = Cluster(stores=1, dram_bytes=64 * MiB)
    try:
        client = shelf.Client([cluster.master], timeout_ms=20000)
        store = new_store(cluster)
        dst = np.zeros(32 * MiB, dtype=np.uint8)
        handle = client.register_buffer(dst.ctypes.data, size=dst.nbytes)
        values = [rand(MiB, 900 + i).tobytes() for i in range(32)]
        for r in range(12):
            keys = [f"gone/{r}/{i}" for i in range(32)]
            statuses = client.batch_put([k.encode() for k in keys], values)
            assert all(s.ok for s in statuses), (r, [str(s) for s in statuses if not s.ok][:1])
            sizes = client.batch_get_into_async([k.encode() for k in keys], handle,
                                                [i * MiB for i in range(32)], MiB).result()
            assert sizes == [MiB] * 32
            assert dst[:MiB].tobytes() == values[0]
            assert store.batch_remove(keys) == [OK] * 32
        client.unregister_buffer(handle)
        client.close()
        store.close()
    finally:
        cluster.stop()
