"""Mooncake Store's Python API (mooncake.store) over a Shelf cluster: the
wheel's shelf.mooncake, over libshelf's Mooncake C API (shelf/mooncake.h)
through ctypes, with the system module's names, arguments, defaults and
return codes. docs/mooncake-compat.md lists what each method does on
Shelf."""

import ctypes
import enum
import json
from ctypes import (POINTER, Structure, byref, c_char_p, c_int, c_int64, c_size_t, c_uint64,
                    c_void_p)

from . import _native
from ._buffers import BufferView, bytes_at

_P = c_void_p
_SIZE_P = POINTER(c_size_t)
_DEFAULT_SEGMENT_BYTES = 16 << 20
_INVALID_PARAMS = -600
_NOT_SUPPORTED = -1012


class _Config(Structure):
    _fields_ = [("replica_num", c_int64), ("nof_replica_num", c_int64),
                ("dfs_replica_num", c_int64), ("with_soft_pin", c_int),
                ("soft_pin_action", c_int), ("has_soft_pin_ttl_ms", c_int),
                ("soft_pin_ttl_ms", c_int64), ("with_hard_pin", c_int), ("data_type", c_int),
                ("preferred_segments", POINTER(c_char_p)), ("n_preferred_segments", c_size_t),
                ("preferred_nof_segments", POINTER(c_char_p)),
                ("n_preferred_nof_segments", c_size_t), ("preferred_segment", c_char_p),
                ("prefer_alloc_in_same_node", c_int), ("has_group_ids", c_int),
                ("group_ids", POINTER(c_char_p)), ("n_group_ids", c_size_t)]


class _Extras(Structure):
    _fields_ = [("enable_ssd_offload", c_int), ("ssd_offload_path", c_char_p),
                ("tenant_id", c_char_p), ("enable_client_http_server", c_int),
                ("client_http_port", c_int64)]


_CFG = POINTER(_Config)
_store_new = _native.declare("shelf_mc_store_new", _P)
_store_free = _native.declare("shelf_mc_store_free", None, _P)
_setup = _native.declare("shelf_mc_setup", c_int, _P, c_char_p, c_char_p, c_int64, c_int64, c_char_p,
                  c_char_p, c_char_p, POINTER(_Extras))
_setup_config = _native.declare("shelf_mc_setup_config", c_int, _P, _P, _P, c_size_t)
_setup_dummy = _native.declare("shelf_mc_setup_dummy", c_int, _P, c_int64, c_int64, c_char_p)
_close = _native.declare("shelf_mc_close", c_int, _P)
_health_check = _native.declare("shelf_mc_health_check", c_int, _P)
_hostname = _native.declare("shelf_mc_hostname", c_int, _P, POINTER(c_void_p))
_put = _native.declare("shelf_mc_put", c_int, _P, _P, c_size_t, _P, c_size_t, _CFG, c_int)
_put_batch = _native.declare("shelf_mc_put_batch", c_int, _P, _P, _P, _P, _P, c_size_t, _CFG)
_get = _native.declare("shelf_mc_get", c_int, _P, _P, c_size_t, POINTER(c_void_p), _SIZE_P)
_batch_get = _native.declare("shelf_mc_batch_get", c_int, _P, _P, _P, c_size_t, _P, _P, _P)
_batch_is_exist = _native.declare("shelf_mc_batch_is_exist", c_int, _P, _P, _P, c_size_t, _P)
_remove = _native.declare("shelf_mc_remove", c_int, _P, _P, c_size_t, c_int)
_batch_remove = _native.declare("shelf_mc_batch_remove", c_int, _P, _P, _P, c_size_t, c_int, _P)
_remove_matching = _native.declare("shelf_mc_remove_matching", c_int64, _P, c_char_p, c_int, c_int)
_replica_desc = _native.declare("shelf_mc_batch_get_replica_desc", c_int, _P, _P, _P, c_size_t,
                         POINTER(c_void_p))
_get_size = _native.declare("shelf_mc_get_size", c_int64, _P, _P, c_size_t)
_register = _native.declare("shelf_mc_register_buffer", c_int, _P, c_uint64, c_int64)
_unregister = _native.declare("shelf_mc_unregister_buffer", c_int, _P, c_uint64)
_batch_get_into = _native.declare("shelf_mc_batch_get_into", c_int, _P, _P, _P, c_size_t, _P, _P, _P)
_batch_put_from = _native.declare("shelf_mc_batch_put_from", c_int, _P, _P, _P, c_size_t, _P, _P, _CFG,
                           _P)
_put_from_multi = _native.declare("shelf_mc_batch_put_from_multi", c_int, _P, _P, _P, c_size_t,
                           c_size_t, _P, _P, c_size_t, _P, _P, _CFG, _P)
_get_into_multi = _native.declare("shelf_mc_batch_get_into_multi", c_int, _P, _P, _P, c_size_t,
                           c_size_t, _P, _P, c_size_t, _P, _P, _P)
_get_into_ranges = _native.declare("shelf_mc_get_into_ranges", c_int, _P, c_size_t, _P, _P, _P, _P, _P,
                            _P, _P, _P, _P, _P)
_host_alloc = _native.declare("shelf_mc_host_alloc", c_int, c_int64, POINTER(c_uint64))
_host_free = _native.declare("shelf_mc_host_free", c_int, c_uint64)


class SoftPinAction(enum.IntEnum):
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    UNKNOWN = 0
    KVCACHE = 1


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


# The enums' values in the module's scope, as Mooncake's binding exports them.
globals().update({m.name: m for e in (SoftPinAction, ObjectDataType, ReplicaStatus) for m in e})


class ReplicaDescriptor:
    """One replica of a key as batch_get_replica_desc reports it."""

    __slots__ = ("status", "node_id", "transport_endpoint", "_memory")

    def __init__(self, memory, node_id, transport_endpoint, status):
        self._memory = memory
        self.node_id = node_id
        self.transport_endpoint = transport_endpoint
        self.status = ReplicaStatus(status)

    def is_memory_replica(self):
        return self._memory

    def is_disk_replica(self):
        return not self._memory

    def is_local_disk_replica(self):
        return False

    def __repr__(self):
        return f"ReplicaDescriptor({'memory' if self._memory else 'disk'} on {self.node_id})"


class MooncakeHostMemAllocator:
    """Host memory for an engine's KV pool (SGLang's allocator_type
    "mooncake"): shared memory a same-host store copies puts from."""

    def alloc(self, size):
        """The int address of `size` bytes of zeroed, shared host memory."""
        address = c_uint64()
        if _host_alloc(size, byref(address)) != 0:
            raise RuntimeError(_native.error_message())
        return address.value

    def free(self, ptr):
        """Unmaps what alloc returned: 0, or -1 for an address alloc did not return."""
        return _host_free(ptr)


class ReplicateConfig:
    """Mooncake's ReplicateConfig, its fields and defaults."""

    __slots__ = ("replica_num", "nof_replica_num", "dfs_replica_num", "with_soft_pin",
                 "preferred_segments", "preferred_nof_segments", "preferred_segment",
                 "prefer_alloc_in_same_node", "group_ids", "_soft_pin_action",
                 "soft_pin_ttl_ms", "with_hard_pin", "_data_type")

    def __init__(self, *, replica_num=1, with_soft_pin=False, preferred_segments=None,
                 preferred_segment="", prefer_alloc_in_same_node=False):
        self.replica_num = replica_num
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.with_soft_pin = with_soft_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_nof_segments = []
        self.preferred_segment = preferred_segment
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.group_ids = None
        self._soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms = None
        self.with_hard_pin = False
        self._data_type = ObjectDataType.UNKNOWN

    @property
    def soft_pin_action(self):
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, action):
        self._soft_pin_action = SoftPinAction(action)

    @property
    def data_type(self):
        return self._data_type

    @data_type.setter
    def data_type(self, data_type):
        self._data_type = ObjectDataType(data_type)

    def __str__(self):
        return (f"ReplicateConfig: {{ replica_num: {self.replica_num}, with_soft_pin: "
                f"{'true' if self.with_soft_pin else 'false'}, preferred_segment: "
                f"{self.preferred_segment} }}")

    def _c(self, keep):
        """The C struct; what it points at is appended to `keep`."""
        c = _Config()
        c.replica_num = self.replica_num
        c.nof_replica_num = self.nof_replica_num
        c.dfs_replica_num = self.dfs_replica_num
        c.with_soft_pin = 1 if self.with_soft_pin else 0
        c.soft_pin_action = int(self._soft_pin_action)
        if self.soft_pin_ttl_ms is not None:
            c.has_soft_pin_ttl_ms = 1
            c.soft_pin_ttl_ms = self.soft_pin_ttl_ms
        c.with_hard_pin = 1 if self.with_hard_pin else 0
        c.data_type = int(self._data_type)
        c.preferred_segments, c.n_preferred_segments = _strings(self.preferred_segments, keep)
        c.preferred_nof_segments, c.n_preferred_nof_segments = _strings(
            self.preferred_nof_segments, keep)
        segment = _text(self.preferred_segment)
        keep.append(segment)
        c.preferred_segment = segment
        c.prefer_alloc_in_same_node = 1 if self.prefer_alloc_in_same_node else 0
        if self.group_ids is not None:
            c.has_group_ids = 1
            c.group_ids, c.n_group_ids = _strings(self.group_ids, keep)
        return c


# The default ReplicateConfig's C struct, built once: most calls pass none.
_DEFAULT_KEEP = []
_DEFAULT_C = None


def _config_c(config, keep):
    """`config`'s C struct (the shared default's when None)."""
    global _DEFAULT_C
    if config is not None:
        return config._c(keep)
    if _DEFAULT_C is None:
        _DEFAULT_C = ReplicateConfig()._c(_DEFAULT_KEEP)
    return _DEFAULT_C


class BufferHandle(bytes):
    """A block read with get_buffer: its bytes, with Mooncake's ptr() and
    size()."""

    def ptr(self):
        return ctypes.cast(ctypes.c_char_p(self), c_void_p).value or 0

    def size(self):
        return len(self)


def _text(s):
    if isinstance(s, bytes):
        return s
    if not isinstance(s, str):
        raise TypeError(f"expected str, not {type(s).__name__}")
    return s.encode("utf-8")


def _strings(items, keep):
    arr = (c_char_p * len(items))(*[_text(i) for i in items])
    keep.append(arr)
    return ctypes.cast(arr, POINTER(c_char_p)), len(items)


class _Keys:
    """Keys as the C API takes them (str as UTF-8, or bytes)."""

    __slots__ = ("keys", "pointers", "lengths", "n")

    def __init__(self, keys):
        if isinstance(keys, (str, bytes)):
            raise TypeError("expected a list of keys, got a single key")
        self.keys = [_text(k) for k in keys]
        self.n = len(self.keys)
        self.pointers = (c_char_p * self.n)(*self.keys)
        self.lengths = (c_size_t * self.n)(*[len(k) for k in self.keys])


def _array(ctype, values):
    values = list(values)
    return (ctype * len(values))(*values), len(values)


def _not_supported(*args, **kwargs):
    return _NOT_SUPPORTED


class MooncakeDistributedStore:
    """Mooncake's MooncakeDistributedStore over a Shelf cluster: 0 or a
    negative Mooncake ErrorCode from every call that can fail."""

    def __init__(self):
        self._store = _store_new()

    def __del__(self):
        store, self._store = getattr(self, "_store", None), None
        if store:
            _store_free(store)

    def setup(self, local_hostname, metadata_server=None,
              global_segment_size=_DEFAULT_SEGMENT_BYTES,
              local_buffer_size=_DEFAULT_SEGMENT_BYTES, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
              client_http_port=9300):
        """Connects to the Shelf master(s) named by master_server_addr; the
        dict form takes Mooncake's JSON config keys. 0, or a negative code."""
        del engine  # Mooncake's TransferEngine: Shelf has its own transports
        if isinstance(local_hostname, dict):
            if metadata_server is not None:
                raise TypeError("setup(config) takes the dict alone")
            items = [(str(k), str(v)) for k, v in local_hostname.items() if v is not None]
            names, n = _array(c_char_p, [_text(k) for k, _ in items])
            values, _ = _array(c_char_p, [_text(v) for _, v in items])
            return _setup_config(self._store, names, values, n)
        if metadata_server is None:
            raise TypeError("setup() needs metadata_server")
        extras = _Extras(1 if enable_ssd_offload else 0, _text(ssd_offload_path),
                         _text(tenant_id), 1 if enable_client_http_server else 0,
                         client_http_port)
        return _setup(self._store, _text(local_hostname), _text(metadata_server),
                      global_segment_size, local_buffer_size, _text(protocol),
                      _text(rdma_devices), _text(master_server_addr), byref(extras))

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """A client like any other; server_address names the Shelf master(s)."""
        return _setup_dummy(self._store, mem_pool_size, local_buffer_size,
                            _text(server_address))

    def close(self):
        return _close(self._store)

    def health_check(self):
        return _health_check(self._store)

    def get_hostname(self):
        out = c_void_p()
        if _hostname(self._store, byref(out)) != 0:
            return ""
        try:
            return ctypes.string_at(out.value).decode("utf-8")
        finally:
            _native.free(out)

    # ------------------------------------------------------------ values

    def _put(self, key, value, config, replace):
        keep = []
        c = _config_c(config, keep)
        k = _text(key)
        with BufferView(value, writable=False) as v:
            return _put(self._store, k, len(k), v.address, v.size, byref(c), replace)

    def put(self, key, value, config=None):
        return self._put(key, value, config, 0)

    def put_parts(self, key, *parts, config=None):
        """The parts joined into one block."""
        joined = b"".join(bytes(memoryview(p)) for p in parts)
        return self._put(key, joined, config, 0)

    def upsert(self, key, value, config=None):
        return self._put(key, value, config, 1)

    def put_batch(self, keys, values, config=None):
        k = _Keys(keys)
        views = [BufferView(v, writable=False) for v in values]
        try:
            if len(views) != k.n:
                return _INVALID_PARAMS
            keep = []
            c = _config_c(config, keep)
            data, _ = _array(c_void_p, [v.address for v in views])
            sizes, _ = _array(c_size_t, [v.size for v in views])
            return _put_batch(self._store, k.pointers, k.lengths, data, sizes, k.n, byref(c))
        finally:
            for v in views:
                v.release()

    def get(self, key):
        """The block, b"" on a miss or an error."""
        k = _text(key)
        data, size = c_void_p(), c_size_t()
        if _get(self._store, k, len(k), byref(data), byref(size)) != 0:
            return b""
        try:
            return bytes_at(data.value, size.value)
        finally:
            _native.free(data)

    def _batch_get(self, keys):
        k = _Keys(keys)
        data = (c_void_p * k.n)()
        sizes = (c_size_t * k.n)()
        codes = (c_int * k.n)()
        _batch_get(self._store, k.pointers, k.lengths, k.n, data, sizes, codes)
        out = []
        for i in range(k.n):
            out.append(bytes_at(data[i], sizes[i]) if codes[i] == 0 else None)
            if data[i]:
                _native.free(data[i])
        return out

    def get_batch(self, keys):
        return [b"" if v is None else v for v in self._batch_get(keys)]

    def get_buffer(self, key):
        k = _text(key)
        data, size = c_void_p(), c_size_t()
        if _get(self._store, k, len(k), byref(data), byref(size)) != 0:
            return None
        try:
            return BufferHandle(bytes_at(data.value, size.value))
        finally:
            _native.free(data)

    def batch_get_buffer(self, keys):
        return [None if v is None else BufferHandle(v) for v in self._batch_get(keys)]

    def is_exist(self, key):
        kb = _text(key)
        k = c_char_p(kb)
        out = c_int()
        _batch_is_exist(self._store, byref(k), byref(c_size_t(len(kb))), 1, byref(out))
        return out.value

    def batch_is_exist(self, keys):
        k = _Keys(keys)
        out = (c_int * k.n)()
        _batch_is_exist(self._store, k.pointers, k.lengths, k.n, out)
        return list(out)

    def remove(self, key, force=False):
        k = _text(key)
        return _remove(self._store, k, len(k), 1 if force else 0)

    def batch_remove(self, keys, force=False):
        k = _Keys(keys)
        out = (c_int * k.n)()
        _batch_remove(self._store, k.pointers, k.lengths, k.n, 1 if force else 0, out)
        return list(out)

    def remove_all(self, force=False):
        """Removes every key; the count removed."""
        return _remove_matching(self._store, b"", 0, 1 if force else 0)

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the keys in which the regex (RE2 syntax) is found; the count removed."""
        return _remove_matching(self._store, _text(regex_pattern), 1, 1 if force else 0)

    def batch_get_replica_desc(self, keys):
        """Per key present: one ReplicaDescriptor per store holding it."""
        k = _Keys(keys)
        text = c_void_p()
        if _replica_desc(self._store, k.pointers, k.lengths, k.n, byref(text)) != 0:
            return {}
        try:
            raw = json.loads(ctypes.string_at(text.value).decode("utf-8"))
        finally:
            _native.free(text)
        return {bytes.fromhex(key).decode("utf-8"): [
            ReplicaDescriptor(d["memory"], d["node_id"], d["transport_endpoint"], d["status"])
            for d in replicas] for key, replicas in raw.items()}

    def get_size(self, key):
        k = _text(key)
        return _get_size(self._store, k, len(k))

    # ------------------------------------------------ registered buffers

    def register_buffer(self, buffer_ptr, size):
        return _register(self._store, buffer_ptr, size)

    def unregister_buffer(self, buffer_ptr):
        return _unregister(self._store, buffer_ptr)

    def get_into(self, key, buffer_ptr, size):
        kb = _text(key)
        k = c_char_p(kb)
        out = c_int64()
        _batch_get_into(self._store, byref(k), byref(c_size_t(len(kb))), 1,
                        byref(c_uint64(buffer_ptr)), byref(c_int64(size)), byref(out))
        return out.value

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        k = _Keys(keys)
        ptrs, n_ptrs = _array(c_uint64, buffer_ptrs)
        lens, n_lens = _array(c_int64, sizes)
        if n_ptrs != k.n or n_lens != k.n:
            return [_INVALID_PARAMS] * k.n
        out = (c_int64 * k.n)()
        _batch_get_into(self._store, k.pointers, k.lengths, k.n, ptrs, lens, out)
        return list(out)

    def put_from(self, key, buffer_ptr, size, config=None):
        kb = _text(key)
        k = c_char_p(kb)
        keep = []
        c = _config_c(config, keep)
        out = c_int()
        _batch_put_from(self._store, byref(k), byref(c_size_t(len(kb))), 1,
                        byref(c_uint64(buffer_ptr)), byref(c_int64(size)), byref(c), byref(out))
        return out.value

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        k = _Keys(keys)
        ptrs, n_ptrs = _array(c_uint64, buffer_ptrs)
        lens, n_lens = _array(c_int64, sizes)
        if n_ptrs != k.n or n_lens != k.n:
            return [_INVALID_PARAMS] * k.n
        keep = []
        c = _config_c(config, keep)
        out = (c_int * k.n)()
        _batch_put_from(self._store, k.pointers, k.lengths, k.n, ptrs, lens, byref(c), out)
        return list(out)

    @staticmethod
    def _pieces(all_buffer_ptrs, all_sizes):
        """The lists of a multi-buffer call, flattened as the C API takes
        them: (lists, counts, values) for the pointers, then the sizes."""
        ptr_lists = [list(p) for p in all_buffer_ptrs]
        size_lists = [list(s) for s in all_sizes]
        return (len(ptr_lists), _array(c_size_t, [len(p) for p in ptr_lists])[0],
                _array(c_uint64, [p for ptrs in ptr_lists for p in ptrs])[0],
                len(size_lists), _array(c_size_t, [len(s) for s in size_lists])[0],
                _array(c_int64, [n for sizes in size_lists for n in sizes])[0])

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        k = _Keys(keys)
        keep = []
        c = _config_c(config, keep)
        out = (c_int * k.n)()
        written = _put_from_multi(self._store, k.pointers, k.lengths, k.n,
                                  *self._pieces(all_buffer_ptrs, all_sizes), byref(c), out)
        return list(out[:written])

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        del prefer_alloc_in_same_node  # reads pick the nearest replica anyway
        k = _Keys(keys)
        out = (c_int * k.n)()
        written = _get_into_multi(self._store, k.pointers, k.lengths, k.n,
                                  *self._pieces(all_buffer_ptrs, all_sizes), out)
        return list(out[:written])

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Copies byte ranges of blocks into registered buffers; per range
        the bytes copied or a negative code. A key whose lists do not match
        fails whole (one code per range, at least one), as the layer fails
        it; the rest go to libshelf."""
        buffer_ptrs = list(buffer_ptrs)
        all_keys = [list(k) for k in all_keys]
        dst_all, src_all, len_all = list(all_dst_offsets), list(all_src_offsets), list(all_sizes)
        nb = len(all_keys)
        shapes = len(buffer_ptrs) == nb and len(dst_all) == nb and len(src_all) == nb and \
            len(len_all) == nb
        result = [[None] * len(keys) for keys in all_keys]
        sent = []  # (b, i) of each key sent, in order
        buffers, per_buffer, keys, ranges, dst, src, lens = [], [], [], [], [], [], []
        for b, bkeys in enumerate(all_keys):
            buffer_shape = shapes and len(dst_all[b]) == len(bkeys) and \
                len(src_all[b]) == len(bkeys) and len(len_all[b]) == len(bkeys)
            count = 0
            for i, key in enumerate(bkeys):
                n = list(len_all[b][i]) if buffer_shape else []
                if not buffer_shape or len(dst_all[b][i]) != len(n) or \
                        len(src_all[b][i]) != len(n):
                    result[b][i] = [_INVALID_PARAMS] * max(len(n), 1)
                    continue
                keys.append(key)
                ranges.append(len(n))
                dst.extend(dst_all[b][i])
                src.extend(src_all[b][i])
                lens.extend(n)
                sent.append((b, i))
                count += 1
            if count:
                buffers.append(buffer_ptrs[b])
                per_buffer.append(count)
        if sent:
            k = _Keys(keys)
            out = (c_int64 * (len(lens) + k.n))()
            out_per_key = (c_size_t * k.n)()
            _get_into_ranges(self._store, len(buffers), _array(c_uint64, buffers)[0],
                             _array(c_size_t, per_buffer)[0], k.pointers, k.lengths,
                             _array(c_size_t, ranges)[0], _array(c_int64, dst)[0],
                             _array(c_int64, src)[0], _array(c_int64, lens)[0], out,
                             out_per_key)
            at = 0
            for j, (b, i) in enumerate(sent):
                m = out_per_key[j]
                result[b][i] = list(out[at:at + m])
                at += m
        return result

    # Not supported: NOT_SUPPORTED (-1012), whatever the arguments.
    init_all = staticmethod(_not_supported)
    put_from_with_metadata = staticmethod(_not_supported)
    put_tensor = staticmethod(_not_supported)
    pub_tensor = staticmethod(_not_supported)


__all__ = ["BufferHandle", "MooncakeDistributedStore", "MooncakeHostMemAllocator",
           "ObjectDataType", "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig",
           "SoftPinAction"]
