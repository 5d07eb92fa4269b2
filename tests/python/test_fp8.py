"""FP8 (e4m3) forward from Python: numpy arrays of ml_dtypes.float8_e4m3fn (and torch float8
when present) against the float64 oracle on the dequantised inputs. The CPU backend keeps P in
fp32, so the error is bf16's output rounding plus accumulation noise."""

import numpy as np
import pytest

import tessera

import naive

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn


def quantise(x, heads_kv, rng):
    """x (B, S, H, D) float32 -> (fp8 array, descale (B, heads_kv) fp32, dequantised float64).
    One factor per (sequence, kv head); a query head uses its kv head's factor."""
    b, _, h, _ = x.shape
    group = h // heads_kv
    descale = (rng.uniform(4.0, 8.0, size=(b, heads_kv)) / 448.0).astype(np.float32)
    per_head = np.repeat(descale, group, axis=1)[:, None, :, None]  # (B, 1, H, 1)
    x8 = (x / per_head).astype(E4M3)
    return x8, descale, x8.astype(np.float64) * per_head


def check(out, lse, ref_out, ref_lse):
    assert out.dtype.name == "bfloat16"
    got = np.asarray(out, dtype=np.float64)
    assert np.all(np.isfinite(got))
    if ref_out.size == 0:
        return
    bound = 2.0 ** -7 * max(1.0, float(np.abs(ref_out).max()))
    assert np.abs(got - ref_out).max() <= bound
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.all(np.isneginf(np.asarray(lse)[~finite]))  # fully masked rows: -inf, not NaN or +inf
    assert np.abs(np.asarray(lse, np.float64)[finite] - ref_lse[finite]).max(initial=0.0) <= 1e-4


@pytest.mark.parametrize("causal,window,softcap,hq,hkv,d", [
    (False, (-1, -1), 0.0, 4, 2, 128),
    (True, (-1, -1), 0.0, 8, 1, 64),
    (False, (16, 4), 2.5, 2, 2, 256),
])
def test_dense_matches_oracle(causal, window, softcap, hq, hkv, d):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 17, hq, d), dtype=np.float32)
    k = rng.standard_normal((2, 33, hkv, d), dtype=np.float32)
    v = rng.standard_normal((2, 33, hkv, d), dtype=np.float32)
    q8, dq, qd = quantise(q, hkv, rng)
    k8, dk, kd = quantise(k, hkv, rng)
    v8, dv, vd = quantise(v, hkv, rng)
    out, lse = tessera.attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal, window=window, softcap=softcap,
                                     return_lse=True)
    ref_out, ref_lse = naive.attention(qd, kd, vd, causal, window, softcap)
    check(out, lse, ref_out, ref_lse)


def test_absent_descales_mean_one():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 9, 2, 64), dtype=np.float32).astype(E4M3)
    k = rng.standard_normal((1, 12, 1, 64), dtype=np.float32).astype(E4M3)
    v = rng.standard_normal((1, 12, 1, 64), dtype=np.float32).astype(E4M3)
    out, lse = tessera.attention_fp8(q, k, v, return_lse=True)
    ref_out, ref_lse = naive.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    check(out, lse, ref_out, ref_lse)


def test_ragged_matches_per_sequence_oracle():
    rng = np.random.default_rng(5)
    # an empty query sequence, rows that see no key (causal, seq_q > seq_k) and an empty key sequence
    q_lens, k_lens, hq, hkv, d = [5, 0, 17, 12, 3], [9, 4, 17, 7, 0], 4, 2, 128
    q = rng.standard_normal((sum(q_lens), hq, d), dtype=np.float32).astype(E4M3)
    k = rng.standard_normal((sum(k_lens), hkv, d), dtype=np.float32).astype(E4M3)
    v = rng.standard_normal((sum(k_lens), hkv, d), dtype=np.float32).astype(E4M3)
    dq = rng.uniform(0.5, 2.0, size=(len(q_lens), hkv)).astype(np.float32)
    dk = rng.uniform(0.5, 2.0, size=(len(q_lens), hkv)).astype(np.float32)
    dv = rng.uniform(0.5, 2.0, size=(len(q_lens), hkv)).astype(np.float32)
    cu_q, cu_k = np.cumsum([0] + q_lens).tolist(), np.cumsum([0] + k_lens).tolist()
    out, lse = tessera.attention_ragged_fp8(q, k, v, cu_q, cu_k, dq, dk, dv, causal=True, return_lse=True)
    group = hq // hkv
    for b in range(len(q_lens)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qb = q[qs].astype(np.float64)[None] * np.repeat(dq[b], group)[None, None, :, None]
        kb = k[ks].astype(np.float64)[None] * dk[b][None, None, :, None]
        vb = v[ks].astype(np.float64)[None] * dv[b][None, None, :, None]
        ref_out, ref_lse = naive.attention(qb, kb, vb, causal=True)
        check(out[qs][None], lse[:, qs][None], ref_out, ref_lse)


def test_wrong_dtype_points_to_the_fp8_contract():
    q = np.zeros((1, 4, 1, 64), dtype=np.float16)
    with pytest.raises(tessera.DTypeError, match="attention_forward_fp8: q: expected dtype fp8_e4m3") as e:
        tessera.attention_fp8(q, q, q)
    assert e.value.argument == "q"


def test_bad_descale_shape_is_named():
    q = np.zeros((2, 4, 2, 64), dtype=np.float32).astype(E4M3)
    for which in "qkv":  # each descale named as itself
        with pytest.raises(tessera.InvalidArgumentError,
                           match=rf"descale\.{which}: expected fp32 of shape \(batch=2, heads_kv=2\)") as e:
            tessera.attention_fp8(q, q, q, **{f"descale_{which}": np.ones((3, 2), np.float32)})
        assert e.value.argument == f"descale.{which}"


def test_torch_float8_cpu():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, 8, 2, 128), dtype=np.float32)
    k = rng.standard_normal((1, 16, 2, 128), dtype=np.float32)
    q8, k8 = torch.from_numpy(q).to(torch.float8_e4m3fn), torch.from_numpy(k).to(torch.float8_e4m3fn)
    out = tessera.attention_fp8(q8, k8, k8)
    assert out.dtype == torch.bfloat16
    qd, kd = q8.to(torch.float64).numpy(), k8.to(torch.float64).numpy()
    ref_out, _ = naive.attention(qd, kd, kd)
    assert np.abs(out.to(torch.float64).numpy() - ref_out).max() <= 2.0 ** -7 * max(1.0, float(np.abs(ref_out).max()))


def test_torch_float8_cuda_matches_cpu():
    torch = pytest.importorskip("torch")
    if not (tessera.cuda_available() and torch.cuda.is_available()):
        pytest.skip("no CUDA device")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the fp8 CUDA kernels need compute capability 9.0")
    rng = np.random.default_rng(13)
    q = torch.from_numpy(rng.standard_normal((2, 300, 4, 128), dtype=np.float32)).to(torch.float8_e4m3fn)
    k = torch.from_numpy(rng.standard_normal((2, 500, 2, 128), dtype=np.float32)).to(torch.float8_e4m3fn)
    v = torch.from_numpy(rng.standard_normal((2, 500, 2, 128), dtype=np.float32)).to(torch.float8_e4m3fn)
    ds = torch.full((2, 2), 0.5, dtype=torch.float32)
    cpu_out, cpu_lse = tessera.attention_fp8(q, k, v, ds, ds, ds, causal=True, return_lse=True)
    gpu_out, gpu_lse = tessera.attention_fp8(q.cuda(), k.cuda(), v.cuda(), ds.cuda(), ds.cuda(), ds.cuda(),
                                             causal=True, return_lse=True)
    torch.cuda.synchronize()
    # The GPU rounds P to e4m3 (the CPU keeps fp32): within a few e4m3 steps of the weights.
    diff = (gpu_out.cpu().to(torch.float64) - cpu_out.to(torch.float64)).abs().max().item()
    assert diff <= 0.08 * max(1.0, cpu_out.to(torch.float64).abs().max().item())
    assert (gpu_lse.cpu() - cpu_lse).abs().max().item() <= 5e-3


def test_ragged_without_cu_seqlens_q_names_it():
    # attention_ragged_fp8 with cu_seqlens_q None ran the dense forward (4-d q) or blamed q's rank
    # (3-d q): the entry, not the argument, says which forward is meant.
    q4 = np.zeros((1, 4, 2, 64), dtype=np.float32).astype(E4M3)
    for q in (q4, q4[0]):
        with pytest.raises(TypeError, match="cu_seqlens_q: expected an array, got None"):
            tessera.attention_ragged_fp8(q, q, q, None, [0, 4])
