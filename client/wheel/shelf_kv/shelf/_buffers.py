"""Zero-copy access to Python buffers: the address and length of any
C-contiguous buffer-protocol object (bytes, bytearray, memoryview, numpy
arrays, mmap), held through CPython's PyObject_GetBuffer for as long as a
call uses it, as the system module holds them."""

import ctypes
from ctypes import c_char_p, c_int, c_ssize_t, c_void_p

_PyBUF_WRITABLE = 0x0001
_PyBUF_ANY_CONTIGUOUS = 0x0080 | 0x0010 | 0x0008  # with PyBUF_STRIDES and PyBUF_ND


class _PyBuffer(ctypes.Structure):
    # Py_buffer (Include/pybuffer.h), unchanged since CPython 3.3.
    _fields_ = [("buf", c_void_p), ("obj", c_void_p), ("len", c_ssize_t),
                ("itemsize", c_ssize_t), ("readonly", c_int), ("ndim", c_int),
                ("format", c_char_p), ("shape", c_void_p), ("strides", c_void_p),
                ("suboffsets", c_void_p), ("internal", c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), c_int]
_get_buffer.restype = c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.argtypes = [c_void_p, c_ssize_t]
_new_bytes.restype = ctypes.py_object
_bytes_address = ctypes.pythonapi.PyBytes_AsString
_bytes_address.argtypes = [ctypes.py_object]
_bytes_address.restype = c_void_p


def bytes_at(address, size):
    """A new bytes object holding [address, address + size): allocated
    with the GIL, filled without it (ctypes.memmove releases it), so
    threads reading blocks at once do not queue on the GIL for their
    copies. The object is this thread's alone until returned."""
    out = _new_bytes(None, size)
    if size:
        ctypes.memmove(_bytes_address(out), address, size)
    return out


class BufferView:
    """A held view of `obj`: .address and .size; released by release() or
    when collected. TypeError (or BufferError) when `obj` is not a
    contiguous buffer, or not writable when `writable`."""

    __slots__ = ("_view", "_held", "address", "size")

    def __init__(self, obj, writable):
        self._view = _PyBuffer()
        self._held = False
        flags = _PyBUF_ANY_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        _get_buffer(obj, ctypes.byref(self._view), flags)  # raises on failure
        self._held = True
        self.address = self._view.buf or 0
        self.size = self._view.len

    def release(self):
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))

    def __del__(self):
        self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def key_bytes(key):
    """Keys are bytes; str keys are taken as their UTF-8 bytes."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytearray):
        return bytes(key)
    raise TypeError(f"a key is bytes or str, not {type(key).__name__}")


def keys_bytes(keys):
    if isinstance(keys, (bytes, str)):
        raise TypeError("expected a sequence of keys, got a single key")
    return [key_bytes(k) for k in keys]


class KeyArray:
    """A batch's keys as the C API takes them: .pointers (const void* const*)
    and .lengths (const size_t*), valid while this object lives."""

    __slots__ = ("keys", "pointers", "lengths", "n")

    def __init__(self, keys):
        self.keys = keys
        self.n = len(keys)
        self.pointers = (c_char_p * self.n)(*keys)
        self.lengths = (ctypes.c_size_t * self.n)(*[len(k) for k in keys])
