"""One SGLang host pool as pages of Shelf objects, for shelf.sglang.

A pool's get_page_buffer_meta(host_indices) gives, per page, the pointers
and sizes of the page's pieces in the pool's layout. A page of one or two
pieces (an MLA page_first page; an MHA page_first or page_first_direct
page's K and V) is stored as one object per piece and moves in place; a
page of more (layer_first: a piece per layer; a Mamba state's temporal and
conv pieces) is gathered into one object through scratch memory, one copy
each way."""

import ctypes
from typing import List, Optional, Sequence

BATCH_ITEMS_MAX = 1024  # libshelf's keys per batch call


def view(address: int, size: int) -> memoryview:
    """The bytes [address, address + size) of a host pool, as a buffer."""
    return memoryview((ctypes.c_ubyte * size).from_address(address))


def slices(n: int, size: int = BATCH_ITEMS_MAX):
    for begin in range(0, n, size):
        yield begin, min(n, begin + size)


class PagePool:
    """A host pool's pages on the cluster, under `prefix`."""

    def __init__(self, client, counters: dict, prefix: str, pool, name: Optional[str],
                 register: bool):
        import torch  # SGLang's host indices are torch tensors

        self.client, self.counters, self.pool = client, counters, pool
        self.page_size = getattr(pool, "page_size", 1) or 1
        # The KV pool is registered once, and read in place through its
        # handle; side pools (several tensors, pieces of several sizes)
        # are registered by the client per call.
        self.handle, self.base = None, 0
        kv = getattr(pool, "kv_buffer", None)
        if register and kv is not None:
            self.base = kv.data_ptr()
            self.handle = client.register_buffer(self.base, size=kv.numel() * kv.element_size())
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(self.page_size, dtype=torch.int64))
        self.piece_sizes: List[int] = list(sizes)
        tag = "" if name is None else f"_{name}"
        if len(ptrs) == 1:
            self.suffixes = [f"{tag}_kv"]
        elif len(ptrs) == 2:
            self.suffixes = [f"{tag}_k", f"{tag}_v"]
        else:
            self.suffixes = [f"{tag}_lf"]
        self.prefix = prefix
        self.page_bytes = sum(self.piece_sizes)

    @property
    def pieces(self) -> int:
        return len(self.piece_sizes)

    def gathered(self) -> bool:
        return len(self.suffixes) == 1 and self.pieces > 1

    def objects(self, keys: Sequence[str]) -> List[str]:
        return [f"{self.prefix}{k}{s}" for k in keys for s in self.suffixes]

    def object_sizes(self) -> List[int]:
        return [self.page_bytes] if self.gathered() else list(self.piece_sizes)

    def _pointers(self, host_indices, pages: int) -> List[int]:
        ptrs, sizes = self.pool.get_page_buffer_meta(host_indices)
        if len(ptrs) != pages * self.pieces or list(sizes[:self.pieces]) != self.piece_sizes:
            raise ValueError(f"{len(ptrs)} pieces for {pages} pages: the pool's layout changed")
        return ptrs

    # -------------------------------------------------------------- exists

    def present(self, keys: Sequence[str]) -> List[bool]:
        """Per page: every object of it is present."""
        objects = self.objects(keys)
        found: List[bool] = []
        try:
            for begin, end in slices(len(objects)):
                found.extend(self.client.exists(objects[begin:end]))
        except Exception:
            self.counters["errors"] += 1
            return [False] * len(keys)
        per = len(self.suffixes)
        return [all(found[p * per:(p + 1) * per]) for p in range(len(keys))]

    def leading_pages(self, keys: Sequence[str]) -> int:
        """The leading pages present: one MatchPrefix per 1,024 objects."""
        objects = self.objects(keys)
        matched = 0
        try:
            for begin, end in slices(len(objects)):
                n = self.client.match_prefix(objects[begin:end])
                matched += n
                if n < end - begin:
                    break
        except Exception:
            self.counters["errors"] += 1
            return 0
        return matched // len(self.suffixes)

    # ------------------------------------------------------------ get, set

    def get(self, keys: Sequence[str], host_indices, timeout_ms: int) -> List[bool]:
        """Reads pages into the pool; per page, True when every object of it
        was read whole."""
        pages = len(keys)
        ptrs = self._pointers(host_indices, pages)
        objects = self.objects(keys)
        if self.gathered():
            scratch = bytearray(pages * self.page_bytes)
            whole = memoryview(scratch)
            targets = [whole[p * self.page_bytes:(p + 1) * self.page_bytes] for p in range(pages)]
            loaded = [s == self.page_bytes for s in self._get_into(objects, targets, timeout_ms)]
            base = ctypes.addressof(ctypes.c_char.from_buffer(scratch))
            for p in range(pages):
                if loaded[p]:
                    self._scatter(ptrs[p * self.pieces:(p + 1) * self.pieces],
                                  base + p * self.page_bytes)
            return loaded
        sizes = self.object_sizes() * pages
        if self.handle is not None and len(set(self.piece_sizes)) == 1:
            got = self._get_registered(objects, [q - self.base for q in ptrs], timeout_ms)
        else:
            got = self._get_into(objects, [view(q, n) for q, n in zip(ptrs, sizes)], timeout_ms)
        per = len(self.suffixes)
        return [all(got[i] == sizes[i] for i in range(p * per, (p + 1) * per))
                for p in range(pages)]

    def put(self, keys: Sequence[str], host_indices) -> List[bool]:
        """Stores pages of the pool; per page, True when every object of it
        is stored."""
        pages = len(keys)
        ptrs = self._pointers(host_indices, pages)
        if self.gathered():
            scratch = bytearray(pages * self.page_bytes)
            base = ctypes.addressof(ctypes.c_char.from_buffer(scratch))
            for p in range(pages):
                self._gather(ptrs[p * self.pieces:(p + 1) * self.pieces], base + p * self.page_bytes)
            whole = memoryview(scratch)
            values = [whole[p * self.page_bytes:(p + 1) * self.page_bytes] for p in range(pages)]
        else:
            values = [view(q, n) for q, n in zip(ptrs, self.object_sizes() * pages)]
        ok = self._put(self.objects(keys), values)
        per = len(self.suffixes)
        return [all(ok[p * per:(p + 1) * per]) for p in range(pages)]

    def _gather(self, pieces: Sequence[int], dst: int) -> None:
        for q, n in zip(pieces, self.piece_sizes):
            ctypes.memmove(dst, q, n)
            dst += n

    def _scatter(self, pieces: Sequence[int], src: int) -> None:
        for q, n in zip(pieces, self.piece_sizes):
            ctypes.memmove(q, src, n)
            src += n

    # ------------------------------------------------- calls on the cluster

    def _get_registered(self, objects, offsets, timeout_ms) -> List[int]:
        """Sizes read into the registered pool at `offsets`; 0 where not."""
        out: List[int] = []
        for begin, end in slices(len(objects)):
            try:
                got = self.client.batch_get_into_async(
                    objects[begin:end], self.handle, offsets[begin:end], self.piece_sizes[0],
                    timeout_ms=timeout_ms).result()
            except Exception:
                self.counters["errors"] += 1
                got = [None] * (end - begin)
            out.extend(0 if g is None else g for g in got)
        return out

    def _get_into(self, objects, targets, timeout_ms) -> List[int]:
        out: List[int] = []
        for begin, end in slices(len(objects)):
            try:
                got = self.client.batch_get_into(objects[begin:end], targets[begin:end],
                                                 timeout_ms=timeout_ms)
            except Exception:
                self.counters["errors"] += 1
                got = [None] * (end - begin)
            out.extend(0 if g is None else g for g in got)
        return out

    def _put(self, objects, values) -> List[bool]:
        out: List[bool] = []
        for begin, end in slices(len(objects)):
            try:
                out.extend(bool(s) for s in self.client.batch_put(objects[begin:end],
                                                                  values[begin:end]))
            except Exception:
                self.counters["errors"] += 1
                out.extend([False] * (end - begin))
        return out

    def close(self) -> None:
        if self.handle is not None:
            self.client.unregister_buffer(self.handle)
            self.handle = None
