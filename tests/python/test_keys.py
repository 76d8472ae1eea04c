"""shelf.KeyNamespace / shelf.KeyBuilder give exactly the keys of the C++
KeyBuilder: the checked-in vectors (tests/data/key_vectors.json), which
keys_test checks against the C++ implementation."""

import json

import pytest

import shelf
from conftest import SOURCE_DIR

VECTORS = json.loads((SOURCE_DIR / "tests/data/key_vectors.json").read_text("utf-8"))
CASES = VECTORS["cases"]


def namespace(case):
    return shelf.KeyNamespace(**case["namespace"])


def test_vectors_are_this_version():
    assert VECTORS["version"] == shelf.KEY_VERSION
    assert shelf.KEY_BYTES == 17


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector(case):
    ns = namespace(case)
    assert shelf.KeyBuilder.serialize_namespace(ns).hex() == case["namespace_hex"]
    kb = shelf.KeyBuilder(ns)
    assert kb.namespace_digest.hex() == case["namespace_digest_hex"]
    keys = kb.block_keys(case["tokens"])
    assert [shelf.KeyBuilder.to_hex(k) for k in keys] == case["keys"]
    assert all(isinstance(k, bytes) and len(k) == shelf.KEY_BYTES for k in keys)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_extend_rebuilds_the_chain(case):
    ns = namespace(case)
    kb = shelf.KeyBuilder(ns)
    chunk = ns.chunk_tokens
    tokens = case["tokens"]
    previous = b""
    for i, want in enumerate(case["keys"]):
        previous = kb.extend(previous, tokens[i * chunk:(i + 1) * chunk])
        assert previous.hex() == want


def test_numpy_token_arrays_match_lists():
    np = pytest.importorskip("numpy")
    case = next(c for c in CASES if c["name"] == "chunk512_partial_tail")
    kb = shelf.KeyBuilder(namespace(case))
    for dtype in (np.uint32, np.int64, np.int32, np.uint64):
        keys = kb.block_keys(np.array(case["tokens"], dtype=dtype))
        assert [k.hex() for k in keys] == case["keys"], dtype
    extreme = next(c for c in CASES if c["name"] == "utf8_and_extreme_ids")
    kb = shelf.KeyBuilder(namespace(extreme))
    arr = np.array(extreme["tokens"], dtype=np.uint32)
    assert [k.hex() for k in kb.block_keys(arr)] == extreme["keys"]


def test_none_salt_is_empty_salt():
    case = CASES[0]
    fields = dict(case["namespace"], salt=None)
    assert shelf.KeyBuilder(shelf.KeyNamespace(**fields)).block_keys(case["tokens"]) == \
        shelf.KeyBuilder(namespace(case)).block_keys(case["tokens"])


def test_invalid_namespaces_raise_value_error():
    assert shelf.KeyBuilder.validate(shelf.KeyNamespace(model="m")) is None
    bad = shelf.KeyNamespace(model="m", tp_rank=2, tp_size=2)
    assert "tp_rank" in shelf.KeyBuilder.validate(bad)
    with pytest.raises(ValueError, match="tp_rank"):
        shelf.KeyBuilder(bad)
    with pytest.raises(ValueError):
        shelf.KeyBuilder(shelf.KeyNamespace(model="m", chunk_tokens=0))


def test_bad_tokens_and_keys():
    kb = shelf.KeyBuilder(shelf.KeyNamespace(model="m", chunk_tokens=2))
    with pytest.raises(ValueError, match="outside"):
        kb.block_keys([1, -1])
    with pytest.raises(ValueError, match="outside"):
        kb.block_keys([1, 2 ** 32])
    with pytest.raises(ValueError, match="chunk"):
        kb.extend(b"", [1, 2, 3])
    with pytest.raises(ValueError, match="version-1 key"):
        kb.extend(b"\x02" + b"\x00" * 16, [1, 2])
    assert kb.block_keys([7]) == []
    assert shelf.KeyBuilder.from_hex("0aFF") == b"\x0a\xff"
    with pytest.raises(ValueError):
        shelf.KeyBuilder.from_hex("abc")
