"""The master's KV event stream (docs/events.md) against real processes: a
subscriber decoding with vLLM's schema rebuilds the cluster's block set and
must find the master's index, through evictions, demotions to an SSD tier,
removals, a store's death and a master failover; a late joiner's gap is
refilled from the replay socket; a subscriber that stops reading costs
lookups nothing and the master counts what it drops.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest
import zmq

import shelf
from conftest import BIN_DIR, START_TIMEOUT_S, _wait_for_line, stop_all
from kv_events_sub import Subscriber, block_hash

BLOCK = 128 << 10
SYNC_TIMEOUT_S = 60


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """Processes of one test in a fresh directory, killed at stop()."""

    def __init__(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shelf-events-"))
        self.procs = {}

    def spawn(self, name, argv, ready=True):
        ready_file = self.dir / f"{name}.addr"
        log = self.dir / f"{name}.log"
        extra = ["--ready-file", str(ready_file)] if ready else []
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(a) for a in argv] + extra, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs[name] = proc
        if not ready:
            return None
        _wait_for_line(ready_file, proc, log)
        return ready_file.read_text().splitlines()

    def master(self, name, extra=()):
        lines = self.spawn(name, [BIN_DIR / "shelf-master", "--listen", "127.0.0.1:0",
                                  "--events-listen", "0", "--events-replay-listen", "0",
                                  "--metrics-listen", "127.0.0.1:0", *extra])
        ends = dict(line.split(" ", 1) for line in lines[1:])
        log = (self.dir / f"{name}.log").read_text()
        m = re.search(r"metrics served.*?listen=\"?([0-9.:]+)", log)
        assert m, log
        return {"grpc": lines[0], "events": ends["events"], "replay": ends["events-replay"],
                "metrics": m.group(1)}

    def store(self, name, master, dram="4MiB", ssd=False, extra=()):
        argv = [BIN_DIR / "shelf-store", "--master", master, "--listen", "127.0.0.1:0",
                "--dram-size", dram, "--run-dir", self.dir / f"{name}.run", "--node-id", name,
                *extra]
        if ssd:
            argv += ["--ssd-dir", self.dir / f"{name}.ssd", "--ssd-size", "64MiB"]
        self.spawn(name, argv)

    def kill(self, name):
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def stop(self):
        stop_all(self.procs.values())
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.stop()


def metric(address, name):
    body = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


ENGINE_HASHES = {b"engine/0": 0xFEEDFACECAFEBEEF}  # keys put with an engine hash


def master_blocks(client):
    """The master's index as {(node, hash, medium)}, through ListKeys and Locate."""
    keys, cursor = [], b""
    while True:
        page, cursor = client.list_keys(b"", cursor=cursor)
        keys += page
        if not cursor:
            break
    out = set()
    for k in keys:
        for n in client.locate([k])["nodes"]:
            if n["blocks"] >= 1:
                medium = "CPU" if n["tiers"][0] == "dram" else "DISK"
                out.add((n["node_id"], ENGINE_HASHES.get(k, block_hash(k)), medium))
    return out


def event_blocks(state):
    return {(node, h, m) for node, blocks in state.items() for (h, m) in blocks}


def wait_for_put(client, subs, tag):
    """Puts marker blocks `tag`/0, `tag`/1, ... until one's BlockStored has
    arrived: everything the master published before it has then been
    applied. A fresh marker every half second, since a SUB socket misses
    what is sent before its subscription reaches the publisher."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    j = 0
    while time.monotonic() < deadline:
        key = f"{tag}/{j}".encode()
        client.put(key, b"m" * 4096)
        want = block_hash(key)
        for _ in range(10):
            for s in subs:
                s.poll(50)
            if any(want in {h for h, _ in blocks} for blocks in subs[0].state.values()):
                return
        j += 1
    raise AssertionError(f"no marker's BlockStored within {SYNC_TIMEOUT_S} s")


def assert_converges(client, subs, tag):
    """The subscribers' block set equals the master's index at some point
    (both sides move while stores demote, so compare after each marker)."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    i = 0
    while True:
        wait_for_put(client, subs, f"marker/{tag}/{i}")
        have, want = event_blocks(subs[0].state), master_blocks(client)
        if have == want:
            return want
        if time.monotonic() > deadline:
            raise AssertionError(f"events {len(have)} blocks, index {len(want)}: "
                                 f"only in events {sorted(have - want)[:5]}, "
                                 f"only in index {sorted(want - have)[:5]}")
        i += 1
        time.sleep(0.2)


def connect(master, stores, **kwargs):
    """A client, once `stores` stores take puts (a store writes its ready
    file before it registers)."""
    client = shelf.Client([master], timeout_ms=20000, **kwargs)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            client.put(b"__probe__", b"x", replicas=stores)
            client.remove(b"__probe__")
            return client
        except shelf.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def content_key(i):
    return b"\x01" + i.to_bytes(16, "big")


def test_subscriber_rebuilds_index_through_evictions_demotions_and_store_death(procs, zctx):
    # Demotions move here: Locate names one tier per store, so the index
    # view above cannot show a block on both tiers of one store, as a copy
    # ahead leaves it (the next test follows one).
    m = procs.master("master", ["--node-ttl", "1500ms", "--heartbeat-interval", "200ms",
                                "--demote-keep-dram=false"])
    procs.store("ssd-0", m["grpc"], ssd=True)
    procs.store("ssd-1", m["grpc"], ssd=True)
    procs.store("dram-2", m["grpc"])
    state = {}
    sub = Subscriber(zctx, "tcp://" + m["events"].split("//")[1], m["replay"], state)
    client = connect(m["grpc"], 3)
    try:
        # A chain whose puts carry the engine's view, checked field by field.
        parent = None
        for i in range(4):
            k = content_key(1000 + i)
            client.put(k, os.urandom(BLOCK), parent_key=parent, block_tokens=16,
                       token_ids=list(range(16 * i, 16 * (i + 1))))
            parent = k
        client.put(b"engine/0", b"e" * 4096, engine_hash=ENGINE_HASHES[b"engine/0"],
                   engine_parent_hash=42, block_tokens=16)
        # Three 4 MiB stores, ~300 blocks of 128 KiB: DRAM overflows, the
        # SSD stores demote and the DRAM-only one evicts.
        keys = [content_key(i) for i in range(200)] + [f"plain/{i}".encode() for i in range(100)]
        for j in range(0, len(keys), 32):
            chunk = keys[j:j + 32]
            client.batch_put(chunk, [os.urandom(BLOCK) for _ in chunk],
                             replicas=2 if j % 64 == 0 else 1, best_effort=True)
        for k in keys[:300:15]:
            client.remove(k)
        sub.poll(100)
        assert_converges(client, [sub], "load")

        # The chain's events carry parent hashes, tokens and block size.
        stored = {e["block_hashes"][0]: e for _, e in sub.stored}
        for i in range(1, 4):
            e = stored.get(block_hash(content_key(1000 + i)))
            if e is None:
                continue  # evicted and re-stored by a demotion, without tokens
            if e["token_ids"]:
                assert e["parent_block_hash"] == block_hash(content_key(999 + i))
                assert e["token_ids"] == list(range(16 * i, 16 * (i + 1)))
                assert e["block_size"] == 16
                assert e["lora_id"] is None and e["lora_name"] is None
        engine = [e for _, e in sub.stored if e["block_hashes"] == [0xFEEDFACECAFEBEEF]]
        assert engine and engine[0]["parent_block_hash"] == 42

        assert metric(m["metrics"], 'shelf_master_demotions_total{result="ok"}') > 0
        # Every store's report named the commit it moved (its generation).
        assert metric(m["metrics"], "shelf_master_demotion_reports_unnamed_total") == 0
        assert any(med == "DISK" for _, _, med in event_blocks(state))
        # Evictions: what a put does to a full DRAM-only store depends on
        # placement, so evict there explicitly as well (dropping: no SSD).
        subprocess.run([str(BIN_DIR / "shelfctl"), "--master", m["grpc"], "evict", "--bytes",
                        "1MiB", "--node", "dram-2"], check=True, stdout=subprocess.DEVNULL)
        assert metric(m["metrics"], "shelf_master_evictions_total") > 0
        assert_converges(client, [sub], "evict")

        # A store dies: its blocks leave the index and the stream alike.
        assert any(node == "dram-2" for node, _, _ in event_blocks(state))
        procs.kill("dram-2")
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while any(node == "dram-2" for node, _, _ in event_blocks(state)):
            sub.poll(100)
            assert time.monotonic() < deadline, "dram-2's blocks never removed"
        want = assert_converges(client, [sub], "death")
        assert not any(node == "dram-2" for node, _, _ in want)
        assert metric(m["metrics"], "shelf_master_kv_events_dropped_total") == 0
    finally:
        client.close()
        sub.close()


def wait_for_state(sub, node, want, absent=()):
    """Polls until the subscriber's blocks on `node` hold every (hash,
    medium) of `want` and none of `absent`."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while True:
        have = sub.state.get(node, set())
        if all(w in have for w in want) and not any(a in have for a in absent):
            return
        assert time.monotonic() < deadline, f"{node}: {sorted(have)} after {SYNC_TIMEOUT_S} s"
        sub.poll(50)


def test_a_copy_ahead_is_stored_on_disk_beside_its_cpu_copy(procs, zctx):
    """A block copied ahead to SSD (shelfctl evict --copy) is on both media
    of its store: BlockStored on DISK, and its CPU copy stays. Dropping the
    clean CPU copy (an evict) removes CPU alone; the block reads back."""
    m = procs.master("master", ["--heartbeat-interval", "200ms"])
    procs.store("ssd-0", m["grpc"], ssd=True)
    state = {}
    sub = Subscriber(zctx, "tcp://" + m["events"].split("//")[1], m["replay"], state)
    client = connect(m["grpc"], 1)
    shelfctl = [str(BIN_DIR / "shelfctl"), "--master", m["grpc"]]
    try:
        key, value = content_key(7), os.urandom(BLOCK)
        h = block_hash(key)
        wait_for_put(client, [sub], "marker/copy")  # the subscription is live
        client.put(key, value)
        wait_for_state(sub, "ssd-0", [(h, "CPU")], absent=[(h, "DISK")])
        subprocess.run(shelfctl + ["evict", "--copy", "--bytes", "16MiB"], check=True,
                       stdout=subprocess.DEVNULL)
        wait_for_state(sub, "ssd-0", [(h, "CPU"), (h, "DISK")])
        subprocess.run(shelfctl + ["evict", "--bytes", "16MiB"], check=True,
                       stdout=subprocess.DEVNULL)
        wait_for_state(sub, "ssd-0", [(h, "DISK")], absent=[(h, "CPU")])
        assert client.get(key) == value
    finally:
        client.close()
        sub.close()


def test_a_tenants_blocks_are_hashed_by_the_key_its_engine_names(procs, zctx):
    """With --credentials the master keeps a tenant's key as TENANT/KEY; a
    block put without an engine hash is still named by the hash of KEY."""
    creds = procs.dir / "credentials"
    creds.write_text("eng-a engine team-a secret-of-engine-a-0123456789\n"
                     "store-1 store - secret-of-the-store-0123456789 nodes=*\n")
    creds.chmod(0o600)
    m = procs.master("master", ["--credentials", creds])
    procs.store("s0", m["grpc"], dram="64MiB",
                extra=["--credentials", creds, "--principal", "store-1"])
    client = connect(m["grpc"], 1, principal="eng-a",
                     principal_secret="secret-of-engine-a-0123456789")
    try:
        state = {}
        sub = Subscriber(zctx, "tcp://" + m["events"].split("//")[1], m["replay"], state)
        try:
            wait_for_put(client, [sub], "tenant")  # hashes of the keys as put
        finally:
            sub.close()
    finally:
        client.close()


def test_late_subscriber_refills_its_gap_from_replay(procs, zctx):
    m = procs.master("master")
    procs.store("s0", m["grpc"], dram="64MiB")
    client = connect(m["grpc"], 1)
    try:
        for i in range(50):
            client.put(f"early/{i}".encode(), b"x" * 4096)
        # Joins after 50 batches went out: its first live batch is far from
        # sequence 0, and everything before it comes from the replay socket.
        state = {}
        sub = Subscriber(zctx, "tcp://" + m["events"].split("//")[1], m["replay"], state)
        try:
            want = assert_converges(client, [sub], "late")
            assert sub.replayed >= 1  # batches: the 50 commits share a few
            assert {block_hash(f"early/{i}".encode()) for i in range(50)} <= \
                {h for _, h, _ in want}
        finally:
            sub.close()
    finally:
        client.close()


def test_stalled_subscriber_does_not_block_lookups_and_drops_are_counted(procs, zctx):
    # A one-event queue: a burst of commits overflows it at once.
    m = procs.master("master", ["--events-queue", "1"])
    procs.store("s0", m["grpc"], dram="64MiB")
    stalled = zctx.socket(zmq.SUB)
    stalled.setsockopt(zmq.RCVHWM, 1)
    stalled.setsockopt(zmq.SUBSCRIBE, b"")
    stalled.connect("tcp://" + m["events"].split("//")[1])  # and never reads
    # A subscriber that reads everything ZMQ delivers (no high-water mark):
    # the events the master dropped show as a gap in the sequence.
    reader = zctx.socket(zmq.SUB)
    reader.setsockopt(zmq.RCVHWM, 0)
    reader.setsockopt(zmq.SUBSCRIBE, b"")
    reader.connect("tcp://" + m["events"].split("//")[1])
    time.sleep(0.5)  # subscribed before the burst
    client = connect(m["grpc"], 1)
    try:
        keys = [f"burst/{i}".encode() for i in range(2048)]
        for j in range(0, len(keys), 256):
            chunk = keys[j:j + 256]
            assert all(client.batch_put(chunk, [b"y" * 1024] * len(chunk)))
        for j in range(0, len(keys), 256):
            assert client.match_prefix(keys[j:j + 256]) == 256
        assert metric(m["metrics"], "shelf_master_kv_events_dropped_total") > 0
        assert metric(m["metrics"], "shelf_master_kv_events_published_total") > 0
        seqs = []
        while reader.poll(1000):
            _, seq, _ = reader.recv_multipart()
            seqs.append(int.from_bytes(seq, "big"))
        assert len(seqs) > 1
        assert any(b - a > 1 for a, b in zip(seqs, seqs[1:])), "drops left no sequence gap"
    finally:
        client.close()
        stalled.close(linger=0)
        reader.close(linger=0)


def _role(metrics_address):
    try:
        body = urllib.request.urlopen(f"http://{metrics_address}/health", timeout=5).read()
    except OSError:
        return None
    return json.loads(body)["role"]


def _wait_for_leader(masters, names):
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while time.monotonic() < deadline:
        for name in names:
            if _role(masters[name]["metrics"]) == "leader":
                return name
        time.sleep(0.1)
    raise AssertionError(f"none of {names} became leader")


@pytest.mark.parametrize("node_loss", ["removed", "cleared"])
def test_subscriber_of_every_master_resyncs_after_failover(procs, zctx, node_loss):
    client_port, peer_port = _free_port(), _free_port()
    etcd = f"http://127.0.0.1:{client_port}"
    procs.spawn("etcd", [shutil.which("etcd") or "/usr/bin/etcd", "--name=default",
                         f"--data-dir={procs.dir / 'etcd'}", f"--listen-client-urls={etcd}",
                         f"--advertise-client-urls={etcd}",
                         f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                         f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                         f"--initial-cluster=default=http://127.0.0.1:{peer_port}"],
                ready=False)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(f"{etcd}/health", timeout=2).read()
            break
        except OSError:
            assert time.monotonic() < deadline, "etcd did not come up"
            time.sleep(0.1)
    cluster = f"ev{os.getpid()}"
    ha = ["--etcd", etcd, "--cluster", cluster, "--election-ttl", "1s", "--recovery-grace",
          "5s", "--node-ttl", "2s", "--events-node-loss", node_loss]
    masters = {name: procs.master(name, ha) for name in ("ma", "mb")}
    leader = _wait_for_leader(masters, ["ma", "mb"])
    spec = f"etcd://127.0.0.1:{client_port}/{cluster}"
    for name in ("s0", "s1"):
        procs.store(name, spec, dram="64MiB")
    state = {}
    subs = {name: Subscriber(zctx, "tcp://" + m["events"].split("//")[1], m["replay"], state)
            for name, m in masters.items()}
    client = connect(spec, 2)
    try:
        for i in range(60):
            client.put(content_key(i), os.urandom(4096), replicas=1 + i % 2)
        ordered = [subs[leader]] + [s for n, s in subs.items() if n != leader]
        assert_converges(client, ordered, "before")
        blocks = {block_hash(content_key(i)) for i in range(60)}
        # The stores learn which blocks their DRAM holds from notices riding
        # on heartbeats; a block younger than a heartbeat may be lost with
        # the leader (docs/ha.md). Let a few heartbeats pass.
        time.sleep(1.5)

        procs.kill(leader)
        standby = "mb" if leader == "ma" else "ma"
        assert _wait_for_leader(masters, [standby]) == standby
        # The new leader starts empty: each store's inventory comes as
        # BlockStored as it re-registers (after AllBlocksCleared for every
        # known store with --events-node-loss=cleared). Converged and
        # recovered: every block is back.
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while True:
            after = assert_converges(client, [subs[standby], subs[leader]], "after")
            if blocks <= {h for _, h, _ in after}:
                break
            assert time.monotonic() < deadline, f"{len(blocks - {h for _, h, _ in after})} " \
                "blocks never came back after the failover"
            time.sleep(0.5)
        if node_loss == "cleared":
            assert subs[standby].cleared >= 2
        else:
            # Nothing voided, and one ordered stream: the new leader's
            # sequences start above every one the old leader sent.
            assert subs[standby].cleared == 0 and subs[leader].cleared == 0
            assert subs[standby].min_seq > subs[leader].max_seq
    finally:
        client.close()
        for s in subs.values():
            s.close()


@pytest.mark.parametrize("args,message", [
    (["--events-listen", "host:notaport"], "want PORT, HOST:PORT or a ZMQ endpoint"),
    (["--events-replay-listen", "0"], "--events-replay-listen needs --events-listen"),
    (["--events-listen", "0", "--events-queue", "0"], "--events-queue must be >= 1"),
    (["--events-listen", "0", "--events-namespace", "a@b"], "without '@'"),
    (["--events-listen", "*:0"], "reachable from other hosts"),
    (["--events-listen", "0", "--events-encoding", "json"], "want map (vLLM's) or array"),
    (["--events-listen", "0", "--events-node-loss", "never"], "removed or cleared"),
    (["--events-listen", "0", "--events-other-replay-listen", "0"],
     "--events-other-replay-listen needs --events-other-listen"),
    (["--events-listen", "0", "--events-tenant-listen", "team-a"], "TENANT=ENDPOINT"),
    (["--events-listen", "0", "--events-curve-secret-file", "/nonexistent"], "/nonexistent"),
])
def test_bad_event_flags_are_refused_clearly(args, message):
    r = subprocess.run([str(BIN_DIR / "shelf-master"), "--listen", "127.0.0.1:0", *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert message in r.stderr, r.stderr
