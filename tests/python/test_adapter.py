"""shelf.StorageAdapter: the get/set/exists/batch_* shape of engines'
hierarchical caches, against a real cluster and against none."""

import os

import pytest

import shelf


@pytest.fixture
def adapter(client, unique):
    return shelf.StorageAdapter(client, key_prefix=unique)


def test_get_set_exists_delete(adapter):
    value = os.urandom(32 << 10)
    assert adapter.get("k1") is None
    assert adapter.exists("k1") is False
    assert adapter.set("k1", value) is True
    assert adapter.set("k1", value) is True  # already there
    assert adapter.exists("k1") is True
    assert adapter.get("k1") == value
    target = bytearray(len(value))
    assert adapter.get("k1", target) is target and bytes(target) == value
    assert adapter.delete("k1") is True
    assert adapter.get("k1") is None
    assert adapter.last_error == ""


def test_batches_and_leading_exists(adapter):
    keys = ["h%d" % i for i in range(5)]
    values = [os.urandom(8000 + i) for i in range(5)]
    assert adapter.batch_set(keys[:3], values[:3]) is True
    assert adapter.batch_exists(keys) == 3
    assert adapter.batch_exists(["h1", "h2"]) == 2
    assert adapter.batch_exists(["nope"] + keys) == 0
    assert adapter.batch_exists([]) == 0
    assert adapter.batch_get(keys) == values[:3] + [None, None]
    targets = [bytearray(9000) for _ in keys]
    got = adapter.batch_get(keys, targets)
    assert got[0] is targets[0] and got[3] is None
    assert bytes(targets[1][:8001]) == values[1]


def test_numpy_values(adapter):
    np = pytest.importorskip("numpy")
    kv = np.random.default_rng(1).standard_normal((4, 64), dtype=np.float32)
    assert adapter.set("np", kv)
    out = np.empty_like(kv)
    assert adapter.get("np", out) is out
    assert np.array_equal(out, kv)


def test_key_prefix_isolates_namespaces(client, unique):
    a = shelf.StorageAdapter(client, key_prefix=unique + b"a/")
    b = shelf.StorageAdapter(client, key_prefix=unique + b"b/")
    assert a.set("same", b"from a")
    assert b.get("same") is None
    assert client.get(unique + b"a/same") == b"from a"


def test_long_batches_are_split(adapter):
    keys = ["many%d" % i for i in range(1500)]  # over the 1024-key batch limit
    assert adapter.batch_set(keys, [b"v"] * len(keys))
    assert adapter.batch_exists(keys) == 1500
    assert adapter.batch_get(keys)[-1] == b"v"


def test_misuse_raises(adapter):
    with pytest.raises(shelf.InvalidArgumentError):
        adapter.get("x" * 300)
    with pytest.raises(ValueError, match="one value per key"):
        adapter.batch_set(["a"], [])
    with pytest.raises(TypeError):
        adapter.set("k", 42)


def test_unreachable_cluster_reads_as_absent():
    down = shelf.StorageAdapter(masters="127.0.0.1:1", timeout_ms=1000)
    assert down.get("k") is None
    assert down.set("k", b"v") is False
    assert down.exists("k") is False
    assert down.batch_exists(["a", "b"]) == 0
    assert down.batch_get(["a", "b"]) == [None, None]
    assert "UNAVAILABLE" in down.last_error or "DEADLINE" in down.last_error
    with pytest.raises(ValueError):
        shelf.StorageAdapter()
