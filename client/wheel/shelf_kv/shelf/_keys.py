"""shelf.KeyNamespace and shelf.KeyBuilder: the content keys of the C++
shelf::KeyBuilder (docs/keys.md), built by libshelf through its C API."""

import re
from ctypes import byref, c_size_t, c_uint8, c_uint32, c_void_p

from . import _native
from ._errors import make_error

KEY_BYTES = 17
_DIGEST_BYTES_MAX = 64
_SERIALIZED_BYTES_MAX = 4096
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
# memoryview formats of integer token arrays, by item size.
_INTEGER_FORMATS = {"I", "i", "l", "q", "L", "Q", "H", "h"}


class KeyNamespace:
    """Everything that must differ for two caches to hold different bytes
    for the same tokens (docs/keys.md)."""

    def __init__(self, model="", dtype="", kv_layout="", tp_rank=0, tp_size=1, salt=None,
                 chunk_tokens=512):
        self.model = model
        self.dtype = dtype
        self.kv_layout = kv_layout
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.salt = salt
        self.chunk_tokens = chunk_tokens

    @property
    def salt(self):
        return self._salt

    @salt.setter
    def salt(self, value):
        self._salt = "" if value is None else value

    def _c_args(self):
        return (self.model.encode("utf-8"), self.dtype.encode("utf-8"),
                self.kv_layout.encode("utf-8"), self.tp_rank, self.tp_size,
                self.salt.encode("utf-8"), self.chunk_tokens)

    def __repr__(self):
        return (f"KeyNamespace(model={self.model!r}, dtype={self.dtype!r}, "
                f"kv_layout={self.kv_layout!r}, tp_rank={self.tp_rank}, "
                f"tp_size={self.tp_size}, salt={self.salt!r}, "
                f"chunk_tokens={self.chunk_tokens})")


def _tokens(tokens):
    """Token ids as a ctypes uint32 array: a sequence of ints or an integer
    array (numpy, array.array); ValueError for ids outside 0..2**32-1."""
    values = None
    try:
        view = memoryview(tokens)
    except TypeError:
        view = None
    if view is not None:
        fmt = view.format
        if fmt[:1] in "<=@!>":
            if fmt[0] in "!>":
                raise ValueError("big-endian token arrays are not supported")
            fmt = fmt[1:]
        if fmt not in _INTEGER_FORMATS:
            raise TypeError(f"token arrays need an integer dtype, not format '{fmt}'")
        if fmt == "I" and view.contiguous:
            return (c_uint32 * (view.nbytes // 4)).from_buffer_copy(view)
        values = view.cast("B").cast(fmt).tolist() if view.ndim != 1 else view.tolist()
    else:
        values = [int(t) for t in tokens]
    for i, v in enumerate(values):
        if v < 0 or v > 0xFFFFFFFF:
            raise ValueError(f"token id {v} at {i} is outside 0..2**32-1")
    return (c_uint32 * len(values))(*values)


def _copied_out(call, capacity):
    out = (c_uint8 * capacity)()
    size = c_size_t()
    rc = call(out, capacity, byref(size))
    if rc != 0:
        raise make_error(rc, _native.error_message())
    return bytes(out[:size.value])


class KeyBuilder:
    """Builds the content keys of one namespace; the same keys as the C++
    shelf::KeyBuilder. Raises ValueError for an invalid namespace."""

    def __init__(self, namespace):
        handle = c_void_p()
        if _native.key_builder_new(*namespace._c_args(), byref(handle)) != 0:
            raise ValueError(_native.error_message())
        self._handle = handle.value
        self._namespace = KeyNamespace(namespace.model, namespace.dtype, namespace.kv_layout,
                                       namespace.tp_rank, namespace.tp_size, namespace.salt,
                                       namespace.chunk_tokens)

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _native.key_builder_free(handle)

    @staticmethod
    def validate(namespace):
        """None when valid, else the reason."""
        handle = c_void_p()
        if _native.key_builder_new(*namespace._c_args(), byref(handle)) == 0:
            _native.key_builder_free(handle)
            return None
        return _native.error_message().replace("invalid key namespace: ", "", 1)

    @property
    def key_namespace(self):
        return self._namespace

    @property
    def namespace_digest(self):
        return _copied_out(lambda out, cap, size: _native.key_builder_digest(
            self._handle, out, cap, size), _DIGEST_BYTES_MAX)

    def block_keys(self, tokens):
        """One key (bytes) per full chunk of `tokens` (a sequence of ints or
        an integer array); a partial tail gets none."""
        t = _tokens(tokens)
        n = len(t) // self._namespace.chunk_tokens
        keys = (c_uint8 * (n * KEY_BYTES or 1))()
        count = c_size_t()
        rc = _native.block_keys(self._handle, t, len(t), keys, n * KEY_BYTES, byref(count))
        if rc != 0:
            raise make_error(rc, _native.error_message())
        raw = bytes(keys)
        return [raw[i * KEY_BYTES:(i + 1) * KEY_BYTES] for i in range(count.value)]

    def extend(self, previous_key, chunk):
        """The key of `chunk` following the block keyed `previous_key` (b''
        for the first)."""
        t = _tokens(chunk)
        if len(t) != self._namespace.chunk_tokens:
            raise ValueError(f"extend: the chunk holds {len(t)} tokens, not "
                             f"chunk_tokens={self._namespace.chunk_tokens}")
        previous = bytes(previous_key)
        key = (c_uint8 * KEY_BYTES)()
        if _native.key_extend(self._handle, previous, len(previous), t, key) != 0:
            raise ValueError("extend: previous_key is not a version-1 key")
        return bytes(key)

    @staticmethod
    def serialize_namespace(namespace):
        return _copied_out(lambda out, cap, size: _native.key_namespace_serialize(
            *namespace._c_args(), out, cap, size), _SERIALIZED_BYTES_MAX)

    @staticmethod
    def to_hex(key):
        return bytes(key).hex()

    @staticmethod
    def from_hex(text):
        if not _HEX.fullmatch(text):
            raise ValueError("not a hex string")
        return bytes.fromhex(text)


__all__ = ["KeyBuilder", "KeyNamespace"]
