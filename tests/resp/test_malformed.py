"""Bad input to shelf-resp, over raw sockets: each bad connection gets a
clear error or is closed, the gateway keeps serving the others, and nothing
half-written is readable."""

import os
import resource
import select
import socket
import time

import pytest
import redis


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


def test_an_mget_whose_values_are_over_max_inflight_bytes_is_oom(small_gateway, unique):
    # 2 MiB may be in flight: an MGET naming a 900 KB value three times
    # would hold 2.7 MB of copies. It gets -OOM before any is read; the
    # connection and the gateway go on.
    key = unique + b"v"
    r = small_gateway.redis()
    assert r.set(key, b"m" * 900000) is True
    with pytest.raises(redis.exceptions.ResponseError, match="^OOM .*MGET"):
        r.mget([key, key, key])
    assert r.mget([key, key]) == [b"m" * 900000] * 2
    assert r.mget([key, unique + b"absent"]) == [b"m" * 900000, None]
    assert r.info()["inflight_rejections"] >= 1
    r.close()


def test_an_unfinished_array_of_empty_arguments_is_charged(small_gateway):
    # Each argument costs memory besides its bytes: an array announced
    # huge and fed empty arguments, never finished, reaches the 2 MiB
    # budget and gets -OOM (it was charged nothing).
    s = small_gateway.socket()
    s.sendall(b"*1048576\r\n" + b"$0\r\n\r\n" * 100000)
    reply = read_until_closed(s)
    s.close()
    assert reply.startswith(b"-OOM "), reply[:200]
    r = small_gateway.redis()
    assert r.ping() is True
    r.close()


def test_a_client_sending_faster_than_its_commands_run_is_not_read(gateway, unique):
    # GETs of a 4 MiB value, never read: past 64 MiB of unsent replies the
    # commands wait, and past 64 MiB of waiting commands (what each costs,
    # not only its bytes) the gateway stops reading the client, which then
    # waits in TCP: 2 million requests (160 MB) do not all land in the
    # gateway's memory, whatever the kernel's socket buffers hold.
    key = unique + b"v"
    r = gateway.redis()
    r.set(key, b"v" * (4 << 20))
    get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
    flood = get * 2000000
    s = gateway.socket()
    s.setblocking(False)
    sent = 0
    stalled_since = None
    while sent < len(flood):
        try:
            sent += s.send(flood[sent:sent + (1 << 20)])
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 3:
                break
            time.sleep(0.05)
    # At most 64 MiB of commands, and one read's worth (16 MiB) unparsed.
    assert int(r.info()["inflight_bytes"]) < (96 << 20), (sent, r.info()["inflight_bytes"])
    s.close()
    assert r.ping() is True
    r.close()


def test_out_of_file_descriptors_refuses_clients_without_spinning(cluster):
    # An open-file limit far below --max-clients (10000 by default): the
    # gateway lowers --max-clients to fit and refuses the clients past it,
    # with the usual error, rather than leave them hanging while its loop
    # spins on a listener it cannot accept from.
    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    g = cluster.gateway("resp-fds", preexec=low_fd_limit)
    socks = [g.socket() for _ in range(60)]
    for s in socks:
        s.sendall(b"PING\r\n")
    answers = []
    for s in socks:
        s.settimeout(10)
        answers.append(s.recv(100))
    assert all(a == b"+PONG\r\n" or a.startswith(b"-ERR max number of clients reached")
               for a in answers), answers
    assert answers.count(b"+PONG\r\n") >= 1
    assert any(a.startswith(b"-ERR max number of clients") for a in answers)

    def cpu_s():
        with open(f"/proc/{g.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu_s()
    time.sleep(2)
    assert cpu_s() - before < 1.0, "the gateway's loop spins"
    for s in socks:
        s.close()


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


def test_a_failed_set_of_an_existing_key_keeps_its_value(gateway, three_replicas_gateway, unique):
    # The value is set through the usual gateway; a SET, an MSET and a
    # pipelined SET of it through one that cannot place its puts fail with
    # -OOM, and the key keeps its value (the old way, remove then put, lost
    # it).
    key = unique + b"k"
    r = gateway.redis()
    assert r.set(key, b"precious") is True
    bad = three_replicas_gateway.redis()
    with pytest.raises(redis.exceptions.ResponseError, match="OOM"):
        bad.set(key, b"new value")
    with pytest.raises(redis.exceptions.ResponseError, match="OOM"):
        bad.mset({key: b"new value", unique + b"other": b"x"})
    p = bad.pipeline(transaction=False)
    p.set(key, b"new value")
    p.set(unique + b"other", b"y")
    results = p.execute(raise_on_error=False)
    assert all(isinstance(x, redis.exceptions.ResponseError) for x in results), results
    assert r.get(key) == b"precious"
    # And a SET that works replaces it, readable at once.
    assert r.set(key, b"replaced") is True
    assert r.get(key) == b"replaced"
    assert r.set(key, b"replaced") is True  # the same bytes again
    assert r.get(key) == b"replaced"
    bad.close()
    r.close()
