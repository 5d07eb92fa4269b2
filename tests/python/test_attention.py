"""Dense and ragged attention, backward and merge_states on numpy arrays (CPU backend),
against the float64 oracle in naive.py."""

import numpy as np
import pytest

import naive
import tessera

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def tol(dtype):
    return {np.float32: 2e-5, np.float16: 2e-3}.get(np.dtype(dtype).type, 2e-2)


CASES = [
    # batch, seq_q, seq_k, heads_q, heads_kv, head_dim, causal, window, softcap, scale
    (2, 16, 16, 4, 4, 32, False, (-1, -1), 0.0, None),
    (2, 13, 29, 4, 2, 64, True, (-1, -1), 0.0, None),
    (1, 40, 17, 8, 1, 32, True, (-1, -1), 0.0, 0.3),      # seq_q > seq_k: leading rows see no key
    (2, 33, 33, 6, 3, 16, False, (5, 3), 0.0, None),
    (1, 24, 50, 4, 2, 64, True, (8, -1), 10.0, None),
    (1, 1, 77, 8, 2, 128, False, (-1, -1), 0.0, None),    # decode-like
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}_q{}_k{}_h{}/{}_d{}_c{}_w{}_s{}".format(*c[:9]))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_forward_matches_reference(case, dtype):
    b, sq, sk, hq, hkv, d, causal, window, softcap, scale = case
    q, k, v = rand(b, sq, hq, d, dtype=dtype), rand(b, sk, hkv, d, dtype=dtype), rand(b, sk, hkv, d, dtype=dtype)
    out, lse = tessera.attention(q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                                 return_lse=True)
    ref_out, ref_lse = naive.attention(q, k, v, causal, window, softcap, scale)
    assert out.dtype == q.dtype and out.shape == q.shape and isinstance(out, np.ndarray)
    assert lse.dtype == np.float32 and lse.shape == (b, hq, sq)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, atol=tol(dtype), rtol=tol(dtype))
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    assert np.all(np.isneginf(lse[~finite]))  # fully masked rows: -inf, not NaN or +inf
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-4, rtol=1e-4)
    assert not np.isnan(out.astype(np.float32)).any()
    # Without return_lse a single array comes back.
    out2 = tessera.attention(q, k, v, causal=causal, window=window, softcap=softcap, scale=scale)
    np.testing.assert_array_equal(out2, out)


def test_fully_masked_rows_and_empty_kv():
    q, k, v = rand(1, 8, 2, 32), rand(1, 4, 2, 32), rand(1, 4, 2, 32)
    out, lse = tessera.attention(q, k, v, causal=True, return_lse=True)  # rows 0..3 see nothing
    assert np.all(out[0, :4] == 0) and np.all(np.isneginf(lse[0, :, :4]))
    ref, _ = naive.attention(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
    e = np.zeros((1, 0, 2, 32), np.float32)
    out, lse = tessera.attention(q, e, e, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))


def test_strided_inputs():
    # q, k, v as views into one packed (batch, seq, 3, heads, head_dim) array: unit stride on
    # head_dim only.
    qkv = rand(2, 20, 3, 4, 32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out = tessera.attention(q, k, v, causal=True)
    ref, _ = naive.attention(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
    # Read-only arrays are accepted as inputs.
    q2 = np.ascontiguousarray(q)
    q2.setflags(write=False)
    np.testing.assert_array_equal(tessera.attention(q2, k, v, causal=True), out)


def test_bfloat16_via_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    q, k, v = rand(1, 12, 4, 64).astype(bf16), rand(1, 20, 2, 64).astype(bf16), rand(1, 20, 2, 64).astype(bf16)
    out = tessera.attention(q, k, v, causal=True)
    assert out.dtype == bf16
    ref, _ = naive.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=True)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-2, rtol=2e-2)


def ragged_case(seqs_q, seqs_k, hq=4, hkv=2, d=32, dtype=np.float32):
    cu_q = np.concatenate([[0], np.cumsum(seqs_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(seqs_k)]).astype(np.int32)
    q = rand(int(cu_q[-1]), hq, d, dtype=dtype)
    k = rand(int(cu_k[-1]), hkv, d, dtype=dtype)
    v = rand(int(cu_k[-1]), hkv, d, dtype=dtype)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
def test_ragged_matches_reference(causal):
    seqs_q, seqs_k = [5, 1, 0, 17], [9, 30, 4, 17]
    q, k, v, cu_q, cu_k = ragged_case(seqs_q, seqs_k)
    out, lse = tessera.attention_ragged(q, k, v, cu_q, cu_k, causal=causal, softcap=5.0, return_lse=True)
    assert out.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])
    for b in range(len(seqs_q)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref, ref_lse = naive.attention(q[None, qs], k[None, ks], v[None, ks], causal, (-1, -1), 5.0)
        np.testing.assert_allclose(out[qs], ref[0], atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(lse[:, qs], ref_lse[0], atol=1e-4, rtol=1e-4)
    # cu_seqlens as Python lists give the same result.
    out2 = tessera.attention_ragged(q, k, v, cu_q.tolist(), cu_k.tolist(), causal=causal, softcap=5.0)
    np.testing.assert_array_equal(out2, out)


@pytest.mark.parametrize("case", [
    (2, 16, 16, 4, 4, 32, False, (-1, -1), 0.0, None),
    (2, 13, 21, 4, 2, 64, True, (-1, -1), 0.0, None),
    (1, 24, 24, 6, 2, 32, True, (6, -1), 8.0, 0.2),
    (1, 20, 9, 4, 2, 32, True, (-1, -1), 0.0, None),     # seq_q > seq_k: rows 0..10 see no key, dq = 0
    (2, 5, 30, 4, 1, 32, True, (3, -1), 0.0, None),      # keys 0..21 seen by no row: dk = dv = 0
], ids=["plain", "causal_gqa", "window_softcap", "masked_rows", "unseen_keys"])
def test_backward_matches_reference(case):
    b, sq, sk, hq, hkv, d, causal, window, softcap, scale = case
    q, k, v, dout = rand(b, sq, hq, d), rand(b, sk, hkv, d), rand(b, sk, hkv, d), rand(b, sq, hq, d)
    out, lse = tessera.attention(q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                                 return_lse=True)
    dq, dk, dv = tessera.attention_backward(q, k, v, out, dout, lse, causal=causal, window=window,
                                            softcap=softcap, scale=scale)
    rq, rk, rv = naive.attention_backward(q, k, v, dout, causal, window, softcap, scale)
    for got, ref in ((dq, rq), (dk, rk), (dv, rv)):
        assert got.shape == ref.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    # Deterministic mode: the same bits twice.
    a = tessera.attention_backward(q, k, v, out, dout, lse, causal=causal, window=window, softcap=softcap,
                                   scale=scale, deterministic=True)
    b2 = tessera.attention_backward(q, k, v, out, dout, lse, causal=causal, window=window, softcap=softcap,
                                    scale=scale, deterministic=True)
    for x, y in zip(a, b2):
        np.testing.assert_array_equal(x, y)


def test_ragged_backward_matches_reference():
    seqs_q, seqs_k = [3, 11, 0, 6, 4], [7, 11, 5, 20, 0]  # an empty query and an empty key sequence
    q, k, v, cu_q, cu_k = ragged_case(seqs_q, seqs_k)
    dout = rand(*q.shape)
    out, lse = tessera.attention_ragged(q, k, v, cu_q, cu_k, causal=True, return_lse=True)
    dq, dk, dv = tessera.attention_ragged_backward(q, k, v, cu_q, cu_k, out, dout, lse, causal=True)
    for b in range(len(seqs_q)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        rq, rk, rv = naive.attention_backward(q[None, qs], k[None, ks], v[None, ks], dout[None, qs], True)
        np.testing.assert_allclose(dq[qs], rq[0], atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(dk[ks], rk[0], atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(dv[ks], rv[0], atol=1e-4, rtol=1e-4)


def test_merge_states_recovers_full_attention():
    sq, sk, h, d = 10, 48, 4, 32
    q, k, v = rand(1, sq, h, d), rand(1, sk, h, d), rand(1, sk, h, d)
    bounds = [0, 7, 30, 48]
    os, ls = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        o, l_ = tessera.attention(q, k[:, lo:hi], v[:, lo:hi], return_lse=True)
        os.append(o[0])                   # (tokens, heads, d)
        ls.append(l_[0].T)                # (heads, tokens) -> (tokens, heads)
    # A fourth, empty state (no keys) must not change anything.
    os.append(np.zeros((sq, h, d), np.float32))
    ls.append(np.full((sq, h), -np.inf, np.float32))
    o_states, lse_states = np.stack(os), np.ascontiguousarray(np.stack(ls))
    out, lse = tessera.merge_states(o_states, lse_states)
    ref, ref_lse = naive.attention(q, k, v)
    np.testing.assert_allclose(out, ref[0], atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(lse, ref_lse[0].T, atol=1e-5, rtol=1e-5)
    assert isinstance(tessera.merge_states(o_states, lse_states, return_lse=False), np.ndarray)
    # All states empty: out = 0, lse = -inf.
    out, lse = tessera.merge_states(np.zeros((2, 3, h, d), np.float32), np.full((2, 3, h), -np.inf, np.float32))
    assert np.all(out == 0) and np.all(np.isneginf(lse))


def test_num_threads_setting():
    q, k, v = rand(1, 32, 2, 32), rand(1, 32, 2, 32), rand(1, 32, 2, 32)
    ref = tessera.attention(q, k, v)
    old = tessera.get_num_threads()
    try:
        tessera.set_num_threads(1)
        np.testing.assert_allclose(tessera.attention(q, k, v), ref, atol=1e-6)
    finally:
        tessera.set_num_threads(old)
    with pytest.raises(ValueError, match="num_threads"):
        tessera.set_num_threads(-1)
