"""The paged KV cache, its CSR page table, the host page pool, and BatchAttention.

Layouts (include/tessera/paged_kv.h): NHD pages are (num_pages, page_size, heads_kv,
head_dim), HND pages (num_pages, heads_kv, page_size, head_dim). The page table is CSR,
int32: kv_indptr (batch + 1), kv_indices (kv_indptr[-1]), kv_last_page_len (batch).
"""

import numpy as np

from . import _C
from ._arrays import adapter_for, dtype_name
from ._checks import describe, index_array, integer, lengths
from ._errors import InvalidArgumentError
from ._ops import _config, _flag, _is_torch, _scale, _softcap, _window


class PagedKVCache:
    """Views of the K and V pages (any framework, cpu or cuda). Nothing is copied."""

    def __init__(self, k_pages, v_pages, layout="NHD"):
        if layout not in ("NHD", "HND"):
            raise ValueError(f"layout: expected 'NHD' or 'HND', got {layout!r}")
        self.k_pages = k_pages
        self.v_pages = v_pages
        self.layout = layout

    @classmethod
    def from_combined(cls, kv_pages, layout="NHD"):
        """Views of one tensor with a K/V axis: (num_pages, 2, <page layout>)."""
        if len(kv_pages.shape) != 5 or kv_pages.shape[1] != 2:
            raise ValueError(f"kv_pages: expected 5 dims (num_pages, 2, ...), got shape {tuple(kv_pages.shape)}")
        return cls(kv_pages[:, 0], kv_pages[:, 1], layout)

    @classmethod
    def zeros(cls, num_pages, page_size, heads_kv, head_dim, dtype="fp16", layout="NHD", like=None):
        """A zero-filled cache in like's framework and on its device (numpy when like is None)."""
        if layout not in ("NHD", "HND"):
            raise ValueError(f"layout: expected 'NHD' or 'HND', got {layout!r}")
        num_pages, page_size, heads_kv, head_dim = (
            integer(num_pages, "num_pages", 0), integer(page_size, "page_size", 0), integer(heads_kv, "heads_kv", 0),
            integer(head_dim, "head_dim", 0))
        shape = ((num_pages, page_size, heads_kv, head_dim) if layout == "NHD"
                 else (num_pages, heads_kv, page_size, head_dim))
        if like is None:
            like = np.empty(0, np.float32)
        fw = adapter_for(like, "like")
        k = fw.empty(like, shape, dtype_name(dtype))
        v = fw.empty(like, shape, dtype_name(dtype))
        k[...] = 0
        v[...] = 0
        return cls(fw.wrap(k), fw.wrap(v), layout)

    @property
    def num_pages(self):
        return int(self.k_pages.shape[0])

    @property
    def page_size(self):
        return int(self.k_pages.shape[1 if self.layout == "NHD" else 2])

    @property
    def heads_kv(self):
        return int(self.k_pages.shape[2 if self.layout == "NHD" else 1])

    @property
    def head_dim(self):
        return int(self.k_pages.shape[3])

    def __repr__(self):
        return (f"PagedKVCache(num_pages={self.num_pages}, page_size={self.page_size}, heads_kv={self.heads_kv}, "
                f"head_dim={self.head_dim}, layout={self.layout!r})")


class PageTable:
    """The CSR page table: three int32 arrays (host numpy arrays, or arrays on the device)."""

    def __init__(self, kv_indptr, kv_indices, kv_last_page_len, page_size=0):
        # Lists / tuples of integers become host int32 arrays here (each value checked), as every
        # other index argument; arrays are kept as given (a device table stays on its device).
        def host(a, name):
            return index_array(a, name) if isinstance(a, (list, tuple)) else a
        self.kv_indptr = host(kv_indptr, "kv_indptr")
        self.kv_indices = host(kv_indices, "kv_indices")
        self.kv_last_page_len = host(kv_last_page_len, "kv_last_page_len")
        self.page_size = integer(page_size, "page_size", 0)

    @classmethod
    def _from_tuple(cls, t):
        indptr, indices, last, page_size = t
        return cls(np.asarray(indptr, np.int32), np.asarray(indices, np.int32), np.asarray(last, np.int32), page_size)

    @property
    def batch(self):
        return int(self.kv_last_page_len.shape[0])

    def _host(self, a):
        return adapter_for(a, "page table").to_numpy(a) if not isinstance(a, np.ndarray) else a

    def kv_lens(self):
        """Tokens held by each request, as a numpy int32 array (computed on the host)."""
        if not self.page_size:
            raise ValueError("page_size: expected the table's page size (> 0), got 0")
        indptr = self._host(self.kv_indptr).astype(np.int64)
        last = self._host(self.kv_last_page_len).astype(np.int64)
        n = indptr[1:] - indptr[:-1]
        return np.where(n > 0, (n - 1) * self.page_size + last, 0).astype(np.int32)

    def to(self, like):
        """The same table with its arrays in like's framework, on like's device."""
        fw = adapter_for(like, "like")
        conv = (lambda a, name: fw.index_array(index_array(self._host(a), name), like))
        return PageTable(conv(self.kv_indptr, "kv_indptr"), conv(self.kv_indices, "kv_indices"),
                         conv(self.kv_last_page_len, "kv_last_page_len"), self.page_size)

    def __repr__(self):
        return f"PageTable(batch={self.batch}, pages={int(self.kv_indices.shape[0])}, page_size={self.page_size})"


def block_table_to_page_table(block_table, kv_lens, page_size):
    """CSR table from a (batch, max_pages) int32 block table and per-request token counts."""
    bt = block_table
    if isinstance(bt, (list, tuple, np.ndarray)):
        bt = index_array(bt, "block_table")
    fw = adapter_for(bt, "block_table")
    if fw.name != "numpy":
        bt = fw.to_numpy(bt)
    lens = lengths(kv_lens, "kv_lens")
    return PageTable._from_tuple(_C.block_table_to_page_table(bt, lens, integer(page_size, "page_size")))


class PagePool:
    """Host-side allocator of page indices (deterministic: lowest free page first)."""

    def __init__(self, num_pages, page_size):
        self._pool = _C.PagePool(integer(num_pages, "num_pages"), integer(page_size, "page_size"))

    num_pages = property(lambda self: self._pool.num_pages)
    page_size = property(lambda self: self._pool.page_size)
    free_pages = property(lambda self: self._pool.free_pages)

    def create_sequence(self):
        return self._pool.create_sequence()

    def append_tokens(self, seq, num_tokens):
        self._pool.append_tokens(integer(seq, "seq"), integer(num_tokens, "num_tokens"))

    def free_sequence(self, seq):
        self._pool.free_sequence(integer(seq, "seq"))

    def has_sequence(self, seq):
        return self._pool.has_sequence(integer(seq, "seq"))

    def length(self, seq):
        return self._pool.length(integer(seq, "seq"))

    def pages(self, seq):
        return np.asarray(self._pool.pages(integer(seq, "seq")), dtype=np.int32)

    def pages_needed(self, seq, num_tokens):
        return self._pool.pages_needed(integer(seq, "seq"), integer(num_tokens, "num_tokens"))

    def page_table(self, seqs):
        """CSR table (host numpy arrays) of the given sequences, in that order."""
        return PageTable._from_tuple(self._pool.page_table(lengths(seqs, "seqs")))

    def __repr__(self):
        return f"PagePool(num_pages={self.num_pages}, page_size={self.page_size}, free_pages={self.free_pages})"


def _host_index(fw, values, like, name):
    """Lists / tuples of integers and host numpy arrays, checked (int32 values), as arrays of
    like's framework on its device; other arrays as they are (the extension checks them)."""
    if isinstance(values, (list, tuple, np.ndarray)):
        values = index_array(values, name)
        if fw.name != "numpy":
            values = fw.index_array(values, like)
    return values


def _check_cache(cache):
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache: expected a PagedKVCache, got {_type_name(cache)}")


def _check_table(table):
    if not isinstance(table, PageTable):
        raise TypeError(f"table: expected a PageTable, got {_type_name(table)}")


def _type_name(x):
    return "None" if x is None else type(x).__qualname__


def _table_arrays(table, fw, like, keep):
    """The table's arrays for the extension. Copies made here (a host table for a device cache)
    are appended to `keep`, which the caller holds until the call returns: a raw descriptor
    does not keep its array alive."""
    arrs = []
    for a, name in ((table.kv_indptr, "kv_indptr"), (table.kv_indices, "kv_indices"),
                    (table.kv_last_page_len, "kv_last_page_len")):
        if fw.name != "numpy" and isinstance(a, np.ndarray):
            a = fw.index_array(index_array(a, name), like)  # host table, device cache: copy across
            keep.append(a)
        arrs.append(fw.to_c(a))
    return arrs


def append_paged_kv(cache, table, append_indptr, new_k, new_v):
    """Write new tokens' K/V into their pages.

    `table` describes every request after the append; request b's new tokens are rows
    append_indptr[b] .. append_indptr[b+1] of new_k/new_v (total_new, heads_kv, head_dim)
    and become its last positions.
    """
    _check_cache(cache)
    _check_table(table)
    fw = adapter_for(cache.k_pages, "cache.k_pages")
    like = cache.k_pages
    append_indptr = _host_index(fw, append_indptr, like, "append_indptr")
    keep = []
    indptr, indices, last = _table_arrays(table, fw, like, keep)
    _C.append_paged_kv(fw.to_c(cache.k_pages), fw.to_c(cache.v_pages), cache.layout, indptr, indices, last,
                       fw.to_c(append_indptr), fw.to_c(new_k), fw.to_c(new_v), fw.stream(like),
                       _config["num_threads"])


def copy_pages(cache, src_pages, dst_pages):
    """Copy whole pages, K and V: page dst[i] := page src[i] (prefix sharing, copy-on-write)."""
    _check_cache(cache)
    fw = adapter_for(cache.k_pages, "cache.k_pages")
    like = cache.k_pages
    src = _host_index(fw, src_pages, like, "src_pages")
    dst = _host_index(fw, dst_pages, like, "dst_pages")
    _C.copy_pages(fw.to_c(cache.k_pages), fw.to_c(cache.v_pages), cache.layout, fw.to_c(src), fw.to_c(dst),
                  fw.stream(like), _config["num_threads"])


class BatchAttention:
    """Batch attention over a paged KV cache, mixing prefill chunks and decode tokens.

    ``plan(q_lens, kv_lens, like=q_or_cache_array)`` builds the work list on the host and
    stores it in a workspace allocated in like's framework on like's device (kept and reused
    by later plans while large enough; pass ``workspace=`` to supply your own). ``run(q,
    cache, table)`` allocates the output and runs; with CUDA it does no host synchronisation.
    q is packed (total_q, heads_q, head_dim); request b's rows follow request b-1's.
    """

    def __init__(self, heads_q, heads_kv, head_dim, dtype="bf16", layout="NHD", page_size=16, *, causal=False,
                 window=(-1, -1), softcap=0.0, scale=None, return_lse=False, split="auto", kv_chunk_tokens=0,
                 max_requests=256, max_q_tokens=8192):
        wl, wr = _window(window)
        self.return_lse = _flag(return_lse, "return_lse")
        for value, name, allowed in ((layout, "layout", "'NHD' or 'HND'"),
                                     (split, "split", "'auto', 'disabled' or 'fixed'")):
            if not isinstance(value, str):
                raise TypeError(f"{name}: expected {allowed}, got {describe(value)}")
        self.layout = layout
        heads_q = integer(heads_q, "heads_q")
        self._impl = _C.BatchAttention(heads_q, integer(heads_kv, "heads_kv"), integer(head_dim, "head_dim"),
                                       dtype_name(dtype), layout, integer(page_size, "page_size"),
                                       _scale(scale), _flag(causal, "causal"), wl, wr, _softcap(softcap),
                                       self.return_lse, split, integer(kv_chunk_tokens, "kv_chunk_tokens"),
                                       integer(max_requests, "max_requests"),
                                       integer(max_q_tokens, "max_q_tokens"))
        self.heads_q = heads_q
        self.workspace = None
        self._device = None
        self._facts = {}

    def _num_sms(self, kind, index):
        key = (kind, index)
        if key not in self._facts:
            self._facts[key] = _C.query_device(kind, index)
        return self._facts[key]

    def workspace_size(self, like=None, num_sms=None):
        """Bytes of workspace for this configuration on like's device (cpu when None)."""
        kind, index = ("cpu", 0) if like is None else adapter_for(like, "like").device(like)
        sms = self._num_sms(kind, index) if num_sms is None else integer(num_sms, "num_sms")
        return self._impl.workspace_size(kind, index, sms)

    def plan(self, q_lens, kv_lens, *, like=None, workspace=None, num_sms=None):
        """Plan a batch: q_lens[b] query tokens, kv_lens[b] cached tokens (including this step's)."""
        if workspace is not None:
            like = workspace
            fw = adapter_for(workspace, "workspace")
        else:
            if like is None:
                like = np.empty(0, np.uint8)
            fw = adapter_for(like, "like")
        kind, index = fw.device(like)
        sms = self._num_sms(kind, index) if num_sms is None else integer(num_sms, "num_sms")
        ql = lengths(q_lens, "q_lens")
        kl = lengths(kv_lens, "kv_lens")
        if workspace is None:
            need = self._impl.workspace_size(kind, index, sms)
            ws = self.workspace
            if ws is None or self._device != (kind, index) or int(ws.shape[0]) < need:
                ws = fw.empty(like, (max(need, 1),), "uint8")
            workspace = ws
        self._impl.plan(ql, kl, kind, index, sms, _workspace_c(workspace), fw.stream(like))
        self.workspace = workspace
        self._device = (kind, index)

    def run(self, q, cache, table, out=None, lse=None):
        """out (like q) and, when configured with return_lse, lse (heads_q, total_q) fp32."""
        if self.workspace is None:
            raise ValueError("workspace: expected plan() to have been called before run(), got no plan")
        if lse is not None and not self.return_lse:  # it would be ignored, never written
            raise InvalidArgumentError("lse: expected None (this BatchAttention was made with return_lse=False), "
                                       f"got {describe(lse)}", "invalid_argument", "lse")
        fw = adapter_for(q)
        _check_cache(cache)
        _check_table(table)
        if out is None:
            out = fw.empty_like(q)
        if self.return_lse and lse is None:
            lse = fw.empty(q, (int(q.shape[1]), int(q.shape[0])) if len(q.shape) == 3 else (1,), "fp32")
        keep = []
        indptr, indices, last = _table_arrays(table, fw, q, keep)
        self._impl.run(fw.to_c(q), fw.to_c(cache.k_pages), fw.to_c(cache.v_pages), cache.layout, indptr, indices,
                       last, fw.to_c(out), None if lse is None else fw.to_c(lse), _workspace_c(self.workspace),
                       fw.stream(q), _config["num_threads"])
        if self.return_lse:
            return fw.wrap(out), fw.wrap(lse)
        return fw.wrap(out)

    planned_batch = property(lambda self: self._impl.planned_batch)
    planned_q_tokens = property(lambda self: self._impl.planned_q_tokens)
    planned_work_items = property(lambda self: self._impl.planned_work_items)

    def planned_splits(self, request):
        return self._impl.planned_splits(integer(request, "request"))


def _workspace_c(ws):
    """The workspace for the extension: the array itself (DLPack), or for torch a raw
    (data_ptr, bytes, device type, device id) descriptor, which is much cheaper to pass."""
    if _is_torch(ws) and ws.device.type in ("cpu", "cuda") and ws.is_contiguous():
        return (ws.data_ptr(), ws.numel() * ws.element_size(), 2 if ws.device.type == "cuda" else 1,
                ws.device.index or 0)
    return ws
