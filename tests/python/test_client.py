"""shelf.Client against a real cluster: every call, zero-copy buffers,
async batches, and the errors misuse must raise."""

import os
import time

import pytest

import shelf


def block(n, seed):
    return os.urandom(n) if seed is None else bytes((i * 31 + seed) & 0xFF for i in range(n))


def test_put_get_exists_remove(client, unique):
    key = unique + b"a"
    data = os.urandom(100_000)
    client.put(key, data)
    client.put(key, data)  # already there: success
    assert client.get(key) == data
    assert client.get(unique + b"absent") is None
    assert client.exists(key) is True
    assert client.exists([key, unique + b"absent"]) == [True, False]
    assert client.remove(key) is True
    assert client.remove(key) is False
    assert client.get(key) is None


def test_batch_remove_one_round_trip_per_batch(client, unique):
    keys = [unique + b"br%d" % i for i in range(3)]
    client.batch_put(keys, [b"x"] * 3)
    removed, statuses = client.batch_remove(keys[:2] + [unique + b"absent"],
                                            return_statuses=True)
    assert removed == [True, True, False]
    assert statuses[0].code == shelf.StatusCode.OK
    assert statuses[2].code == shelf.StatusCode.NOT_FOUND
    assert client.exists(keys) == [False, False, True]
    assert client.batch_remove([keys[2]]) == [True]
    with pytest.raises(shelf.InvalidArgumentError, match="1..1024"):
        client.batch_remove([keys[2]] * 1025)
    with pytest.raises(shelf.InvalidArgumentError):
        client.batch_remove([])


def test_str_keys_are_their_utf8_bytes(client, unique):
    key = unique.decode() + "ключ"
    client.put(key, b"v")
    assert client.get(key.encode("utf-8")) == b"v"


def test_batches_and_match_prefix(client, unique):
    keys = [unique + b"%d" % i for i in range(6)]
    values = [os.urandom(4096 + i) for i in range(6)]
    statuses = client.batch_put(keys[:4], values[:4])
    assert [s.ok for s in statuses] == [True] * 4
    assert all(statuses) and repr(statuses[0]) == "<shelf.Status OK>"
    assert client.match_prefix(keys) == 4
    got = client.batch_get(keys)
    assert got[:4] == values[:4] and got[4:] == [None, None]
    got, st = client.batch_get(keys, return_statuses=True)
    assert st[4].code == shelf.StatusCode.NOT_FOUND and st[4].name == "NOT_FOUND"
    with pytest.raises(shelf.NotFoundError):
        st[5].raise_if_error()


def test_locate_says_which_store_holds_the_longest_prefix(client, unique):
    keys = [unique + b"%d" % i for i in range(5)]
    for k in keys[:3]:
        client.put(k, os.urandom(4096), replicas=2)  # on both stores
    client.put(keys[3], os.urandom(4096))              # on one of them
    where = client.locate(keys)
    assert where["cluster_blocks"] == 4
    nodes = where["nodes"]
    assert sorted(n["node_id"] for n in nodes) == ["node-0", "node-1"]
    assert [n["blocks"] for n in nodes] == [4, 3]  # longest run first
    assert nodes[0]["dram_blocks"] == 4 and nodes[0]["tiers"] == ["dram"] * 4
    assert nodes[1]["tiers"] == ["dram"] * 3
    assert all(n["data_address"] and n["host_id"] for n in nodes)
    # A removed block ends the runs it was in.
    assert client.remove(keys[3])
    assert client.locate(keys)["cluster_blocks"] == 3
    assert client.locate([unique + b"absent"]) == {"cluster_blocks": 0, "nodes": []}
    with pytest.raises(shelf.InvalidArgumentError):
        client.locate([])


def test_zero_copy_into_bytearray_memoryview_and_numpy(client, unique):
    data = os.urandom(64 << 10)
    client.put(unique + b"z", data)
    buf = bytearray(100 << 10)
    assert client.get_into(unique + b"z", buf) == len(data)
    assert bytes(buf[:len(data)]) == data
    view = memoryview(bytearray(200 << 10))
    assert client.get_into(unique + b"z", view, offset=1000) == len(data)
    assert view[1000:1000 + len(data)].tobytes() == data
    assert client.get_into(unique + b"missing", buf) is None

    np = pytest.importorskip("numpy")
    arr = np.zeros(32 << 10, dtype=np.uint16)  # 64 KiB
    assert client.get_into(unique + b"z", arr) == len(data)
    assert arr.tobytes() == data
    # put_from a slice of a numpy array, without copying it first.
    src = np.arange(1 << 16, dtype=np.uint32)
    client.put_from(unique + b"slice", src, offset=4096, size=8192)
    assert client.get(unique + b"slice") == src.tobytes()[4096:4096 + 8192]


def test_batch_get_into_targets(client, unique):
    keys = [unique + b"%d" % i for i in range(3)]
    values = [os.urandom(10_000), os.urandom(20_000), os.urandom(30_000)]
    client.batch_put(keys, values)
    targets = [bytearray(10_000), bytearray(100), bytearray(30_000)]
    sizes, st = client.batch_get_into(keys, targets, return_statuses=True)
    assert sizes == [10_000, None, 30_000]
    assert st[1].code == shelf.StatusCode.OUT_OF_RANGE
    assert bytes(targets[0]) == values[0] and bytes(targets[2]) == values[2]
    assert targets[1] == bytearray(100), "a block that does not fit is not written"


def test_buffer_too_small_raises_out_of_range(client, unique):
    client.put(unique + b"big", os.urandom(50_000))
    small = bytearray(1000)
    with pytest.raises(shelf.OutOfRangeError, match="does not fit") as e:
        client.get_into(unique + b"big", small)
    assert isinstance(e.value, ValueError)
    assert e.value.code == int(shelf.StatusCode.OUT_OF_RANGE)
    assert small == bytearray(1000)
    with pytest.raises(shelf.OutOfRangeError):
        client.get_into(unique + b"big", bytearray(100), offset=200)
    with pytest.raises(BufferError):
        client.get_into(unique + b"big", b"read-only bytes" * 5000)


def test_registered_buffers(client, unique):
    pool = bytearray(1 << 20)
    handle = client.register_buffer(pool)
    assert handle.size == len(pool) and not handle.gpu
    data = os.urandom(128 << 10)
    pool[0:len(data)] = data
    client.put_from(unique + b"r", handle, offset=0, size=len(data))
    assert client.get_into(unique + b"r", handle, offset=512 << 10, capacity=len(data)) == len(data)
    assert bytes(pool[512 << 10:(512 << 10) + len(data)]) == data
    with pytest.raises(shelf.OutOfRangeError, match="outside registered buffer"):
        client.get_into(unique + b"r", handle, offset=(1 << 20) - 10, capacity=len(data))
    # Async loads into the registered buffer.
    keys = [unique + b"r"] * 4
    fut = client.batch_get_into_async(keys, handle, [i * len(data) for i in range(4)], len(data))
    assert fut.wait(30) is True and fut.done()
    assert fut.result() == [len(data)] * 4
    assert bytes(pool[3 * len(data):4 * len(data)]) == data
    client.unregister_buffer(handle)
    with pytest.raises(shelf.InvalidArgumentError, match="not registered"):
        client.get_into(unique + b"r", handle)
    with pytest.raises(shelf.InvalidArgumentError):
        client.unregister_buffer(handle)


def test_gpu_registration_of_host_memory_fails(client):
    with pytest.raises(shelf.Error) as e:
        client.register_buffer(bytearray(4096), gpu=True)
    assert e.value.code_name in ("UNIMPLEMENTED", "FAILED_PRECONDITION", "INVALID_ARGUMENT")


def test_async_batches(client, unique):
    keys = [unique + b"%d" % i for i in range(8)]
    values = [os.urandom(50_000) for _ in keys]
    put = client.batch_put_async(keys, values)
    assert all(s.ok for s in put.result())
    get = client.batch_get_async(keys + [unique + b"absent"])
    got = get.result()
    assert got[:8] == values and got[8] is None
    assert get.statuses()[8].code == shelf.StatusCode.NOT_FOUND


def test_deadline_in_the_past_fails_at_once(client, unique):
    start = time.monotonic()
    with pytest.raises(shelf.DeadlineExceededError, match="already passed") as e:
        client.get(unique + b"x", timeout_ms=-1)
    assert isinstance(e.value, TimeoutError)
    with pytest.raises(TimeoutError):
        client.put(unique + b"x", b"v", timeout_ms=-1)
    with pytest.raises(TimeoutError):
        client.batch_get_async([unique + b"x"], timeout_ms=-1).result()
    assert time.monotonic() - start < 1.0
    assert client.exists(unique + b"x") is False


def test_misuse_raises_clear_errors(client):
    with pytest.raises(shelf.InvalidArgumentError, match="empty key"):
        client.get(b"")
    with pytest.raises(ValueError, match="exceeds the limit"):
        client.put(b"k" * 257, b"v")
    with pytest.raises(TypeError):
        client.get(12)
    with pytest.raises(shelf.InvalidArgumentError, match="1..1024"):
        client.match_prefix([])
    with pytest.raises(ValueError, match="one value per key"):
        client.batch_put([b"a", b"b"], [b"x"])


def test_closed_client_raises_failed_precondition(cluster, unique):
    c = shelf.Client(cluster.master)
    c.put(unique + b"k", b"v")
    c.close()
    with pytest.raises(shelf.FailedPreconditionError, match="closed"):
        c.get(unique + b"k")
    with pytest.raises(shelf.FailedPreconditionError):
        c.batch_get_async([unique + b"k"]).result()
    with shelf.Client([cluster.master]) as d:
        assert d.get(unique + b"k") == b"v"
    with pytest.raises(shelf.FailedPreconditionError):
        d.get(unique + b"k")


def test_unreachable_master_raises_unavailable():
    c = shelf.Client(["127.0.0.1:1"], timeout_ms=1000)
    with pytest.raises((shelf.UnavailableError, shelf.DeadlineExceededError)) as e:
        c.get(b"k")
    assert isinstance(e.value, (ConnectionError, TimeoutError))


def test_tcp_only_client_and_stats(cluster, unique):
    with shelf.Client([cluster.master], allow_shm=False) as c:
        data = os.urandom(300_000)
        c.put(unique + b"t", data)
        assert c.get(unique + b"t") == data
        st = c.stats()
        assert st["bytes_loaded_tcp"] == len(data) and st["bytes_loaded_shm"] == 0


def test_striped_blocks_and_transport_options(cluster, unique):
    # A 9 MiB block over tcp is striped over 3 connections, one over 1 is
    # not; both read back whole.
    for streams in (1, 3):
        with shelf.Client([cluster.master], allow_shm=False,
                          tcp_streams_per_block=streams) as c:
            data = os.urandom(9 << 20)
            key = unique + b"s%d" % streams
            c.put(key, data)
            assert c.get(key) == data
            st = c.stats()
            assert st["bytes_loaded_tcp"] == len(data) and st["bytes_loaded_rdma"] == 0
    with pytest.raises(shelf.InvalidArgumentError):
        shelf.Client([cluster.master], tcp_streams_per_block=0)
    # An RDMA device that is not there: the client says which, and fails.
    with pytest.raises(shelf.Error) as e:
        shelf.Client([cluster.master], rdma_device="shelf-no-such-rdma-device")
    assert "shelf-no-such-rdma-device" in str(e.value)


def test_threads_share_one_client(client, unique):
    import threading
    keys = [unique + b"%d" % i for i in range(16)]
    values = [os.urandom(20_000) for _ in keys]
    client.batch_put(keys, values)
    errors = []

    def reader(seed):
        try:
            for _ in range(20):
                got = client.batch_get(keys[seed:] + keys[:seed])
                assert got == values[seed:] + values[:seed]
                buf = bytearray(20_000)
                assert client.get_into(keys[seed], buf) == 20_000
                assert bytes(buf) == values[seed]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_a_client_certificate_needs_its_key(tmp_path):
    # tls_cert/tls_key reach the channel: one without the other is refused
    # before anything is sent.
    cert = tmp_path / "client.pem"
    cert.write_text("not used\n")
    with pytest.raises(shelf.InvalidArgumentError, match="both --tls-cert and --tls-key"):
        shelf.Client("127.0.0.1:1", tls_ca=str(cert), tls_cert=str(cert))


def test_shm_store_uid_is_an_option_and_checked(cluster, unique):
    # The uid a same-host store must run as (root always passes): a client
    # expecting our own uid reads as before; a value that is no uid is
    # refused when the client opens.
    with shelf.Client([cluster.master], timeout_ms=20000, shm_store_uid=os.geteuid()) as c:
        c.put(unique + b"u", b"uid")
        assert c.get(unique + b"u") == b"uid"
    with pytest.raises(shelf.InvalidArgumentError, match="shm_store_uid"):
        shelf.Client([cluster.master], shm_store_uid=-2)


def test_warm_shm_bytes_is_an_option(cluster, unique):
    # Each same-host store's segment is read through in the background once
    # mapped, up to warm_shm_bytes of it; 0 reads none.
    with shelf.Client([cluster.master], timeout_ms=20000, warm_shm_bytes=0) as c:
        c.put(unique + b"w0", b"cold")
        assert c.get(unique + b"w0") == b"cold"
        assert c.stats()["bytes_stored_shm"] > 0, "no store on this host: nothing to warm"
        time.sleep(0.5)
        assert c.stats()["bytes_warmed_shm"] == 0
    with shelf.Client([cluster.master], timeout_ms=20000, warm_shm_bytes=1 << 20) as c:
        c.put(unique + b"w1", b"warm")
        assert c.get(unique + b"w1") == b"warm"
        deadline = time.monotonic() + 30
        while c.stats()["bytes_warmed_shm"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        # At most 1 MiB of each segment mapped (the cluster's stores).
        warmed = c.stats()["bytes_warmed_shm"]
        assert warmed > 0 and warmed % (1 << 20) == 0
    with pytest.raises((shelf.InvalidArgumentError, OverflowError, TypeError)):
        shelf.Client([cluster.master], warm_shm_bytes=-1)


def test_data_tls_is_an_option_and_checked(cluster):
    # TLS on the data plane needs the CA that signed the stores, and a
    # client certificate comes with its key (the round trip is in
    # tests/security/data_tls_test.cc).
    with pytest.raises(shelf.InvalidArgumentError, match="data_tls_ca"):
        shelf.Client([cluster.master], data_tls=True)
    with pytest.raises(shelf.InvalidArgumentError, match="data_tls_key"):
        shelf.Client([cluster.master], data_tls=True, data_tls_ca="/ca.pem",
                     data_tls_cert="/c.pem")
