"""Shelf: a distributed KV-cache block store for LLM inference.

This is the shelf_kv wheel's package: shelf.Client and its errors over
libshelf's C API through ctypes, for every CPython from 3.9 on.
docs/python-wheel.md says what it holds and how it differs from the
module built with the system install; docs/client.md describes each call.

    import shelf
    client = shelf.Client("127.0.0.1:7000")
    client.put(b"block-0", b"bytes")
    client.get(b"block-0")                     # b"bytes"; None on a miss
"""

from ._client import BufferHandle, Client, Future
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
           "InvalidArgumentError", "KEY_BYTES", "KEY_BYTES_MAX", "KEY_VERSION", "NotFoundError",
           "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError", "Status",
           "StatusCode", "UnauthenticatedError", "UnavailableError", "UnimplementedError"]
