"""Fixtures for shelf-resp's tests: one Shelf cluster (shelf-master and two
shelf-store processes on loopback ports they pick) and shelf-resp gateways in
front of it, started once per session and stopped at teardown.

    SHELF_BIN_DIR=<build>/bin /usr/bin/python3 -m pytest -q tests/resp
"""

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

BIN_DIR = pathlib.Path(os.environ.get("SHELF_BIN_DIR", "build/bin"))
START_TIMEOUT_S = 30
PASSWORD = "resp-test-password"


def _wait_for_line(path, proc, log):
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists():
            line = path.read_text().strip()
            if line:
                return line.splitlines()[0]
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}; see {log}")
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {path}; see {log}")


class Gateway:
    def __init__(self, address):
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)

    def redis(self, **kw):
        return redis.Redis(host=self.host, port=self.port, socket_timeout=60, **kw)

    def socket(self):
        s = socket.create_connection((self.host, self.port), timeout=60)
        return s


class Cluster:
    def __init__(self):
        for name in ("shelf-master", "shelf-store", "shelf-resp"):
            if not (BIN_DIR / name).exists():
                raise RuntimeError(f"no {BIN_DIR / name}: build it, or set SHELF_BIN_DIR")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shelf-resp-test-"))
        self.procs = []
        self.master = self._spawn("master", [BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0"])
        for i in range(2):
            self._spawn(f"store{i}", [
                BIN_DIR / "shelf-store", "--master", self.master, "--listen", "127.0.0.1:0",
                "--dram-size", "384MiB", "--run-dir", self.dir / f"store{i}.run",
                "--node-id", f"node-{i}"])

    def _spawn(self, name, argv, preexec=None):
        ready = self.dir / f"{name}.addr"
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(a) for a in argv] + ["--ready-file", str(ready)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=preexec)
        self.procs.append(proc)
        return _wait_for_line(ready, proc, log)

    def gateway(self, name, *extra, probe=True, preexec=None):
        """A shelf-resp in front of the cluster; `preexec` runs in the child
        before it starts (e.g. to lower its limits). g.pid is its process."""
        g = Gateway(self._spawn(name, [BIN_DIR / "shelf-resp", "--master", self.master,
                                       "--listen", "127.0.0.1:0", *extra], preexec))
        g.pid = self.procs[-1].pid
        if not probe:
            return g
        # The stores register after writing their ready files: wait until a
        # put that needs both of them goes through.
        r = g.redis(password=PASSWORD if "--requirepass-file" in extra else None)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                r.set("__probe__", b"x")
                r.delete("__probe__")
                break
            except redis.exceptions.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        r.close()
        return g

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


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    yield c
    c.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gateway(cluster):
    """The usual gateway: defaults, plus FLUSHDB, metrics and a unix socket."""
    admin = f"127.0.0.1:{free_port()}"
    g = cluster.gateway("resp", "--enable-flush", "--admin-listen", admin,
                        "--unix-socket", str(cluster.dir / "resp.sock"))
    g.admin = admin
    g.unix_socket = str(cluster.dir / "resp.sock")
    return g


@pytest.fixture(scope="session")
def three_replicas_gateway(cluster, gateway):
    """Asks for more replicas than the cluster has stores: puts fail with
    RESOURCE_EXHAUSTED. After `gateway`, whose probe waits for the stores."""
    return cluster.gateway("resp-three", "--replicas", "3", probe=False)


@pytest.fixture(scope="session")
def few_clients_gateway(cluster):
    return cluster.gateway("resp-few", "--max-clients", "2")


@pytest.fixture(scope="session")
def auth_gateway(cluster):
    pw = cluster.dir / "requirepass"
    pw.write_text(PASSWORD + "\n")
    pw.chmod(0o600)
    return cluster.gateway("resp-auth", "--requirepass-file", str(pw))


@pytest.fixture(scope="session")
def small_gateway(cluster):
    """Small limits: values up to 1 MiB, 2 MiB of requests in flight."""
    return cluster.gateway("resp-small", "--max-value-size", "1MiB",
                           "--max-inflight-bytes", "2MiB")


@pytest.fixture
def r(gateway):
    c = gateway.redis()
    yield c
    c.close()


@pytest.fixture
def unique(request):
    """A key prefix of this test's own, so tests share the cluster safely."""
    return request.node.name.encode() + b"/"
