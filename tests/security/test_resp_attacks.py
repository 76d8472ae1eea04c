"""Attacks on shelf-resp's password (--requirepass-file) from clients that do
not know it (docs/security.md, "Attacks with their tests"):

- an unauthenticated socket sends a 256 MiB SET: refused at its bulk header,
  the gateway's memory does not grow by the value;
- unauthenticated commands other than AUTH, HELLO, PING and QUIT: NOAUTH;
- password guessing through AUTH and HELLO's AUTH option: one back-off per
  address, shared by both, doubling per failure.

A real cluster (shelf-master, two shelf-stores) and gateways, from
tests/resp/conftest.py.

    SHELF_BIN_DIR=<build>/bin /usr/bin/python3 -m pytest -q tests/security/test_resp_attacks.py
"""

import os
import pathlib
import socket
import sys
import threading
import time

import pytest
import redis

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "resp"))
from conftest import PASSWORD, cluster  # noqa: E402,F401  (cluster: the fixture)


@pytest.fixture
def gateway(cluster, request):
    """A password-protected gateway of this test's own, so one test's
    failures do not back off another's address."""
    pw = cluster.dir / f"requirepass-{request.node.name}"
    pw.write_text(PASSWORD + "\n")
    pw.chmod(0o600)
    return cluster.gateway(f"resp-{request.node.name}", "--requirepass-file", str(pw))


def rss_bytes(pid):
    """The gateway's own resident memory (RssAnon): not the stores'
    segments it maps, which its client reads through once in the
    background (ClientOptions.warm_shm_bytes) and which count in VmRSS as
    shared memory."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for {pid}")


def sanitized(pid):
    """Whether the process runs under AddressSanitizer or ThreadSanitizer,
    whose allocators keep freed memory in quarantine (hundreds of MiB):
    its RSS then says nothing about what the gateway holds. GCC links the
    runtime as a shared library, clang into the executable: either way the
    executable names the runtime's entry point."""
    with open(f"/proc/{pid}/exe", "rb") as f:
        exe = f.read()
    return b"__asan_init" in exe or b"__tsan_init" in exe


def check_growth(pid, grew):
    if not sanitized(pid):
        assert grew < (32 << 20), f"RSS grew by {grew} bytes"


def read_reply(s):
    """One reply line (simple string, error or integer), or b"" at EOF."""
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = s.recv(1)
        if not chunk:
            return data
        data += chunk
    return data


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def test_an_unauthenticated_256mib_set_is_refused_at_its_header(gateway):
    value_bytes = 256 << 20
    before = rss_bytes(gateway.pid)
    s = gateway.socket()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % value_bytes)
    chunk = b"\0" * (1 << 20)
    sent = 0
    try:
        while sent < value_bytes:
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.settimeout(10)
    try:
        reply = read_reply(s)
    except ConnectionResetError:
        reply = b"(reset)"
    s.close()
    grew = rss_bytes(gateway.pid) - before
    # Today's gateway refuses the header; before, it read the whole value
    # into memory and only then answered NOAUTH.
    assert reply.startswith(b"-ERR Protocol error: unauthenticated bulk length") or \
        reply == b"(reset)", reply
    assert sent < value_bytes, f"the gateway read all {sent} bytes of an unauthenticated SET"
    check_growth(gateway.pid, grew)


def test_an_unauthenticated_pipeline_is_read_one_small_command_at_a_time(gateway):
    # 20,000 pipelined PINGs with a 4 KiB argument each (80 MiB): the
    # gateway holds at most 64 KiB of them at once, answering as it reads.
    before = rss_bytes(gateway.pid)
    s = gateway.socket()
    s.settimeout(60)
    one = command("PING", b"p" * 4096)
    count = 20000
    replies = bytearray()
    expected = len(b"$4096\r\n" + b"p" * 4096 + b"\r\n") * count
    reader_done = threading.Event()

    def reader():
        while len(replies) < expected:
            got = s.recv(1 << 20)
            if not got:
                break
            replies.extend(got)
        reader_done.set()

    t = threading.Thread(target=reader)
    t.start()
    s.sendall(one * count)
    t.join(60)
    grew = rss_bytes(gateway.pid) - before
    s.close()
    assert len(replies) == expected
    check_growth(gateway.pid, grew)


def test_only_auth_hello_ping_and_quit_run_before_authentication(gateway):
    s = gateway.socket()
    s.settimeout(10)
    for args in (("GET", "k"), ("ECHO", "x"), ("RESET",), ("CLIENT", "LIST"), ("INFO",),
                 ("SET", "k", "v"), ("DBSIZE",)):
        s.sendall(command(*args))
        assert read_reply(s).startswith(b"-NOAUTH"), args
    s.sendall(command("PING"))
    assert read_reply(s) == b"+PONG\r\n"
    # An argument over the unauthenticated limits closes the connection.
    s.sendall(command("AUTH", b"x" * 5000))
    assert read_reply(s).startswith(b"-ERR Protocol error: unauthenticated bulk length")
    s.close()
    s = gateway.socket()
    s.settimeout(10)
    s.sendall(command(*(["PING"] * 11)))
    assert read_reply(s).startswith(b"-ERR Protocol error: unauthenticated multibulk length")
    s.close()


def test_an_authenticated_pipeline_after_auth_in_the_same_write_runs_whole(gateway):
    # AUTH then a 1 MiB SET and a GET, in one write: the SET is parsed under
    # the full limits once AUTH has run.
    value = os.urandom(1 << 20)
    s = gateway.socket()
    s.settimeout(30)
    s.sendall(command("AUTH", PASSWORD) + command("SET", "piped", value) + command("GET", "piped"))
    assert read_reply(s) == b"+OK\r\n"
    assert read_reply(s) == b"+OK\r\n"
    assert read_reply(s) == b"$%d\r\n" % len(value)
    got = b""
    while len(got) < len(value) + 2:
        got += s.recv(len(value) + 2 - len(got))
    assert got[:-2] == value
    s.close()


def test_password_guessing_is_backed_off_per_address_through_auth_and_hello(gateway):
    s = gateway.socket()
    s.settimeout(10)
    checked = 0
    deadline = time.monotonic() + 2.0
    guesses = 0
    while time.monotonic() < deadline:
        verb = command("AUTH", f"guess-{guesses}") if guesses % 2 == 0 else \
            command("HELLO", "3", "AUTH", "default", f"guess-{guesses}")
        s.sendall(verb)
        reply = read_reply(s)
        guesses += 1
        if reply.startswith(b"-WRONGPASS"):
            checked += 1
        else:
            assert reply.startswith(b"-ERR too many failed authentications"), reply
        time.sleep(0.01)
    # Back-offs of 100, 200, 400 and 800 ms fit in two seconds: at most
    # five guesses are checked of the ~100 sent (all of them, before).
    assert guesses > 50
    assert checked <= 5, f"{checked} of {guesses} guesses were checked"
    # The right password too is refused during the back-off, from another
    # connection of the same address ...
    c = gateway.redis(password=PASSWORD)
    with pytest.raises(redis.exceptions.ResponseError, match="too many failed"):
        c.ping()
    c.close()
    s.close()
    # ... and accepted after it (five failures at most: 1.6 s).
    time.sleep(1.8)
    c = gateway.redis(password=PASSWORD)
    assert c.ping() is True
    c.close()

