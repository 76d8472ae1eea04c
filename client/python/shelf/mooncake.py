"""Mooncake Store's Python API (mooncake.store) over a Shelf cluster; see
docs/mooncake-compat.md."""

from ._shelf.mooncake import (BufferHandle, MooncakeDistributedStore, MooncakeHostMemAllocator,
                              ObjectDataType, ReplicaDescriptor, ReplicaStatus, ReplicateConfig,
                              SoftPinAction)

__all__ = ["BufferHandle", "MooncakeDistributedStore", "MooncakeHostMemAllocator",
           "ObjectDataType", "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig",
           "SoftPinAction"]
