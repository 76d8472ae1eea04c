"""The call sequences of today's engines, replayed against a real cluster
with real tensors, through the `mooncake.store` shim as the engines import
it: SGLang HiCache's Mooncake backend
(python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py) and
vLLM's MooncakeStoreConnector (.../kv_connector/v1/mooncake/store/worker.py).
docs/mooncake-compat.md lists each call with the file it was read in.

Host memory here: SGLang's pool from MooncakeHostMemAllocator, vLLM's KV
cache as CPU tensors in both of its layouts (FlashAttention's separate K and
V segments, FlashInfer's one segment per layer)."""

import ctypes
import json
import math
import os
import pathlib
import re
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")

import shelf  # noqa: E402

# The shim engines import: <build>/python/compat/mooncake/store.py.
sys.path.insert(0, str(pathlib.Path(shelf.__file__).resolve().parent.parent / "compat"))
from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,  # noqa: E402
                            ReplicateConfig)

from conftest import Cluster  # noqa: E402

OK = 0
INVALID_PARAMS = -600
MiB = 1 << 20
LOCAL_BUFFER = 16 * MiB  # SGLang's DEFAULT_LOCAL_BUFFER_SIZE


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(stores=2, dram_bytes=128 * MiB)
    yield c
    c.stop()


def untyped_storage(t):
    # vLLM calls untyped_storage(); Debian's torch 1.13 spells it
    # storage().untyped().
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()


def test_sglang_hicache_sequence(cluster):
    # MooncakeHostTensorAllocator.allocate: a host pool from the allocator,
    # wrapped by torch.frombuffer. A page_first MHA pool: [2 (K, V), tokens,
    # layers, heads, head_dim].
    layers, heads, head_dim, page_size, pages = 4, 2, 64, 16, 12
    dims = (2, pages * page_size, layers, heads, head_dim)
    dtype = torch.float16
    size = math.prod(dims) * torch.tensor([], dtype=dtype).element_size()
    allocator = MooncakeHostMemAllocator()
    ptr_int = allocator.alloc(size)
    assert isinstance(ptr_int, int)
    c_array = (ctypes.c_byte * size).from_address(ptr_int)
    kv = torch.frombuffer(c_array, dtype=torch.uint8, count=size).view(dtype).view(dims)

    # MooncakeStore.__init__: eight positional arguments (the eighth the
    # shared transfer engine, None here) and the keywords SGLang adds when
    # they differ from Mooncake's defaults.
    store = MooncakeDistributedStore()
    ret = store.setup("localhost", "P2PHANDSHAKE", 64 * MiB, LOCAL_BUFFER, "tcp", "",
                      cluster.master, None, enable_client_http_server=True,
                      client_http_port=9300, enable_ssd_offload=True,
                      ssd_offload_path="/tmp/unused")
    assert ret == OK
    # An argument Mooncake does not know is a TypeError naming it, which
    # SGLang's retry loop reads.
    with pytest.raises(TypeError, match="no_such_keyword"):
        store.setup("localhost", "P2PHANDSHAKE", 0, LOCAL_BUFFER, "tcp", "", cluster.master,
                    None, no_such_keyword=1)

    # The warm-up right after setup.
    warmup_key = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    warmup_value = bytes(4 * 1024)
    assert store.put(warmup_key, warmup_value) == OK
    assert store.is_exist(warmup_key) == 1
    assert store.get(warmup_key) == warmup_value

    assert store.register_buffer(kv.data_ptr(), kv.numel() * kv.element_size()) == OK
    assert hasattr(ReplicateConfig, "group_ids")

    # Per page: `<hash>_0_k` and `<hash>_0_v`, each the page's tokens over
    # every layer, one contiguous range of the pool.
    kv.copy_(torch.randn(dims).to(dtype))
    want = kv.clone()
    page_bytes = page_size * layers * heads * head_dim * kv.element_size()
    keys, ptrs = [], []
    for p in range(pages):
        for side, suffix in ((0, "k"), (1, "v")):
            keys.append(f"sglang-page{p:03d}_0_{suffix}")
            ptrs.append(kv[side, p * page_size].data_ptr())
    sizes = [page_bytes] * len(keys)

    # _put_batch_zero_copy_impl: only the keys batch_is_exist does not
    # report present (== 1), with group ids, one per key.
    assert [e for e in store.batch_is_exist(keys) if e == 1] == []
    config = ReplicateConfig()
    config.group_ids = [f"sglang-hicache:{k[:-2]}" for k in keys]
    assert store.batch_put_from(keys, ptrs, sizes, config) == [OK] * len(keys)
    assert store.batch_is_exist(keys) == [1] * len(keys)
    # Again: a put of a present key is 0, as in Mooncake.
    assert store.batch_put_from(keys[:2], ptrs[:2], sizes[:2]) == [OK, OK]
    # group_ids of the wrong length: INVALID_PARAMS for every key.
    config.group_ids = ["g"]
    assert store.batch_put_from(keys[:2], ptrs[:2], sizes[:2], config) == [INVALID_PARAMS] * 2

    # _get_batch_zero_copy_impl: a page loads only when every object is > 0.
    kv.zero_()
    got = store.batch_get_into(keys, ptrs, sizes)
    assert got == sizes and all(g > 0 for g in got)
    assert torch.equal(kv, want)

    # clear(): remove_all(), its return ignored; SGLang never calls close().
    assert store.remove_all() >= len(keys)
    assert store.batch_is_exist(keys) == [0] * len(keys)
    assert store.unregister_buffer(kv.data_ptr()) == OK
    del kv, c_array
    assert allocator.free(ptr_int) == OK
    assert allocator.free(ptr_int) == -1
    with pytest.raises(RuntimeError):
        allocator.alloc(0)
    store.close()


def test_a_zero_local_buffer_refuses_byte_puts_as_mooncake_does(cluster):
    # Mooncake copies put()'s bytes through its local buffer: without one,
    # put returns INVALID_PARAMS (SGLang's warm-up would retry and fail).
    # The zero-copy puts need none.
    store = MooncakeDistributedStore()
    assert store.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", cluster.master) == OK
    assert store.put("zero-buffer/k", b"x" * 100) == INVALID_PARAMS
    assert store.put_batch(["zero-buffer/a"], [b"a"]) == INVALID_PARAMS
    t = torch.arange(1024, dtype=torch.int32)
    assert store.register_buffer(t.data_ptr(), t.numel() * 4) == OK
    assert store.put_from("zero-buffer/z", t.data_ptr(), t.numel() * 4) == OK
    assert store.get_size("zero-buffer/z") == 4096
    assert store.remove("zero-buffer/z", force=True) == OK
    store.close()


def vllm_kv_caches(layout, layers=3, num_blocks=10, block_size=16, heads=2, head_size=32):
    """vLLM's per-layer KV caches: FlashAttention's (2, num_blocks, block_size,
    heads, head_size) or FlashInfer's (num_blocks, 2, block_size, heads,
    head_size), float16 on the CPU."""
    if layout == "flash_attn":
        shape = (2, num_blocks, block_size, heads, head_size)
    else:
        shape = (num_blocks, 2, block_size, heads, head_size)
    return {f"model.layers.{i}.self_attn": torch.zeros(shape, dtype=torch.float16)
            for i in range(layers)}, num_blocks


def vllm_register_kv_caches(store, kv_caches, num_blocks):
    """MooncakeStoreWorker.register_kv_caches: one registration per
    storage, and the segments a block is cut from (K and V apart for
    FlashAttention, one per layer for FlashInfer)."""
    seg_addrs, block_lens = [], []
    for cache in kv_caches.values():
        storage = untyped_storage(cache)
        base_addr, region_len = storage.data_ptr(), storage.nbytes()
        assert store.register_buffer(base_addr, region_len) == OK
        el = cache.element_size()
        page_size_bytes = region_len // num_blocks
        outer_dims = [d for d in range(cache.ndim) if cache.stride(d) * el > page_size_bytes]
        if not outer_dims:
            seg_addrs.append(base_addr)
            block_lens.append(page_size_bytes)
        else:
            seg_stride = cache.stride(outer_dims[0]) * el
            for idx in range(cache.shape[outer_dims[0]]):
                seg_addrs.append(base_addr + idx * seg_stride)
                block_lens.append(seg_stride // num_blocks)
    return seg_addrs, block_lens


def vllm_parse_size(value):
    """The worker's _parse_size: an int, or a number with gb/mb/kb/b."""
    if isinstance(value, int):
        return value
    m = re.match(r"^\s*([\d.]+)\s*(gb|mb|kb|b)?\s*$", str(value).strip().lower())
    assert m, value
    return int(float(m.group(1)) * {"gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10,
                                      "b": 1}[m.group(2) or "b"])


def vllm_setup(store, master):
    """MooncakeStoreWorker.__init__: MooncakeStoreConfig.from_file of the
    file MOONCAKE_CONFIG_PATH names (here docs/integrations.md's, with this
    cluster's master), then setup() of the dict it builds, sizes as strings."""
    doc = (pathlib.Path(os.environ["SHELF_SOURCE_DIR"]) / "docs" / "integrations.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.S)]
    config = next(b for b in blocks if "master_server_address" in b)
    assert config["master_server_address"] == "10.0.0.1:7000"
    config["master_server_address"] = master
    return store.setup({
        "local_hostname": "127.0.0.1",  # get_ip()
        "metadata_server": config.get("metadata_server", ""),
        "global_segment_size": str(vllm_parse_size(config.get("global_segment_size", 4 << 30))),
        "local_buffer_size": str(vllm_parse_size(config.get("local_buffer_size", 4 << 30))),
        "protocol": config.get("protocol", "rdma"),
        "rdma_devices": config.get("device_name", ""),
        "master_server_addr": config.get("master_server_address", ""),
    })


def test_vllm_setup_of_older_releases_takes_seven_positional_arguments(cluster):
    store = MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 64 * MiB, "tcp", "",
                       cluster.master) == OK
    assert store.close() == OK


@pytest.mark.parametrize("layout,segments_per_layer", [("flash_attn", 2), ("flashinfer", 1)])
def test_vllm_store_connector_sequence(cluster, layout, segments_per_layer):
    store = MooncakeDistributedStore()
    # The dict form, from the config file, as the worker builds it.
    assert vllm_setup(store, cluster.master) == OK

    kv_caches, num_blocks = vllm_kv_caches(layout)
    seg_addrs, block_lens = vllm_register_kv_caches(store, kv_caches, num_blocks)
    assert len(seg_addrs) == segments_per_layer * len(kv_caches)
    for cache in kv_caches.values():
        cache.copy_(torch.randn(cache.shape).to(torch.float16))
    want = {name: cache.clone() for name, cache in kv_caches.items()}

    # prepare_values: per key, one address and size per segment.
    block_ids = [1, 4, 7, 9]
    keys = [f"llama@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{layout}{b:04x}" for b in block_ids]
    addrs = [[base + b * blen for base, blen in zip(seg_addrs, block_lens)] for b in block_ids]
    sizes = [list(block_lens) for _ in block_ids]

    # KVCacheStoreSendingThread: batch_is_exist, then the missing keys in
    # one batch_put_from_multi_buffers, three positional arguments (older
    # releases passed a ReplicateConfig fourth).
    assert [e for e in store.batch_is_exist(keys) if e == 1] == []
    res = store.batch_put_from_multi_buffers(keys, addrs, sizes)
    assert res == [OK] * len(keys)
    config = ReplicateConfig()
    config.preferred_segment = "127.0.0.1"
    assert store.batch_put_from_multi_buffers(keys[:1], addrs[:1], sizes[:1], config) == [OK]

    # KVCacheStoreRecvingThread: three arguments, one code per key (zip
    # strict), bytes on success.
    for cache in kv_caches.values():
        cache.zero_()
    res = store.batch_get_into_multi_buffers(keys, addrs, sizes)
    assert len(res) == len(keys)
    assert res == [sum(s) for s in sizes]
    for name, cache in kv_caches.items():
        for b in range(num_blocks):
            index = (slice(None), b) if layout == "flash_attn" else (b,)
            expect = want[name][index] if b in block_ids else torch.zeros_like(want[name][index])
            assert torch.equal(cache[index], expect), (name, b)

    # The tier log: descriptors of the first replica of each key.
    descs = store.batch_get_replica_desc(keys + ["never-put"])
    assert sorted(descs) == sorted(keys)
    for key in keys:
        assert descs[key][0].is_memory_replica()
        assert not descs[key][0].is_disk_replica()
        assert not descs[key][0].is_local_disk_replica()

    # reset_cache: remove_all(force=True); shutdown: close(), twice.
    assert store.remove_all(force=True) >= len(keys)
    assert store.batch_is_exist(keys) == [0] * len(keys)
    assert store.close() == OK
    assert store.close() == OK


def test_replicate_config_validates_as_mooncake_does(cluster):
    store = MooncakeDistributedStore()
    assert store.setup("h", "P2PHANDSHAKE", 0, LOCAL_BUFFER, "tcp", "", cluster.master) == OK
    c = ReplicateConfig()
    assert c.soft_pin_ttl_ms is None and c.group_ids is None
    assert c.nof_replica_num == 0 and c.dfs_replica_num == 0
    cases = [
        ("prefer_alloc_in_same_node", True, INVALID_PARAMS),
        ("soft_pin_ttl_ms", 1000, INVALID_PARAMS),  # a TTL without ENABLE
        ("replica_num", 0, INVALID_PARAMS),         # no replica at all
        ("dfs_replica_num", 2, INVALID_PARAMS),
        ("nof_replica_num", 1, -1012),              # valid in Mooncake; no such tier here
    ]
    for field, value, code in cases:
        c = ReplicateConfig()
        setattr(c, field, value)
        assert store.put(f"cfg/{field}", b"v", c) == code, field
        assert store.is_exist(f"cfg/{field}") == 0, field
    store.close()
