"""shelf-resp as a gateway principal (--credentials, docs/security.md,
"Principals and tenants"): two gateways of two tenants in front of one
master run with --credentials keep their keys apart; KEYS and FLUSHDB act
within the gateway's tenant; another tenant's key is refused."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import pathlib

import pytest
import redis

from conftest import BIN_DIR, START_TIMEOUT_S, Gateway, _wait_for_line

DATA_SECRET = "resp-principals-data-plane-secret"
CREDENTIALS = ("gw-a gateway team-a secret-of-gateway-a-0123456\n"
               "gw-b gateway team-b secret-of-gateway-b-0123456\n"
               "store-1 store - secret-of-the-store-0123456789 nodes=*\n")


class TenantCluster:
    def __init__(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shelf-resp-princ-"))
        self.procs = []
        creds = self._private("credentials", CREDENTIALS)
        secret = self._private("secret", DATA_SECRET + "\n")
        master = self._spawn("master", [BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0",
                                        "--credentials", creds, "--secret-file", secret])
        self._spawn("store", [BIN_DIR / "shelf-store", "--master", master,
                              "--listen", "127.0.0.1:0", "--dram-size", "64MiB",
                              "--run-dir", self.dir / "store.run", "--node-id", "node-0",
                              "--credentials", creds, "--principal", "store-1",
                              "--secret-file", secret])
        self.gateways = {
            name: Gateway(self._spawn(name, [
                BIN_DIR / "shelf-resp", "--master", master, "--listen", "127.0.0.1:0",
                "--enable-flush", "--secret-file", secret, "--credentials", creds,
                "--principal", name]))
            for name in ("gw-a", "gw-b")}

    def _private(self, name, text):
        path = self.dir / name
        path.write_text(text)
        path.chmod(0o600)
        return path

    def _spawn(self, name, argv):
        ready = self.dir / f"{name}.addr"
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(a) for a in argv] + ["--ready-file", str(ready)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return _wait_for_line(ready, proc, log)

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def tenants():
    c = TenantCluster()
    a = c.gateways["gw-a"].redis()
    b = c.gateways["gw-b"].redis()
    # The store registers after writing its ready file.
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            a.set("__probe__", b"x")
            a.delete("__probe__")
            break
        except redis.exceptions.ResponseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield a, b
    a.close()
    b.close()
    c.stop()


def test_gateways_of_two_tenants_keep_their_keys_apart(tenants):
    a, b = tenants
    a.set("k", b"of team-a")
    b.set("k", b"of team-b")
    assert a.get("k") == b"of team-a"
    assert b.get("k") == b"of team-b"
    assert a.keys("*") == [b"k"]
    with pytest.raises(redis.exceptions.ResponseError):
        b.get("@team-a/k")
    with pytest.raises(redis.exceptions.ResponseError):
        b.set("@team-a/k", b"overwritten")
    a.flushdb()
    assert a.keys("*") == []
    assert b.get("k") == b"of team-b"


# ------------------------------------------------------------- named users

SECRET_B = "secret-of-gateway-b-0123456"


class LmcacheRespConnection:
    """The bytes LMCache's native RESP connector (csrc/storage_backends/
    redis/connector.cpp in LMCache/LMCache) sends, and the exact replies it
    accepts: AUTH as an array of bulk strings, +OK\\r\\n after AUTH and SET,
    $<len>\\r\\n<bytes>\\r\\n or $-1\\r\\n after GET, :0\\r\\n or :1\\r\\n after
    EXISTS and DEL. Anything else is a failure, as it is there."""

    def __init__(self, gateway, source="127.0.0.1"):
        self.sock = socket.create_connection((gateway.host, gateway.port), timeout=30,
                                             source_address=(source, 0))
        self.buf = b""

    @staticmethod
    def _bulk(b):
        return b"$%d\r\n%s\r\n" % (len(b), b)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def _exactly(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def auth(self, user, password):
        """The reply line: b"+OK\\r\\n" is the only success."""
        if user:
            self.sock.sendall(b"*3\r\n$4\r\nAUTH\r\n" + self._bulk(user) + self._bulk(password))
        else:
            self.sock.sendall(b"*2\r\n$4\r\nAUTH\r\n" + self._bulk(password))
        return self._line()

    def set(self, key, value):
        self.sock.sendall(b"*3\r\n$3\r\nSET\r\n" + self._bulk(key) + self._bulk(value))
        assert self._exactly(5) == b"+OK\r\n"

    def get(self, key, size):
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n" + self._bulk(key))
        header = self._line()
        if header == b"$-1\r\n":
            return None
        assert header == b"$%d\r\n" % size, header
        value = self._exactly(size)
        assert self._exactly(2) == b"\r\n"
        return value

    def _flag(self, command, key):
        self.sock.sendall(b"*2\r\n" + self._bulk(command) + self._bulk(key))
        reply = self._exactly(4)
        assert reply in (b":0\r\n", b":1\r\n"), reply
        return reply == b":1\r\n"

    def exists(self, key):
        return self._flag(b"EXISTS", key)

    def delete(self, key):
        return self._flag(b"DEL", key)

    def close(self):
        self.sock.close()


def test_lmcache_connector_bytes_as_a_named_user(tenants):
    a, b = tenants
    gateway_a = Gateway(f"{a.connection_pool.connection_kwargs['host']}:"
                        f"{a.connection_pool.connection_kwargs['port']}")
    conn = LmcacheRespConnection(gateway_a)
    try:
        # gw-a's gateway, AUTHed as gw-b: the chunks live in team-b.
        assert conn.auth(b"gw-b", SECRET_B.encode()) == b"+OK\r\n"
        key, chunk = b"lmcache@model@00000000@0@ab12", os.urandom(256 << 10)
        assert not conn.exists(key)
        assert conn.get(key, len(chunk)) is None
        conn.set(key, chunk)
        assert conn.exists(key)
        assert conn.get(key, len(chunk)) == chunk
        assert b.get(key) == chunk  # team-b's own gateway sees it
        assert a.get(key) is None   # team-a's does not
        assert conn.delete(key) and not conn.delete(key)
        # gw-b's gateway read the chunk above, so it holds the chunk's
        # location: its store learns of the remove with its next heartbeat
        # (docs/client.md, "Cached reads"), and until then a cached read
        # may still return the removed chunk.
        deadline = time.monotonic() + 10
        while b.get(key) is not None:
            assert time.monotonic() < deadline, "gw-b still reads the removed chunk"
            time.sleep(0.1)
    finally:
        conn.close()


def test_named_users_through_redis_py(tenants):
    a, b = tenants
    kw = a.connection_pool.connection_kwargs
    as_b = redis.Redis(host=kw["host"], port=kw["port"], username="gw-b", password=SECRET_B,
                       socket_timeout=60)
    try:
        as_b.set("named", b"through gw-a's gateway as gw-b")
        assert b.get("named") == b"through gw-a's gateway as gw-b"
        assert a.get("named") is None
        assert b"user=gw-b" in as_b.execute_command("CLIENT", "INFO")
        # A SCAN cursor is its user's alone.
        for i in range(3):
            a.set(f"scan-{i}", b"x")
        cursor, _ = a.scan(0, count=1)
        assert cursor != 0
        with pytest.raises(redis.exceptions.ResponseError, match="invalid cursor"):
            as_b.scan(cursor, count=1)
        assert a.scan(cursor, count=1) is not None
        # RESET goes back to the default user (gw-a, team-a).
        as_b.execute_command("RESET")
        assert as_b.get("named") is None
    finally:
        as_b.close()
        b.delete("named")


def test_a_wrong_password_or_unknown_user_is_refused_exactly(tenants):
    a, _ = tenants
    kw = a.connection_pool.connection_kwargs
    gateway_a = Gateway(f"{kw['host']}:{kw['port']}")
    # From an address of its own: a failure backs its address off.
    for user, password in ((b"gw-b", b"not-the-secret-0123456789"),
                           (b"no-such-user", SECRET_B.encode()),
                           (b"store-1", b"secret-of-the-store-0123456789")):
        conn = LmcacheRespConnection(gateway_a, source="127.0.0.2")
        try:
            reply = conn.auth(user, password)
            assert reply.startswith(b"-WRONGPASS"), reply
        finally:
            conn.close()
        time.sleep(0.5)
