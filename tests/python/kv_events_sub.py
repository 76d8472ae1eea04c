"""A KV-event subscriber for tests: decodes shelf-master's stream with vLLM's
schema (vllm/distributed/kv_events.py: msgspec structs as msgpack maps,
events tagged by `type`) and keeps the cluster's block set.

Written against python3-zmq and python3-msgpack only, as a router would be.
The decoder is strict where msgspec is: every required field of a struct
must be there with the right type; fields a struct does not declare are
ignored (msgspec's default), which is how `shelf_node` rides along.
"""

import re
import time

import msgpack
import xxhash
import zmq

END_SEQ = -1
TERM_SHIFT = 40  # a leader's sequences start at term << 40 (docs/events.md)

# vLLM's structs: required fields, then optional ones (with defaults).
BLOCK_STORED_REQUIRED = ("block_hashes", "parent_block_hash", "token_ids", "block_size",
                         "lora_id", "medium", "lora_name")
BLOCK_STORED_OPTIONAL = ("extra_keys", "group_idx", "kv_cache_spec_kind",
                         "kv_cache_spec_sliding_window")
BLOCK_REMOVED_REQUIRED = ("block_hashes", "medium")
TOPIC_RE = re.compile(r"^kv@([^@]+)@([^@]+)$")


def block_hash(key):
    """What the master publishes a key under (docs/events.md)."""
    if len(key) == 17 and key[0] == 1:
        return int.from_bytes(key[9:17], "big")
    return xxhash.xxh3_64_intdigest(key)


def _is_hash(h):
    return isinstance(h, (int, bytes))


def decode_batch(payload):
    """The payload as (ts, events, node); raises ValueError on a schema breach."""
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    if not isinstance(batch, dict):
        raise ValueError(f"a batch is a map, got {type(batch)}")
    if not isinstance(batch.get("ts"), float):
        raise ValueError(f"ts must be a float: {batch.get('ts')!r}")
    if not isinstance(batch.get("events"), list):
        raise ValueError("events must be a list")
    rank = batch.get("data_parallel_rank")
    if rank is not None and not isinstance(rank, int):
        raise ValueError("data_parallel_rank must be int or null")
    events = []
    for e in batch["events"]:
        if not isinstance(e, dict) or "type" not in e:
            raise ValueError(f"an event is a map tagged by 'type': {e!r}")
        kind = e["type"]
        if kind == "BlockStored":
            for f in BLOCK_STORED_REQUIRED:
                if f not in e:
                    raise ValueError(f"BlockStored lacks {f}")
            if not all(_is_hash(h) for h in e["block_hashes"]):
                raise ValueError("block_hashes: bytes or int")
            if e["parent_block_hash"] is not None and not _is_hash(e["parent_block_hash"]):
                raise ValueError("parent_block_hash: bytes, int or null")
            if not all(isinstance(t, int) for t in e["token_ids"]):
                raise ValueError("token_ids: ints")
            if not isinstance(e["block_size"], int):
                raise ValueError("block_size: int")
            if not isinstance(e["medium"], str):
                raise ValueError("medium: str")
        elif kind == "BlockRemoved":
            for f in BLOCK_REMOVED_REQUIRED:
                if f not in e:
                    raise ValueError(f"BlockRemoved lacks {f}")
        elif kind != "AllBlocksCleared":
            raise ValueError(f"unknown event type {kind!r}")
        events.append(e)
    return batch["ts"], events, batch.get("shelf_node")


def replay_from(ctx, endpoint, start):
    """Batches [start, ...) from the replay socket at `endpoint`, as
    (seq, payload), in whichever encoding that stream has.

    DEALER with the empty delimiter a REQ socket would add: the ROUTER
    answers one request with many messages, which a REQ socket (one reply
    per request) would not take."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 20000)
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            empty, seq_bytes, payload = dealer.recv_multipart()
            assert empty == b""
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq == END_SEQ:
                assert payload == b""
                return got
            got.append((seq, payload))
    finally:
        dealer.close(linger=0)


class Subscriber:
    """One master's stream: SUB on its PUB endpoint, REQ to its replay one."""

    def __init__(self, ctx, endpoint, replay_endpoint, state):
        self.ctx = ctx
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.state = state
        self.next_seq = None  # the sequence expected next; None before the first
        self.replayed = 0
        self.cleared = 0  # AllBlocksCleared events applied
        self.min_seq, self.max_seq = 1 << 64, -1  # of the batches received live
        self.stored = []  # every BlockStored applied, for field checks

    def close(self):
        self.sub.close(linger=0)

    def replay_from(self, start):
        """Batches [start, ...) from this master's replay socket."""
        return replay_from(self.ctx, self.replay_endpoint, start)

    def _apply(self, node, payload):
        _, events, batch_node = decode_batch(payload)
        if node is None:
            node = batch_node
        assert batch_node == node, (batch_node, node)
        for e in events:
            if e["type"] == "AllBlocksCleared":
                self.cleared += 1
                self.state.pop(node, None)
            elif e["type"] == "BlockStored":
                self.stored.append((node, e))
                blocks = self.state.setdefault(node, set())
                for h in e["block_hashes"]:
                    blocks.add((h, e["medium"]))
            else:
                blocks = self.state.setdefault(node, set())
                for h in e["block_hashes"]:
                    blocks.discard((h, e["medium"]))

    def poll(self, timeout_ms):
        """Applies what arrives within timeout_ms; refills any gap by replay.
        Returns the number of batches applied."""
        n = 0
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            if not self.sub.poll(left if n == 0 else 0):
                return n
            topic, seq_bytes, payload = self.sub.recv_multipart()
            m = TOPIC_RE.match(topic.decode())
            assert m, topic
            seq = int.from_bytes(seq_bytes, "big")
            self.min_seq = min(self.min_seq, seq)
            self.max_seq = max(self.max_seq, seq)
            if self.next_seq is None:
                # A late joiner: the history of this leader's term (its
                # sequences start at term << 40) is in the replay buffer.
                self.next_seq = seq >> TERM_SHIFT << TERM_SHIFT
            if seq > self.next_seq:
                for s, p in self.replay_from(self.next_seq):
                    if self.next_seq <= s < seq:
                        self._apply(None, p)
                        self.replayed += 1
                        self.next_seq = s + 1
                assert self.next_seq == seq, f"replay left a gap: {self.next_seq}..{seq}"
            if seq < self.next_seq:
                continue  # already applied through replay
            self._apply(m.group(1), payload)
            self.next_seq = seq + 1
            n += 1
