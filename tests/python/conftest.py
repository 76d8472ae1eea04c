"""Fixtures for the `shelf` module's tests: a real cluster (one shelf-master,
two shelf-store processes on loopback ports they pick), started once per
session and killed at teardown.

    PYTHONPATH=<build>/python SHELF_BIN_DIR=<build>/bin \
        /usr/bin/python3 -m pytest -q tests/python
"""

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import shelf

BIN_DIR = pathlib.Path(os.environ.get("SHELF_BIN_DIR", "build/bin"))
SOURCE_DIR = pathlib.Path(
    os.environ.get("SHELF_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
START_TIMEOUT_S = 20


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


def stop_all(procs):
    """SIGTERMs every live process of `procs`, then waits for each in turn
    (SIGKILL after 5 s)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class Cluster:
    """shelf-master and `stores` shelf-store processes in a fresh directory.
    `master_args` and `store_args` are extra flags; `client_kwargs` what the
    startup probe's shelf.Client needs (a secret, a principal). With
    `wait_populated`, the constructor returns once every store's populator
    has written its DRAM segment through, so that a benchmark does not
    share the host with it."""

    def __init__(self, stores=2, dram_bytes=64 << 20, master_args=(), store_args=(),
                 client_kwargs=None, wait_populated=False):
        for name in ("shelf-master", "shelf-store"):
            if not (BIN_DIR / name).exists():
                raise RuntimeError(f"no {BIN_DIR / name}: build it, or set SHELF_BIN_DIR")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shelf-pytest-"))
        self.procs = []
        self.master = self._spawn(
            "master", [BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0", *master_args])
        self.store_addresses = [
            self._spawn(f"store{i}", [
                BIN_DIR / "shelf-store", "--master", self.master, "--listen", "127.0.0.1:0",
                "--dram-size", str(dram_bytes), "--run-dir", self.dir / f"store{i}.run",
                "--node-id", f"node-{i}", *store_args])
            for i in range(stores)]
        self._wait_until_stores_take_puts(stores, client_kwargs or {})
        if wait_populated:
            self._wait_populated(stores, 30 + 10 * (dram_bytes >> 30))

    def _wait_populated(self, stores, timeout_s):
        deadline = time.monotonic() + timeout_s
        for i in range(stores):
            log = self.dir / f"store{i}.log"
            while True:
                text = log.read_text(errors="replace")
                if ("DRAM segment populated" in text
                        or "DRAM segment not populated past this point" in text):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"store {i} did not populate its DRAM segment within "
                                       f"{timeout_s} s; see {log}")
                time.sleep(0.05)

    def _spawn(self, name, argv):
        ready = self.dir / f"{name}.addr"
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(a) for a in argv] + ["--ready-file", str(ready)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return _wait_for_line(ready, proc, log)

    def _wait_until_stores_take_puts(self, stores, client_kwargs=None):
        # A store writes its ready file before it registers: probe with a
        # put that needs every store.
        client = shelf.Client([self.master], timeout_ms=2000, **(client_kwargs or {}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.put(b"__probe__", b"x", replicas=stores)
                client.remove(b"__probe__")
                return
            except shelf.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill_store(self, i):
        proc = self.procs[1 + i]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self):
        stop_all(reversed(self.procs))
        shutil.rmtree(self.dir, ignore_errors=True)


def private_file(path, text):
    """Writes `text` to `path`, readable by its owner alone (as credentials
    and secret files must be); returns the path as a string."""
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


# Two engines of two tenants, for the tenant tests: name -> (tenant, secret).
ENGINE_PRINCIPALS = {"eng-a": ("team-a", "secret-of-engine-a-0123456789"),
                     "eng-b": ("team-b", "secret-of-engine-b-0123456789")}
STORE_PRINCIPAL_SECRET = "secret-of-the-store-0123456789"
ADMIN_PRINCIPAL_SECRET = "secret-of-the-admin-0123456789"


def principals_cluster(directory, engine_lines, data_secret):
    """One store, its master and store run with --credentials: the file
    holds `engine_lines` ("name engine tenant secret" lines), the store's
    principal store-1 and the admin ops. Returns the cluster and the
    cluster secret's file (the data plane's secret, `data_secret`)."""
    creds = private_file(directory / "credentials",
                         engine_lines + f"store-1 store - {STORE_PRINCIPAL_SECRET} nodes=*\n"
                         f"ops admin - {ADMIN_PRINCIPAL_SECRET}\n")
    secret = private_file(directory / "secret", data_secret + "\n")
    c = Cluster(stores=1, master_args=["--credentials", creds, "--secret-file", secret],
                store_args=["--credentials", creds, "--principal", "store-1",
                            "--secret-file", secret],
                client_kwargs=dict(secret=data_secret, principal="ops",
                                   principal_secret=ADMIN_PRINCIPAL_SECRET))
    return c, secret


@pytest.fixture(scope="session")
def cluster():
    c = Cluster(stores=2)
    yield c
    c.stop()


@pytest.fixture
def client(cluster):
    with shelf.Client([cluster.master], timeout_ms=20000) as c:
        yield c


@pytest.fixture
def unique(request):
    """A key prefix of this test's own, so tests share the cluster safely."""
    return request.node.name.encode() + b"/"


@pytest.fixture
def zctx():
    """A ZMQ context for event subscribers, closed after the test."""
    import zmq
    ctx = zmq.Context()
    yield ctx
    ctx.term()
