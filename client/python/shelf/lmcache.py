"""LMCache's native connector interface over a Shelf cluster.

ShelfConnector is what LMCache's multiprocess mode loads as an L2 adapter of
type ``native_plugin``::

    --l2-adapter '{"type": "native_plugin", "module_path": "shelf.lmcache",
                   "class_name": "ShelfConnector",
                   "adapter_params": {"master": "10.0.0.1:7000"}}'

See docs/integrations.md.
"""

from ._shelf.lmcache import ShelfConnector

__all__ = ["ShelfConnector"]
