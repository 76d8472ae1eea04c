"""Content keys (docs/keys.md), written from the spec in plain Python.

An implementation independent of client/keys.cc: it shares no code with it,
only the spec, so agreement on tests/data/key_vectors.json checks both. It
needs Debian's python3-xxhash (xxhash.xxh3_128).

    from reference_keys import Namespace, block_keys, to_hex
    ns = Namespace(model="example/model-7b", dtype="bf16",
                   kv_layout="paged_nhd", chunk_tokens=4)
    print([to_hex(k) for k in block_keys(ns, [1, 2, 3, 4, 5])])  # one key
"""

import dataclasses
import struct
from typing import List, Optional, Sequence

import xxhash

VERSION = 1
DIGEST_BYTES = 16
KEY_BYTES = 1 + DIGEST_BYTES


@dataclasses.dataclass(frozen=True)
class Namespace:
    model: str = ""
    dtype: str = ""
    kv_layout: str = ""
    tp_rank: int = 0
    tp_size: int = 1
    salt: Optional[str] = None  # None and "" are the same namespace
    chunk_tokens: int = 512


def _u32(v: int) -> bytes:
    return struct.pack("<I", v)


def _string(s: Optional[str]) -> bytes:
    raw = (s or "").encode("utf-8")
    return _u32(len(raw)) + raw


def serialize_namespace(ns: Namespace) -> bytes:
    """version u8, model, dtype, kv_layout, tp_rank u32, tp_size u32, salt,
    chunk_tokens u32; strings as u32 byte length + UTF-8; integers LE."""
    return (bytes([VERSION]) + _string(ns.model) + _string(ns.dtype) +
            _string(ns.kv_layout) + _u32(ns.tp_rank) + _u32(ns.tp_size) +
            _string(ns.salt) + _u32(ns.chunk_tokens))


def digest(data: bytes) -> bytes:
    """XXH3-128, seed 0, as the 128-bit value's 16 little-endian bytes."""
    return xxhash.xxh3_128(data, seed=0).intdigest().to_bytes(16, "little")


def namespace_digest(ns: Namespace) -> bytes:
    """h0, the chain's seed."""
    return digest(serialize_namespace(ns))


def extend(ns: Namespace, previous_key: bytes, chunk: Sequence[int]) -> bytes:
    """The key of `chunk` after the block keyed `previous_key` (b"": first)."""
    assert len(chunk) == ns.chunk_tokens
    if previous_key:
        assert len(previous_key) == KEY_BYTES and previous_key[0] == VERSION
        previous = previous_key[1:]
    else:
        previous = namespace_digest(ns)
    data = bytes([VERSION]) + previous + struct.pack("<%dI" % len(chunk), *chunk)
    return bytes([VERSION]) + digest(data)


def block_keys(ns: Namespace, tokens: Sequence[int]) -> List[bytes]:
    """One key per full chunk; a partial trailing chunk has none."""
    keys: List[bytes] = []
    previous = b""
    n = ns.chunk_tokens
    for i in range(len(tokens) // n):
        previous = extend(ns, previous, tokens[i * n:(i + 1) * n])
        keys.append(previous)
    return keys


def to_hex(key: bytes) -> str:
    return key.hex()
