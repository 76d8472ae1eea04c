"""shelf.Client over libshelf's C API: the system module's Client (names,
arguments, defaults, results and errors), each call a ctypes call that
releases the GIL. docs/python-wheel.md says how the wheel's package
relates to the system module."""

import ctypes
import json
from ctypes import byref, c_int, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p

from . import _native
from ._buffers import BufferView, KeyArray, bytes_at, key_bytes, keys_bytes
from ._errors import StatusCode, check, item_status, make_error

_NOT_FOUND = int(StatusCode.NOT_FOUND)
_CUDA_STREAM_LEGACY = 0x1  # cudaStreamLegacy (driver_types.h)

# Client's keywords and the ClientOptions field each sets (shelf_options_set).
_OPTION_FIELDS = {
    "secret": "secret", "timeout_ms": "timeout_ms", "allow_tcp": "allow_tcp",
    "allow_shm": "allow_shm", "verify_checksums": "verify_checksums", "tls_ca": "tls_ca",
    "transfer_threads": "transfer_threads", "async_threads": "async_threads",
    "async_queue_max": "async_queue_max", "tcp_streams_per_block": "tcp_streams_per_block",
    "rdma_device": "rdma_device", "rdma_port": "rdma_port", "rdma_gid_index": "rdma_gid_index",
    "rdma_traffic_class": "rdma_traffic_class", "rdma_service_level": "rdma_service_level",
    "rdma_pkey_index": "rdma_pkey_index", "tls_cert": "tls_cert", "tls_key": "tls_key",
    "etcd_ca": "etcd_ca", "etcd_cert": "etcd_cert", "etcd_key": "etcd_key",
    "etcd_user_file": "etcd_user_file", "shm_store_uid": "shm_store_uid",
    "principal": "principal", "principal_secret": "principal_secret",
    "credentials": "credentials_file", "rdma_store_pull_puts": "rdma_store_pull_puts",
    "rdma_connections_max": "rdma_connections_max",
    "rdma_gpu_registrations_max": "rdma_gpu_registrations_max", "data_tls": "data_tls",
    "data_tls_ca": "data_tls_ca", "data_tls_cert": "data_tls_cert",
    "data_tls_key": "data_tls_key", "session_tag_payload": "session_tag_payload",
    "warm_shm_bytes": "warm_shm_bytes",
}

_BLOCK_FIELDS = ("parent_key", "engine_hash", "engine_parent_hash", "block_tokens", "token_ids",
                 "model")


def _option_text(value):
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, int):
        return str(value).encode()
    return str(value).encode("utf-8")


def _range_length(size, offset, length, what):
    """Bytes [offset, offset + length) of a buffer of `size`, length
    defaulting to the rest; OutOfRangeError when they do not fit."""
    if offset < 0 or offset > size:
        raise make_error(StatusCode.OUT_OF_RANGE,
                         f"offset {offset} is past the end of the buffer of {size} bytes")
    n = size - offset if length is None else length
    if n < 0 or n > size - offset:
        raise make_error(StatusCode.OUT_OF_RANGE, f"{what} runs past the buffer's end")
    return n


def _gpu_sync(stream, event):
    """A call's CUDA ordering from `stream` / `event` (ints; stream 0 is the
    legacy default stream), or None when neither is given."""
    if stream is None and event is None:
        return None
    sync = _native.GpuSync()
    if stream is not None:
        sync.stream = _CUDA_STREAM_LEGACY if stream == 0 else stream
    if event is not None:
        if event == 0:
            raise ValueError("event=0 is not a CUDA event")
        sync.event = event
    return sync


def _block_info(keep, parent_key=None, engine_hash=None, engine_parent_hash=None,
                block_tokens=0, token_ids=(), model=""):
    """What the KV event stream reports for a block, as a BlockInfo; what
    it points at is appended to `keep`."""
    b = _native.BlockInfo()
    if parent_key is not None:
        pk = key_bytes(parent_key)
        keep.append(pk)
        b.parent_key = ctypes.cast(ctypes.c_char_p(pk), c_void_p)
        b.parent_key_len = len(pk)
    if engine_hash is not None:
        b.has_engine_hash = 1
        b.engine_hash = engine_hash
    if engine_parent_hash is not None:
        b.has_engine_parent_hash = 1
        b.engine_parent_hash = engine_parent_hash
    b.block_tokens = block_tokens
    if token_ids:
        tokens = (c_uint32 * len(token_ids))(*token_ids)
        keep.append(tokens)
        b.token_ids = ctypes.cast(tokens, ctypes.POINTER(c_uint32))
        b.n_token_ids = len(token_ids)
    if model:
        m = model.encode("utf-8")
        keep.append(m)
        b.model = m
    return b


def _block_from_dict(d, keep):
    """A batch item's event info from its dict (put's keywords) or None."""
    if d is None:
        return _native.BlockInfo()
    if not isinstance(d, dict):
        raise TypeError("blocks[i]: a dict or None")
    for k in d:
        if k not in _BLOCK_FIELDS:
            raise ValueError(f"blocks[i]: unknown key '{k}' ({', '.join(_BLOCK_FIELDS)})")
    return _block_info(keep, **d)


class BufferHandle:
    """Memory registered with Client.register_buffer."""

    __slots__ = ("id", "size", "gpu", "_view")

    def __init__(self, handle_id, size, gpu, view):
        self.id = handle_id
        self.size = size
        self.gpu = gpu
        self._view = view  # the registered buffer, held until unregistered

    def __repr__(self):
        return f"<shelf.BufferHandle id={self.id} size={self.size}{' gpu' if self.gpu else ''}>"


class Future:
    """An asynchronous batch. Dropping it waits for the batch to finish."""

    GET, PUT, GET_INTO = range(3)

    def __init__(self, client, handle, n, kind, keep):
        self._client = client  # the client outlives its futures
        self._handle = handle
        self._n = n
        self._kind = kind
        self._keep = keep  # what the batch reads or writes, until it is done

    def done(self):
        """True when the batch has finished (never blocks)."""
        return _native.future_poll(self._handle) == 1

    def wait(self, timeout=None):
        """Waits up to `timeout` seconds (None: until done); True when done."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        return _native.future_wait(self._handle, ms) == 1

    def _outcome(self):
        statuses = (c_int * self._n)()
        sizes = (c_size_t * self._n)()
        check(_native.future_result(self._handle, statuses, sizes, self._n))
        return statuses, sizes

    def result(self):
        """Waits, then: batch_get_async: list of bytes or None;
        batch_put_async: list of Status; batch_get_into_async: list of sizes
        or None. Raises when the whole batch failed."""
        statuses, sizes = self._outcome()
        if self._kind == Future.PUT:
            return [item_status(s) for s in statuses]
        if self._kind == Future.GET_INTO:
            return [sizes[i] if statuses[i] == 0 else None for i in range(self._n)]
        out = []
        data = c_void_p()
        size = c_size_t()
        for i in range(self._n):
            if statuses[i] != 0:
                out.append(None)
                continue
            check(_native.future_value(self._handle, i, byref(data), byref(size)))
            out.append(bytes_at(data.value, size.value))
        return out

    def statuses(self):
        """Waits, then one Status per item."""
        statuses, _ = self._outcome()
        return [item_status(s) for s in statuses]

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _native.future_free(handle)


def _started(client, rc, future, n, kind, keep):
    """The Future of a batch the C API started (or failed to start: then it
    is done with that status); raises only when no future came back."""
    if not future.value:
        check(rc)
    return Future(client, future.value, n, kind, keep)


class Client:
    """A connection to a Shelf cluster. Thread-safe."""

    def __init__(self, masters, *, secret="", timeout_ms=5000, allow_tcp=True, allow_shm=True,
                 verify_checksums=True, tls_ca="", transfer_threads=8, async_threads=4,
                 async_queue_max=256, tcp_streams_per_block=4, rdma_device="", rdma_port=1,
                 rdma_gid_index=-1, rdma_traffic_class=0, rdma_service_level=0,
                 rdma_pkey_index=0, tls_cert="", tls_key="", etcd_ca="", etcd_cert="",
                 etcd_key="", etcd_user_file="", shm_store_uid=-1, principal="",
                 principal_secret="", credentials="", rdma_store_pull_puts=False,
                 rdma_connections_max=256, rdma_gpu_registrations_max=64, data_tls=False,
                 data_tls_ca="", data_tls_cert="", data_tls_key="", session_tag_payload=False,
                 warm_shm_bytes=4 << 30):
        self._handle = None
        values = dict(locals())
        if isinstance(masters, str):
            masters = [m for m in masters.split(",") if m]
        options = _native.options_new()
        if not options:
            raise MemoryError("shelf_options_new")
        try:
            for m in masters:
                check(_native.options_add_master(options, m.encode("utf-8")))
            for keyword, field in _OPTION_FIELDS.items():
                check(_native.options_set(options, field.encode(), _option_text(values[keyword])))
            handle = c_void_p()
            check(_native.client_open(options, byref(handle)))
        finally:
            _native.options_free(options)
        self._handle = handle.value

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _native.client_destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Later calls raise FailedPreconditionError; calls in progress finish."""
        if self._handle:
            _native.client_close(self._handle)

    @staticmethod
    def _put_options(replicas, best_effort, prefer_local, spread_label, keep):
        o = _native.PutOptions()
        o.replicas = replicas
        o.best_effort = 1 if best_effort else 0
        o.prefer_local = 1 if prefer_local else 0
        if spread_label:
            label = spread_label.encode("utf-8")
            keep.append(label)
            o.spread_label = label
        return o

    # ------------------------------------------------------------ blocks

    def put(self, key, value, *, replicas=1, best_effort=False, prefer_local=False,
            spread_label="", timeout_ms=0, parent_key=None, engine_hash=None,
            engine_parent_hash=None, block_tokens=0, token_ids=(), model=""):
        """Stores `value` (any bytes-like object). Succeeds also when the key
        exists. The event keywords are what the KV event stream reports."""
        k = key_bytes(key)
        keep = []
        o = self._put_options(replicas, best_effort, prefer_local, spread_label, keep)
        block = _block_info(keep, parent_key, engine_hash, engine_parent_hash, block_tokens,
                            token_ids, model)
        o.block = ctypes.pointer(block)
        with BufferView(value, writable=False) as v:
            check(_native.put(self._handle, k, len(k), v.address, v.size, byref(o), timeout_ms))

    def get(self, key, *, timeout_ms=0):
        """The block as bytes, or None on a miss."""
        k = key_bytes(key)
        data = c_void_p()
        size = c_size_t()
        rc = _native.get(self._handle, k, len(k), byref(data), byref(size), timeout_ms)
        if rc == _NOT_FOUND:
            return None
        check(rc)
        try:
            return bytes_at(data.value, size.value)
        finally:
            _native.free(data)

    def get_into(self, key, target, *, offset=0, capacity=None, timeout_ms=0, stream=None,
                 event=None):
        """Reads the block straight into `target` (a writable buffer, or a
        BufferHandle) at `offset`; its size, or None on a miss."""
        k = key_bytes(key)
        size = c_size_t()
        if isinstance(target, BufferHandle):
            cap = capacity if capacity is not None else max(0, target.size - offset)
            sync = _gpu_sync(stream, event)
            rc = _native.get_into_buffer_gpu(self._handle, k, len(k), target.id, offset, cap,
                                             byref(size), byref(sync) if sync else None,
                                             timeout_ms)
        else:
            with BufferView(target, writable=True) as v:
                cap = _range_length(v.size, offset, capacity, "capacity")
                rc = _native.get_into(self._handle, k, len(k), v.address + offset, cap,
                                      byref(size), timeout_ms)
        if rc == _NOT_FOUND:
            return None
        check(rc)
        return size.value

    def put_from(self, key, source, *, offset=0, size=None, replicas=1, best_effort=False,
                 prefer_local=False, spread_label="", timeout_ms=0, stream=None, event=None):
        """Stores bytes [offset, offset+size) of `source` (a buffer or a
        BufferHandle) without copying them first."""
        k = key_bytes(key)
        keep = []
        o = self._put_options(replicas, best_effort, prefer_local, spread_label, keep)
        if isinstance(source, BufferHandle):
            sync = _gpu_sync(stream, event)
            if sync is not None:
                o.gpu = sync
            n = size if size is not None else max(0, source.size - offset)
            check(_native.put_from(self._handle, k, len(k), source.id, offset, n, byref(o),
                                   timeout_ms))
            return
        with BufferView(source, writable=False) as v:
            n = _range_length(v.size, offset, size, "size")
            check(_native.put(self._handle, k, len(k), v.address + offset, n, byref(o),
                              timeout_ms))

    def exists(self, keys, *, timeout_ms=0):
        """For one key: bool. For a sequence: list of bools."""
        single = isinstance(keys, (bytes, str))
        batch = KeyArray([key_bytes(keys)] if single else keys_bytes(keys))
        present = (c_uint8 * batch.n)()
        check(_native.exists(self._handle, batch.pointers, batch.lengths, batch.n, present,
                             timeout_ms))
        if single:
            return bool(present[0])
        return [bool(p) for p in present]

    def remove(self, key, *, timeout_ms=0):
        """True when removed, False when absent. FailedPreconditionError if pinned."""
        k = key_bytes(key)
        rc = _native.remove(self._handle, k, len(k), timeout_ms)
        if rc == _NOT_FOUND:
            return False
        check(rc)
        return True

    def batch_remove(self, keys, *, timeout_ms=0, return_statuses=False):
        """Removes 1..1024 keys in one master round trip: True where removed."""
        batch = KeyArray(keys_bytes(keys))
        statuses = (c_int * batch.n)()
        check(_native.batch_remove(self._handle, batch.pointers, batch.lengths, batch.n, statuses,
                                   timeout_ms))
        removed = [s == 0 for s in statuses]
        if return_statuses:
            return removed, [item_status(s) for s in statuses]
        return removed

    def match_prefix(self, keys, *, timeout_ms=0):
        """The number of leading keys present (read leases taken on them)."""
        batch = KeyArray(keys_bytes(keys))
        matched = c_size_t()
        check(_native.match_prefix(self._handle, batch.pointers, batch.lengths, batch.n,
                                   byref(matched), timeout_ms))
        return matched.value

    def list_keys(self, pattern=b"", *, cursor=b"", count=1024, timeout_ms=0):
        """One page of the keys matching `pattern` (glob; b'' for all) after
        `cursor`: (keys, next_cursor), next_cursor b'' on the last page."""
        pattern, cursor = bytes(pattern), bytes(cursor)
        packed, lens, cursor_out = c_void_p(), c_void_p(), c_void_p()
        n, cursor_len = c_size_t(), c_size_t()
        check(_native.list_keys(self._handle, pattern, len(pattern), cursor, len(cursor), count,
                                byref(packed), byref(lens), byref(n), byref(cursor_out),
                                byref(cursor_len), timeout_ms))
        try:
            sizes = ctypes.cast(lens, ctypes.POINTER(c_size_t))
            raw = ctypes.string_at(packed.value, sum(sizes[i] for i in range(n.value)))
            keys, at = [], 0
            for i in range(n.value):
                keys.append(raw[at:at + sizes[i]])
                at += sizes[i]
            return keys, ctypes.string_at(cursor_out.value, cursor_len.value)
        finally:
            for p in (packed, lens, cursor_out):
                _native.free(p)

    def batch_get(self, keys, *, timeout_ms=0, return_statuses=False):
        """A list of bytes, None where the block is missing or unreadable."""
        batch = KeyArray(keys_bytes(keys))
        data = (c_void_p * batch.n)()
        sizes = (c_size_t * batch.n)()
        statuses = (c_int * batch.n)()
        check(_native.batch_get(self._handle, batch.pointers, batch.lengths, batch.n, data, sizes,
                                statuses, timeout_ms))
        out = []
        for i in range(batch.n):
            out.append(bytes_at(data[i], sizes[i]) if statuses[i] == 0 else None)
            if data[i]:
                _native.free(data[i])
        if return_statuses:
            return out, [item_status(s) for s in statuses]
        return out

    def batch_get_into(self, keys, targets, *, timeout_ms=0, return_statuses=False):
        """Reads block i into targets[i]; sizes, None where missing or unreadable."""
        batch = KeyArray(keys_bytes(keys))
        views = [BufferView(t, writable=True) for t in targets]
        try:
            if len(views) != batch.n:
                raise ValueError("one target per key")
            buffers = (c_void_p * batch.n)(*[v.address for v in views])
            caps = (c_size_t * batch.n)(*[v.size for v in views])
            sizes = (c_size_t * batch.n)()
            statuses = (c_int * batch.n)()
            check(_native.batch_get_into(self._handle, batch.pointers, batch.lengths, buffers,
                                         caps, batch.n, sizes, statuses, timeout_ms))
        finally:
            for v in views:
                v.release()
        out = [sizes[i] if statuses[i] == 0 else None for i in range(batch.n)]
        if return_statuses:
            return out, [item_status(s) for s in statuses]
        return out

    def batch_put(self, keys, values, *, replicas=1, best_effort=False, prefer_local=False,
                  spread_label="", timeout_ms=0, blocks=None):
        """Stores values[i] under keys[i]; one Status per item. blocks[i], a
        dict of put's event keywords or None, describes item i."""
        batch = KeyArray(keys_bytes(keys))
        keep = []
        o = self._put_options(replicas, best_effort, prefer_local, spread_label, keep)
        if blocks is not None:
            blocks = list(blocks)
            if len(blocks) != batch.n:
                raise ValueError("blocks: one per key (None for none)")
            infos = (_native.BlockInfo * batch.n)(*[_block_from_dict(b, keep) for b in blocks])
            keep.append(infos)
            o.blocks = ctypes.cast(infos, ctypes.POINTER(_native.BlockInfo))
        views = [BufferView(v, writable=False) for v in values]
        try:
            if len(views) != batch.n:
                raise ValueError("one value per key")
            data = (c_void_p * batch.n)(*[v.address for v in views])
            sizes = (c_size_t * batch.n)(*[v.size for v in views])
            statuses = (c_int * batch.n)()
            check(_native.batch_put(self._handle, batch.pointers, batch.lengths, data, sizes,
                                    batch.n, byref(o), statuses, timeout_ms))
        finally:
            for v in views:
                v.release()
        return [item_status(s) for s in statuses]

    # ------------------------------------------------ registered buffers

    def register_buffer(self, target, size=None, gpu=False):
        """Registers a writable buffer (held until unregistered) or a raw
        address (int, with size=; e.g. a CUDA tensor's data_ptr() with
        gpu=True). Returns a BufferHandle."""
        view = None
        if isinstance(target, int):
            if size is None:
                raise ValueError("register_buffer: an address needs size=")
            address = target
        else:
            view = BufferView(target, writable=True)
            address = view.address
            if size is None:
                size = view.size
            elif size > view.size:
                view.release()
                raise make_error(StatusCode.OUT_OF_RANGE, "size runs past the buffer's end")
        handle = c_uint64()
        rc = _native.register_buffer(self._handle, address, size, 1 if gpu else 0, byref(handle))
        if rc != 0:
            if view is not None:
                view.release()
            check(rc)
        return BufferHandle(handle.value, size, bool(gpu), view)

    def unregister_buffer(self, handle):
        """Waits for calls using the buffer, then forgets it."""
        check(_native.unregister_buffer(self._handle, handle.id))
        if handle._view is not None:
            handle._view.release()

    def batch_get_into_async(self, keys, buffer, offsets, capacity, *, timeout_ms=0, stream=None,
                             event=None):
        """Starts reading block i into [offsets[i], offsets[i]+capacity) of a
        registered buffer; a Future whose result() is the sizes."""
        batch = KeyArray(keys_bytes(keys))
        offsets = list(offsets)
        if len(offsets) != batch.n:
            raise ValueError("one offset per key")
        handles = (c_uint64 * batch.n)(*([buffer.id] * batch.n))
        offs = (c_size_t * batch.n)(*offsets)
        caps = (c_size_t * batch.n)(*([capacity] * batch.n))
        sync = _gpu_sync(stream, event)
        future = c_void_p()
        rc = _native.batch_get_into_async_gpu(self._handle, batch.pointers, batch.lengths, handles,
                                              offs, caps, batch.n,
                                              byref(sync) if sync else None, timeout_ms,
                                              byref(future))
        return _started(self, rc, future, batch.n, Future.GET_INTO, [batch, buffer])

    def batch_get_async(self, keys, *, timeout_ms=0):
        """Starts batch_get on the client's async threads; returns a Future."""
        batch = KeyArray(keys_bytes(keys))
        future = c_void_p()
        rc = _native.batch_get_async(self._handle, batch.pointers, batch.lengths, batch.n,
                                     timeout_ms, byref(future))
        return _started(self, rc, future, batch.n, Future.GET, [batch])

    def batch_put_async(self, keys, values, *, replicas=1, timeout_ms=0):
        """Starts batch_put; the values stay referenced (and must not
        change) until done."""
        batch = KeyArray(keys_bytes(keys))
        views = [BufferView(v, writable=False) for v in values]
        if len(views) != batch.n:
            for v in views:
                v.release()
            raise ValueError("one value per key")
        keep = [batch, views]
        o = self._put_options(replicas, False, False, "", keep)
        data = (c_void_p * batch.n)(*[v.address for v in views])
        sizes = (c_size_t * batch.n)(*[v.size for v in views])
        future = c_void_p()
        rc = _native.batch_put_async(self._handle, batch.pointers, batch.lengths, data, sizes,
                                     batch.n, byref(o), timeout_ms, byref(future))
        return _started(self, rc, future, batch.n, Future.PUT, keep)

    def locate(self, keys, *, timeout_ms=0):
        """Where the chain of keys lives: {'cluster_blocks': n, 'nodes':
        [{'node_id', 'data_address', 'host_id', 'blocks', 'dram_blocks',
        'tiers': ['dram'|'ssd', ...]}]}, longest run first. No lease, no
        LRU move."""
        batch = KeyArray(keys_bytes(keys))
        text = c_void_p()
        check(_native.locate(self._handle, batch.pointers, batch.lengths, batch.n, byref(text),
                             timeout_ms))
        try:
            return json.loads(ctypes.string_at(text.value).decode("utf-8"))
        finally:
            _native.free(text)

    def stats(self):
        """The client's transfer counters (shelf::ClientStats) by name."""
        out = {}
        value = c_uint64()
        for name in _native.stat_names():
            check(_native.client_stat(self._handle, name.encode(), byref(value)))
            out[name] = value.value
        return out
