"""RESP over TLS (--tls-listen): certificates made here with the openssl CLI
(a self-signed CA, a server certificate, client certificates from that CA and
from another), then redis-py (ssl=True) and redis-cli --tls against a real
shelf-resp, beside its plain listener. Large values and pipelines go through
the non-blocking handshake/read/write paths; plaintext and garbage on the TLS
port are closed without touching other clients."""

import os
import random
import socket
import ssl
import subprocess
import threading
import time

import pytest
import redis

from conftest import BIN_DIR, START_TIMEOUT_S


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _issue(d, name, ca, extensions):
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-days", "2", "-in", f"{name}.csr", "-CA", f"{ca}.crt",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt",
             "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(cluster):
    d = cluster.dir / "tls"
    d.mkdir(exist_ok=True)
    for ca in ("ca", "rogue-ca"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-days", "2", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                 "-subj", f"/CN=shelf test {ca}", cwd=d)
    _issue(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                              "extendedKeyUsage=serverAuth\n")
    _issue(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    _issue(d, "rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth\n")
    return d


def _tls_gateway(cluster, name, certs, *extra):
    """Starts shelf-resp with a plain and a TLS listener: (plain, tls) ports."""
    cluster._spawn(name, [BIN_DIR / "shelf-resp", "--master", cluster.master,
                          "--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0",
                          "--tls-cert", certs / "server.crt", "--tls-key", certs / "server.key",
                          *extra])
    lines = (cluster.dir / f"{name}.addr").read_text().split()
    assert len(lines) == 2, lines
    return [int(a.rsplit(":", 1)[1]) for a in lines]


def _tls_client(port, certs, **kw):
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                       ssl_cert_reqs="required", socket_timeout=120, **kw)


def _wait_ready(c):
    # The stores register after their ready files: wait for a put to pass.
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            c.set("__tls_probe__", b"x")
            return
        except redis.exceptions.ResponseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def tls_gateway(cluster, certs):
    # A short handshake deadline, so the stalled handshakes below are closed
    # soon (the default is 10 s).
    plain, tls = _tls_gateway(cluster, "resp-tls", certs, "--tls-handshake-timeout", "2s")
    c = _tls_client(tls, certs)
    _wait_ready(c)
    c.close()
    return plain, tls


def test_values_from_0_bytes_to_64_mib_round_trip_over_tls(tls_gateway, certs, unique):
    _, tls = tls_gateway
    c = _tls_client(tls, certs)
    for size in (0, 1, 64 << 10, 4 << 20, 64 << 20):
        value = os.urandom(size)
        key = unique + b"v%d" % size
        assert c.set(key, value) is True
        assert c.get(key) == value, size
        assert c.strlen(key) == size
    c.close()


def test_pipeline_of_100_commands_over_tls(tls_gateway, certs, unique):
    _, tls = tls_gateway
    c = _tls_client(tls, certs)
    values = [os.urandom(i * 997) for i in range(50)]
    p = c.pipeline(transaction=False)
    for i, v in enumerate(values):
        p.set(unique + b"p%d" % i, v)
    for i in range(50):
        p.get(unique + b"p%d" % i)
    out = p.execute()
    assert out[:50] == [True] * 50
    assert out[50:] == values
    # Large replies back to back: SSL_write hits a full socket and resumes.
    big = [os.urandom(8 << 20) for _ in range(4)]
    c.mset({unique + b"big%d" % i: v for i, v in enumerate(big)})
    p = c.pipeline(transaction=False)
    for _ in range(3):
        for i in range(4):
            p.get(unique + b"big%d" % i)
    assert p.execute() == big * 3
    c.close()


def test_16_tls_connections_at_once(tls_gateway, certs, unique):
    _, tls = tls_gateway
    errors = []

    def work(i):
        try:
            c = _tls_client(tls, certs)
            for j in range(10):
                v = os.urandom(256 << 10)
                k = unique + b"c%d/%d" % (i, j)
                assert c.set(k, v) is True
                assert c.get(k) == v
            c.close()
        except Exception as e:  # reported below, with the connection's number
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_plain_and_tls_listeners_serve_the_same_keys(tls_gateway, certs, unique):
    plain, tls = tls_gateway
    t = _tls_client(tls, certs)
    p = redis.Redis(host="127.0.0.1", port=plain, socket_timeout=60)
    t.set(unique + b"shared", b"over tls")
    assert p.get(unique + b"shared") == b"over tls"
    t.close()
    p.close()


def test_redis_cli_over_tls(tls_gateway, certs, unique):
    _, tls = tls_gateway
    base = ["redis-cli", "--tls", "--cacert", str(certs / "ca.crt"), "-h", "127.0.0.1",
            "-p", str(tls)]
    key = (unique + b"cli").decode()
    out = subprocess.run(base + ["SET", key, "hello tls"], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "OK", out.stderr
    out = subprocess.run(base + ["GET", key], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "hello tls", out.stderr
    # Without --tls, redis-cli on the TLS port gets no reply: it is closed.
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(tls), "GET", key],
                         capture_output=True, text=True, timeout=60)
    assert "hello tls" not in out.stdout


def _stats(port, certs):
    c = _tls_client(port, certs)
    s = c.info("stats")
    c.close()
    return s


def _closed_without_reply(s):
    s.settimeout(60)
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    s.close()
    return got


def test_plaintext_and_garbage_on_the_tls_port_are_closed_alone(tls_gateway, certs, unique):
    _, tls = tls_gateway
    c = _tls_client(tls, certs)  # a client in the middle of its work
    c.set(unique + b"a", b"1")
    before = _stats(tls, certs)["tls_handshake_failures"]

    s = socket.create_connection(("127.0.0.1", tls), timeout=60)
    s.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
    got = _closed_without_reply(s)
    assert not got.startswith(b"$") and not got.startswith(b"+"), got

    # Garbage, the same every run: random bytes may happen to open a record
    # that claims more than was sent, which is the stalled case below.
    s = socket.create_connection(("127.0.0.1", tls), timeout=60)
    s.sendall(b"\x00\x00" + random.Random(7).randbytes(8190))
    _closed_without_reply(s)

    # Stalled handshakes: a record header that promises 16 KiB and delivers
    # 100 bytes, and a client that sends nothing at all. Both hold their
    # connection until --tls-handshake-timeout closes it.
    s = socket.create_connection(("127.0.0.1", tls), timeout=60)
    s.sendall(b"\x16\x03\x01\x40\x00" + b"\x01" * 100)
    _closed_without_reply(s)
    s = socket.create_connection(("127.0.0.1", tls), timeout=60)
    _closed_without_reply(s)

    # A handshake record cut short, then the client goes.
    s = socket.create_connection(("127.0.0.1", tls), timeout=60)
    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(40))
    s.close()

    assert c.get(unique + b"a") == b"1"
    c.close()
    deadline = time.monotonic() + 30
    while _stats(tls, certs)["tls_handshake_failures"] < before + 5:
        assert time.monotonic() < deadline, "handshake failures not counted"
        time.sleep(0.05)


def test_client_certificates_checked_when_asked(cluster, certs, tls_gateway, unique):
    _, tls = _tls_gateway(cluster, "resp-mtls", certs, "--tls-ca-cert", certs / "ca.crt",
                          "--tls-auth-clients", "yes")
    good = _tls_client(tls, certs, ssl_certfile=str(certs / "client.crt"),
                       ssl_keyfile=str(certs / "client.key"))
    _wait_ready(good)
    good.set(unique + b"m", b"with a certificate")
    assert good.get(unique + b"m") == b"with a certificate"
    for kw in ({}, {"ssl_certfile": str(certs / "rogue-client.crt"),
                    "ssl_keyfile": str(certs / "rogue-client.key")}):
        bad = _tls_client(tls, certs, **kw)
        with pytest.raises((redis.exceptions.ConnectionError, ssl.SSLError, OSError)):
            bad.get(unique + b"m")
        bad.close()
    assert good.get(unique + b"m") == b"with a certificate"
    good.close()
    # The gateway without --tls-auth-clients takes a client without a certificate.
    c = _tls_client(tls_gateway[1], certs)
    assert c.get(unique + b"m") == b"with a certificate"
    c.close()


def test_tls_only_with_the_plain_listener_off(cluster, certs, tls_gateway, unique):
    cluster._spawn("resp-tls-only", [BIN_DIR / "shelf-resp", "--master", cluster.master,
                                     "--listen=", "--tls-listen", "127.0.0.1:0",
                                     "--tls-cert", certs / "server.crt",
                                     "--tls-key", certs / "server.key"])
    lines = (cluster.dir / "resp-tls-only.addr").read_text().split()
    assert len(lines) == 1, lines
    c = _tls_client(int(lines[0].rsplit(":", 1)[1]), certs)
    _wait_ready(c)
    assert c.ping() is True
    c.close()


def _start_fails(cluster, *args):
    out = subprocess.run([str(BIN_DIR / "shelf-resp"), "--master", cluster.master,
                          "--listen", "127.0.0.1:0", *map(str, args)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    return out.stderr


def test_bad_tls_files_stop_the_start_with_a_clear_error(cluster, certs):
    tl = ["--tls-listen", "127.0.0.1:0"]
    err = _start_fails(cluster, *tl, "--tls-cert", certs / "absent.crt",
                       "--tls-key", certs / "server.key")
    assert "--tls-cert" in err and "absent.crt" in err
    err = _start_fails(cluster, *tl, "--tls-cert", certs / "server.crt",
                       "--tls-key", certs / "server.csr")
    assert "--tls-key" in err and "server.csr" in err
    err = _start_fails(cluster, *tl, "--tls-cert", certs / "server.crt",
                       "--tls-key", certs / "client.key")
    assert "does not match" in err
    err = _start_fails(cluster, *tl, "--tls-cert", certs / "server.crt",
                       "--tls-key", certs / "server.key", "--tls-auth-clients", "yes")
    assert "--tls-ca-cert" in err
    err = _start_fails(cluster, *tl, "--tls-cert", certs / "server.crt",
                       "--tls-key", certs / "server.key", "--tls-auth-clients", "maybe")
    assert "no, yes or optional" in err
    err = _start_fails(cluster, *tl)
    assert "--tls-cert" in err
    err = _start_fails(cluster, "--tls-cert", certs / "server.crt",
                       "--tls-key", certs / "server.key")
    assert "--tls-listen" in err
