"""torch integration, imported only when a torch tensor reaches tessera.

Custom ops (torch.library.custom_op, each with a register_fake so torch.compile traces them
without graph breaks):

  tessera::attention_fwd(q, k, v, scale, causal, window_left, window_right, softcap) -> (out, lse)
  tessera::attention_bwd(dout, q, k, v, out, lse, ..., deterministic) -> (dq, dk, dv)
  tessera::attention_ragged_fwd / attention_ragged_bwd (with cu_seqlens_q, cu_seqlens_k)
  tessera::merge_states(o_states, lse_states) -> (out, lse)

The forward ops have autograd registered (register_autograd), so tessera.attention on torch
tensors trains; the LSE output is not differentiable. AttentionFunction is the same as a
classic torch.autograd.Function, for code that prefers one.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.utils import _python_dispatch

from . import _checks, _ops
from ._arrays import adapter_for_module


def _c(t: Tensor) -> Tensor:
    # head_dim must have unit stride; gradients from broadcasting ops may have stride 0.
    return t if (t.dim() == 0 or t.stride(-1) == 1) else t.contiguous()


# ---- dense --------------------------------------------------------------------------------

@torch.library.custom_op("tessera::attention_fwd", mutates_args=())
def attention_fwd(q: Tensor, k: Tensor, v: Tensor, scale: Optional[float], causal: bool, window_left: int,
                  window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    return _ops._forward(q, k, v, causal, (window_left, window_right), softcap, scale, True)


@attention_fwd.register_fake
def _(q, k, v, scale, causal, window_left, window_right, softcap):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("tessera::attention_bwd", mutates_args=())
def attention_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, scale: Optional[float],
                  causal: bool, window_left: int, window_right: int, softcap: float,
                  deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    return _ops._backward(q, k, v, out, _c(dout), lse, causal, (window_left, window_right), softcap, scale,
                          deterministic)


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, scale, causal, window_left, window_right, softcap, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_fwd(ctx, inputs, output):
    q, k, v, scale, causal, wl, wr, softcap = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.opts = (scale, causal, wl, wr, softcap)
    ctx.mark_non_differentiable(lse)
    # The LSE's gradient is never used: without this autograd fills a zero tensor for it on every
    # backward (~0.45 ms of host time per call on an H200 machine, while the GPU waits).
    ctx.set_materialize_grads(False)


def _backward_fwd(ctx, dout, dlse):
    if dout is None:  # out took no part in the loss: no gradient flows
        return None, None, None, None, None, None, None, None
    q, k, v, out, lse = ctx.saved_tensors
    scale, causal, wl, wr, softcap = ctx.opts
    bwd = _eager_backward if _eager(dout, q, k, v, out, lse) else attention_bwd
    dq, dk, dv = bwd(dout, q, k, v, out, lse, scale, causal, wl, wr, softcap, False)
    return dq, dk, dv, None, None, None, None, None


# Resolved once: looking them up per call cost ~1.5 us of the eager path's host time.
_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled
_current_dispatch_mode = getattr(_python_dispatch, "_get_current_dispatch_mode", None)
_is_functional = getattr(torch, "_is_functional_tensor", None)
_is_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)


def _plain(*tensors):
    """True when every tensor is real data seen by no interposer: a plain Tensor or Parameter,
    not functorch-wrapped, not functional, and no dispatch mode active (make_fx, flop
    counters). Only then may tessera call its kernels without going through its custom ops."""
    if _current_dispatch_mode is not None and _current_dispatch_mode() is not None:
        return False
    for t in tensors:
        if type(t) not in _PLAIN_TYPES or (_is_functional is not None and _is_functional(t)) \
                or (_is_wrapped is not None and _is_wrapped(t)):
            return False
    return True


def _eager(*tensors):
    """True when the backward formula may call the kernels directly: real tensors (_plain), no
    tracing (torch.compile's dynamo; AOTAutograd traces the backward with fake or functional
    tensors, where is_compiling is False) and grad mode off. Grad mode is on in a backward only
    under create_graph=True: there the custom op must run, so that a second backward through
    dq, dk, dv raises instead of treating them as constants."""
    return not _is_compiling() and not _is_grad_enabled() and _plain(*tensors)


def _eager_backward(dout, q, k, v, out, lse, scale, causal, wl, wr, softcap, deterministic):
    # Eager backwards call the kernels directly, as eager_no_grad does for the forward: the
    # custom op's dispatch adds ~0.1 ms of Python per call.
    return _ops._backward(q, k, v, out, _c(dout), lse, causal, (wl, wr), softcap, scale, deterministic)


attention_fwd.register_autograd(_backward_fwd, setup_context=_setup_fwd)


# ---- ragged -------------------------------------------------------------------------------

@torch.library.custom_op("tessera::attention_ragged_fwd", mutates_args=())
def attention_ragged_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                         scale: Optional[float], causal: bool, window_left: int, window_right: int,
                         softcap: float) -> Tuple[Tensor, Tensor]:
    return _ops._forward_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, (window_left, window_right), softcap,
                                scale, True)


@attention_ragged_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, causal, window_left, window_right, softcap):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("tessera::attention_ragged_bwd", mutates_args=())
def attention_ragged_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                         out: Tensor, lse: Tensor, scale: Optional[float], causal: bool, window_left: int,
                         window_right: int, softcap: float, deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    return _ops._backward_ragged(q, k, v, cu_seqlens_q, cu_seqlens_k, out, _c(dout), lse, causal,
                                 (window_left, window_right), softcap, scale, deterministic)


@attention_ragged_bwd.register_fake
def _(dout, q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, scale, causal, window_left, window_right, softcap,
      deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_ragged(ctx, inputs, output):
    q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, cu_q, cu_k, out, lse)
    ctx.opts = (scale, causal, wl, wr, softcap)
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)  # as _setup_fwd


def _backward_ragged(ctx, dout, dlse):
    if dout is None:
        return (None,) * 10
    q, k, v, cu_q, cu_k, out, lse = ctx.saved_tensors
    scale, causal, wl, wr, softcap = ctx.opts
    if not _eager(dout, q, k, v, cu_q, cu_k, out, lse):
        dq, dk, dv = attention_ragged_bwd(dout, q, k, v, cu_q, cu_k, out, lse, scale, causal, wl, wr, softcap, False)
    else:
        dq, dk, dv = _ops._backward_ragged(q, k, v, cu_q, cu_k, out, _c(dout), lse, causal, (wl, wr), softcap, scale,
                                           False)
    return dq, dk, dv, None, None, None, None, None, None, None


attention_ragged_fwd.register_autograd(_backward_ragged, setup_context=_setup_ragged)


# ---- merge --------------------------------------------------------------------------------

@torch.library.custom_op("tessera::merge_states", mutates_args=())
def merge_states_op(o_states: Tensor, lse_states: Tensor) -> Tuple[Tensor, Tensor]:
    return _ops._merge(o_states, lse_states, True)


@merge_states_op.register_fake
def _(o_states, lse_states):
    return o_states.new_empty(o_states.shape[1:]), o_states.new_empty(o_states.shape[1:3], dtype=torch.float32)


# ---- the autograd.Function form -----------------------------------------------------------

class AttentionFunction(torch.autograd.Function):
    """tessera dense attention as a torch.autograd.Function.

    AttentionFunction.apply(q, k, v, scale, causal, window_left, window_right, softcap)
    returns (out, lse); lse is not differentiable.
    """

    @staticmethod
    def forward(q, k, v, scale, causal, window_left, window_right, softcap):
        return attention_fwd(q, k, v, scale, causal, window_left, window_right, softcap)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_fwd(ctx, inputs, output)

    @staticmethod
    def backward(ctx, dout, dlse):
        return _backward_fwd(ctx, dout, dlse)


# ---- what tessera's public functions call for torch tensors -------------------------------

def eager_no_grad(*tensors):
    """True when no autograd graph is wanted and torch.compile is not tracing: then tessera
    calls the kernels directly, without the custom op's dispatch (~0.1 ms of Python)."""
    if _is_compiling():  # first: under dynamo it folds to True and nothing below is traced
        return False
    if not _plain(*tensors):  # before requires_grad: k may be None or a numpy array (the slow path names it)
        return False
    if _is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return False
    return True


adapter = adapter_for_module("torch")  # what _ops._forward_torch takes for these tensors


def _check_tensors(like_name, like, **named):
    """TypeError naming the first argument that is not a torch Tensor (None, a numpy array): the
    custom ops' schemas take Tensors only, and torch's own message dumps the value."""
    for name, t in named.items():
        if not isinstance(t, Tensor):
            got = "None" if t is None else f"{type(t).__module__}.{type(t).__qualname__}"
            raise TypeError(f"{name}: expected a torch.Tensor ({like_name} is one, on {like.device}), got {got}")


def _to_index(values, like, name):
    """A Tensor as it is (the extension checks it is int32); a list or host array checked on the
    host (integers that fit int32; numpy arrays int32) and moved to like's device."""
    if isinstance(values, Tensor):
        return values
    if values is None:
        raise TypeError(f"{name}: expected an int32 tensor or a sequence of integers, got None")
    return torch.as_tensor(_checks.index_array(values, name), device=like.device)


def attention(q, k, v, causal, window, softcap, scale, return_lse):
    _check_tensors("q", q, k=k, v=v)
    wl, wr = _ops._window(window)
    out, lse = attention_fwd(q, k, v, _ops._scale(scale), _ops._flag(causal, "causal"), wl, wr, _ops._softcap(softcap))
    return (out, lse) if return_lse else out


def attention_ragged(q, k, v, cu_q, cu_k, causal, window, softcap, scale, return_lse):
    _check_tensors("q", q, k=k, v=v)
    wl, wr = _ops._window(window)
    out, lse = attention_ragged_fwd(q, k, v, _to_index(cu_q, q, "cu_seqlens_q"), _to_index(cu_k, q, "cu_seqlens_k"),
                                    _ops._scale(scale), _ops._flag(causal, "causal"), wl, wr, _ops._softcap(softcap))
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, out, dout, lse, causal, window, softcap, scale, deterministic):
    _check_tensors("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
    wl, wr = _ops._window(window)
    return attention_bwd(dout, q, k, v, out, lse, _ops._scale(scale), _ops._flag(causal, "causal"), wl, wr,
                         _ops._softcap(softcap), _ops._flag(deterministic, "deterministic"))


def attention_ragged_backward(q, k, v, cu_q, cu_k, out, dout, lse, causal, window, softcap, scale, deterministic):
    _check_tensors("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
    wl, wr = _ops._window(window)
    cu_q, cu_k = _to_index(cu_q, q, "cu_seqlens_q"), _to_index(cu_k, q, "cu_seqlens_k")
    return attention_ragged_bwd(dout, q, k, v, cu_q, cu_k, out, lse, _ops._scale(scale),
                                _ops._flag(causal, "causal"), wl, wr, _ops._softcap(softcap), _ops._flag(deterministic, "deterministic"))


def merge_states(o_states, lse_states, return_lse):
    _check_tensors("o_states", o_states, lse_states=lse_states)
    out, lse = merge_states_op(o_states, lse_states)
    return (out, lse) if return_lse else out
