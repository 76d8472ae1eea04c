"""Shelf: a distributed KV-cache block store for LLM inference.

This is the shelf_kv wheel's package, for every CPython from 3.9 on: the
system module's API over libshelf's C APIs through ctypes. shelf.Client,
its errors, KeyNamespace, KeyBuilder and StorageAdapter here;
shelf.mooncake is Mooncake Store's Python API over Shelf;
shelf.lmcache.ShelfConnector is LMCache's native_plugin connector;
shelf.sglang.ShelfHiCacheStorage is SGLang HiCache's dynamic backend.
docs/python-wheel.md says what the wheel holds; docs/client.md,
docs/mooncake-compat.md and docs/integrations.md describe each call.

    import shelf
    client = shelf.Client("127.0.0.1:7000")
    client.put(b"block-0", b"bytes")
    client.get(b"block-0")                     # b"bytes"; None on a miss
"""

from ._adapter import StorageAdapter
from ._client import BufferHandle, Client, Future
from ._keys import KeyBuilder, KeyNamespace
from ._errors import (DataLossError, DeadlineExceededError, Error, FailedPreconditionError,
                      InvalidArgumentError, NotFoundError, OutOfRangeError,
                      PermissionDeniedError, ResourceExhaustedError, Status, StatusCode,
                      UnauthenticatedError, UnavailableError, UnimplementedError)

KEY_VERSION = 1
KEY_BYTES = 17
KEY_BYTES_MAX = 256
BATCH_ITEMS_MAX = 1024

__all__ = ["BATCH_ITEMS_MAX", "BufferHandle", "Client", "DataLossError",
           "DeadlineExceededError", "Error", "FailedPreconditionError", "Future",
           "InvalidArgumentError", "KEY_BYTES", "KEY_BYTES_MAX", "KEY_VERSION", "KeyBuilder",
           "KeyNamespace", "NotFoundError", "OutOfRangeError", "PermissionDeniedError",
           "ResourceExhaustedError", "Status", "StatusCode", "StorageAdapter", "UnauthenticatedError",
           "UnavailableError", "UnimplementedError"]
