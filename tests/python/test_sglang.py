"""shelf.sglang.ShelfHiCacheStorage driven as SGLang HiCache drives a
`dynamic` storage backend (python/sglang/srt/mem_cache/storage/
backend_factory.py and hicache_storage.py in sgl-project/sglang): loaded
from extra_config's module_path and class_name, checked to subclass
HiCacheStorage, built with (storage_config, kwargs), given the host KV pool,
then batch_set_v1 of pages (backup), batch_exists (the prefix count the
prefetch asks), batch_get_v1 of that prefix into the host pool. Host pools
in every layout SGLang has, MHA and MLA (sglang_pools.py), against a real
cluster."""

import importlib
import json
import os
import pathlib
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

import shelf.sglang
from conftest import ENGINE_PRINCIPALS, Cluster, principals_cluster, private_file
from sglang_pools import MambaHostPool, MHAHostPool, MLAHostPool, page_bytes, page_indices

LAYOUTS = ["layer_first", "page_first", "page_first_direct"]


@dataclass
class HiCacheStorageConfig:
    """SGLang's HiCacheStorageConfig (hicache_storage.py), its fields."""
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(stores=2, dram_bytes=64 << 20)
    yield c
    c.stop()


@dataclass
class PoolTransfer:
    """SGLang's PoolTransfer (hicache_storage.py), the fields the storage
    calls read."""
    name: str
    host_indices: Optional[torch.Tensor] = None
    keys: Optional[list] = None
    hit_policy: str = "all_pages"


def create_dynamic_backend(cluster, tp_rank=0, tp_size=1, mla=False, layout="page_first",
                           model="org/model", **extra):
    """StorageBackendFactory._create_dynamic_backend, as SGLang runs it."""
    config = HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=True,
        is_page_first_layout=layout != "layer_first", model_name=model,
        extra_config={"backend_name": "shelf", "module_path": "shelf.sglang",
                      "class_name": "ShelfHiCacheStorage", "master": cluster.master, **extra})
    backend = config.extra_config
    cls = getattr(importlib.import_module(backend["module_path"]), backend["class_name"])
    assert issubclass(cls, shelf.sglang.HiCacheStorage)
    return cls(config, {})


def fill(pool, seed):
    g = torch.Generator().manual_seed(seed)
    flat = pool.kv_buffer.reshape(-1).view(torch.uint8)
    flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=g))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_pages_round_trip_in_every_layout(cluster, kind, layout):
    pool = MHAHostPool(layout) if kind == "mha" else MLAHostPool(layout)
    storage = create_dynamic_backend(cluster, mla=kind == "mla", layout=layout,
                                     model=f"m-{kind}-{layout}")
    storage.register_mem_pool_host(pool)
    fill(pool, seed=1)
    ps = pool.page_size
    want = {p: page_bytes(pool, p, ps).clone() for p in range(8)}
    keys = [f"hash{p:04d}" for p in range(8)]
    # Backup: pages 0..7 of the pool under keys 0..7.
    assert storage.batch_set_v1(keys, page_indices(range(8), ps)) == [True] * 8
    # Prefetch: the prefix count, then a get of the counted pages into other
    # slots of the pool (8..15), which must then hold the same bytes.
    assert storage.batch_exists(keys + ["hash-never-stored"]) == 8
    pool.kv_buffer.zero_()
    assert storage.batch_get_v1(keys, page_indices(range(8, 16), ps)) == [True] * 8
    for p in range(8):
        assert torch.equal(page_bytes(pool, 8 + p, ps), want[p]), f"page {p}"
        assert int(page_bytes(pool, p, ps).count_nonzero()) == 0  # untouched
    stats = storage.get_stats()
    assert stats.backup_pgs == [8] and stats.prefetch_pgs == [8]
    assert len(stats.prefetch_bandwidth) == 1 and stats.prefetch_bandwidth[0] > 0
    assert storage.get_stats().prefetch_pgs == []  # taken once
    assert storage.counters["hit_pages"] == 8 and storage.counters["written_pages"] == 8
    storage.clear()
    assert storage.batch_exists(keys) == 0
    storage.close()


def test_the_prefix_stops_at_the_first_missing_page(cluster):
    pool = MHAHostPool("page_first")
    storage = create_dynamic_backend(cluster, model="m-prefix")
    storage.register_mem_pool_host(pool)
    fill(pool, seed=2)
    keys = [f"p{p}" for p in range(6)]
    ps = pool.page_size
    assert storage.batch_set_v1(keys[:3] + keys[4:], page_indices([0, 1, 2, 4, 5], ps)) == \
        [True] * 5
    assert storage.batch_exists(keys) == 3
    # A get of pages that include a miss: the miss alone is False, its slot
    # untouched.
    pool.kv_buffer.zero_()
    assert storage.batch_get_v1(keys[2:5], page_indices([8, 9, 10], ps)) == [True, False, True]
    assert int(page_bytes(pool, 9, ps).count_nonzero()) == 0
    assert storage.counters["miss_pages"] == 1
    storage.clear()
    storage.close()


def test_mla_pages_are_written_once_and_read_by_every_rank(cluster):
    pools = [MLAHostPool("page_first") for _ in range(2)]
    ranks = [create_dynamic_backend(cluster, tp_rank=r, tp_size=2, mla=True, model="m-mla-tp")
             for r in range(2)]
    for storage, pool in zip(ranks, pools):
        storage.register_mem_pool_host(pool)
    fill(pools[0], seed=3)
    fill(pools[1], seed=4)  # rank 1's pool differs: its set must not be stored
    keys = [f"mla{p}" for p in range(4)]
    ps = pools[0].page_size
    assert ranks[1].batch_set_v1(keys, page_indices(range(4), ps)) == [True] * 4
    assert ranks[1].batch_exists(keys) == 0  # nothing written by rank 1
    assert ranks[0].batch_set_v1(keys, page_indices(range(4), ps)) == [True] * 4
    want = [page_bytes(pools[0], p, ps).clone() for p in range(4)]
    assert ranks[1].batch_exists(keys) == 4
    assert ranks[1].batch_get_v1(keys, page_indices(range(8, 12), ps)) == [True] * 4
    for p in range(4):
        assert torch.equal(page_bytes(pools[1], 8 + p, ps), want[p])
    ranks[0].clear()
    for storage in ranks:
        storage.close()


def test_tensor_parallel_mha_ranks_keep_their_own_shards(cluster):
    pools = [MHAHostPool("page_first") for _ in range(2)]
    ranks = [create_dynamic_backend(cluster, tp_rank=r, tp_size=2, model="m-mha-tp")
             for r in range(2)]
    for r, (storage, pool) in enumerate(zip(ranks, pools)):
        storage.register_mem_pool_host(pool)
        fill(pool, seed=10 + r)
    ps = pools[0].page_size
    want = [[page_bytes(pool, 0, ps).clone()] for pool in pools]
    for storage in ranks:
        assert storage.batch_set_v1(["shared-hash"], page_indices([0], ps)) == [True]
    for r, (storage, pool) in enumerate(zip(ranks, pools)):
        pool.kv_buffer.zero_()
        assert storage.batch_get_v1(["shared-hash"], page_indices([1], ps)) == [True]
        assert torch.equal(page_bytes(pool, 1, ps), want[r][0]), f"rank {r}"
        storage.clear()
        storage.close()


def test_the_configuration_in_the_docs_loads_and_moves_a_page(cluster):
    doc = (pathlib.Path(os.environ["SHELF_SOURCE_DIR"]) / "docs" / "integrations.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.S)]
    extra = next(b for b in blocks if b.get("class_name") == "ShelfHiCacheStorage")
    assert extra["master"] == "10.0.0.1:7000"
    extra["master"] = cluster.master
    config = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m-docs",
                                  extra_config=extra)
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    storage = cls(config, {})
    pool = MHAHostPool("page_first")
    storage.register_mem_pool_host(pool)
    fill(pool, seed=20)
    want = page_bytes(pool, 0, pool.page_size).clone()
    assert storage.batch_set_v1(["docs"], page_indices([0], pool.page_size)) == [True]
    assert storage.batch_get_v1(["docs"], page_indices([1], pool.page_size)) == [True]
    assert torch.equal(page_bytes(pool, 1, pool.page_size), want)
    storage.clear()
    storage.close()


def test_extra_config_is_checked(cluster):
    with pytest.raises(ValueError, match="master"):
        shelf.sglang.ShelfHiCacheStorage(
            HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m", extra_config={}), {})


def test_a_store_killed_mid_prefetch_fails_only_its_pages():
    cluster = Cluster(stores=2, dram_bytes=64 << 20)
    try:
        # Over TCP: a client keeps a same-host store's segment mapped.
        storage = create_dynamic_backend(cluster, model="m-kill", allow_shm=False,
                                         timeout_ms=3000, prefetch_timeout_max=3.0)
        pool = MHAHostPool("page_first", pages=64)
        storage.register_mem_pool_host(pool)
        fill(pool, seed=30)
        ps = pool.page_size
        keys = [f"kill{p}" for p in range(32)]
        want = [page_bytes(pool, p, ps).clone() for p in range(32)]
        assert storage.batch_set_v1(keys, page_indices(range(32), ps)) == [True] * 32
        pool.kv_buffer.zero_()
        killer = threading.Thread(target=cluster.kill_store, args=(0,))
        killer.start()
        loaded = storage.batch_get_v1(keys, page_indices(range(32, 64), ps))
        killer.join()
        for p in range(32):  # a page reported loaded holds its own bytes
            if loaded[p]:
                assert torch.equal(page_bytes(pool, 32 + p, ps), want[p]), p
        # After the kill: a page whose K and V objects both live on the
        # survivor loads; a page with either on the dead store is False
        # (a batch spreads K and V over the stores, so here that is every
        # page); nothing raises.
        pool.kv_buffer.zero_()
        loaded = storage.batch_get_v1(keys, page_indices(range(32, 64), ps))
        assert len(loaded) == 32 and loaded.count(False) > 0
        for p in range(32):
            if loaded[p]:
                assert torch.equal(page_bytes(pool, 32 + p, ps), want[p]), p
        assert storage.counters["miss_pages"] >= loaded.count(False)
        storage.close()
    finally:
        cluster.stop()


SECRET = "sglang-backend-data-plane-secret"
PRINCIPALS = ENGINE_PRINCIPALS


def test_a_tenant_reads_only_its_own_pages():
    d = pathlib.Path(tempfile.mkdtemp(prefix="shelf-sglang-"))
    lines = "".join(f"{p} engine {t} {s}\n" for p, (t, s) in PRINCIPALS.items())
    cluster, secret = principals_cluster(d, lines, SECRET)
    try:
        own = {p: private_file(d / p, f"{p} engine {t} {s}\n")
               for p, (t, s) in PRINCIPALS.items()}
        a, b = (create_dynamic_backend(cluster, model="m-tenant", secret_file=secret,
                                       credentials=own[p]) for p in ("eng-a", "eng-b"))
        pools = [MHAHostPool("page_first") for _ in range(2)]
        for storage, pool in zip((a, b), pools):
            storage.register_mem_pool_host(pool)
        fill(pools[0], seed=40)
        ps = pools[0].page_size
        assert a.batch_set_v1(["shared"], page_indices([0], ps)) == [True]
        assert b.batch_exists(["shared"]) == 0
        assert b.batch_get_v1(["shared"], page_indices([1], ps)) == [False]
        assert int(page_bytes(pools[1], 1, ps).count_nonzero()) == 0
        assert a.batch_exists(["shared"]) == 1
        for storage in (a, b):
            storage.close()
    finally:
        cluster.stop()
        shutil.rmtree(d, ignore_errors=True)


def hybrid_backend(cluster, model):
    """A backend of a hybrid model: the KV pool, a Mamba state pool and an
    SWA pool (an MHA-shaped side pool), registered as SGLang does."""
    storage = create_dynamic_backend(cluster, model=model)
    kv, mamba, swa = MHAHostPool("page_first"), MambaHostPool(), MHAHostPool("page_first")
    storage.register_mem_pool_host(kv)
    storage.register_mem_host_pool_v2(kv, "kv")
    storage.register_mem_host_pool_v2(mamba, "mamba")
    storage.register_mem_host_pool_v2(swa, "swa")
    return storage, kv, mamba, swa


def test_hybrid_pools_round_trip_through_the_v2_calls(cluster):
    storage, kv, mamba, swa = hybrid_backend(cluster, "m-hybrid")
    for seed, pool in enumerate((kv, swa)):
        fill(pool, seed=50 + seed)
    mamba.temporal.copy_(torch.randint(0, 256, mamba.temporal.shape, dtype=torch.uint8))
    for b in mamba.conv_buffer:
        b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8))
    ps = kv.page_size
    keys = [f"hy{p}" for p in range(4)]
    want_swa = [page_bytes(swa, p, ps).clone() for p in range(4)]
    want_mamba = [mamba.slot_bytes(p).clone() for p in range(4)]
    assert storage.batch_set_v1(keys, page_indices(range(4), ps)) == [True] * 4
    result = storage.batch_set_v2([
        PoolTransfer("mamba", torch.arange(4), keys),
        PoolTransfer("swa", page_indices(range(4), ps), keys)])
    assert result == {"mamba": [True] * 4, "swa": [True] * 4}
    found = storage.batch_exists_v2(keys + ["hy-missing"], [
        PoolTransfer("mamba", keys=keys), PoolTransfer("swa", keys=keys)])
    assert found.kv_hit_pages == 4
    assert found.extra_pool_hit_pages == {"kv": 4, "mamba": 4, "swa": 4}
    swa.kv_buffer.zero_()
    for b in mamba.buffers():
        b.zero_()
    result = storage.batch_get_v2([
        PoolTransfer("mamba", torch.arange(4, 8), keys),
        PoolTransfer("swa", page_indices(range(8, 12), ps), keys)])
    assert result == {"mamba": [True] * 4, "swa": [True] * 4}
    for p in range(4):
        assert torch.equal(mamba.slot_bytes(4 + p), want_mamba[p]), p
        assert torch.equal(page_bytes(swa, 8 + p, ps), want_swa[p]), p
    storage.clear()
    storage.close()


def test_hit_policies_bound_the_restorable_prefix(cluster):
    storage, kv, mamba, _ = hybrid_backend(cluster, "m-policy")
    fill(kv, seed=60)
    ps = kv.page_size
    keys = [f"po{p}" for p in range(4)]
    assert storage.batch_set_v1(keys, page_indices(range(4), ps)) == [True] * 4
    # A Mamba state for the last page alone, as SGLang backs up the state
    # of a prefix's end.
    assert storage.batch_set_v2([PoolTransfer("mamba", torch.tensor([3]), keys[3:])]) == \
        {"mamba": [True]}
    # trailing_pages with a window of one: only stop point 4 has its state.
    trailing = storage.batch_exists_v2(
        keys, [PoolTransfer("mamba", keys=keys[3:], hit_policy="trailing_pages")])
    assert trailing.kv_hit_pages == 4
    assert trailing.extra_pool_hit_pages["mamba"] == 4
    # all_pages: page 0 has no state, so nothing can be restored.
    every = storage.batch_exists_v2(keys, [PoolTransfer("mamba", keys=keys)])
    assert every.kv_hit_pages == 0
    assert "mamba" not in every.extra_pool_hit_pages
    # A KV page missing in the middle stops the KV prefix first.
    storage.client.remove(f"{storage.prefix}po2_k".encode())
    shorter = storage.batch_exists_v2(
        keys, [PoolTransfer("mamba", keys=keys[3:], hit_policy="trailing_pages")])
    assert shorter.kv_hit_pages == 0  # stop points 1 and 2 lack the state
    with pytest.raises(ValueError, match="never registered"):
        storage.batch_get_v2([PoolTransfer("indexer", torch.arange(1), keys[:1])])
    storage.clear()
    storage.close()
