"""SGLang HiCache's storage backend over a Shelf cluster.

ShelfHiCacheStorage is what SGLang loads with ``--hicache-storage-backend
dynamic``::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "shelf",
        "module_path": "shelf.sglang", "class_name": "ShelfHiCacheStorage",
        "master": "10.0.0.1:7000"}'

SGLang's factory imports module_path, checks that class_name subclasses its
HiCacheStorage and builds it with (storage_config, kwargs); the scheduler
then registers its host KV pool and calls batch_exists, batch_get_v1 and
batch_set_v1 with host indices. Pages move between the host pool and the
stores with libshelf's batch calls, without a copy in the page layouts that
keep a page's K and V each in one piece (page_first, page_first_direct) and
through one scratch copy in layer_first, where a page is a piece per layer.
See docs/integrations.md.

When SGLang is not installed, the base classes are structurally identical
stand-ins defined here, so the backend can be driven (and tested) alone.
"""

import ctypes
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, List, Optional

from ._shelf import Client

try:  # SGLang's own base class, when SGLang is installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError:  # a stand-in with the same methods

    class HiCacheStorage(ABC):
        """SGLang's HiCacheStorage interface (hicache_storage.py)."""

        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        def batch_get_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
            raise NotImplementedError()

        def batch_set_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
            raise NotImplementedError()

        @abstractmethod
        def get(self, key, target_location=None, target_sizes=None):
            pass

        @abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None):
            pass

        @abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
            pass

        @abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
            pass

        @abstractmethod
        def exists(self, key) -> bool:
            pass

        def batch_exists(self, keys, extra_info=None) -> int:
            for i, key in enumerate(keys):
                if not self.exists(key):
                    return i
            return len(keys)

        def clear(self) -> None:
            pass

        def get_stats(self):
            return None

try:  # SGLang's metrics record, when SGLang is installed
    from sglang.srt.observability.metrics_collector import StorageMetrics
except ImportError:

    @dataclass
    class StorageMetrics:
        """SGLang's StorageMetrics (observability/metrics_collector.py)."""
        prefetch_pgs: List[int] = field(default_factory=list)
        backup_pgs: List[int] = field(default_factory=list)
        prefetch_bandwidth: List[float] = field(default_factory=list)
        backup_bandwidth: List[float] = field(default_factory=list)

BATCH_ITEMS_MAX = 1024  # libshelf's keys per batch call


def _view(address: int, size: int) -> memoryview:
    """The bytes [address, address + size) of the host pool, as a buffer."""
    return memoryview((ctypes.c_ubyte * size).from_address(address))


def _slices(n: int, size: int = BATCH_ITEMS_MAX):
    for begin in range(0, n, size):
        yield begin, min(n, begin + size)


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
        self._pool_handle = None
        self._pool_base = 0
        self._pieces = 0       # pool pieces of one page (get_page_buffer_meta)
        self._piece_bytes = 0
        self._suffixes: List[str] = []  # one object per suffix per page
        self.gb_per_page = 0.0
        self.prefetch_pgs: List[int] = []
        self.backup_pgs: List[int] = []
        self.prefetch_bandwidth: List[float] = []
        self.backup_bandwidth: List[float] = []
        # Counters beyond StorageMetrics: pages hit, missed, read and
        # written, bytes moved, calls that failed as a whole.
        self.counters = {"hit_pages": 0, "miss_pages": 0, "read_pages": 0, "written_pages": 0,
                         "read_bytes": 0, "written_bytes": 0, "errors": 0}

    # ------------------------------------------------------------ the pool

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        kv = mem_pool_host.kv_buffer
        nbytes = kv.numel() * kv.element_size()
        self._pool_base = kv.data_ptr()
        self._pool_handle = self.client.register_buffer(self._pool_base, size=nbytes)
        # How the pool lays out one page: its pieces and their size.
        import torch
        ptrs, sizes = mem_pool_host.get_page_buffer_meta(
            torch.arange(mem_pool_host.page_size, dtype=torch.int64))
        if len(set(sizes)) != 1:
            raise ValueError("pieces of one page differ in size: " + repr(sorted(set(sizes))))
        self._pieces, self._piece_bytes = len(ptrs), sizes[0]
        if self._pieces == 1:
            self._suffixes = ["_kv"]            # MLA page_first: one piece
        elif self._pieces == 2:
            self._suffixes = ["_k", "_v"]       # MHA page_first(_direct): K, V
        else:
            self._suffixes = ["_lf"]            # layer_first: gathered per page
        self.gb_per_page = self._pieces * self._piece_bytes / (1 << 30)

    def _object_keys(self, keys: List[str]) -> List[str]:
        return [f"{self.prefix}{k}{s}" for k in keys for s in self._suffixes]

    def _gathered(self) -> bool:
        return len(self._suffixes) == 1 and self._pieces > 1

    def _pieces_of(self, host_indices, pages: int):
        ptrs, _ = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(ptrs) != pages * self._pieces:
            raise ValueError(f"{len(ptrs)} pieces for {pages} pages: the pool's layout changed")
        return ptrs

    def _prefetch_timeout_ms(self, pages: int) -> int:
        base, per_ki, most = self.prefetch_timeout
        tokens = pages * self.mem_pool_host.page_size
        return max(1, int(1000 * min(most, base + per_ki * tokens / 1024)))

    # ------------------------------------------------------------ v1 calls

    def batch_exists(self, keys, extra_info=None) -> int:
        """The leading pages present: one MatchPrefix per 1,024 objects."""
        objects = self._object_keys(keys)
        per_page = len(self._suffixes)
        matched = 0
        try:
            for begin, end in _slices(len(objects)):
                n = self.client.match_prefix(objects[begin:end])
                matched += n
                if n < end - begin:
                    break
        except Exception:
            self.counters["errors"] += 1
            return 0
        return matched // per_page

    def batch_get_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        pages = len(keys)
        if pages == 0:
            return []
        ptrs = self._pieces_of(host_indices, pages)
        objects = self._object_keys(keys)
        timeout_ms = self._prefetch_timeout_ms(pages)
        start = time.perf_counter()
        if self._gathered():
            page_bytes = self._pieces * self._piece_bytes
            scratch = bytearray(pages * page_bytes)
            view = memoryview(scratch)
            sizes = self._get_into(objects, [view[i * page_bytes:(i + 1) * page_bytes]
                                             for i in range(pages)], timeout_ms)
            loaded = [s == page_bytes for s in sizes]
            base = ctypes.addressof(ctypes.c_char.from_buffer(scratch))
            for p in range(pages):
                if not loaded[p]:
                    continue
                for j in range(self._pieces):
                    ctypes.memmove(ptrs[p * self._pieces + j],
                                   base + p * page_bytes + j * self._piece_bytes,
                                   self._piece_bytes)
        else:
            offsets = [p - self._pool_base for p in ptrs]
            sizes = self._get_registered(objects, offsets, timeout_ms)
            per_page = len(self._suffixes)
            loaded = [all(s == self._piece_bytes for s in sizes[p * per_page:(p + 1) * per_page])
                      for p in range(pages)]
        elapsed = time.perf_counter() - start
        self.prefetch_pgs.append(pages)
        self.prefetch_bandwidth.append(pages / max(elapsed, 1e-9) * self.gb_per_page)
        hits = sum(loaded)
        self.counters["hit_pages"] += hits
        self.counters["miss_pages"] += pages - hits
        self.counters["read_pages"] += hits
        self.counters["read_bytes"] += hits * self._pieces * self._piece_bytes
        return loaded

    def batch_set_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        pages = len(keys)
        if pages == 0:
            return []
        if not self.writes:
            return [True] * pages  # rank 0 writes the MLA pages every rank holds
        ptrs = self._pieces_of(host_indices, pages)
        objects = self._object_keys(keys)
        start = time.perf_counter()
        if self._gathered():
            page_bytes = self._pieces * self._piece_bytes
            scratch = bytearray(pages * page_bytes)
            base = ctypes.addressof(ctypes.c_char.from_buffer(scratch))
            for p in range(pages):
                for j in range(self._pieces):
                    ctypes.memmove(base + p * page_bytes + j * self._piece_bytes,
                                   ptrs[p * self._pieces + j], self._piece_bytes)
            view = memoryview(scratch)
            values = [view[i * page_bytes:(i + 1) * page_bytes] for i in range(pages)]
        else:
            values = [_view(p, self._piece_bytes) for p in ptrs]
        ok = self._put(objects, values)
        per_page = len(self._suffixes)
        stored = [all(ok[p * per_page:(p + 1) * per_page]) for p in range(pages)]
        elapsed = time.perf_counter() - start
        self.backup_pgs.append(pages)
        self.backup_bandwidth.append(pages / max(elapsed, 1e-9) * self.gb_per_page)
        self.counters["written_pages"] += sum(stored)
        self.counters["written_bytes"] += sum(stored) * self._pieces * self._piece_bytes
        return stored

    # ------------------------------------------------- calls on the cluster

    def _get_registered(self, objects, offsets, timeout_ms) -> List[int]:
        """Sizes read into the registered pool at `offsets`; 0 where not."""
        out: List[int] = []
        for begin, end in _slices(len(objects)):
            try:
                got = self.client.batch_get_into_async(
                    objects[begin:end], self._pool_handle, offsets[begin:end],
                    self._piece_bytes, timeout_ms=timeout_ms).result()
            except Exception:
                self.counters["errors"] += 1
                got = [None] * (end - begin)
            out.extend(0 if g is None else g for g in got)
        return out

    def _get_into(self, objects, targets, timeout_ms) -> List[int]:
        out: List[int] = []
        for begin, end in _slices(len(objects)):
            try:
                got = self.client.batch_get_into(objects[begin:end], targets[begin:end],
                                                 timeout_ms=timeout_ms)
            except Exception:
                self.counters["errors"] += 1
                got = [None] * (end - begin)
            out.extend(0 if g is None else g for g in got)
        return out

    def _put(self, objects, values) -> List[bool]:
        out: List[bool] = []
        for begin, end in _slices(len(objects)):
            try:
                statuses = self.client.batch_put(objects[begin:end], values[begin:end])
                out.extend(bool(s) for s in statuses)
            except Exception:
                self.counters["errors"] += 1
                out.extend([False] * (end - begin))
        return out

    # ------------------------------- SGLang's older calls, by raw pointers

    def get(self, key, target_location=None, target_sizes=None) -> bool:
        return self.batch_get([key], [target_location], [target_sizes]) == 1

    def batch_get(self, keys, target_locations=None, target_sizes=None) -> int:
        """Reads key i into [target_locations[i], + target_sizes[i]); the
        number of leading keys read."""
        targets = [_view(a, n) for a, n in zip(target_locations, target_sizes)]
        sizes = self._get_into([self.prefix + k for k in keys], targets, self.timeout_ms)
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
            data: List[Any] = [_view(a, n) for a, n in zip(target_locations, target_sizes)]
        else:
            data = [memoryview(v.contiguous().view(-1).numpy()) if hasattr(v, "numpy") else v
                    for v in values]
        return all(self._put([self.prefix + k for k in keys], data))

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
        if self._pool_handle is not None:
            self.client.unregister_buffer(self._pool_handle)
            self._pool_handle = None
        self.client.close()
