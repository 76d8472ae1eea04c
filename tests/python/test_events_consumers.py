"""The KV event stream as its consumers decode it (docs/events.md, "What
each consumer decodes"), against real processes:

- the array encoding through a Go program built on the library llm-d's
  indexer uses (vmihailenco/msgpack v5) with llm-d's structs, and through a
  Python decoder that checks every array position and type;
- the map encoding through vLLM's schema (kv_events_sub.decode_batch);
- both streams of one master carry the same events under the same
  sequence numbers, and each replay socket answers in its stream's form;
- topics name the model a put gave, or the one a vLLM-format key names,
  and blocks put through the Mooncake layer's batch_put_from_multi_buffers
  with vLLM's keys carry vLLM's block hash;
- with CURVE, a subscriber without a key, or with another tenant's, reads
  nothing; a tenant's reader sees its tenant's blocks alone.
"""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import msgpack
import pytest
import xxhash
import zmq

import shelf
from conftest import BIN_DIR, Cluster
from kv_events_sub import decode_batch, replay_from

SOURCE_DIR = pathlib.Path(__file__).resolve().parent
MiB = 1 << 20

# vLLM's MooncakeStoreConnector key (vllm/distributed/kv_transfer/
# kv_connector/v1/mooncake/store/data.py): model basename, ranks, then the
# block hash's hex digest; vLLM publishes the digest's last 8 bytes.
VLLM_DIGESTS = [bytes([i]) * 24 + (0x1122334455667700 + i).to_bytes(8, "big") for i in range(4)]


# SGLang HiCache's Mooncake backend (python/sglang/srt/mem_cache/storage/
# mooncake_store/mooncake_store.py): the page's sha256 hex, the TP rank, k/v;
# SGLang publishes the digest's first 8 bytes (hash_str_to_int64).
SGLANG_DIGESTS = [bytes([0x80 + i]) * 8 + bytes([i]) * 24 for i in range(2)]


def vllm_key(model, digest):
    return f"{model}@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{digest.hex()}"


@pytest.fixture(scope="module")
def llmd_decoder():
    """The Go decoder, built once with Debian's Go and msgpack library."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="shelf-llmd-")) / "llmd_decoder"
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=str(out.parent / "gocache"))
    r = subprocess.run(["go", "build", "-o", str(out), str(SOURCE_DIR / "llmd_decoder/main.go")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)


def llmd_decode(decoder, frames):
    """Each (topic, seq, payload) through the Go decoder: its events."""
    lines = "".join(f"{t} {s} {p.hex()}\n" for t, s, p in frames)
    r = subprocess.run([str(decoder)], input=lines, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"llm-d's decoder refused the stream: {r.stderr}"
    return [json.loads(line) for line in r.stdout.splitlines()]


def _is_u64(v):
    return isinstance(v, int) and 0 <= v < 1 << 64


def check_array_batch(payload):
    """Every position and type of the array form (llm-d's and Dynamo's
    layouts): raises AssertionError on any difference."""
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) == 3, batch
    ts, events, rank = batch
    assert isinstance(ts, float) and isinstance(events, list) and rank is None
    for e in events:
        assert isinstance(e, list) and e and isinstance(e[0], str), e
        if e[0] == "BlockStored":
            assert len(e) == 7, e
            _, hashes, parent, tokens, block_size, lora_id, medium = e
            assert len(hashes) == 1 and all(_is_u64(h) for h in hashes)
            assert parent is None or _is_u64(parent)
            assert all(isinstance(t, int) for t in tokens)
            assert isinstance(block_size, int) and lora_id is None
            assert medium in ("CPU", "DISK")
        elif e[0] == "BlockRemoved":
            assert len(e) == 3, e
            assert e[1] and all(_is_u64(h) for h in e[1]) and e[2] in ("CPU", "DISK")
        else:
            assert e == ["AllBlocksCleared"], e
    # Every hash as msgpack uint 64 (0xcf): llm-d takes a hash into a Go
    # `any`, and a shorter int becomes a type it refuses. The Go decoder
    # checks this as well; here the bytes say it directly.
    for e in events:
        for h in (e[1] if e[0] != "AllBlocksCleared" else []):
            assert b"\xcf" + h.to_bytes(8, "big") in payload
    return events


def drain(sock, timeout_ms, until=None):
    """(topic, seq, payload) frames until `timeout_ms` passes quietly."""
    got = []
    while sock.poll(timeout_ms):
        topic, seq, payload = sock.recv_multipart()
        got.append((topic.decode(), int.from_bytes(seq, "big"), payload))
    return got


def joined(client, socks, tag, timeout_s=60, **put_kwargs):
    """Puts probe blocks until each of `socks` has received a batch (ZMQ's
    slow joiner: a SUB socket misses what is published before its
    subscription, and a CURVE one before its handshake, reaches the master),
    then empties them: what they receive next is all the test's. Returns
    what was drained."""
    pending, seen, i = set(range(len(socks))), [[] for _ in socks], 0
    deadline = time.monotonic() + timeout_s
    while pending:
        assert time.monotonic() < deadline, f"subscribers {sorted(pending)} never joined"
        client.put(f"{tag}-probe-{i}".encode(), b"p" * 1024, **put_kwargs)
        i += 1
        for j in list(pending):
            if socks[j].poll(100):
                pending.discard(j)
    for j, sock in enumerate(socks):
        seen[j] += drain(sock, 300)
    return seen


def ready_lines(cluster):
    lines = (cluster.dir / "master.addr").read_text().splitlines()[1:]
    return dict(line.rsplit(" ", 1) for line in lines)


def sub(ctx, endpoint, **curve):
    s = ctx.socket(zmq.SUB)
    for opt, value in curve.items():
        s.setsockopt(getattr(zmq, opt), value)
    s.setsockopt(zmq.SUBSCRIBE, b"kv@")
    s.connect(endpoint)
    return s


def test_both_encodings_carry_one_stream_each_as_its_consumers_decode_it(zctx, llmd_decoder):
    cluster = Cluster(stores=2, dram_bytes=64 * MiB, master_args=[
        "--events-listen", "0", "--events-replay-listen", "0", "--events-encoding", "array",
        "--events-other-listen", "0", "--events-other-replay-listen", "0",
        "--events-namespace", "shelf-default"])
    ends = ready_lines(cluster)
    arr, mp = sub(zctx, ends["events"]), sub(zctx, ends["events-other"])
    client = shelf.Client([cluster.master], timeout_ms=20000)
    try:
        joined(client, [arr, mp], "both")
        # One put naming its model, with the engine's view.
        client.put(b"single", b"s" * 4096, engine_hash=7, engine_parent_hash=6, block_tokens=16,
                   token_ids=list(range(16)), model="llama-3-8b")
        # A batch whose items each carry theirs; one item without any.
        keys = [b"batch-%d" % i for i in range(3)]
        blocks = [dict(engine_hash=100 + i, block_tokens=16, token_ids=[i] * 16,
                       model="qwen-7b") for i in range(2)] + [None]
        assert all(s.ok for s in client.batch_put(keys, [b"b" * 4096] * 3, blocks=blocks))
        # vLLM-format keys through the Mooncake layer, as vLLM's worker calls it.
        from shelf.mooncake import MooncakeDistributedStore, ReplicateConfig
        store = MooncakeDistributedStore()
        assert store.setup("localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                           cluster.master) == 0
        kv = bytearray(8 * 8192)
        base = (ctypes_addr(kv))
        assert store.register_buffer(base, len(kv)) == 0
        vkeys = [vllm_key("Llama-3.1-8B", d) for d in VLLM_DIGESTS]
        addrs = [[base + i * 16384, base + i * 16384 + 8192] for i in range(4)]
        sizes = [[8192, 8192]] * 4
        assert store.batch_put_from_multi_buffers(vkeys, addrs, sizes, ReplicateConfig()) == \
            [0] * 4
        # SGLang's page keys through batch_put_from, as its backend calls it.
        skeys = [f"{d.hex()}_0_{side}" for d in SGLANG_DIGESTS for side in "kv"]
        assert store.batch_put_from(skeys, [base + i * 4096 for i in range(4)], [4096] * 4,
                                    ReplicateConfig()) == [0] * 4
        client.remove(b"batch-2")
        store.close()

        a = drain(arr, 1000)
        m = drain(mp, 300)
        # One stream, two forms: the same topics under the same sequences.
        assert [(t, s) for t, s, _ in a] == [(t, s) for t, s, _ in m]
        assert len(a) >= 4
        for _, _, payload in a:
            check_array_batch(payload)
        events = llmd_decode(llmd_decoder, a)
        mapped = []
        for topic, seq, payload in m:
            _, evs, node = decode_batch(payload)
            assert topic.split("@")[1] == node
            for e in evs:
                mapped.append((seq, e["type"], e.get("block_hashes", []), e.get("medium")))
        assert [(e["seq"], e["type"], e["hashes"], e["medium"]) for e in events] == mapped

        stored = {e["hashes"][0]: e for e in events if e["type"] == "BlockStored"}
        single = stored[7]
        assert single["model"] == "llama-3-8b" and single["parent"] == 6
        assert single["tokens"] == list(range(16)) and single["block_size"] == 16
        assert single["medium"] == "CPU"
        for i in range(2):
            assert stored[100 + i]["model"] == "qwen-7b"
            assert stored[100 + i]["tokens"] == [i] * 16
        # The item without block info: its key's hash, the namespace's topic.
        plain_hash = xxhash.xxh3_64_intdigest(b"batch-2")
        plain = [e for e in events if e["type"] == "BlockStored" and e["hashes"] == [plain_hash]]
        assert len(plain) == 1 and plain[0]["model"] == "shelf-default"
        removed = [e for e in events if e["type"] == "BlockRemoved"]
        assert removed and removed[-1]["hashes"] == plain[0]["hashes"]
        # vLLM's keys: vLLM's hash (the digest's last 8 bytes), its model.
        for d in VLLM_DIGESTS:
            e = stored[int.from_bytes(d[-8:], "big")]
            assert e["model"] == "Llama-3.1-8B", e
        # SGLang's keys: the page hash SGLang publishes, K and V alike.
        for d in SGLANG_DIGESTS:
            h = int.from_bytes(d[:8], "big")
            assert [e["model"] for e in events
                    if e["type"] == "BlockStored" and e["hashes"] == [h]] == ["shelf-default"] * 2

        # Each replay socket answers in its own stream's form.
        ra = replay_from(zctx, ends["events-replay"], 0)
        rm = replay_from(zctx, ends["events-other-replay"], 0)
        # (Both also hold the startup probe's batches, sent before the
        # subscribers connected.)
        assert [s for s, _ in ra] == [s for s, _ in rm]
        assert {s for _, s, _ in a} <= {s for s, _ in ra}
        assert llmd_decode(llmd_decoder, [("kv@replay@model", s, p) for s, p in ra])
        for _, p in rm:
            decode_batch(p)
    finally:
        arr.close(linger=0)
        mp.close(linger=0)
        client.close()
        cluster.stop()


def ctypes_addr(buf):
    import ctypes
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def test_a_stores_death_is_removals_a_router_applies(zctx, llmd_decoder):
    cluster = Cluster(stores=2, master_args=[
        "--events-listen", "0", "--events-encoding", "array", "--node-ttl", "1500ms",
        "--heartbeat-interval", "200ms"])
    ends = ready_lines(cluster)
    s = sub(zctx, ends["events"])
    client = shelf.Client([cluster.master], timeout_ms=20000)
    try:
        joined(client, [s], "death")
        keys = [b"d-%d" % i for i in range(40)]
        client.batch_put(keys, [b"x" * 4096] * len(keys))
        frames = drain(s, 500)
        where = {}
        for e in llmd_decode(llmd_decoder, frames):
            for h in e["hashes"]:
                where.setdefault(e["pod"], set()).add(h)
        victim = "node-1"
        assert where.get(victim), where
        cluster.procs[2].kill()  # store1's process: node-1
        deadline = time.monotonic() + 30
        gone = set()
        while not where[victim] <= gone:  # (the probes that joined us go too)
            assert time.monotonic() < deadline, "the dead store's blocks never removed"
            for e in llmd_decode(llmd_decoder, drain(s, 500)):
                # llm-d ignores AllBlocksCleared: the removals must list them.
                assert e["type"] != "AllBlocksCleared"
                if e["type"] == "BlockRemoved" and e["pod"] == victim:
                    gone |= set(e["hashes"])
    finally:
        s.close(linger=0)
        client.close()
        cluster.stop()


def _private(path, text):
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_curve_admits_only_the_readers_of_each_stream(zctx):
    d = pathlib.Path(tempfile.mkdtemp(prefix="shelf-curve-"))
    server_pub, server_sec = zmq.curve_keypair()
    keys = {n: zmq.curve_keypair() for n in ("ops", "eng-a", "eng-b", "stranger")}
    secrets = {n: f"secret-of-{n}-0123456789abcdef" for n in ("ops", "eng-a", "eng-b", "st")}
    creds = _private(d / "credentials", "".join([
        f"ops admin - {secrets['ops']} events_key={keys['ops'][0].decode()}\n",
        f"eng-a engine team-a {secrets['eng-a']} events_key={keys['eng-a'][0].decode()}\n",
        f"eng-b engine team-b {secrets['eng-b']} events_key={keys['eng-b'][0].decode()}\n",
        f"st store - {secrets['st']} nodes=*\n"]))
    curve_file = _private(d / "events.key", server_sec.decode() + "\n")
    cluster = Cluster(stores=1, master_args=[
        "--credentials", creds, "--events-listen", "*:0", "--events-curve-secret-file",
        curve_file, "--events-tenant-listen", "team-a=*:0", "--metrics-listen", "127.0.0.1:0"],
        store_args=["--credentials", creds, "--principal", "st"],
        client_kwargs=dict(principal="ops", principal_secret=secrets["ops"]))
    ends = ready_lines(cluster)
    everyone, team_a = ends["events"], ends["events-tenant team-a"]
    assert everyone.startswith("tcp://0.0.0.0:") and team_a.startswith("tcp://0.0.0.0:")

    def curve(name):
        pub, sec = keys[name]
        return dict(CURVE_SERVERKEY=server_pub, CURVE_PUBLICKEY=pub, CURVE_SECRETKEY=sec)

    subs = {
        "plain-all": sub(zctx, everyone.replace("0.0.0.0", "127.0.0.1")),
        "stranger-all": sub(zctx, everyone.replace("0.0.0.0", "127.0.0.1"), **curve("stranger")),
        "a-on-all": sub(zctx, everyone.replace("0.0.0.0", "127.0.0.1"), **curve("eng-a")),
        "ops-all": sub(zctx, everyone.replace("0.0.0.0", "127.0.0.1"), **curve("ops")),
        "a-on-a": sub(zctx, team_a.replace("0.0.0.0", "127.0.0.1"), **curve("eng-a")),
        "b-on-a": sub(zctx, team_a.replace("0.0.0.0", "127.0.0.1"), **curve("eng-b")),
    }
    a = shelf.Client([cluster.master], principal="eng-a", principal_secret=secrets["eng-a"],
                     timeout_ms=20000)
    b = shelf.Client([cluster.master], principal="eng-b", principal_secret=secrets["eng-b"],
                     timeout_ms=20000)
    try:
        # Team-a's probes until the two admitted subscribers hear them;
        # whatever the others get, from the first probe on, is kept.
        names = list(subs)
        admitted = ["ops-all", "a-on-a"]
        early = dict(zip(admitted, joined(a, [subs[n] for n in admitted], "curve",
                                          engine_hash=0x1)))
        a.put(b"a-block", b"a" * 4096, engine_hash=0xA)
        b.put(b"b-block", b"b" * 4096, engine_hash=0xB)
        got = {n: set() for n in names}
        deadline = time.monotonic() + 30
        while got["ops-all"] != {0xA, 0xB} or got["a-on-a"] != {0xA}:
            assert time.monotonic() < deadline, got
            for name in admitted:
                for _, _, payload in drain(subs[name], 200):
                    for e in decode_batch(payload)[1]:
                        got[name] |= set(e.get("block_hashes", []))
        assert got["ops-all"] == {0xA, 0xB} and got["a-on-a"] == {0xA}
        assert all(f for f in early.values())
        # The others: nothing, neither the probes nor the blocks.
        for name in ("plain-all", "stranger-all", "a-on-all", "b-on-a"):
            assert drain(subs[name], 300) == [], name
    finally:
        for s in subs.values():
            s.close(linger=0)
        a.close()
        b.close()
        cluster.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_plaintext_beyond_loopback_only_when_asked(tmp_path):
    ready = tmp_path / "ready"
    p = subprocess.Popen([str(BIN_DIR / "shelf-master"), "--listen", "127.0.0.1:0",
                          "--events-listen", "*:0", "--events-allow-plaintext",
                          "--ready-file", str(ready)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (ready.exists() and "events " in ready.read_text()):
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        p.kill()
        p.wait()
