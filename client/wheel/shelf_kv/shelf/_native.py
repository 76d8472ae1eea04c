"""libshelf.so loaded with ctypes, and the C API (shelf/shelf.h) as this
package calls it.

The library sits in the package's _libs/ folder with the shared libraries
it needs (found through its $ORIGIN run path); SHELF_LIBRARY names another
libshelf.so (a build tree's <build>/lib/libshelf.so). ctypes releases the
GIL around every call, so threads move blocks in parallel.
"""

import ctypes
import os
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int64, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load():
    path = os.environ.get("SHELF_LIBRARY") or os.path.join(_HERE, "_libs", "libshelf.so")
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"shelf: cannot load libshelf from {path}: {e}. The shelf_kv wheel carries it in "
            "shelf/_libs/; reinstall the wheel, or set SHELF_LIBRARY to a libshelf.so") from e


lib = _load()


class GpuSync(Structure):
    _fields_ = [("stream", c_void_p), ("event", c_void_p)]


class BlockInfo(Structure):
    _fields_ = [("parent_key", c_void_p), ("parent_key_len", c_size_t),
                ("has_engine_hash", c_int), ("engine_hash", c_uint64),
                ("has_engine_parent_hash", c_int), ("engine_parent_hash", c_uint64),
                ("block_tokens", c_uint32), ("token_ids", POINTER(c_uint32)),
                ("n_token_ids", c_size_t), ("model", c_char_p)]


class PutOptions(Structure):
    _fields_ = [("replicas", c_uint32), ("best_effort", c_int), ("prefer_local", c_int),
                ("spread_label", c_char_p), ("gpu", GpuSync), ("block", POINTER(BlockInfo)),
                ("blocks", POINTER(BlockInfo))]


def declare(name, restype, *argtypes):
    """libshelf's function `name`, with its C prototype set."""
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_P = c_void_p  # any pointer: arrays, buffers, handles
_SIZE_P = POINTER(c_size_t)

status_name = declare("shelf_status_name", c_char_p, c_int)
last_error = declare("shelf_last_error", c_char_p)
options_new = declare("shelf_options_new", _P)
options_free = declare("shelf_options_free", None, _P)
options_add_master = declare("shelf_options_add_master", c_int, _P, c_char_p)
options_set = declare("shelf_options_set", c_int, _P, c_char_p, c_char_p)
client_open = declare("shelf_client_open", c_int, _P, POINTER(c_void_p))
client_close = declare("shelf_client_close", None, _P)
client_destroy = declare("shelf_client_destroy", None, _P)
put = declare("shelf_put", c_int, _P, _P, c_size_t, _P, c_size_t, POINTER(PutOptions), c_int64)
get = declare("shelf_get", c_int, _P, _P, c_size_t, POINTER(c_void_p), _SIZE_P, c_int64)
batch_get = declare("shelf_batch_get", c_int, _P, _P, _P, c_size_t, _P, _P, _P, c_int64)
get_into = declare("shelf_get_into", c_int, _P, _P, c_size_t, _P, c_size_t, _SIZE_P, c_int64)
exists = declare("shelf_exists", c_int, _P, _P, _P, c_size_t, POINTER(c_uint8), c_int64)
remove = declare("shelf_remove", c_int, _P, _P, c_size_t, c_int64)
batch_remove = declare("shelf_batch_remove", c_int, _P, _P, _P, c_size_t, _P, c_int64)
match_prefix = declare("shelf_match_prefix", c_int, _P, _P, _P, c_size_t, _SIZE_P, c_int64)
batch_put = declare("shelf_batch_put", c_int, _P, _P, _P, _P, _P, c_size_t, POINTER(PutOptions),
                     _P, c_int64)
batch_get_into = declare("shelf_batch_get_into", c_int, _P, _P, _P, _P, _P, c_size_t, _P, _P,
                          c_int64)
client_stat_name = declare("shelf_client_stat_name", c_char_p, c_size_t)
client_stat = declare("shelf_client_stat", c_int, _P, c_char_p, POINTER(c_uint64))
free = declare("shelf_free", None, _P)
register_buffer = declare("shelf_register_buffer", c_int, _P, _P, c_size_t, c_int,
                           POINTER(c_uint64))
unregister_buffer = declare("shelf_unregister_buffer", c_int, _P, c_uint64)
put_from = declare("shelf_put_from", c_int, _P, _P, c_size_t, c_uint64, c_size_t, c_size_t,
                    POINTER(PutOptions), c_int64)
get_into_buffer_gpu = declare("shelf_get_into_buffer_gpu", c_int, _P, _P, c_size_t, c_uint64,
                               c_size_t, c_size_t, _SIZE_P, POINTER(GpuSync), c_int64)
batch_get_into_async_gpu = declare("shelf_batch_get_into_async_gpu", c_int, _P, _P, _P, _P, _P,
                                    _P, c_size_t, POINTER(GpuSync), c_int64, POINTER(c_void_p))
locate = declare("shelf_locate", c_int, _P, _P, _P, c_size_t, POINTER(c_void_p), c_int64)
batch_get_async = declare("shelf_batch_get_async", c_int, _P, _P, _P, c_size_t, c_int64,
                           POINTER(c_void_p))
batch_put_async = declare("shelf_batch_put_async", c_int, _P, _P, _P, _P, _P, c_size_t,
                           POINTER(PutOptions), c_int64, POINTER(c_void_p))
future_value = declare("shelf_future_value", c_int, _P, c_size_t, POINTER(c_void_p), _SIZE_P)
list_keys = declare("shelf_list_keys", c_int, _P, _P, c_size_t, _P, c_size_t, c_size_t,
                     POINTER(c_void_p), POINTER(c_void_p), _SIZE_P, POINTER(c_void_p), _SIZE_P,
                     c_int64)
key_builder_new = declare("shelf_key_builder_new", c_int, c_char_p, c_char_p, c_char_p, c_uint32,
                           c_uint32, c_char_p, c_uint32, POINTER(c_void_p))
key_builder_free = declare("shelf_key_builder_free", None, _P)
block_keys = declare("shelf_block_keys", c_int, _P, _P, c_size_t, _P, c_size_t, _SIZE_P)
key_extend = declare("shelf_key_extend", c_int, _P, _P, c_size_t, _P, _P)
key_builder_digest = declare("shelf_key_builder_digest", c_int, _P, _P, c_size_t, _SIZE_P)
key_namespace_serialize = declare("shelf_key_namespace_serialize", c_int, c_char_p, c_char_p,
                                   c_char_p, c_uint32, c_uint32, c_char_p, c_uint32, _P,
                                   c_size_t, _SIZE_P)
future_poll = declare("shelf_future_poll", c_int, _P)
future_wait = declare("shelf_future_wait", c_int, _P, c_int64)
future_result = declare("shelf_future_result", c_int, _P, _P, _P, c_size_t)
future_free = declare("shelf_future_free", None, _P)


def error_message():
    """The calling thread's last error message from libshelf."""
    m = last_error()
    return m.decode("utf-8", "replace") if m else ""


def stat_names():
    names = []
    while True:
        n = client_stat_name(len(names))
        if n is None:
            return names
        names.append(n.decode())
