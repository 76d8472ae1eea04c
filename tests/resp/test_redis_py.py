"""shelf-resp driven by redis-py (Debian's python3-redis), as LMCache's
redis:// backend drives Redis."""

import concurrent.futures
import os
import subprocess
import time

import pytest
import redis

from conftest import BIN_DIR


def test_lmcache_connector_sequence(r, unique):
    # LMCache's RedisConnector: a chunk is two keys, its KV bytes and a
    # small metadata record; a chunk counts only when its metadata exists.
    key = unique + b"vllm@model@1@0@abcdef"
    kv = os.urandom(256 << 10)
    meta = os.urandom(28)
    assert r.exists(key + b"metadata") == 0
    assert r.set(key + b"kv_bytes", kv) is True
    assert r.set(key + b"metadata", meta) is True
    assert r.exists(key + b"metadata") == 1
    assert r.get(key + b"metadata") == meta
    assert r.get(key + b"kv_bytes") == kv
    # A half-written pair (kv_bytes without metadata) is cleaned up with
    # one DEL of both keys; only the present one counts.
    half = unique + b"vllm@model@1@0@half"
    r.set(half + b"kv_bytes", kv)
    assert r.delete(half + b"kv_bytes", half + b"metadata") == 1
    assert r.get(half + b"kv_bytes") is None
    assert r.exists(half + b"kv_bytes", half + b"metadata") == 0


@pytest.mark.parametrize("size", [0, 1, 64 << 10, 4 << 20, 64 << 20])
def test_value_sizes_round_trip(r, unique, size):
    value = os.urandom(size)
    key = unique + b"v"
    assert r.set(key, value) is True
    got = r.get(key)
    assert got == value
    assert r.strlen(key) == size
    assert r.delete(key) == 1
    assert r.get(key) is None


def test_miss_is_null_and_ttl_type(r, unique):
    k = unique + b"k"
    assert r.get(k) is None
    assert r.ttl(k) == -2
    assert r.pttl(k) == -2
    assert r.type(k) == b"none"
    r.set(k, b"v")
    assert r.ttl(k) == -1
    assert r.pttl(k) == -1
    assert r.type(k) == b"string"


def test_set_options(r, unique):
    k = unique + b"k"
    assert r.set(k, b"a", nx=True) is True
    assert r.set(k, b"b", nx=True) is None
    assert r.get(k) == b"a"
    assert r.setnx(k, b"c") is False
    assert r.set(unique + b"absent", b"x", xx=True) is None
    assert r.get(unique + b"absent") is None
    assert r.set(k, b"d", xx=True) is True
    assert r.get(k) == b"d"
    assert r.set(k, b"e", get=True) == b"d"
    assert r.get(k) == b"e"
    assert r.set(k, b"e") is True  # identical bytes: nothing rewritten, still OK
    assert r.getdel(k) == b"e"
    assert r.get(k) is None
    for kw in ({"ex": 10}, {"px": 10}, {"exat": 2000000000}, {"pxat": 2000000000000}):
        with pytest.raises(redis.exceptions.ResponseError, match="expiry not supported"):
            r.set(k, b"x", **kw)
    assert r.get(k) is None


def test_mset_mget_exists_del_over_the_batch_limit(r, unique):
    n = 2500  # over libshelf's 1024-item batch: split into three calls
    items = {unique + b"%d" % i: b"value-%d" % i for i in range(n)}
    assert r.mset(items) is True
    keys = list(items)
    got = r.mget(keys + [unique + b"missing"])
    assert got[:-1] == [items[k] for k in keys]
    assert got[-1] is None
    assert r.exists(*keys) == n
    assert r.delete(*keys, unique + b"missing") == n
    assert r.exists(*keys) == 0


def test_pipeline_of_100_keeps_order(r, unique):
    p = r.pipeline(transaction=False)
    for i in range(50):
        p.set(unique + b"%d" % i, b"%d" % (i * 7))
    for i in range(50):
        p.get(unique + b"%d" % i)
    replies = p.execute()
    assert replies[:50] == [True] * 50
    assert replies[50:] == [b"%d" % (i * 7) for i in range(50)]


def test_sixteen_concurrent_connections(gateway, unique):
    def worker(t):
        c = gateway.redis()
        try:
            for i in range(20):
                k = unique + b"%d/%d" % (t, i)
                v = os.urandom(1000 + t * 100 + i)
                assert c.set(k, v) is True
                assert c.get(k) == v
            return True
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert all(pool.map(worker, range(16)))


def test_binary_safe_keys_and_values(r, unique):
    keys = [unique + bytes([0]) + b"\r\n" + bytes(range(256))[:200],
            unique + b"\xff\xfe\r\n\x00 *$+-:"]
    for k in keys:
        v = bytes(range(256)) * 4 + b"\r\n$-1\r\n"
        assert r.set(k, v) is True
        assert r.get(k) == v
        assert r.exists(k) == 1


def test_key_over_the_limit_is_an_error(r, unique):
    with pytest.raises(redis.exceptions.ResponseError, match="1..256 bytes"):
        r.set(b"k" * 257, b"v")
    with pytest.raises(redis.exceptions.ResponseError, match="1..256 bytes"):
        r.get(b"")


def test_scan_over_10000_keys(r, unique):
    n = 10000
    prefix = unique + b"s/"
    for at in range(0, n, 1000):
        r.mset({prefix + b"%05d" % i: b"x" for i in range(at, at + 1000)})
    seen = list(r.scan_iter(match=prefix + b"*", count=1000))
    assert len(seen) == n
    assert set(seen) == {prefix + b"%05d" % i for i in range(n)}
    assert len(r.keys(prefix + b"00*")) == 1000
    assert r.dbsize() >= n
    # A cursor stays valid after use: the same step again gives the same
    # keys (a client retrying a step that failed).
    cursor, first = r.scan(0, match=prefix + b"*", count=100)
    assert cursor != 0
    _, again = r.scan(cursor, match=prefix + b"*", count=100)
    assert again and r.scan(cursor, match=prefix + b"*", count=100)[1] == again
    r.delete(*seen)


def test_server_commands(r, gateway):
    assert r.ping() is True
    assert r.echo(b"hi") == b"hi"
    assert r.execute_command("SELECT", 0) is True
    with pytest.raises(redis.exceptions.ResponseError, match="out of range"):
        r.execute_command("SELECT", 1)
    r.client_setname("lmcache")
    assert r.client_getname() == "lmcache" or r.client_getname() == b"lmcache"
    assert isinstance(r.client_id(), int)
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "test") == b"OK"
    assert b"lib-name=test" in r.execute_command("CLIENT", "INFO")
    info = r.info()
    assert info["connected_clients"] >= 1
    assert info["total_commands_processed"] > 0
    assert "used_memory" in info
    assert r.command_count() > 10
    assert len(r.command()) == r.command_count()
    assert r.command()["get"]["arity"] == 2
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
        r.execute_command("HSET", "h", "f", "v")


def test_flushdb(r, unique, gateway):
    r.set(unique + b"a", b"1")
    assert r.flushdb() is True
    assert r.get(unique + b"a") is None
    assert r.dbsize() == 0


def test_requirepass(auth_gateway):
    c = auth_gateway.redis()
    with pytest.raises(redis.exceptions.AuthenticationError):  # -NOAUTH
        c.get("x")
    c.close()
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGPASS"):
        auth_gateway.redis(password="wrong").ping()
    from conftest import PASSWORD
    # A failure backs the address off for 100 ms: even the right password
    # is refused, unchecked, until then.
    with pytest.raises(redis.exceptions.ResponseError, match="too many failed"):
        auth_gateway.redis(password=PASSWORD).ping()
    time.sleep(0.3)
    good = auth_gateway.redis(password=PASSWORD)
    assert good.set("authed", b"v") is True
    assert good.get("authed") == b"v"
    good.close()


def test_value_over_the_max_is_refused_and_nothing_is_stored(small_gateway, unique):
    c = small_gateway.redis()
    with pytest.raises((redis.exceptions.ResponseError, redis.exceptions.ConnectionError)):
        c.set(unique + b"big", os.urandom((1 << 20) + 1))
    c.close()
    c = small_gateway.redis()
    assert c.get(unique + b"big") is None
    assert c.set(unique + b"ok", os.urandom(1 << 20)) is True  # exactly the max is fine
    c.close()


def test_pipelined_runs_match_one_by_one(r, unique):
    # Runs of GETs and of SETs go to the cluster as batches; the replies
    # must be those of running the commands one at a time, in order.
    k, k2 = unique + b"k", unique + b"k2"
    p = r.pipeline(transaction=False)
    p.set(k, b"a")
    p.set(k, b"b")          # the same key twice in one run
    p.set(k2, b"x")
    p.get(k)
    p.get(k2)
    p.get(unique + b"missing")
    p.set(k2, b"x")         # identical bytes
    p.set(k2, b"y")         # replaced
    p.get(k2)
    p.set(b"", b"bad key")  # not batchable: its own error, the rest unaffected
    p.get(k)
    replies = p.execute(raise_on_error=False)
    assert replies[:9] == [True, True, True, b"b", b"x", None, True, True, b"y"]
    assert isinstance(replies[9], redis.exceptions.ResponseError)
    assert replies[10] == b"b"


def test_unix_socket(gateway, unique):
    c = redis.Redis(unix_socket_path=gateway.unix_socket, socket_timeout=60)
    assert c.set(unique + b"k", b"over unix") is True
    c.close()
    r = gateway.redis()
    assert r.get(unique + b"k") == b"over unix"
    r.close()


def test_max_clients(few_clients_gateway):
    # Two clients are served; until the fixture's own probe connection has
    # been seen closed, the second may still be refused: then start over.
    for _ in range(100):
        a, b = few_clients_gateway.socket(), few_clients_gateway.socket()
        replies = []
        for s in (a, b):
            s.sendall(b"PING\r\n")
            replies.append(s.recv(100))
        if replies == [b"+PONG\r\n"] * 2:
            break
        assert b"max number of clients" in b"".join(replies), replies
        a.close()
        b.close()
        time.sleep(0.05)
    assert replies == [b"+PONG\r\n"] * 2
    c = few_clients_gateway.socket()
    data = b""
    while True:
        chunk = c.recv(100)
        if not chunk:
            break
        data += chunk
    assert data == b"-ERR max number of clients reached\r\n"
    for s in (a, b, c):
        s.close()


def test_health_and_metrics(gateway, r):
    import urllib.request
    r.ping()
    with urllib.request.urlopen(f"http://{gateway.admin}/health", timeout=30) as h:
        assert h.status == 200
        assert b'"ok"' in h.read()
    with urllib.request.urlopen(f"http://{gateway.admin}/metrics", timeout=30) as m:
        text = m.read().decode()
    assert "# TYPE shelf_resp_connections gauge" in text
    assert "# TYPE shelf_resp_commands_total counter" in text
    assert "# TYPE shelf_resp_errors_total counter" in text
    # Prometheus's own linter (Debian: prometheus) accepts the exposition.
    lint = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_flush_is_off_unless_enabled(auth_gateway, unique):
    from conftest import PASSWORD
    c = auth_gateway.redis(password=PASSWORD)
    c.set(unique + b"k", b"v")
    with pytest.raises(redis.exceptions.ResponseError, match="--enable-flush"):
        c.flushall()
    assert c.get(unique + b"k") == b"v"
    c.close()


def test_a_block_of_another_client_is_wrongtype_on_every_read_path(cluster, r, unique):
    # A block put by shelfctl has no shelf-resp trailer: GET, a pipelined
    # GET, GETSET-style SET ... GET and STRLEN answer WRONGTYPE, the same
    # line on each path; MGET answers nil, as Redis does for a key of
    # another type.
    key = unique + b"foreign"
    subprocess.run([str(BIN_DIR / "shelfctl"), "--master", cluster.master, "put",
                    key.decode(), "-"], input=b"written by shelfctl", check=True,
                   capture_output=True, timeout=60)
    wrongtype = "WRONGTYPE block was not written through shelf-resp"
    with pytest.raises(redis.exceptions.ResponseError, match=wrongtype):
        r.get(key)
    with pytest.raises(redis.exceptions.ResponseError, match=wrongtype):
        r.strlen(key)
    with pytest.raises(redis.exceptions.ResponseError, match=wrongtype):
        r.set(key, b"new", get=True)
    p = r.pipeline(transaction=False)
    p.get(key)
    p.get(key)
    replies = p.execute(raise_on_error=False)
    assert [str(e) for e in replies] == [wrongtype, wrongtype]
    assert r.mget([key]) == [None]
    # Nothing was changed by the refused reads.
    assert r.exists(key) == 1
