"""shelf-resp finding its master through etcd (--master etcd://...), as the
stores do in an HA deployment: a real etcd, one master elected through it,
two stores and a gateway that all name only etcd."""

import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis

from conftest import BIN_DIR, START_TIMEOUT_S, Gateway, _wait_for_line


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd_cluster():
    d = pathlib.Path(tempfile.mkdtemp(prefix="shelf-resp-etcd-"))
    procs = []

    def spawn(name, argv, ready=None):
        log = open(d / f"{name}.log", "wb")
        p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        return _wait_for_line(ready, p, d / f"{name}.log") if ready else None

    try:
        client, peer = free_port(), free_port()
        curl, purl = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        spawn("etcd", ["/usr/bin/etcd", "--name=default", f"--data-dir={d}/etcd",
                       f"--listen-client-urls={curl}", f"--advertise-client-urls={curl}",
                       f"--listen-peer-urls={purl}", f"--initial-advertise-peer-urls={purl}",
                       f"--initial-cluster=default={purl}"])
        spec = f"etcd://127.0.0.1:{client}/resp-test"
        spawn("master", [BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0",
                         "--etcd", f"127.0.0.1:{client}", "--cluster", "resp-test",
                         "--election-ttl", "2s", "--ready-file", d / "master.addr"],
              d / "master.addr")
        for i in range(2):
            spawn(f"store{i}", [BIN_DIR / "shelf-store", "--master", spec,
                                "--listen", "127.0.0.1:0", "--dram-size", "64MiB",
                                "--run-dir", d / f"store{i}.run", "--node-id", f"node-{i}",
                                "--ready-file", d / f"store{i}.addr"], d / f"store{i}.addr")
        g = Gateway(spawn("resp", [BIN_DIR / "shelf-resp", "--master", spec,
                                   "--listen", "127.0.0.1:0", "--ready-file", d / "resp.addr"],
                          d / "resp.addr"))
        yield g
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(d, ignore_errors=True)


def test_master_found_through_etcd(etcd_cluster):
    r = etcd_cluster.redis()
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the stores register with the elected master meanwhile
        try:
            assert r.set(b"through-etcd", b"value") is True
            break
        except redis.exceptions.ResponseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert r.get(b"through-etcd") == b"value"
    r.close()
