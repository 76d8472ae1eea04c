"""shelf.mooncake's ways in: setup's dict form with Mooncake's JSON config
keys and "16MB"-style sizes, setup_dummy, and masters found through etcd
(Mooncake's HA form "etcd://HOST:PORT"), against real processes: an etcd,
a shelf-master campaigning in it and a shelf-store finding it there."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from shelf.mooncake import MooncakeDistributedStore

from conftest import BIN_DIR, Cluster

OK = 0
INVALID_PARAMS = -600
RPC_FAIL = -900


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(stores=1)
    yield c
    c.stop()


def test_setup_dict_form_with_human_readable_sizes(cluster):
    s = MooncakeDistributedStore()
    config = {
        "local_hostname": "node-a",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "3GB",
        "local_buffer_size": "16MB",
        "protocol": "tcp",
        "device_name": "",
        "master_server_address": cluster.master,
        "check_server": False,  # a Mooncake key Shelf has no use for
    }
    assert s.setup(config) == OK
    assert s.get_hostname() == "node-a"
    assert s.put("dict/k", b"v" * 100) == OK
    assert s.get("dict/k") == b"v" * 100
    assert s.close() == OK
    for sizes in ({"local_buffer_size": 16 << 20}, {"global_segment_size": "512 KiB"},
                  {"global_segment_size": "1tb"}):
        assert s.setup(dict(config, **sizes)) == OK
        assert s.close() == OK
    for bad in ({"global_segment_size": "16XB"}, {"global_segment_size": "MB"},
                {"local_buffer_size": -1}, {"global_segment_size": "99999999999999TB"},
                {"protocol": "udp"}):
        assert s.setup(dict(config, **bad)) == INVALID_PARAMS, bad
    assert s.setup(dict(config, master_server_address="127.0.0.1:1")) == RPC_FAIL


def test_setup_dummy_is_a_client_like_any_other(cluster):
    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 << 20, 16 << 20, cluster.master) == OK
    assert s.put("dummy/k", b"x" * 4096) == OK
    assert s.get("dummy/k") == b"x" * 4096
    assert s.batch_is_exist(["dummy/k", "dummy/absent"]) == [1, 0]
    assert s.close() == OK


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _etcd_binary():
    return os.environ.get("SHELF_ETCD_BIN") or shutil.which("etcd") or "/usr/bin/etcd"


class EtcdCluster(Cluster):
    """An etcd, one shelf-master campaigning in it (cluster `pyc`) and one
    shelf-store finding the master through it."""

    def __init__(self):
        self.dir = __import__("pathlib").Path(tempfile.mkdtemp(prefix="shelf-pytest-etcd-"))
        self.procs = []
        client_port, peer_port = _free_port(), _free_port()
        self.etcd = f"127.0.0.1:{client_port}"
        log = open(self.dir / "etcd.log", "wb")
        self.procs.append(subprocess.Popen(
            [_etcd_binary(), "--data-dir", str(self.dir / "etcd"),
             "--listen-client-urls", f"http://{self.etcd}",
             "--advertise-client-urls", f"http://{self.etcd}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True))
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", client_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"etcd did not start; see {self.dir / 'etcd.log'}")
                time.sleep(0.05)
        self.master = self._spawn("master", [
            BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0", "--etcd", self.etcd,
            "--cluster", "pyc"])
        self._spawn("store0", [
            BIN_DIR / "shelf-store", "--master", f"etcd://{self.etcd}/pyc", "--listen",
            "127.0.0.1:0", "--dram-size", str(64 << 20), "--run-dir", self.dir / "store0.run",
            "--node-id", "etcd-node-0"])
        self._wait_until_stores_take_puts(1)


@pytest.fixture(scope="module")
def etcd_cluster():
    if not os.access(_etcd_binary(), os.X_OK):
        pytest.fail("no etcd binary: deploy/install-deps.sh installs etcd-server")
    c = EtcdCluster()
    yield c
    c.stop()


def test_masters_found_through_etcd(etcd_cluster):
    # Mooncake's HA form (no cluster name: a cluster's name is set by
    # "/CLUSTER"; here the masters campaign as "pyc").
    s = MooncakeDistributedStore()
    rc = s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", f"etcd://{etcd_cluster.etcd}/pyc")
    assert rc == OK
    assert s.put("etcd/k", b"e" * 1000) == OK
    assert s.get("etcd/k") == b"e" * 1000
    assert s.close() == OK
    # ';' separates endpoints as in Mooncake; metadata_server naming etcd
    # is used when master_server_addr is empty.
    rc = s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "",
                 f"etcd://127.0.0.1:1;{etcd_cluster.etcd}/pyc")
    assert rc == OK
    assert s.get("etcd/k") == b"e" * 1000
    assert s.close() == OK
    assert s.setup({"metadata_server": f"etcd://{etcd_cluster.etcd}/pyc",
                    "master_server_address": ""}) == OK
    assert s.get("etcd/k") == b"e" * 1000
    assert s.close() == OK
    # A cluster no master campaigns in: no leader, an RPC failure.
    assert s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "",
                   f"etcd://{etcd_cluster.etcd}/nobody") == RPC_FAIL
