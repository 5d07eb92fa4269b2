"""Dense and ragged attention (forward and backward) and merge_states.

Semantics are the C++ library's (docs/ARCHITECTURE.md, include/tessera/attention.h):
q (batch, seq_q, heads_q, head_dim), k/v (batch, seq_k, heads_kv, head_dim); ragged q
(total_q, heads_q, head_dim) with int32 cu_seqlens of batch + 1 offsets. LSE is natural-log
fp32, (batch, heads_q, seq_q) dense or (heads_q, total_q) ragged.
"""

import sys

import numpy as np

from . import _C
from ._arrays import adapter_for
from ._checks import INT32_MAX, INT32_MIN, flag, index_array, integer, real
from ._errors import DTypeError

_config = {"num_threads": 0}


def set_num_threads(n: int) -> None:
    """Bound the CPU backend's worker threads (0 = all cores)."""
    _config["num_threads"] = integer(n, "num_threads", 0, INT32_MAX)


def get_num_threads() -> int:
    return _config["num_threads"]


_torch_mod = []


def _torch_module():
    """tessera._torch, imported on first use (it imports torch and registers the custom ops)."""
    if not _torch_mod:
        from . import _torch
        _torch_mod.append(_torch)
    return _torch_mod[0]


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _window(window):
    """(left, right) as int32 ints; -1 = unbounded (the library checks the rest)."""
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"window: expected a pair (left, right) with -1 = unbounded, got {window!r}") from None
    if type(left) is int and type(right) is int and INT32_MIN <= left <= INT32_MAX and INT32_MIN <= right <= INT32_MAX:
        return left, right  # the common case, cheaply
    return integer(left, "window"), integer(right, "window")


def _scale(scale):
    """None (1/sqrt(head_dim)) or a real number as a float; a fast path for floats."""
    return scale if scale is None or type(scale) is float else real(scale, "scale", allow_none=True)


def _softcap(softcap):
    return softcap if type(softcap) is float else real(softcap, "softcap")


def _flag(value, name):
    """causal, return_lse, deterministic: a bool (a fast path for bools; "no" is not True)."""
    return value if type(value) is bool else flag(value, name)


def _index(fw, values, like, name):
    """cu_seqlens and friends: lists/tuples of integers become int32 arrays on like's device (each
    value checked), host numpy arrays must be int32 (copied across for a device q)."""
    if isinstance(values, (list, tuple, np.ndarray)):
        values = index_array(values, name)
        if fw.name != "numpy":
            return fw.index_array(values, like)  # host values with a framework q: copy across
    return values


def _ndim(x):
    return len(getattr(x, "shape", ()))


# --------------------------------------------------------------------------------------------
# Framework-neutral implementations (torch goes through tessera._torch for autograd/compile).

def _forward(q, k, v, causal, window, softcap, scale, return_lse):
    fw = adapter_for(q)
    wl, wr = _window(window)
    scale, softcap = _scale(scale), _softcap(softcap)
    out = fw.empty_like(q)
    lse = None
    if return_lse:
        shape = (q.shape[0], q.shape[2], q.shape[1]) if _ndim(q) == 4 else (1,)
        lse = fw.empty(q, shape, "fp32")
    _C.attention_forward(fw.to_c(q), fw.to_c(k), fw.to_c(v), fw.to_c(out),
                         None if lse is None else fw.to_c(lse), scale, _flag(causal, "causal"), wl, wr, softcap,
                         _flag(return_lse, "return_lse"), fw.stream(q), _config["num_threads"])
    if return_lse:
        return fw.wrap(out), fw.wrap(lse)
    return fw.wrap(out)


def _forward_torch(fw, q, k, v, causal, window, softcap, scale, return_lse):
    """_forward for tensors that passed _torch.eager_no_grad (plain torch Tensors, so fw is the
    torch adapter): the same steps in the same order, without the adapter lookup."""
    wl, wr = _window(window)
    if scale is not None and type(scale) is not float:  # O(1): a type check each, no calls for floats
        scale = _scale(scale)
    if type(softcap) is not float:
        softcap = _softcap(softcap)
    out = fw.empty_like(q)
    lse = None
    if return_lse:
        s = q.shape
        if len(s) == 4:  # sizes as separate ints, as in fw.empty_like: faster for torch to parse
            lse = fw.torch.empty(s[0], s[2], s[1], dtype=fw.torch.float32, device=q.device)
        else:
            lse = fw.empty(q, (1,), "fp32")
    to_c = fw.to_c
    _C.attention_forward(to_c(q), to_c(k), to_c(v), to_c(out), None if lse is None else to_c(lse), scale,
                         _flag(causal, "causal"), wl, wr, softcap, _flag(return_lse, "return_lse"), fw.stream(q),
                         _config["num_threads"])
    return (out, lse) if return_lse else out


def _forward_ragged(q, k, v, cu_q, cu_k, causal, window, softcap, scale, return_lse):
    fw = adapter_for(q)
    wl, wr = _window(window)
    scale, softcap = _scale(scale), _softcap(softcap)
    cu_q = _index(fw, cu_q, q, "cu_seqlens_q")
    cu_k = _index(fw, cu_k, q, "cu_seqlens_k")
    out = fw.empty_like(q)
    lse = None
    if return_lse:
        shape = (q.shape[1], q.shape[0]) if _ndim(q) == 3 else (1,)
        lse = fw.empty(q, shape, "fp32")
    _C.attention_forward_ragged(fw.to_c(q), fw.to_c(k), fw.to_c(v), fw.to_c(cu_q), fw.to_c(cu_k), fw.to_c(out),
                                None if lse is None else fw.to_c(lse), scale, _flag(causal, "causal"), wl, wr, softcap,
                                _flag(return_lse, "return_lse"), fw.stream(q), _config["num_threads"])
    if return_lse:
        return fw.wrap(out), fw.wrap(lse)
    return fw.wrap(out)


def _backward(q, k, v, out, dout, lse, causal, window, softcap, scale, deterministic):
    fw = adapter_for(q)
    wl, wr = _window(window)
    scale, softcap = _scale(scale), _softcap(softcap)
    dq, dk, dv = fw.empty_like(q), fw.empty_like(k), fw.empty_like(v)
    _C.attention_backward(fw.to_c(q), fw.to_c(k), fw.to_c(v), fw.to_c(out), fw.to_c(dout), fw.to_c(lse),
                          fw.to_c(dq), fw.to_c(dk), fw.to_c(dv), scale, _flag(causal, "causal"), wl, wr, softcap,
                          _flag(deterministic, "deterministic"), fw.stream(q), _config["num_threads"])
    return fw.wrap(dq), fw.wrap(dk), fw.wrap(dv)


def _backward_ragged(q, k, v, cu_q, cu_k, out, dout, lse, causal, window, softcap, scale, deterministic):
    fw = adapter_for(q)
    wl, wr = _window(window)
    scale, softcap = _scale(scale), _softcap(softcap)
    cu_q = _index(fw, cu_q, q, "cu_seqlens_q")
    cu_k = _index(fw, cu_k, q, "cu_seqlens_k")
    dq, dk, dv = fw.empty_like(q), fw.empty_like(k), fw.empty_like(v)
    _C.attention_backward_ragged(fw.to_c(q), fw.to_c(k), fw.to_c(v), fw.to_c(cu_q), fw.to_c(cu_k), fw.to_c(out),
                                 fw.to_c(dout), fw.to_c(lse), fw.to_c(dq), fw.to_c(dk), fw.to_c(dv), scale,
                                 _flag(causal, "causal"), wl, wr, softcap, _flag(deterministic, "deterministic"), fw.stream(q),
                                 _config["num_threads"])
    return fw.wrap(dq), fw.wrap(dk), fw.wrap(dv)


def _merge(o_states, lse_states, return_lse):
    fw = adapter_for(o_states, "o_states")
    shape = tuple(o_states.shape)
    if len(shape) == 4:
        name = _dtype_of(fw, o_states)
        try:
            out = fw.empty(o_states, shape[1:], name)
        except TypeError:  # no such dtype in tessera (float64, int8): name o_states, not "dtype"
            raise DTypeError(f"o_states: expected dtype one of fp32, fp16, bf16, got dtype {name}",
                             "invalid_argument", "o_states") from None
    else:
        out = fw.empty_like(o_states)  # the library names the rank problem
    out_lse = fw.empty(o_states, shape[1:3], "fp32") if (return_lse and len(shape) == 4) else None
    _C.merge_states(fw.to_c(o_states), fw.to_c(lse_states), fw.to_c(out),
                    None if out_lse is None else fw.to_c(out_lse), fw.stream(o_states), _config["num_threads"])
    if return_lse:
        return fw.wrap(out), fw.wrap(out_lse)
    return fw.wrap(out)


def _forward_fp8(q, k, v, cu_q, cu_k, descale, causal, window, softcap, scale, return_lse, ragged):
    # ragged: which entry was called (not inferred from cu_q, which a ragged call may lack: the
    # library then names the missing cu_seqlens_q instead of running the dense forward).
    fw = adapter_for(q)
    wl, wr = _window(window)
    scale, softcap = _scale(scale), _softcap(softcap)
    out = fw.empty(q, tuple(q.shape), "bf16")
    lse = None
    if return_lse:
        if ragged:
            shape = (q.shape[1], q.shape[0]) if _ndim(q) == 3 else (1,)
        else:
            shape = (q.shape[0], q.shape[2], q.shape[1]) if _ndim(q) == 4 else (1,)
        lse = fw.empty(q, shape, "fp32")
    dq, dk, dv = (None if d is None else fw.to_c(d) for d in descale)
    common = (dq, dk, dv, fw.to_c(out), None if lse is None else fw.to_c(lse), scale, _flag(causal, "causal"), wl, wr,
              softcap, _flag(return_lse, "return_lse"), fw.stream(q), _config["num_threads"])
    if ragged:
        cu_q = _index(fw, cu_q, q, "cu_seqlens_q")
        cu_k = _index(fw, cu_k, q, "cu_seqlens_k")
        _C.attention_forward_fp8_ragged(fw.to_c(q), fw.to_c(k), fw.to_c(v), fw.to_c(cu_q), fw.to_c(cu_k), *common)
    else:
        _C.attention_forward_fp8(fw.to_c(q), fw.to_c(k), fw.to_c(v), *common)
    if return_lse:
        return fw.wrap(out), fw.wrap(lse)
    return fw.wrap(out)


def _dtype_of(fw, x):
    from ._arrays import dtype_name
    return dtype_name(x.dtype)


# --------------------------------------------------------------------------------------------
# Public API.

def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, return_lse=False):
    """Dense attention: out = softmax(mask(scale * q k^T)) v.

    q: (batch, seq_q, heads_q, head_dim); k, v: (batch, seq_k, heads_kv, head_dim), any
    strides with unit stride on head_dim; heads_q % heads_kv == 0 (GQA/MQA).
    causal: bottom-right aligned. window: (left, right), -1 = unbounded. softcap c > 0:
    s = c * tanh(scale * q.k / c). scale defaults to 1/sqrt(head_dim).

    Returns out (like q, in q's framework and on q's device), and with return_lse also the
    natural-log LSE (batch, heads_q, seq_q) fp32. torch tensors are differentiable (autograd
    and torch.compile through the ``tessera::attention_fwd`` custom op).
    """
    causal, return_lse = _flag(causal, "causal"), _flag(return_lse, "return_lse")
    if _is_torch(q):
        _torch = _torch_module()
        if _torch.eager_no_grad(q, k, v):  # skip the custom op's dispatch overhead
            return _forward_torch(_torch.adapter, q, k, v, causal, window, softcap, scale, return_lse)
        return _torch.attention(q, k, v, causal, window, softcap, scale, return_lse)
    return _forward(q, k, v, causal, window, softcap, scale, return_lse)


def attention_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, window=(-1, -1), softcap=0.0, scale=None,
                     return_lse=False):
    """Attention over a variable-length batch packed along the token axis.

    q: (total_q, heads_q, head_dim), k/v: (total_k, heads_kv, head_dim); cu_seqlens_q/k:
    int32 prefix sums of batch + 1 entries starting at 0 (arrays on q's device, or Python
    lists). LSE (with return_lse) is (heads_q, total_q) fp32.
    """
    causal, return_lse = _flag(causal, "causal"), _flag(return_lse, "return_lse")
    if _is_torch(q):
        _torch = _torch_module()
        if _torch.eager_no_grad(q, k, v):
            return _forward_ragged(q, k, v, _torch._to_index(cu_seqlens_q, q, "cu_seqlens_q"),
                                   _torch._to_index(cu_seqlens_k, q, "cu_seqlens_k"), causal, window, softcap, scale,
                                   return_lse)
        return _torch.attention_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, window, softcap, scale,
                                       return_lse)
    return _forward_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, window, softcap, scale, return_lse)


def attention_backward(q, k, v, out, dout, lse, causal=False, window=(-1, -1), softcap=0.0, scale=None,
                       deterministic=False):
    """Gradients (dq, dk, dv) of attention from dout, the forward output and its LSE.

    The options must be the forward's. deterministic=True gives bit-identical gradients
    run to run. Returns arrays shaped like q, k, v in q's framework.
    """
    causal, deterministic = _flag(causal, "causal"), _flag(deterministic, "deterministic")
    if _is_torch(q):
        _torch = _torch_module()
        return _torch.attention_backward(q, k, v, out, dout, lse, causal, window, softcap, scale, deterministic)
    return _backward(q, k, v, out, dout, lse, causal, window, softcap, scale, deterministic)


def attention_ragged_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, out, dout, lse, causal=False, window=(-1, -1),
                              softcap=0.0, scale=None, deterministic=False):
    """Gradients (dq, dk, dv) of attention_ragged (layouts as attention_ragged)."""
    causal, deterministic = _flag(causal, "causal"), _flag(deterministic, "deterministic")
    if _is_torch(q):
        _torch = _torch_module()
        return _torch.attention_ragged_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, out, dout, lse, causal,
                                                window, softcap, scale, deterministic)
    return _backward_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, out, dout, lse, causal, window, softcap, scale,
                            deterministic)


def merge_states(o_states, lse_states, return_lse=True):
    """Merge attention states computed over disjoint key sets of the same queries.

    o_states (num_states, tokens, heads, head_dim), lse_states (num_states, tokens, heads)
    fp32. Returns out (tokens, heads, head_dim) in o_states' dtype and, with return_lse,
    lse (tokens, heads): lse = log(sum_i exp(lse_i)), out = sum_i exp(lse_i - lse) o_i.
    Rows whose every state is empty (lse = -inf) give out = 0, lse = -inf.
    """
    return_lse = _flag(return_lse, "return_lse")
    if _is_torch(o_states):
        _torch = _torch_module()
        return _torch.merge_states(o_states, lse_states, return_lse)
    return _merge(o_states, lse_states, return_lse)


def attention_fp8(q, k, v, descale_q=None, descale_k=None, descale_v=None, causal=False, window=(-1, -1),
                  softcap=0.0, scale=None, return_lse=False):
    """FP8 forward: q, k, v in fp8 e4m3 (torch.float8_e4m3fn, or numpy with ml_dtypes.float8_e4m3fn),
    layouts as ``attention``; the attention of q * descale_q, k * descale_k, v * descale_v.

    descale_*: fp32 arrays of shape (batch, heads_kv) on q's device (a query head uses its kv
    head's factor), or None for 1.0. Returns out in bf16 (and the fp32 LSE with return_lse).
    CPU backend everywhere; on CUDA the sm90 kernels (compute capability 9.0, head_dim 128 or
    256). There is no fp8 backward: the result does not carry gradients.
    """
    causal, return_lse = _flag(causal, "causal"), _flag(return_lse, "return_lse")
    return _forward_fp8(q, k, v, None, None, (descale_q, descale_k, descale_v), causal, window, softcap, scale,
                        return_lse, False)


def attention_ragged_fp8(q, k, v, cu_seqlens_q, cu_seqlens_k, descale_q=None, descale_k=None, descale_v=None,
                         causal=False, window=(-1, -1), softcap=0.0, scale=None, return_lse=False):
    """FP8 forward over a ragged batch (layouts as ``attention_ragged``; descales per
    (sequence, kv head)); out bf16."""
    causal, return_lse = _flag(causal, "causal"), _flag(return_lse, "return_lse")
    return _forward_fp8(q, k, v, cu_seqlens_q, cu_seqlens_k, (descale_q, descale_k, descale_v), causal, window,
                        softcap, scale, return_lse, True)
