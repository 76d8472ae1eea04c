"""shelf-resp as a gateway principal (--credentials, docs/security.md,
"Principals and tenants"): two gateways of two tenants in front of one
master run with --credentials keep their keys apart; KEYS and FLUSHDB act
within the gateway's tenant; another tenant's key is refused."""

import shutil
import signal
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
