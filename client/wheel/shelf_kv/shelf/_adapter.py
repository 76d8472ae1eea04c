"""shelf.StorageAdapter: the shape engines' hierarchical caches use for an
external tier, over shelf.Client. A miss, and any failure of the cluster,
reads as "not there" (the engine computes instead) and is noted in
last_error; only misuse (a bad key, a closed client) raises."""

import threading

from ._buffers import key_bytes, keys_bytes
from ._client import Client
from ._errors import Error, StatusCode, make_error

BATCH_ITEMS_MAX = 1024
_MISUSE = (int(StatusCode.INVALID_ARGUMENT), int(StatusCode.FAILED_PRECONDITION))


def _slices(n):
    for begin in range(0, n, BATCH_ITEMS_MAX):
        yield begin, min(n, begin + BATCH_ITEMS_MAX)


class StorageAdapter:
    """A storage backend with the shape engines' hierarchical caches use:
    get/set/exists and batch forms, keys as str or bytes, values as any
    bytes-like object. A miss, or a cluster that cannot answer, reads as
    not there (None / False / 0) and is noted in last_error; misuse (a bad
    key, a closed client) raises."""

    def __init__(self, client=None, *, masters=None, key_prefix=None, replicas=1, timeout_ms=0):
        if client is None:
            if masters is None:
                raise ValueError("StorageAdapter needs client or masters")
            client = Client([masters] if isinstance(masters, str) else list(masters))
        self._client = client
        self._prefix = b"" if key_prefix is None else key_bytes(key_prefix)
        self._replicas = replicas
        self._timeout_ms = timeout_ms
        self._mu = threading.Lock()
        self._last_error = ""

    @property
    def client(self):
        return self._client

    @property
    def last_error(self):
        """The most recent failure other than a miss, for logs ('' if none)."""
        with self._mu:
            return self._last_error

    def _key(self, key):
        return self._prefix + key_bytes(key)

    def _keys(self, keys):
        return [self._prefix + k for k in keys_bytes(keys)]

    def _failed(self, code, text):
        """A failure: misuse raises; anything else is noted, reads as absent."""
        if code in _MISUSE:
            raise make_error(code, text)
        if code != int(StatusCode.NOT_FOUND):
            with self._mu:
                self._last_error = f"{StatusCode(code).name}: {text}"
        return False

    def _call(self, fn):
        """fn()'s result, or None after a failure _failed accepts."""
        try:
            return fn()
        except Error as e:
            self._failed(e.code, e.message)
            return None

    def _item(self, status):
        return status.ok or self._failed(int(status.code), status.message)

    def get(self, key, target=None):
        """The value as bytes (or read into `target` and returned), None when absent."""
        k = self._key(key)
        if target is not None:
            size = self._call(lambda: self._client.get_into(k, target,
                                                            timeout_ms=self._timeout_ms))
            return target if size is not None else None
        return self._call(lambda: self._client.get(k, timeout_ms=self._timeout_ms))

    def set(self, key, value):
        """True when stored (or already there)."""
        k = self._key(key)
        return self._call(lambda: self._client.put(k, value, replicas=self._replicas,
                                                   timeout_ms=self._timeout_ms) or True) is True

    def exists(self, key):
        k = self._key(key)
        return self._call(lambda: self._client.exists(k, timeout_ms=self._timeout_ms)) is True

    def delete(self, key):
        """True when removed."""
        k = self._key(key)
        return self._call(lambda: self._client.remove(k, timeout_ms=self._timeout_ms)) is True

    def batch_get(self, keys, targets=None):
        """One value (or target) or None per key."""
        k = self._keys(keys)
        if targets is not None:
            targets = list(targets)
            if len(targets) != len(k):
                raise ValueError("batch_get: one target per key")
        out = []
        for begin, end in _slices(len(k)):
            chunk = k[begin:end]
            if targets is not None:
                got = self._call(lambda: self._client.batch_get_into(
                    chunk, targets[begin:end], timeout_ms=self._timeout_ms,
                    return_statuses=True))
            else:
                got = self._call(lambda: self._client.batch_get(
                    chunk, timeout_ms=self._timeout_ms, return_statuses=True))
            if got is None:
                out.extend([None] * len(chunk))
                continue
            values, statuses = got
            for i, s in enumerate(statuses):
                if not self._item(s):
                    out.append(None)
                else:
                    out.append(targets[begin + i] if targets is not None else values[i])
        return out

    def batch_set(self, keys, values):
        """True when every value was stored."""
        k = self._keys(keys)
        values = list(values)
        if len(values) != len(k):
            raise ValueError("batch_set: one value per key")
        stored = True
        for begin, end in _slices(len(k)):
            statuses = self._call(lambda: self._client.batch_put(
                k[begin:end], values[begin:end], replicas=self._replicas,
                timeout_ms=self._timeout_ms))
            if statuses is None:
                stored = False
                continue
            for s in statuses:
                stored = self._item(s) and stored
        return stored

    def batch_exists(self, keys):
        """The number of leading keys present."""
        k = self._keys(keys)
        total = 0
        for begin, end in _slices(len(k)):
            matched = self._call(lambda: self._client.match_prefix(
                k[begin:end], timeout_ms=self._timeout_ms))
            if matched is None:
                return total
            total += matched
            if matched != end - begin:
                break
        return total
