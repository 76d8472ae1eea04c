"""SGLang HiCache's storage interface, as shelf.sglang sees it: SGLang's
own classes when SGLang is installed (python/sglang/srt/mem_cache/
hicache_storage.py, observability/metrics_collector.py in
sgl-project/sglang), else structurally identical stand-ins, so that the
backend imports, and is tested, anywhere."""

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Dict, List, Optional

try:  # SGLang's own interface, when SGLang is installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, PoolTransferResult
except ImportError:  # stand-ins with the same methods and fields

    class HiCacheStorage(ABC):
        """SGLang's HiCacheStorage interface."""

        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        def register_mem_host_pool_v2(self, host_pool, host_pool_name):
            if not hasattr(self, "registered_pools"):
                self.registered_pools = {}
            self.registered_pools[host_pool_name] = host_pool

        def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
            raise NotImplementedError()

        def batch_get_v2(self, transfers, extra_info=None):
            raise NotImplementedError()

        def batch_set_v2(self, transfers, extra_info=None):
            raise NotImplementedError()

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

    @dataclass
    class PoolTransferResult:
        """How many pages a batch_exists_v2 found, per pool."""
        kv_hit_pages: int
        extra_pool_hit_pages: Dict[str, int]
        restorable_prefixes: Optional[List[int]] = None

try:  # SGLang's metrics record, when SGLang is installed
    from sglang.srt.observability.metrics_collector import StorageMetrics
except ImportError:

    @dataclass
    class StorageMetrics:
        """SGLang's StorageMetrics."""
        prefetch_pgs: List[int] = field(default_factory=list)
        backup_pgs: List[int] = field(default_factory=list)
        prefetch_bandwidth: List[float] = field(default_factory=list)
        backup_bandwidth: List[float] = field(default_factory=list)


def pool_transfer_result(kv_hit_pages, extra_pool_hit_pages, restorable):
    """A PoolTransferResult, with the stop points every pool can restore
    from where the installed SGLang's record has a field for them (its
    revisions differ)."""
    fields = list(inspect.signature(PoolTransferResult).parameters)
    if len(fields) >= 3:
        return PoolTransferResult(kv_hit_pages, extra_pool_hit_pages, restorable)
    return PoolTransferResult(kv_hit_pages, extra_pool_hit_pages)


def policy_name(policy) -> str:
    """A PoolHitPolicy (a str enum) or its value, as the value."""
    return str(getattr(policy, "value", policy))
