"""Principals from Python, against a master and a store run with
--credentials (docs/security.md, "Principals and tenants"): shelf.Client's
principal=, principal_secret= and credentials=, and the Mooncake-compatible
setup dict's shelf_secret_file, shelf_credentials and shelf_principal."""

import pathlib
import shutil
import tempfile

import pytest

import shelf
from shelf.mooncake import MooncakeDistributedStore

from conftest import (ADMIN_PRINCIPAL_SECRET, STORE_PRINCIPAL_SECRET, principals_cluster,
                      private_file)

DATA_SECRET = "python-principals-data-plane-secret"
SECRETS = {
    "eng-a": "secret-of-engine-a-0123456789",
    "eng-b": "secret-of-engine-b-0123456789",
    "store-1": STORE_PRINCIPAL_SECRET,
    "ops": ADMIN_PRINCIPAL_SECRET,
}


@pytest.fixture(scope="module")
def tenants():
    d = pathlib.Path(tempfile.mkdtemp(prefix="shelf-pyprinc-"))
    c, secret = principals_cluster(d, f"eng-a engine team-a {SECRETS['eng-a']}\n"
                                   f"eng-b engine team-b {SECRETS['eng-b']}\n", DATA_SECRET)
    # A caller's file holds only its own line.
    eng_b = private_file(d / "eng-b", f"eng-b engine team-b {SECRETS['eng-b']}\n")
    yield c, secret, eng_b
    c.stop()
    shutil.rmtree(d, ignore_errors=True)


def _client(cluster, **kwargs):
    return shelf.Client([cluster.master], secret=DATA_SECRET, timeout_ms=20000, **kwargs)


def test_each_principal_in_its_tenant(tenants):
    cluster, _, eng_b = tenants
    with _client(cluster, principal="eng-a", principal_secret=SECRETS["eng-a"]) as a, \
            _client(cluster, credentials=eng_b) as b, \
            _client(cluster, principal="ops", principal_secret=SECRETS["ops"]) as ops:
        a.put(b"py/k", b"from-a")
        b.put(b"py/k", b"from-b")
        assert a.get(b"py/k") == b"from-a"
        assert b.get(b"py/k") == b"from-b"
        with pytest.raises(shelf.PermissionDeniedError):
            b.get(b"@team-a/py/k")
        with pytest.raises(shelf.PermissionDeniedError):
            b.remove(b"@team-a/py/k")
        assert a.list_keys(b"py/*")[0] == [b"py/k"]
        keys, _ = ops.list_keys(b"*py/k")
        assert sorted(keys) == [b"team-a/py/k", b"team-b/py/k"]
    with _client(cluster, principal="eng-a", principal_secret="not-the-secret-0123456") as bad:
        with pytest.raises(shelf.UnauthenticatedError):
            bad.get(b"py/k")
    with _client(cluster, principal="store-1", principal_secret=SECRETS["store-1"]) as store:
        with pytest.raises(shelf.PermissionDeniedError):
            store.put(b"py/x", b"x")


def test_mooncake_setup_dict_takes_a_principal(tenants):
    cluster, secret, eng_b = tenants
    s = MooncakeDistributedStore()
    config = {
        "local_hostname": "node-a",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "tcp",
        "master_server_address": cluster.master,
        "shelf_secret_file": secret,
        "shelf_credentials": eng_b,
    }
    assert s.setup(config) == 0
    assert s.put("mc/k", b"v" * 100) == 0
    assert s.get("mc/k") == b"v" * 100
    assert s.close() == 0
    with _client(cluster, principal="ops", principal_secret=SECRETS["ops"]) as ops:
        assert ops.list_keys(b"*mc/k")[0] == [b"team-b/mc/k"]
    # Without a principal the master refuses the setup.
    assert s.setup(dict(config, shelf_credentials="")) != 0


def test_session_tags_over_payloads_round_trip_over_tcp(tenants):
    # With a cluster secret every data-plane frame carries a session tag over
    # its header; session_tag_payload asks the store for tags over the block
    # bytes too (the relay and tamper checks are in
    # tests/security/data_plane_session_test.cc).
    cluster, _, _ = tenants
    value = bytes(range(256)) * 4096  # 1 MiB
    with _client(cluster, principal="eng-a", principal_secret=SECRETS["eng-a"],
                 allow_shm=False, session_tag_payload=True) as a:
        a.put(b"py/tagged", value)
        assert a.get(b"py/tagged") == value
        a.remove(b"py/tagged")


def test_mooncake_tenant_id_is_the_tenant_of_the_principal(tenants, monkeypatch):
    # Mooncake's setup(..., tenant_id=) as SGLang and vLLM pass it: Shelf's
    # credentials come from the environment, and the tenant named must be
    # their principal's; any other is INVALID_PARAMS (-600), before any call.
    cluster, secret, eng_b = tenants
    monkeypatch.setenv("SHELF_SECRET_FILE", secret)
    monkeypatch.setenv("SHELF_CREDENTIALS", eng_b)
    s = MooncakeDistributedStore()
    args = ("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster.master, None)
    assert s.setup(*args, tenant_id="team-a") == -600
    assert s.setup(*args, tenant_id="team-b") == 0
    assert s.put("mc/tenant", b"t" * 10) == 0
    assert s.close() == 0
    assert s.setup(*args) == 0  # "default": the principal's own tenant
    assert s.get("mc/tenant") == b"t" * 10
    assert s.close() == 0
    with _client(cluster, principal="ops", principal_secret=SECRETS["ops"]) as ops:
        assert ops.list_keys(b"*mc/tenant")[0] == [b"team-b/mc/tenant"]
    monkeypatch.delenv("SHELF_CREDENTIALS")
    assert s.setup(*args, tenant_id="team-b") == -600
