"""SGLang's host KV pools as HiCache's storage backends see them
(python/sglang/srt/mem_cache/pool_host/mha.py and mla.py in
sgl-project/sglang): a kv_buffer tensor in one of the host layouts, its
page_size, and get_page_buffer_meta(indices), which turns a page's token
indices into the pointers and sizes of the page's pieces in that layout.
Only what a storage backend reads is here; the layouts and the pointer
arithmetic follow SGLang's. Used by test_sglang.py."""

import torch


class MHAHostPool:
    """MHATokenToKVPoolHost: K and V of every layer."""

    def __init__(self, layout, pages=16, page_size=4, layers=3, heads=2, head_dim=8,
                 dtype=torch.float16):
        self.layout, self.page_size, self.layer_num = layout, page_size, layers
        self.head_num, self.head_dim, self.dtype = heads, head_dim, dtype
        self.page_num, self.size = pages, pages * page_size
        if layout == "layer_first":
            dims = (2, layers, self.size, heads, head_dim)
        elif layout == "page_first":
            dims = (2, self.size, layers, heads, head_dim)
        elif layout == "page_first_direct":
            dims = (2, pages, layers, page_size, heads, head_dim)
        else:
            raise ValueError(layout)
        self.kv_buffer = torch.zeros(dims, dtype=dtype)

    def _itemsize(self):
        return torch.tensor([], dtype=self.dtype).element_size()

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        base, item = self.kv_buffer.data_ptr(), self._itemsize()
        token = self.head_num * self.head_dim * item
        v_offset = self.layer_num * self.size * token
        indices = indices.tolist()
        ptrs = []
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(self.layer_num):
                    k = base + indices[i] * token + layer * self.size * token
                    ptrs += [k, k + v_offset]
            size = self.page_size * token
        else:  # page_first, page_first_direct: a page's K (and V) in one piece
            for i in range(0, len(indices), self.page_size):
                k = base + indices[i] * self.layer_num * token
                ptrs += [k, k + v_offset]
            size = self.layer_num * self.page_size * token
        return ptrs, [size] * len(ptrs)


class MLAHostPool:
    """MLATokenToKVPoolHost: one latent vector per token and layer."""

    def __init__(self, layout, pages=16, page_size=4, layers=3, dim=24, dtype=torch.float16):
        self.layout, self.page_size, self.layer_num, self.dim = layout, page_size, layers, dim
        self.dtype, self.page_num, self.size = dtype, pages, pages * page_size
        if layout == "layer_first":
            dims = (layers, self.size, 1, dim)
        elif layout == "page_first":
            dims = (self.size, layers, 1, dim)
        elif layout == "page_first_direct":
            dims = (pages, layers, page_size, 1, dim)
        else:
            raise ValueError(layout)
        self.kv_buffer = torch.zeros(dims, dtype=dtype)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        base = self.kv_buffer.data_ptr()
        token = self.dim * torch.tensor([], dtype=self.dtype).element_size()
        indices = indices.tolist()
        ptrs = []
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(self.layer_num):
                    ptrs.append(base + indices[i] * token + layer * self.size * token)
            size = self.page_size * token
        else:
            for i in range(0, len(indices), self.page_size):
                ptrs.append(base + indices[i] * self.layer_num * token)
            size = self.layer_num * self.page_size * token
        return ptrs, [size] * len(ptrs)


class MambaHostPool:
    """A Mamba state pool (pool_host/mamba.py): one slot per request state
    (page_size 1), each a temporal state and conv states of other sizes,
    in tensors of their own."""

    def __init__(self, slots=8, temporal_bytes=96, conv_bytes=(40, 24)):
        self.page_size = 1
        self.temporal = torch.zeros((slots, temporal_bytes), dtype=torch.uint8)
        self.conv_buffer = [torch.zeros((slots, n), dtype=torch.uint8) for n in conv_bytes]

    def buffers(self):
        return [self.temporal, *self.conv_buffer]

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in indices.tolist():
            for b in self.buffers():
                ptrs.append(b[i].data_ptr())
                sizes.append(b.shape[1])
        return ptrs, sizes

    def slot_bytes(self, slot):
        return torch.cat([b[slot] for b in self.buffers()])


def page_indices(pages, page_size):
    """Host indices of whole pages, as SGLang's controller passes them."""
    return torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in pages])


def page_bytes(pool, page, page_size):
    """Every byte of one page, gathered from its pieces: for comparisons."""
    ptrs, sizes = pool.get_page_buffer_meta(torch.arange(page * page_size,
                                                         (page + 1) * page_size))
    flat = pool.kv_buffer.reshape(-1).view(torch.uint8)
    base = pool.kv_buffer.data_ptr()
    return torch.cat([flat[p - base:p - base + n] for p, n in zip(ptrs, sizes)])
