"""`mooncake.store` names over Shelf: `from mooncake.store import
MooncakeDistributedStore` gets shelf.mooncake's class. docs/mooncake-compat.md
lists what each method does on Shelf."""

from shelf.mooncake import (BufferHandle, MooncakeDistributedStore, MooncakeHostMemAllocator,
                            ObjectDataType, ReplicaDescriptor, ReplicaStatus, ReplicateConfig,
                            SoftPinAction)

__all__ = ["BufferHandle", "MooncakeDistributedStore", "MooncakeHostMemAllocator",
           "ObjectDataType", "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig",
           "SoftPinAction"]
