"""Bad input to shelf-resp, over raw sockets: each bad connection gets a
clear error or is closed, the gateway keeps serving the others, and nothing
half-written is readable."""

import select
import socket

import pytest


def read_until_closed(s):
    """Everything the gateway sends before it closes the connection."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


BAD = {
    "bulk longer than its length": b"*2\r\n$3\r\nGET\r\n$2\r\nabc\r\n",
    "missing CRLF": b"*1\n$4\r\nPING\r\n",
    "negative bulk length": b"*2\r\n$3\r\nGET\r\n$-7\r\n",
    "2^63 bulk length": b"*2\r\n$3\r\nGET\r\n$9223372036854775808\r\n",
    "too-deep array": b"*1\r\n" * 64 + b"$4\r\nPING\r\n",
    "1 GiB array header": b"*1073741824\r\n",
    "huge inline line": b"A" * (128 << 10),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_input_gets_an_error_and_a_close(gateway, name):
    s = gateway.socket()
    s.sendall(b"*1\r\n$4\r\nPING\r\n" + BAD[name])
    reply = read_until_closed(s)
    s.close()
    assert reply.startswith(b"+PONG\r\n-ERR Protocol error"), reply[:200]
    assert reply.endswith(b"\r\n")
    # The gateway still serves others.
    ok = gateway.socket()
    ok.sendall(b"PING\r\n")
    assert ok.recv(100) == b"+PONG\r\n"
    ok.close()


def test_client_dying_mid_value_leaves_nothing(gateway, unique):
    key = unique + b"half"
    s = gateway.socket()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1000\r\n" % (len(key), key) + b"x" * 500)
    s.close()
    r = gateway.redis()
    assert r.get(key) is None
    assert r.exists(key) == 0
    assert r.ping() is True
    r.close()


def test_value_over_the_max_closes_with_an_error(small_gateway, unique):
    key = unique + b"big"
    s = small_gateway.socket()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, (1 << 20) + 1))
    reply = read_until_closed(s)
    s.close()
    assert reply.startswith(b"-ERR value of 1048577 bytes is over --max-value-size"), reply
    r = small_gateway.redis()
    assert r.get(key) is None
    r.close()


def test_over_max_inflight_bytes_is_oom(small_gateway, unique):
    # 2 MiB may be in flight; three clients each announce a ~1 MB value and
    # send part of it. Whichever is read last goes over and gets -OOM.
    socks = []
    for i in range(3):
        key = unique + b"%d" % i
        s = small_gateway.socket()
        s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1000000\r\n" % (len(key), key) + b"y" * 10)
        socks.append(s)
    readable, _, _ = select.select(socks, [], [], 60)
    assert len(readable) >= 1
    reply = read_until_closed(readable[0])
    assert reply.startswith(b"-OOM "), reply
    for s in socks:
        s.close()
    r = small_gateway.redis()
    assert r.info()["inflight_rejections"] >= 1
    for i in range(3):
        assert r.get(unique + b"%d" % i) is None
    assert r.set(unique + b"after", b"z" * 1000) is True
    r.close()


def test_pipelined_inline_and_multibulk_replies_in_order(gateway, unique):
    s = gateway.socket()
    k = unique.decode()
    s.sendall(("SET %sa 1\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%sa\r\nGET %smissing\r\nECHO x\r\nQUIT\r\n"
               % (k, len(k) + 1, k, k)).encode())
    assert read_until_closed(s) == b"+OK\r\n$1\r\n1\r\n$-1\r\n$1\r\nx\r\n+OK\r\n"
    s.close()


def test_slow_reader_of_a_long_pipeline_gets_every_reply(gateway, unique):
    # 48 GETs of a 4 MiB value (192 MiB of replies) sent before reading one:
    # the gateway holds at most a bounded amount of replies for a client that
    # does not read, then resumes as it reads, with every reply in order.
    key = unique + b"v"
    value = bytes(range(256)) * (16 << 10)
    r = gateway.redis()
    r.set(key, value)
    r.close()
    s = gateway.socket()
    n = 48
    get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
    s.sendall(get * n + b"PING\r\n")
    one = b"$%d\r\n" % len(value) + value + b"\r\n"
    want = one * n + b"+PONG\r\n"
    got = bytearray()
    while len(got) < len(want):
        chunk = s.recv(1 << 20)
        assert chunk, "closed after %d bytes" % len(got)
        got += chunk
    s.close()
    assert bytes(got) == want


def test_commands_sent_before_a_half_close_still_run(gateway, unique):
    # `printf 'SET k v\r\nGET k\r\n' | nc host port`: the client shuts its
    # sending side down right after the commands; they run and it gets
    # every reply before the gateway closes.
    k = unique + b"k"
    s = gateway.socket()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\nGET %s\r\n" % (len(k), k, k))
    s.shutdown(socket.SHUT_WR)
    assert read_until_closed(s) == b"+OK\r\n$1\r\nv\r\n"
    s.close()


def test_resource_exhausted_is_oom(three_replicas_gateway, unique):
    # Three replicas on a two-store cluster: the master answers
    # RESOURCE_EXHAUSTED, which a Redis client sees as -OOM; nothing is stored.
    key = unique + b"k"
    s = three_replicas_gateway.socket()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$5\r\nvalue\r\n" % (len(key), key)
              + b"*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n" % (len(key), key) + b"QUIT\r\n")
    reply = read_until_closed(s)
    s.close()
    assert reply.startswith(b"-OOM "), reply
    assert reply.endswith(b"\r\n:0\r\n+OK\r\n"), reply
