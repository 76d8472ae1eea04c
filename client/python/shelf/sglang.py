"""SGLang HiCache's storage backend over a Shelf cluster.

ShelfHiCacheStorage is what SGLang loads with ``--hicache-storage-backend
dynamic``::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "shelf",
        "module_path": "shelf.sglang", "class_name": "ShelfHiCacheStorage",
        "master": "10.0.0.1:7000"}'

SGLang's factory imports module_path, checks that class_name subclasses its
HiCacheStorage and builds it with (storage_config, kwargs); the scheduler
then registers its host KV pool (and a hybrid model's side pools) and
calls batch_exists, batch_get_v1 and batch_set_v1 with host indices (the
v2 calls for the side pools). Pages move between the host pools and the
stores with libshelf's batch calls (_sglang_pages.py): without a copy in
the page layouts that keep a page's K and V each in one piece (page_first,
page_first_direct), through one scratch copy where a page is more pieces
(layer_first). See docs/integrations.md.

When SGLang is not installed, the base classes are structurally identical
stand-ins (_sglang_api.py), so the backend can be driven (and tested) alone.
"""

import time
from typing import Any, List, Optional

from ._sglang_api import (HiCacheStorage, PoolTransferResult, StorageMetrics, policy_name,
                          pool_transfer_result)
from ._sglang_pages import PagePool, view
from . import Client

__all__ = ["HiCacheStorage", "PoolTransferResult", "ShelfHiCacheStorage", "StorageMetrics"]


class ShelfHiCacheStorage(HiCacheStorage):
    """SGLang HiCache's L3 tier on a Shelf cluster.

    extra_config (SGLang's --hicache-storage-backend-extra-config), besides
    the factory's backend_name, module_path and class_name:

      master            HOST:PORT[,...] or etcd://HOST:PORT/CLUSTER (required;
                        master_server_address is read too)
      secret_file       the cluster secret's file
      credentials,      a credentials file and which of its principals
      principal         (the pages then live in its tenant)
      timeout_ms        each call's deadline but prefetches' (default 5000)
      allow_shm         reach stores on this host through shared memory
                        (default true; false: TCP)
      key_prefix        before every key (default "sglang")
      prefetch_timeout_base, prefetch_timeout_per_ki_token,
      prefetch_timeout_max
                        a prefetch's deadline, seconds: base + per_ki_token
                        per 1,024 tokens, at most max (SGLang's defaults
                        2.0, 0.1, 30.0)

    Keys: key_prefix/model/ranks/page-hash, where ranks names the tensor-
    (and pipeline-, context-) parallel shard this process holds; an MLA
    model's pages are the same on every tensor-parallel rank, so they are
    named without it and written by rank 0 alone.
    """

    def __init__(self, storage_config, kwargs: Optional[dict] = None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        master = extra.get("master") or extra.get("master_server_address")
        if not master:
            raise ValueError("ShelfHiCacheStorage needs extra_config 'master' (HOST:PORT)")
        secret = ""
        if extra.get("secret_file"):
            with open(extra["secret_file"]) as f:
                secret = f.read().strip()
        self.timeout_ms = int(extra.get("timeout_ms", 5000))
        self.client = Client(master, secret=secret, credentials=extra.get("credentials", ""),
                             principal=extra.get("principal", ""), timeout_ms=self.timeout_ms,
                             allow_shm=bool(extra.get("allow_shm", True)))
        self.prefetch_timeout = (float(extra.get("prefetch_timeout_base", 2.0)),
                                 float(extra.get("prefetch_timeout_per_ki_token", 0.1)),
                                 float(extra.get("prefetch_timeout_max", 30.0)))

        self.is_mla = bool(storage_config.is_mla_model)
        self.tp_rank = storage_config.tp_rank
        model = (storage_config.model_name or "model").replace("/", "-")
        ranks = "mla" if self.is_mla else f"tp{storage_config.tp_rank}of{storage_config.tp_size}"
        if storage_config.pp_size > 1:
            ranks += f"-pp{storage_config.pp_rank}of{storage_config.pp_size}"
        cp_size = getattr(storage_config, "attn_cp_size", 1) or 1
        if cp_size > 1:
            ranks += f"-cp{storage_config.attn_cp_rank}of{cp_size}"
        self.prefix = f"{extra.get('key_prefix', 'sglang')}/{model}/{ranks}/"
        # MLA pages are identical across tensor-parallel ranks: rank 0 writes.
        self.writes = not (self.is_mla and self.tp_rank != 0)

        self.mem_pool_host = None
        self._kv: Optional[PagePool] = None
        self._side_pools = {}  # pool name -> PagePool (register_mem_host_pool_v2)
        self.gb_per_page = 0.0
        self.prefetch_pgs: List[int] = []
        self.backup_pgs: List[int] = []
        self.prefetch_bandwidth: List[float] = []
        self.backup_bandwidth: List[float] = []
        # Counters beyond StorageMetrics: pages hit, missed, read and
        # written, bytes moved, calls that failed as a whole.
        self.counters = {"hit_pages": 0, "miss_pages": 0, "read_pages": 0, "written_pages": 0,
                         "read_bytes": 0, "written_bytes": 0, "errors": 0}

    # ----------------------------------------------------------- the pools

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        self._kv = PagePool(self.client, self.counters, self.prefix, mem_pool_host, None,
                            register=True)
        self.gb_per_page = self._kv.page_bytes / (1 << 30)

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """A side pool of a hybrid model (Mamba, SWA, DSA indexer, ...),
        its pages stored under the pool's name beside the KV pages."""
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = str(getattr(host_pool_name, "value", host_pool_name))
        if name == "kv":
            return  # the KV pool came through register_mem_pool_host
        self._side_pools[name] = PagePool(self.client, self.counters, self.prefix, host_pool,
                                          name, register=False)

    def _pool(self, name) -> PagePool:
        key = str(getattr(name, "value", name))
        if key == "kv" and self._kv is not None:
            return self._kv
        if key not in self._side_pools:
            raise ValueError(f"pool {key!r} was never registered (register_mem_host_pool_v2)")
        return self._side_pools[key]

    def _prefetch_timeout_ms(self, pages: int) -> int:
        base, per_ki, most = self.prefetch_timeout
        tokens = pages * self.mem_pool_host.page_size
        return max(1, int(1000 * min(most, base + per_ki * tokens / 1024)))

    # ------------------------------------------------------------ v1 calls

    def batch_exists(self, keys, extra_info=None) -> int:
        """The leading pages present: one MatchPrefix per 1,024 objects."""
        return self._kv.leading_pages(keys)

    def batch_get_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        pages = len(keys)
        if pages == 0:
            return []
        start = time.perf_counter()
        loaded = self._kv.get(keys, host_indices, self._prefetch_timeout_ms(pages))
        elapsed = time.perf_counter() - start
        self.prefetch_pgs.append(pages)
        self.prefetch_bandwidth.append(pages / max(elapsed, 1e-9) * self.gb_per_page)
        hits = sum(loaded)
        self.counters["hit_pages"] += hits
        self.counters["miss_pages"] += pages - hits
        self.counters["read_pages"] += hits
        self.counters["read_bytes"] += hits * self._kv.page_bytes
        return loaded

    def batch_set_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        pages = len(keys)
        if pages == 0:
            return []
        if not self.writes:
            return [True] * pages  # rank 0 writes the MLA pages every rank holds
        start = time.perf_counter()
        stored = self._kv.put(keys, host_indices)
        elapsed = time.perf_counter() - start
        self.backup_pgs.append(pages)
        self.backup_bandwidth.append(pages / max(elapsed, 1e-9) * self.gb_per_page)
        self.counters["written_pages"] += sum(stored)
        self.counters["written_bytes"] += sum(stored) * self._kv.page_bytes
        return stored

    # -------------------------------------------- v2 calls (hybrid pools)

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        """The longest prefix of `keys` every pool can restore, as SGLang's
        Mooncake backend computes it: KV pages by MatchPrefix; per side
        pool, its pages of those keys by presence, under the transfer's
        hit policy (all_pages: every page up to the stop; trailing_pages:
        the last len(transfer.keys) pages before it)."""
        kv_pages = self._kv.leading_pages(keys) if self._kv is not None else len(keys)
        hits = {"kv": kv_pages} if kv_pages else {}
        restorable = list(range(1, kv_pages + 1))
        for transfer in pool_transfers or []:
            if not restorable:
                break
            exists = self._pool(transfer.name).present(keys[:kv_pages])
            policy = policy_name(transfer.hit_policy)
            if policy == "all_pages":
                boundary = exists.index(False) if False in exists else kv_pages
                can = set(range(1, boundary + 1))
            elif policy == "trailing_pages":
                window = max(1, len(transfer.keys) if transfer.keys else 1)
                can = {n for n in range(1, kv_pages + 1) if all(exists[max(0, n - window):n])}
                boundary = max(can) if can else 0
            else:
                raise ValueError(f"unknown pool hit policy {policy!r}")
            if boundary:
                hits[transfer.name] = boundary
            restorable = [n for n in restorable if n in can]
        return pool_transfer_result(restorable[-1] if restorable else 0, hits, restorable)

    def batch_get_v2(self, transfers, extra_info=None) -> dict:
        """Per transfer, its pages read into its pool: {name: [bool per page]}."""
        out = {}
        for transfer in transfers:
            pool = self._pool(transfer.name)
            out[transfer.name] = pool.get(transfer.keys, transfer.host_indices,
                                          self._prefetch_timeout_ms(len(transfer.keys)))
        return out

    def batch_set_v2(self, transfers, extra_info=None) -> dict:
        """Per transfer, its pages stored: {name: [bool per page]}."""
        out = {}
        for transfer in transfers:
            if not self.writes:
                out[transfer.name] = [True] * len(transfer.keys)
                continue
            out[transfer.name] = self._pool(transfer.name).put(transfer.keys,
                                                               transfer.host_indices)
        return out

    # ------------------------------- SGLang's older calls, by raw pointers

    def get(self, key, target_location=None, target_sizes=None) -> bool:
        return self.batch_get([key], [target_location], [target_sizes]) == 1

    def batch_get(self, keys, target_locations=None, target_sizes=None) -> int:
        """Reads key i into [target_locations[i], + target_sizes[i]); the
        number of leading keys read."""
        targets = [view(a, n) for a, n in zip(target_locations, target_sizes)]
        try:
            sizes = self.client.batch_get_into([self.prefix + k for k in keys], targets,
                                               timeout_ms=self.timeout_ms)
        except Exception:
            self.counters["errors"] += 1
            return 0
        for i, (s, n) in enumerate(zip(sizes, target_sizes)):
            if s != n:
                return i
        return len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value], [target_location], [target_sizes])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        if not self.writes:
            return True
        if target_locations is not None and all(a is not None for a in target_locations):
            data: List[Any] = [view(a, n) for a, n in zip(target_locations, target_sizes)]
        else:
            data = [memoryview(v.contiguous().view(-1).numpy()) if hasattr(v, "numpy") else v
                    for v in values]
        try:
            return all(self.client.batch_put([self.prefix + k for k in keys], data))
        except Exception:
            self.counters["errors"] += 1
            return False

    def exists(self, key) -> bool:
        return self.batch_exists([key]) == 1

    def clear(self) -> None:
        """Removes every page of this backend's key prefix."""
        cursor = b""
        while True:
            found, cursor = self.client.list_keys(self.prefix.encode() + b"*", cursor=cursor)
            if found:
                self.client.batch_remove(found)
            if not cursor:
                return

    def get_stats(self):
        metrics = StorageMetrics()
        metrics.prefetch_pgs.extend(self.prefetch_pgs)
        metrics.backup_pgs.extend(self.backup_pgs)
        metrics.prefetch_bandwidth.extend(self.prefetch_bandwidth)
        metrics.backup_bandwidth.extend(self.backup_bandwidth)
        self.prefetch_pgs.clear()
        self.backup_pgs.clear()
        self.prefetch_bandwidth.clear()
        self.backup_bandwidth.clear()
        return metrics

    def close(self) -> None:
        for pool in [self._kv, *self._side_pools.values()]:
            if pool is not None:
                pool.close()
        self.client.close()
