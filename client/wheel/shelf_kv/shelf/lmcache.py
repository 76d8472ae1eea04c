"""LMCache's native connector interface over a Shelf cluster: the wheel's
shelf.lmcache, the system module's ShelfConnector over libshelf's
connector C API (shelf/lmcache.h) through ctypes. LMCache's multiprocess
mode loads it as an L2 adapter of type native_plugin (module_path
"shelf.lmcache", class_name "ShelfConnector"); docs/integrations.md has the
configuration to paste.
"""

import threading
from ctypes import (POINTER, Structure, byref, c_char_p, c_int, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)

from . import _native
from ._buffers import BufferView, keys_bytes
from ._errors import StatusCode, check, make_error

_GET, _SET, _EXISTS, _DELETE = range(4)


class _Config(Structure):
    _fields_ = [("master", c_char_p), ("secret_file", c_char_p), ("credentials", c_char_p),
                ("principal", c_char_p), ("tenant", c_char_p), ("workers", c_uint32),
                ("queue_max", c_uint32), ("timeout_ms", c_uint64),
                ("transfer_threads", c_uint32), ("allow_shm", c_int)]


class _Completion(Structure):
    _fields_ = [("future_id", c_uint64), ("ok", c_int), ("error", c_char_p),
                ("results", POINTER(c_uint8)), ("n_results", c_size_t)]


_open = _native.declare("shelf_lmc_open", c_int, POINTER(_Config), POINTER(c_void_p))
_close = _native.declare("shelf_lmc_close", None, c_void_p)
_free = _native.declare("shelf_lmc_free", None, c_void_p)
_event_fd = _native.declare("shelf_lmc_event_fd", c_int, c_void_p)
_submit = _native.declare("shelf_lmc_submit", c_uint64, c_void_p, c_int, c_void_p, c_void_p, c_size_t,
                   c_void_p, c_void_p)
_drain = _native.declare("shelf_lmc_drain", c_int, c_void_p, POINTER(c_void_p), POINTER(c_size_t))
_drained_get = _native.declare("shelf_lmc_drained_get", c_int, c_void_p, c_size_t,
                        POINTER(_Completion))
_drained_free = _native.declare("shelf_lmc_drained_free", None, c_void_p)


class ShelfConnector:
    """LMCache's native connector (event_fd, submit_batch_get/set/exists/
    delete, drain_completions, close) over libshelf. Submissions never
    block; `workers` threads run the batches, one master round trip per
    slice of keys, and each finished batch is signalled on event_fd(). A
    batch's buffers must stay valid until drain_completions() has returned
    its future id."""

    def __init__(self, *, master, secret_file="", credentials="", principal="",
                 tenant="default", workers=4, queue_max=1024, timeout_ms=5000,
                 transfer_threads=8, allow_shm=True):
        self._handle = None
        config = _Config(master.encode(), secret_file.encode(), credentials.encode(),
                         principal.encode(), tenant.encode(), workers, queue_max, timeout_ms,
                         transfer_threads, 1 if allow_shm else 0)
        handle = c_void_p()
        check(_open(byref(config), byref(handle)))
        self._handle = handle.value
        self._held = {}  # future id -> the views its batch reads or writes
        self._mu = threading.Lock()

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _free(handle)

    def event_fd(self):
        """An eventfd, readable while completions wait for drain_completions()."""
        return _event_fd(self._handle)

    def _submit(self, op, keys, views=None, writable=False):
        k = keys_bytes(keys)
        n = len(k)
        pointers = (c_char_p * n)(*k)
        lengths = (c_size_t * n)(*[len(x) for x in k])
        buffers = sizes = None
        held = []
        if views is not None:
            held = [BufferView(v, writable) for v in views]
            if len(held) != n:
                for v in held:
                    v.release()
                raise ValueError(f"{n} keys and {len(held)} memoryviews: one buffer per key")
            buffers = (c_void_p * n)(*[v.address for v in held])
            sizes = (c_size_t * n)(*[v.size for v in held])
        with self._mu:
            future_id = _submit(self._handle, op, pointers, lengths, n, buffers, sizes)
            if future_id == 0:
                for v in held:
                    v.release()
                raise make_error(StatusCode.INVALID_ARGUMENT, _native.error_message())
            self._held[future_id] = held
        return future_id

    def submit_batch_get(self, keys, memoryviews):
        """Reads each key into its writable buffer (its exact size); returns
        the future id. The completion's list says which keys were read."""
        return self._submit(_GET, keys, memoryviews, writable=True)

    def submit_batch_set(self, keys, memoryviews):
        """Stores each buffer under its key; returns the future id."""
        return self._submit(_SET, keys, memoryviews, writable=False)

    def submit_batch_exists(self, keys):
        """Which keys are present (no lease is taken); returns the future id."""
        return self._submit(_EXISTS, keys)

    def submit_batch_delete(self, keys):
        """Removes the keys; the completion's list says which were removed."""
        return self._submit(_DELETE, keys)

    def drain_completions(self):
        """The finished batches: a list of (future_id, ok, error,
        list[bool] or None)."""
        drained, n = c_void_p(), c_size_t()
        check(_drain(self._handle, byref(drained), byref(n)))
        out = []
        try:
            c = _Completion()
            for i in range(n.value):
                check(_drained_get(drained, i, byref(c)))
                results = None
                if c.n_results:
                    results = [c.results[j] != 0 for j in range(c.n_results)]
                out.append((c.future_id, bool(c.ok), (c.error or b"").decode("utf-8", "replace"),
                            results))
        finally:
            _drained_free(drained)
        with self._mu:
            for future_id, _, _, _ in out:
                for v in self._held.pop(future_id, ()):  # its buffers are free again
                    v.release()
        return out

    def close(self):
        """Refuses new batches, lets the queued ones finish and closes the client."""
        if self._handle:
            _close(self._handle)


__all__ = ["ShelfConnector"]
