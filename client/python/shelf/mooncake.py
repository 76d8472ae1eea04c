"""Mooncake Store's Python API (mooncake.store) over a Shelf cluster; see
docs/mooncake-compat.md."""

from ._shelf.mooncake import BufferHandle, MooncakeDistributedStore, ReplicateConfig

__all__ = ["BufferHandle", "MooncakeDistributedStore", "ReplicateConfig"]
