"""Checks tests/data/key_vectors.json against reference_keys.py, the spec of
docs/keys.md written independently of client/keys.cc (which keys_test checks
against the same file).

    /usr/bin/python3 -m pytest -q tests/keys/test_key_vectors.py
"""

import json
import os
import pathlib
import sys

import pytest

try:
    import xxhash  # noqa: F401
except ImportError:
    # CTest matches this reason and reports the test as skipped.
    pytest.skip("python3-xxhash is not installed (apt-get install python3-xxhash)",
                allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import reference_keys as ref  # noqa: E402

SOURCE_DIR = pathlib.Path(
    os.environ.get("SHELF_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
VECTORS = json.loads((SOURCE_DIR / "tests/data/key_vectors.json").read_text("utf-8"))
CASES = VECTORS["cases"]


def namespace(case):
    return ref.Namespace(**case["namespace"])


def test_file_is_this_version():
    assert VECTORS["version"] == ref.VERSION
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector(case):
    ns = namespace(case)
    assert ref.serialize_namespace(ns).hex() == case["namespace_hex"]
    assert ref.namespace_digest(ns).hex() == case["namespace_digest_hex"]
    keys = ref.block_keys(ns, case["tokens"])
    assert len(keys) == len(case["tokens"]) // ns.chunk_tokens
    assert [ref.to_hex(k) for k in keys] == case["keys"]
    assert all(len(k) == ref.KEY_BYTES and k[0] == ref.VERSION for k in keys)


def test_xxh3_128_digest_byte_order():
    # XXH3-128 of the empty input is 0x99aa06d3014798d86001c324468d497f
    # (xxHash's canonical, big-endian form); the spec writes it little-endian.
    assert ref.digest(b"").hex() == "7f498d4624c30160d8984701d306aa99"


def test_none_salt_is_empty_salt():
    case = CASES[0]
    fields = dict(case["namespace"], salt=None)
    assert case["namespace"]["salt"] == ""
    assert ref.serialize_namespace(ref.Namespace(**fields)).hex() == case["namespace_hex"]


def test_cases_differ_where_the_namespace_does():
    by_name = {c["name"]: c for c in CASES}
    basic = by_name["chunk4_basic"]
    for other in ("chunk4_salted", "chunk4_tp_rank1_of_2"):
        assert by_name[other]["tokens"] == basic["tokens"]
        assert not set(by_name[other]["keys"]) & set(basic["keys"])
    assert by_name["length_prefix_ab_empty"]["keys"] != by_name["length_prefix_a_b"]["keys"]
