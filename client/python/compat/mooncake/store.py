"""`mooncake.store` names over Shelf: `from mooncake.store import
MooncakeDistributedStore` gets shelf.mooncake's class. docs/mooncake-compat.md
lists what each method does on Shelf."""

from shelf.mooncake import BufferHandle, MooncakeDistributedStore, ReplicateConfig

__all__ = ["BufferHandle", "MooncakeDistributedStore", "ReplicateConfig"]
