"""Errors: C++ tessera::Error codes become ValueError / TypeError / NotImplementedError /
RuntimeError subclasses carrying the C++ message, which names the argument at fault."""

import numpy as np
import pytest

import tessera


def arrays(dtype=np.float32, hq=4, hkv=2):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, hq, 32)).astype(dtype)
    k = rng.standard_normal((1, 8, hkv, 32)).astype(dtype)
    v = rng.standard_normal((1, 8, hkv, 32)).astype(dtype)
    return q, k, v


def test_shape_mismatch_is_value_error_naming_argument():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"attention_forward: v: expected shape \(1, 8, 2, 32\)") as e:
        tessera.attention(q, k, v[:, :5])
    assert isinstance(e.value, tessera.InvalidArgumentError) and isinstance(e.value, tessera.Error)
    assert e.value.code == "invalid_argument" and e.value.argument == "v"


def test_gqa_heads_not_divisible():
    q, k, v = arrays(hq=5, hkv=2)
    with pytest.raises(ValueError, match="heads_kv: expected a divisor of heads_q = 5") as e:
        tessera.attention(q, k, v)
    assert e.value.argument == "heads_kv"


def test_dtype_problems_are_type_errors():
    q, k, v = arrays()
    with pytest.raises(TypeError, match=r"q: expected dtype .* got float64"):
        tessera.attention(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match=r"k: expected dtype fp32 \(as q\), got dtype fp16") as e:
        tessera.attention(q, k.astype(np.float16), v)
    assert isinstance(e.value, tessera.DTypeError) and e.value.argument == "k"
    qr, kr = q[0], k[0]
    with pytest.raises(TypeError, match="cu_seqlens_q: expected dtype int32, got dtype int64") as e:
        tessera.attention_ragged(qr, kr, kr, np.array([0, 8], np.int64), np.array([0, 8], np.int32))
    assert isinstance(e.value, tessera.DTypeError) and e.value.argument == "cu_seqlens_q"


def test_non_arrays_are_type_errors():
    q, k, v = arrays()
    with pytest.raises(TypeError, match="q: expected an array"):
        tessera.attention("not an array", k, v)
    with pytest.raises(TypeError, match="k: expected an array"):
        tessera.attention(q, object(), v)


def test_options_are_checked():
    q, k, v = arrays()
    with pytest.raises(ValueError, match="options.scale"):
        tessera.attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="options.softcap"):
        tessera.attention(q, k, v, softcap=-2.0)
    # Caps the library cannot fold (too large, too small), and one float rounds to 0: not "no cap".
    for cap in (3e38, 1e-39, 1e-50):
        with pytest.raises(ValueError, match="options.softcap"):
            tessera.attention(q, k, v, softcap=cap)
    with pytest.raises(ValueError, match="options.window_left"):
        tessera.attention(q, k, v, window=(-5, -1))
    with pytest.raises(ValueError, match="window"):
        tessera.attention(q, k, v, window=3)


def test_bad_layouts():
    q, k, v = arrays()
    with pytest.raises(ValueError, match="q: expected 4 dims"):
        tessera.attention(q[0], k, v)
    with pytest.raises(ValueError, match="q: expected unit stride on head_dim"):
        tessera.attention(q[..., ::2], k[..., ::2], v[..., ::2])
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\]"):
        tessera.attention_ragged(q[0], k[0], v[0], [0, 5, 4, 8], [0, 2, 4, 8])


def test_ragged_and_backward_messages_name_their_function():
    q, k, v = arrays()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="attention_backward: lse"):
        tessera.attention_backward(q, k, v, out, out, lse[:, :1])
    with pytest.raises(ValueError, match="attention_forward_ragged: cu_seqlens_k"):
        tessera.attention_ragged(q[0], k[0], v[0], [0, 8], [0, 3, 8])


def test_merge_states_shape_errors():
    o = np.zeros((2, 3, 4, 32), np.float32)
    with pytest.raises(ValueError, match="merge_states: lse_states"):
        tessera.merge_states(o, np.zeros((2, 3, 5), np.float32))
    with pytest.raises(TypeError, match="lse_states: expected dtype fp32"):
        tessera.merge_states(o, np.zeros((2, 3, 4), np.float16))


def test_paged_errors():
    cache = tessera.PagedKVCache.zeros(4, 4, 2, 32, dtype="fp32")
    pool = tessera.PagePool(4, 4)
    s = pool.create_sequence()
    pool.append_tokens(s, 2)
    table = pool.page_table([s])
    with pytest.raises(ValueError, match="append_indptr"):
        tessera.append_paged_kv(cache, table, [0, 3], np.zeros((2, 2, 32), np.float32),
                                np.zeros((2, 2, 32), np.float32))
    with pytest.raises(ValueError, match=r"dst_pages\[0\]"):
        tessera.copy_pages(cache, [0], [9])
    with pytest.raises(ValueError, match="layout"):
        tessera.PagedKVCache(cache.k_pages, cache.v_pages, "XYZ")


def test_cuda_unsupported_or_absent():
    # Without a CUDA build there is nothing on a device to call; the flag says so.
    assert isinstance(tessera.built_with_cuda, bool)
    assert tessera.cuda_available() in (True, False)
    if not tessera.built_with_cuda:
        assert not tessera.cuda_available()
