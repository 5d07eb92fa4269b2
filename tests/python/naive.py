"""A naive float64 attention in numpy: the oracle of the Python tests.

Semantics as docs/ARCHITECTURE.md: bottom-right causal alignment, sliding window
(left, right) with -1 unbounded, soft cap before masking, fully masked rows give O = 0 and
LSE = -inf.
"""

import numpy as np


def _mask(seq_q, seq_k, causal, window):
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    i = np.arange(seq_q)[:, None] + (seq_k - seq_q)
    j = np.arange(seq_k)[None, :]
    ok = np.ones((seq_q, seq_k), dtype=bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def _scores(q, k, causal, window, softcap, scale):
    """q (B, Sq, Hq, D), k (B, Sk, Hkv, D) -> raw x = scale q.k, capped s, mask, all (B, Hq, Sq, Sk)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    group = q.shape[2] // k.shape[2]
    kk = np.repeat(k, group, axis=2)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    x = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    s = softcap * np.tanh(x / softcap) if softcap > 0 else x
    ok = _mask(q.shape[1], k.shape[1], causal, window)[None, None]
    return s, ok, scale, group


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """Returns out (B, Sq, Hq, D) and lse (B, Hq, Sq), float64."""
    s, ok, _, group = _scores(q, k, causal, window, softcap, scale)
    vv = np.repeat(np.asarray(v, dtype=np.float64), group, axis=2)
    s = np.where(ok, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    empty = ~np.isfinite(m)
    p = np.where(ok, np.exp(s - np.where(empty, 0.0, m)), 0.0)
    l_ = p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", p / np.where(l_ > 0, l_, 1.0), vv)
    lse = np.where(l_ > 0, np.where(empty, 0.0, m) + np.log(np.where(l_ > 0, l_, 1.0)), -np.inf)[..., 0]
    return out, lse


def attention_backward(q, k, v, dout, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """Returns dq, dk, dv (float64) of sum(out * dout)."""
    s, ok, scale, group = _scores(q, k, causal, window, softcap, scale)
    qd = np.asarray(q, np.float64)
    kd = np.repeat(np.asarray(k, np.float64), group, axis=2)
    vd = np.repeat(np.asarray(v, np.float64), group, axis=2)
    do = np.asarray(dout, np.float64)
    sm = np.where(ok, s, -np.inf)
    m = sm.max(axis=-1, keepdims=True) if sm.shape[-1] else np.full(sm.shape[:-1] + (1,), -np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.where(ok, np.exp(sm - m), 0.0)
    l_ = p.sum(axis=-1, keepdims=True)
    p = p / np.where(l_ > 0, l_, 1.0)
    o = np.einsum("bhqk,bkhd->bqhd", p, vd)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vd)
    d = np.einsum("bqhd,bqhd->bhq", do, o)[..., None]
    ds = p * (dp - d)
    if softcap > 0:
        ds = ds * (1.0 - (s / softcap) ** 2)
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kd) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, qd) * scale
    B, Sk, Hkv, D = np.shape(k)
    dk = dk.reshape(B, Sk, Hkv, group, D).sum(axis=3)
    dv = dv.reshape(B, Sk, Hkv, group, D).sum(axis=3)
    return dq, dk, dv
