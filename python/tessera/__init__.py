"""tessera: attention kernels (dense, ragged, paged, batch prefill/decode) for numpy, torch,
cupy and jax arrays, on the CPU backend or CUDA.

    import numpy as np, tessera
    q = np.random.randn(2, 128, 8, 64).astype(np.float32)
    k = v = np.random.randn(2, 128, 2, 64).astype(np.float32)
    out, lse = tessera.attention(q, k, v, causal=True, return_lse=True)

Arrays are read through DLPack (or numpy's buffer protocol); outputs are allocated in the
caller's framework on the caller's device, and CUDA work runs on the framework's current
stream. See python/README.md.
"""

from . import _C, _checks
from ._errors import (BackendError, DTypeError, Error, InvalidArgumentError, OutOfMemoryError, PlanMismatchError,
                      UnsupportedError, WorkspaceTooSmallError, ERROR_TYPES as _ERROR_TYPES)
from ._ops import (attention, attention_backward, attention_fp8, attention_ragged, attention_ragged_backward,
                   attention_ragged_fp8, get_num_threads, merge_states, set_num_threads)
from ._paged import (BatchAttention, PagedKVCache, PagePool, PageTable, append_paged_kv, block_table_to_page_table,
                     copy_pages)

_C._set_error_types(_ERROR_TYPES)

__version__ = _C.version()
built_with_cuda = bool(_C.built_with_cuda)


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a CUDA device is present."""
    return bool(_C.cuda_available())


def query_device(device="cpu", index=0) -> int:
    """SMs of a CUDA device, or worker threads of the CPU, as the batch planner sees them."""
    if not isinstance(device, str):
        raise TypeError(f"device: expected 'cpu' or 'cuda', got {_checks.describe(device)}")
    return _C.query_device(device, _checks.integer(index, "index", 0))


def torch_ops():
    """The torch integration module (custom ops, AttentionFunction); imports torch."""
    from . import _torch
    return _torch


__all__ = [
    "attention", "attention_ragged", "attention_backward", "attention_ragged_backward", "merge_states",
    "PagedKVCache", "PageTable", "PagePool", "block_table_to_page_table", "append_paged_kv", "copy_pages",
    "BatchAttention", "set_num_threads", "get_num_threads", "cuda_available", "query_device", "torch_ops",
    "built_with_cuda", "Error", "InvalidArgumentError", "DTypeError", "UnsupportedError", "WorkspaceTooSmallError",
    "PlanMismatchError", "BackendError", "OutOfMemoryError", "__version__",
]
