"""Shelf: a distributed KV-cache block store for LLM inference.

The extension module is shelf._shelf; everything it defines is re-exported
here (Client, KeyNamespace, KeyBuilder, StorageAdapter, the Error classes,
...). shelf.mooncake is Mooncake Store's Python API over Shelf;
shelf.lmcache.ShelfConnector is LMCache's native_plugin connector;
shelf.sglang.ShelfHiCacheStorage is SGLang HiCache's dynamic backend. See
docs/client.md, docs/mooncake-compat.md and docs/integrations.md.
"""

from ._shelf import *  # noqa: F401,F403
from ._shelf import __doc__ as _extension_doc  # noqa: F401
