"""Bad input at the Python layer: every case gets an error that names the argument, says what
was expected and what was given, before anything is written. Cases from a fuzzing pass of
the module (read-only outputs, None for arrays, truncated or wrapped integers, scale/softcap
of the wrong type, messages naming the wrong argument). numpy on the CPU backend; the torch
cases are skipped without torch."""

import numpy as np
import pytest

import tessera


def qkv(b=1, s=8, hq=4, hkv=2, d=32, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((b, s, hq, d)).astype(dtype), rng.standard_normal((b, s, hkv, d)).astype(dtype),
            rng.standard_normal((b, s, hkv, d)).astype(dtype))


def paged(lens=(7, 1, 12), num_pages=32, page_size=4, heads_kv=2, d=32):
    """A filled fp32 NHD cache, its pool and table, and the rows appended (poisoned with 3s first)."""
    pool = tessera.PagePool(num_pages, page_size)
    cache = tessera.PagedKVCache.zeros(num_pages, page_size, heads_kv, d, dtype="fp32")
    cache.k_pages[...] = 3
    cache.v_pages[...] = 3
    seqs = [pool.create_sequence() for _ in lens]
    for s, n in zip(seqs, lens):
        pool.append_tokens(s, n)
    table = pool.page_table(seqs)
    rng = np.random.default_rng(1)
    nk = rng.standard_normal((sum(lens), heads_kv, d)).astype(np.float32)
    nv = rng.standard_normal((sum(lens), heads_kv, d)).astype(np.float32)
    ai = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return pool, cache, table, nk, nv, ai


def batch(return_lse=False):
    pool, cache, table, nk, nv, ai = paged()
    tessera.append_paged_kv(cache, table, ai, nk, nv)
    ba = tessera.BatchAttention(4, 2, 32, dtype="fp32", page_size=4, causal=True, return_lse=return_lse)
    ba.plan([3, 1, 2], table.kv_lens())
    q = np.random.default_rng(2).standard_normal((6, 4, 32)).astype(np.float32)
    return cache, table, ba, q


def read_only(a):
    a.setflags(write=False)
    return a


def raises_named(exc, argument, *fragments):
    """pytest.raises(exc) whose message names `argument` and holds each fragment."""
    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *a):
            r = self.ctx.__exit__(*a)
            msg = str(self.info.value)
            assert f"{argument}:" in msg or f"{argument}[" in msg, msg
            for f in fragments:
                assert f in msg, msg
            assert "incompatible function arguments" not in msg and "bad_cast" not in msg, msg
            return r
    return _Check()


# ---- 1. read-only outputs --------------------------------------------------------------------

RO_MSG = "expected a writable array, got a read-only one"


@pytest.mark.parametrize("how", ["setflags", "frombuffer", "memmap"])
def test_read_only_pages_are_rejected_by_append(how, tmp_path):
    pool, cache, table, nk, nv, ai = paged()
    k = cache.k_pages
    if how == "setflags":
        k = read_only(k)
    elif how == "frombuffer":
        k = np.frombuffer(k.tobytes(), np.float32).reshape(k.shape)
    else:  # used to crash (SIGSEGV) writing into a mapping opened read-only
        fn = tmp_path / "k.bin"
        k.tofile(fn)
        k = np.memmap(fn, np.float32, "r", shape=k.shape)
    before = np.array(k)
    with raises_named(tessera.InvalidArgumentError, "k_pages", RO_MSG) as e:
        tessera.append_paged_kv(tessera.PagedKVCache(k, cache.v_pages), table, ai, nk, nv)
    assert e.value.argument == "k_pages"
    assert np.array_equal(np.asarray(k), before) and np.all(cache.v_pages == 3)  # nothing written


def test_read_only_pages_are_rejected_by_copy_pages():
    _, cache, *_ = paged()
    v = read_only(cache.v_pages)
    with raises_named(ValueError, "v_pages", RO_MSG):
        tessera.copy_pages(tessera.PagedKVCache(cache.k_pages, v), [0], [9])
    assert np.all(cache.k_pages == 3)


def test_read_only_pages_are_fine_to_read():
    cache, table, ba, q = batch()
    ref = ba.run(q, cache, table)
    ro = tessera.PagedKVCache(read_only(cache.k_pages.copy()), read_only(cache.v_pages.copy()))
    np.testing.assert_array_equal(ba.run(q, ro, table), ref)
    qr, kr, vr = (read_only(x) for x in qkv())
    tessera.attention(qr, kr, vr)  # read-only inputs are inputs


def test_batch_run_read_only_out_and_lse():
    cache, table, ba, q = batch(return_lse=True)
    b = bytes(6 * 4 * 32 * 4)
    out = np.frombuffer(b, np.float32).reshape(6, 4, 32)  # backed by an immutable bytes object
    with raises_named(ValueError, "out", RO_MSG):
        ba.run(q, cache, table, out=out)
    assert b == bytes(len(b))
    with raises_named(ValueError, "out", RO_MSG):  # a broadcast view is read-only (rows overlap)
        ba.run(q, cache, table, out=np.broadcast_to(np.zeros((1, 4, 32), np.float32), (6, 4, 32)))
    out = np.full((6, 4, 32), 7, np.float32)
    with raises_named(ValueError, "lse", RO_MSG):
        ba.run(q, cache, table, out=out, lse=read_only(np.zeros((4, 6), np.float32)))
    assert np.all(out == 7)


def test_plan_read_only_workspace():
    _, _, ba, _ = batch()
    need = ba.workspace_size()
    b = bytes(need + 64)
    with raises_named(ValueError, "workspace", RO_MSG):
        ba.plan([1], [3], workspace=np.frombuffer(b, np.uint8))
    assert b == bytes(len(b))


def test_low_level_outputs_read_only():
    q, k, v = qkv()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    o = read_only(np.zeros_like(q))
    with raises_named(ValueError, "out", RO_MSG):
        tessera._C.attention_forward(q, k, v, o, None, None, False, -1, -1, 0.0, False, 0, 0)
    dq, dk = np.zeros_like(q), np.zeros_like(k)
    dv = read_only(np.zeros_like(v))
    with raises_named(ValueError, "dv", RO_MSG):
        tessera._C.attention_backward(q, k, v, out, out, lse, dq, dk, dv, None, False, -1, -1, 0.0, False, 0, 0)
    assert not dq.any() and not dk.any()
    ol = read_only(np.zeros((8, 4), np.float32))
    with raises_named(ValueError, "out_lse", RO_MSG):
        tessera._C.merge_states(np.zeros((2, 8, 4, 32), np.float32), np.zeros((2, 8, 4), np.float32),
                                np.zeros((8, 4, 32), np.float32), ol, 0, 0)


def test_read_only_without_dlpack_flag():
    """numpy before 2.1 cannot flag read-only in DLPack and refuses the export; nanobind then
    imports through the buffer protocol. Simulated with a subclass whose export refuses."""
    class NoDLPack(np.ndarray):
        def __dlpack__(self, *a, **k):
            raise BufferError("Cannot export readonly array since signalling readonly is unsupported by DLPack")

    q, k, v = qkv()
    o = np.zeros_like(q).view(NoDLPack)
    tessera._C.attention_forward(q, k, v, o, None, None, False, -1, -1, 0.0, False, 0, 0)
    np.testing.assert_allclose(np.asarray(o), tessera.attention(q, k, v), rtol=1e-6, atol=1e-6)
    o = read_only(np.zeros_like(q).view(NoDLPack))
    with raises_named(ValueError, "out", RO_MSG):
        tessera._C.attention_forward(q, k, v, o, None, None, False, -1, -1, 0.0, False, 0, 0)
    assert not np.asarray(o).any()


# ---- 2. None (or another framework's array) for a required array -----------------------------

def _none_cases():
    q, k, v = qkv()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    qr, kr = q[0], k[0]
    o_states, lse_states = np.zeros((2, 3, 2, 8), np.float32), np.zeros((2, 3, 2), np.float32)
    return [
        ("q", lambda: tessera.attention(None, k, v)),
        ("k", lambda: tessera.attention(q, None, v)),
        ("v", lambda: tessera.attention(q, k, None)),
        ("out", lambda: tessera.attention_backward(q, k, v, None, out, lse)),
        ("dout", lambda: tessera.attention_backward(q, k, v, out, None, lse)),
        ("lse", lambda: tessera.attention_backward(q, k, v, out, out, None)),
        ("cu_seqlens_q", lambda: tessera.attention_ragged(qr, kr, kr, None, [0, 8])),
        ("cu_seqlens_k", lambda: tessera.attention_ragged(qr, kr, kr, [0, 8], None)),
        ("cu_seqlens_k", lambda: tessera.attention_ragged_backward(qr, kr, kr, [0, 8], None, qr, qr, lse[0])),
        ("o_states", lambda: tessera.merge_states(None, lse_states)),
        ("lse_states", lambda: tessera.merge_states(o_states, None)),
    ]


@pytest.mark.parametrize("i", range(11))
def test_none_for_a_required_array(i):
    argument, call = _none_cases()[i]
    with raises_named(TypeError, argument, "expected", "got None"):
        call()


def test_none_in_paged_calls():
    pool, cache, table, nk, nv, ai = paged()
    cases = [
        ("append_indptr", lambda: tessera.append_paged_kv(cache, table, None, nk, nv)),
        ("new_k", lambda: tessera.append_paged_kv(cache, table, ai, None, nv)),
        ("new_v", lambda: tessera.append_paged_kv(cache, table, ai, nk, None)),
        ("cache", lambda: tessera.append_paged_kv(None, table, ai, nk, nv)),
        ("table", lambda: tessera.append_paged_kv(cache, None, ai, nk, nv)),
        ("src_pages", lambda: tessera.copy_pages(cache, None, [5])),
        ("dst_pages", lambda: tessera.copy_pages(cache, [1], None)),
        ("cache", lambda: tessera.copy_pages(None, [1], [5])),
        ("block_table", lambda: tessera.block_table_to_page_table(None, [3], 4)),
        ("cache.k_pages", lambda: tessera.copy_pages(tessera.PagedKVCache(None, None), [1], [5])),
    ]
    for argument, call in cases:
        with raises_named(TypeError, argument, "expected", "got None"):
            call()
    assert np.all(cache.k_pages == 3)
    cache, table, ba, q = batch()
    for argument, call in [("q", lambda: ba.run(None, cache, table)), ("cache", lambda: ba.run(q, None, table)),
                           ("table", lambda: ba.run(q, cache, None)),
                           ("workspace", lambda: ba._impl.plan([1], [3], "cpu", 0, 1, None, 0))]:
        with raises_named(TypeError, argument, "expected", "got None"):
            call()


def test_torch_none_or_numpy_beside_a_torch_q():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv())
    kn = k.numpy()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    cases = [
        ("k", lambda: tessera.attention(q, None, v)),
        ("k", lambda: tessera.attention(q, kn, v)),
        ("v", lambda: tessera.attention(q, k, v.numpy())),
        ("k", lambda: tessera.attention(q.clone().requires_grad_(), kn, v)),  # the custom op's path
        ("k", lambda: tessera.attention(q.clone().requires_grad_(), None, v)),
        ("k", lambda: tessera.attention_ragged(q[0], kn[0], v[0], [0, 8], [0, 8])),
        ("cu_seqlens_q", lambda: tessera.attention_ragged(q[0], k[0], v[0], None, [0, 8])),
        ("cu_seqlens_k", lambda: tessera.attention_ragged(q[0].clone().requires_grad_(), k[0], v[0], [0, 8], None)),
        ("lse", lambda: tessera.attention_backward(q, k, v, out, out, None)),
        ("dout", lambda: tessera.attention_backward(q, k, v, out, out.numpy(), lse)),
        ("lse_states", lambda: tessera.merge_states(torch.zeros(2, 3, 2, 8), None)),
        ("lse_states", lambda: tessera.merge_states(torch.zeros(2, 3, 2, 8), np.zeros((2, 3, 2), np.float32))),
    ]
    for argument, call in cases:
        with raises_named(TypeError, argument, "expected"):
            call()
    with torch.no_grad():
        with raises_named(TypeError, "k", "expected a torch.Tensor", "got numpy.ndarray"):
            tessera.attention(q, kn, v)


# ---- 3. non-integers are not truncated; int64 is not wrapped ----------------------------------

def test_float_cu_seqlens_are_rejected_not_truncated():
    q, k, v = (x[0] for x in qkv())
    for cu in ([0, 2.7, 8], [0, 2.0, 8], (0, 5.5, 8)):  # [0, 2.7, 8] ran as [0, 2, 8]
        with raises_named(TypeError, "cu_seqlens_q[1]", "expected an integer, got float"):
            tessera.attention_ragged(q, k, v, cu, [0, 8])
        with raises_named(TypeError, "cu_seqlens_k[1]", "expected an integer, got float"):
            tessera.attention_ragged_backward(q, k, v, [0, 8], cu, q, q, np.zeros((4, 8), np.float32))
    with raises_named(TypeError, "cu_seqlens_q[0]", "got bool"):
        tessera.attention_ragged(q, k, v, [False, True], [0, 8])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint32, np.int16])
def test_index_arrays_of_another_dtype_say_int32(dtype):
    q, k, v = (x[0] for x in qkv())
    with raises_named(tessera.DTypeError, "cu_seqlens_q", "expected dtype int32, got dtype") as e:
        tessera.attention_ragged(q, k, v, np.array([0, 8], dtype), [0, 8])
    assert "fp16" not in str(e.value) and e.value.argument == "cu_seqlens_q"
    # integer arrays get the conversion that fixes them; a float array is not told to cast
    assert (".astype(np.int32)" in str(e.value)) == (np.dtype(dtype).kind in "iu")
    _, cache, table, nk, nv, ai = paged()
    with raises_named(TypeError, "src_pages", "expected dtype int32"):
        tessera.copy_pages(cache, np.array([1], dtype), [5])
    with raises_named(TypeError, "append_indptr", "expected dtype int32"):
        tessera.append_paged_kv(cache, table, ai.astype(dtype), nk, nv)
    bad = tessera.PageTable(table.kv_indptr.astype(dtype), table.kv_indices, table.kv_last_page_len, 4)
    with raises_named(TypeError, "kv_indptr", "expected dtype int32"):
        tessera.append_paged_kv(cache, bad, ai, nk, nv)
    with raises_named(TypeError, "block_table", "expected dtype int32"):
        tessera.block_table_to_page_table(np.array([[0, 1]], dtype), [8], 4)
    assert np.all(cache.k_pages == 3)


def test_float_indices_and_lengths_in_paged_calls():
    pool, cache, table, nk, nv, ai = paged()
    with raises_named(TypeError, "append_indptr[1]", "got float 7.9"):
        tessera.append_paged_kv(cache, table, [0, 7.9, 8.2, 20], nk, nv)
    with raises_named(TypeError, "src_pages[0]", "got float 1.7"):
        tessera.copy_pages(cache, [1.7], [5])
    with raises_named(TypeError, "dst_pages[0]", "got float 5.2"):
        tessera.copy_pages(cache, [1], [5.2])
    assert np.all(cache.k_pages == 3)
    with raises_named(TypeError, "kv_lens[0]", "got float 7.5"):
        tessera.block_table_to_page_table([[0, 1]], [7.5], 4)
    with raises_named(TypeError, "block_table[0, 1]", "got float 1.5"):
        tessera.block_table_to_page_table([[0, 1.5]], [8], 4)
    with raises_named(ValueError, "kv_lens", "expected 1 dim"):
        tessera.block_table_to_page_table([[0, 1]], [[8]], 4)
    _, _, ba, _ = batch()
    with raises_named(TypeError, "q_lens[0]", "got float 1.5"):
        ba.plan([1.5], [3])
    with raises_named(TypeError, "kv_lens[0]", "got float 3.5"):
        ba.plan([1], [3.5])
    with raises_named(TypeError, "kv_lens[0]", "got float 3.0"):
        ba.plan([1], np.array([3.0], np.float32))
    with raises_named(ValueError, "q_lens", "expected 1 dim", "2 dims"):  # was flattened
        ba.plan([[1, 1]], [[3, 3]])
    ba.plan(np.array([1, 2], np.int64), np.array([3, 4], np.uint16))  # lengths of any integer dtype are fine
    assert ba.planned_batch == 2


def test_float_scalars_are_rejected_not_truncated():
    q, k, v = qkv()
    with raises_named(TypeError, "window", "expected an integer, got float 1.5"):
        tessera.attention(q, k, v, window=(1.5, 2.5))
    with raises_named(TypeError, "num_threads", "got float 1.5"):
        tessera.set_num_threads(1.5)
    with raises_named(TypeError, "num_threads", "got bool"):
        tessera.set_num_threads(True)
    assert tessera.get_num_threads() == 0
    with raises_named(TypeError, "num_pages", "got float 4.7"):
        tessera.PagePool(4.7, 4)
    with raises_named(TypeError, "page_size", "got float 4.5"):
        tessera.BatchAttention(4, 2, 32, dtype="fp32", page_size=4.5)
    with raises_named(TypeError, "page_size", "got float 4.5"):
        tessera.PagedKVCache.zeros(4, 4.5, 2, 32)
    pool = tessera.PagePool(4, 4)
    s = pool.create_sequence()
    with raises_named(TypeError, "num_tokens", "got float 2.5"):
        pool.append_tokens(s, 2.5)
    assert pool.length(s) == 0
    np.testing.assert_array_equal(tessera.attention(q, k, v, window=(np.int64(2), np.int32(-1))),
                                  tessera.attention(q, k, v, window=(2, -1)))  # numpy integers are integers


def test_torch_index_values_are_checked():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x[0]) for x in qkv())
    # numpy int64 [0, 2**32 + 8] with a torch q ran as [0, 8]
    with raises_named(TypeError, "cu_seqlens_q", "expected dtype int32, got dtype int64"):
        tessera.attention_ragged(q, k, v, np.array([0, 2**32 + 8], np.int64), [0, 8])
    with raises_named(TypeError, "cu_seqlens_q[1]", "got float 5.9"):
        tessera.attention_ragged(q, k, v, [0, 5.9, 8], [0, 8])
    with raises_named(TypeError, "cu_seqlens_k[1]", "got float 2.5"):  # the custom op's path
        tessera.attention_ragged(q.clone().requires_grad_(), k, v, [0, 8], [0, 2.5, 8])
    with raises_named(ValueError, "cu_seqlens_q[1]", "2147483648"):
        tessera.attention_ragged(q, k, v, [0, 2**31, 8], [0, 8])
    for cu in (torch.tensor([0, 8]), torch.tensor([0.0, 8.0])):
        with raises_named(TypeError, "cu_seqlens_q", "expected dtype int32, got dtype"):
            tessera.attention_ragged(q, k, v, cu, [0, 8])
    with raises_named(ValueError, "cu_seqlens_q", "0 dims"):
        tessera.attention_ragged(q, k, v, torch.tensor(8, dtype=torch.int32), [0, 8])
    pool, cache, table, nk, nv, ai = paged()
    tc = tessera.PagedKVCache(torch.from_numpy(cache.k_pages), torch.from_numpy(cache.v_pages))
    with raises_named(TypeError, "append_indptr", "expected dtype int32, got dtype int64"):
        tessera.append_paged_kv(tc, table, ai.astype(np.int64), torch.from_numpy(nk), torch.from_numpy(nv))
    bad = tessera.PageTable(table.kv_indptr.astype(np.int64), table.kv_indices, table.kv_last_page_len, 4)
    with raises_named(TypeError, "kv_indptr", "expected dtype int32"):
        tessera.append_paged_kv(tc, bad, ai, torch.from_numpy(nk), torch.from_numpy(nv))
    assert np.all(cache.k_pages == 3)


# ---- 4. Python ints beyond 32 bits ------------------------------------------------------------

def test_ints_beyond_int32_name_the_argument_and_range():
    q, k, v = qkv()
    big = 2**31
    cases = [
        ("window", lambda: tessera.attention(q, k, v, window=(big, -1))),
        ("window", lambda: tessera.attention(q, k, v, window=(-1, -2**40))),
        ("num_threads", lambda: tessera.set_num_threads(big)),
        ("num_pages", lambda: tessera.PagePool(big, 4)),
        ("page_size", lambda: tessera.PagePool(4, big)),
        ("num_tokens", lambda: tessera.PagePool(4, 4).append_tokens(0, big)),
        ("seq", lambda: tessera.PagePool(4, 4).length(big)),
        ("heads_q", lambda: tessera.BatchAttention(big, 2, 32, dtype="fp32")),
        ("max_q_tokens", lambda: tessera.BatchAttention(4, 2, 32, dtype="fp32", max_q_tokens=big)),
        ("kv_lens[0]", lambda: tessera.block_table_to_page_table([[0, 1]], [big], 4)),
        ("page_size", lambda: tessera.block_table_to_page_table([[0, 1]], [8], big)),
        ("block_table[0, 1]", lambda: tessera.block_table_to_page_table([[0, big]], [8], 4)),
        ("num_pages", lambda: tessera.PagedKVCache.zeros(big, 4, 2, 32)),
    ]
    _, _, ba, _ = batch()
    cases += [
        ("q_lens[0]", lambda: ba.plan([big], [3])),
        ("kv_lens[1]", lambda: ba.plan([1, 1], [3, 2**40])),
        ("num_sms", lambda: ba.plan([1], [3], num_sms=big)),
        ("num_sms", lambda: ba.workspace_size(num_sms=big)),
        ("request", lambda: ba.planned_splits(big)),
    ]
    for argument, call in cases:
        with raises_named(ValueError, argument, "expected an integer in [", "got") as e:
            call()
        assert isinstance(e.value, tessera.InvalidArgumentError), e.value
    assert tessera.get_num_threads() == 0


def test_index_lists_beyond_int32():
    q, k, v = (x[0] for x in qkv())
    for big in (2**31, 2**63, 2**64, -2**31 - 1):  # numpy's OverflowError, float64 or object arrays
        with raises_named(ValueError, "cu_seqlens_q[1]", "expected an integer in [", str(big)):
            tessera.attention_ragged(q, k, v, [0, big, 8], [0, 8])
    _, cache, *_ = paged()
    with raises_named(ValueError, "src_pages[0]", str(2**31)):
        tessera.copy_pages(cache, [2**31], [5])
    assert np.all(cache.k_pages == 3)


# ---- 6. messages that named the wrong argument (integer parts) -------------------------------

def test_zero_dim_index_array_is_not_absent():
    q, k, v = (x[0] for x in qkv())
    for cu in (np.array(8, np.int32), np.int32(8)):
        with raises_named(ValueError, "cu_seqlens_q", "0 dims (a scalar)") as e:
            tessera.attention_ragged(q, k, v, cu, [0, 8])
        assert "absent" not in str(e.value)


def test_negative_cache_dims_name_the_argument():
    for args, argument in [((-4, 4, 2, 32), "num_pages"), ((4, -1, 2, 32), "page_size"),
                           ((4, 4, -2, 32), "heads_kv"), ((4, 4, 2, -32), "head_dim")]:
        with raises_named(ValueError, argument, "expected an integer in [0,") as e:
            tessera.PagedKVCache.zeros(*args)
        assert "negative dimensions" not in str(e.value)
    with raises_named(ValueError, "layout"):
        tessera.PagedKVCache.zeros(4, 4, 2, 32, layout="XYZ")


# ---- 5. scale and softcap of the wrong type ----------------------------------------------------

BAD_REALS = ["x", 1j, np.array([1.0, 2.0]), np.array(0.5), True, [0.5]]


@pytest.mark.parametrize("bad", BAD_REALS, ids=repr)
def test_scale_and_softcap_must_be_real_numbers(bad):
    q, k, v = qkv()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    calls = [
        lambda **kw: tessera.attention(q, k, v, **kw),
        lambda **kw: tessera.attention_backward(q, k, v, out, out, lse, **kw),
        lambda **kw: tessera.attention_ragged(q[0], k[0], v[0], [0, 8], [0, 8], **kw),
        lambda **kw: tessera.BatchAttention(4, 2, 32, dtype="fp32", **kw),
    ]
    for call in calls:
        with raises_named(TypeError, "scale", "expected a real number or None, got"):
            call(scale=bad)
        with raises_named(TypeError, "softcap", "expected a real number, got"):
            call(softcap=bad)
    with raises_named(TypeError, "softcap", "expected a real number, got None"):
        tessera.attention(q, k, v, softcap=None)


def test_scale_and_softcap_numbers_of_any_kind():
    q, k, v = qkv()
    ref = tessera.attention(q, k, v, scale=0.5, softcap=2.0)
    for scale, softcap in ((np.float32(0.5), np.float64(2.0)), (0.5, 2), (np.float16(0.5), np.int64(2))):
        np.testing.assert_array_equal(tessera.attention(q, k, v, scale=scale, softcap=softcap), ref)


def test_low_level_scale_is_a_type_error_not_bad_cast():
    q, k, v = qkv()
    for bad in ("x", 1j, np.array([1.0, 2.0]), True):
        with raises_named(TypeError, "scale", "expected a real number or None"):
            tessera._C.attention_forward(q, k, v, np.zeros_like(q), None, bad, False, -1, -1, 0.0, False, 0, 0)


def test_torch_scale_and_softcap():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv())
    for qq in (q, q.clone().requires_grad_()):  # the eager fast path and the custom op's
        with raises_named(TypeError, "scale", "got str"):
            tessera.attention(qq, k, v, scale="x")
        with raises_named(TypeError, "scale", "got complex"):
            tessera.attention(qq, k, v, scale=1j)
        with raises_named(TypeError, "softcap", "got None"):
            tessera.attention(qq, k, v, softcap=None)
        with raises_named(TypeError, "softcap", "got str"):
            tessera.attention(qq, k, v, softcap="x")


# ---- 6. messages that named the wrong argument -------------------------------------------------

def test_merge_states_dtype_names_o_states():
    lse = np.zeros((2, 3, 2), np.float32)
    for dtype in (np.float64, np.int8):
        with raises_named(tessera.DTypeError, "o_states", "expected dtype one of fp32, fp16, bf16, got dtype") as e:
            tessera.merge_states(np.zeros((2, 3, 2, 8), dtype), lse)
        assert not str(e.value).startswith("dtype:") and e.value.argument == "o_states"


def test_torch_merge_states_dtype_names_o_states():
    torch = pytest.importorskip("torch")
    with raises_named(TypeError, "o_states", "expected dtype one of fp32, fp16, bf16"):
        tessera.merge_states(torch.zeros(2, 3, 2, 8, dtype=torch.float64), torch.zeros(2, 3, 2))


def test_plan_names_workspace_and_kv_lens():
    _, _, ba, _ = batch()
    with raises_named(TypeError, "workspace", "expected an array", "got list"):
        ba.plan([1], [3], workspace=[0] * 10)
    with raises_named(TypeError, "like", "got list"):
        ba.plan([1], [3], like=[0])
    with raises_named(TypeError, "kv_lens", "got None"):
        ba.plan([1], None)
    with raises_named(TypeError, "q_lens", "got None"):
        ba.plan(None, [3])


# ---- 7. an lse buffer that would be ignored --------------------------------------------------

def test_batch_run_lse_without_return_lse():
    cache, table, ba, q = batch(return_lse=False)
    lse = np.full((4, 6), 7, np.float32)
    out = np.full((6, 4, 32), 7, np.float32)
    with raises_named(tessera.InvalidArgumentError, "lse", "return_lse=False") as e:
        ba.run(q, cache, table, out=out, lse=lse)
    assert e.value.argument == "lse" and np.all(out == 7) and np.all(lse == 7)
    ba.run(q, cache, table, out=out, lse=None)  # None is what it means
    assert not np.all(out == 7)
    cache, table, ba, q = batch(return_lse=True)
    out, got = ba.run(q, cache, table, lse=lse)
    assert got is lse and not np.all(lse == 7)


# ---- 8. a second fuzzing pass ----------------------------------------------------------------

def test_batch_softcap_below_float_range_names_it():
    # BatchAttention took softcap as a C float: 1e-46 was 0 before the check and ran uncapped.
    for tiny in (1e-46, 1e-300):
        with raises_named(ValueError, "softcap", "0 as a float"):  # as attention()'s
            tessera.BatchAttention(4, 2, 32, dtype="fp32", softcap=tiny)


def test_bools_inside_index_lists_are_refused():
    # numpy reads [False, True, 3] as integers; a bool alone was already refused.
    q, k, v = qkv(b=1, s=4)
    with raises_named(TypeError, "cu_seqlens_q[0]", "expected an integer, got"):
        tessera.attention_ragged(q[0], k[0], v[0], [False, True, 4], [0, 1, 4])
    with raises_named(TypeError, "cu_seqlens_k[1]", "expected an integer, got"):
        tessera.attention_ragged(q[0], k[0], v[0], [0, 1, 4], [0, True, 4])
    _, _, ba, _ = batch()
    with raises_named(TypeError, "q_lens[0]", "expected an integer, got"):
        ba.plan([True, 2], [3, 3])
    out = tessera.attention_ragged(q[0], k[0], v[0], [0, np.int32(1), 4], (0, 1, 4))  # integers of any kind
    assert np.isfinite(out).all()


def test_scale_and_softcap_past_float_range_name_the_argument():
    q, k, v = qkv()
    with raises_named(tessera.InvalidArgumentError, "scale", "within float's range"):
        tessera.attention(q, k, v, scale=10 ** 400)
    with raises_named(tessera.InvalidArgumentError, "softcap", "within float's range"):
        tessera.attention(q, k, v, softcap=10 ** 400)


@pytest.mark.parametrize("name", ["causal", "return_lse"])
def test_flags_must_be_bools(name):
    # bool("no") is True: a string, an array or another number is refused, not read as a truth value.
    q, k, v = qkv()
    for bad in ("no", np.array([1, 0]), 2, 0.5, None):
        with raises_named(TypeError, name, "expected a bool, got"):
            tessera.attention(q, k, v, **{name: bad})
    with raises_named(TypeError, name, "expected a bool, got"):
        tessera.BatchAttention(4, 2, 32, dtype="fp32", **{name: "no"})
    ref = tessera.attention(q, k, v, causal=True)
    for good in (np.bool_(True), 1):
        np.testing.assert_array_equal(tessera.attention(q, k, v, causal=good), ref)


def test_backward_deterministic_must_be_a_bool():
    q, k, v = qkv()
    out, lse = tessera.attention(q, k, v, return_lse=True)
    with raises_named(TypeError, "deterministic", "expected a bool, got"):
        tessera.attention_backward(q, k, v, out, out, lse, deterministic="yes")


def test_batch_run_out_and_lse_in_one_buffer_are_refused():
    cache, table, ba, q = batch(return_lse=True)
    buf = np.full(6 * 4 * 32, 7, np.float32)
    out, lse = buf.reshape(6, 4, 32), buf[:4 * 6].reshape(4, 6)
    with pytest.raises(tessera.InvalidArgumentError, match="lse: expected .* got") as e:
        ba.run(q, cache, table, out=out, lse=lse)
    assert e.value.argument == "lse" and np.all(buf == 7)


def test_page_table_of_lists():
    # The README lets page-table arrays be lists; the table then holds int32 arrays and runs as the
    # array-built one does (a bad value is named when the table is built).
    pool, cache, table, nk, nv, ai = paged()
    listed = tessera.PageTable(table.kv_indptr.tolist(), table.kv_indices.tolist(), tuple(table.kv_last_page_len),
                               table.page_size)
    assert listed.kv_indptr.dtype == np.int32
    np.testing.assert_array_equal(listed.kv_lens(), table.kv_lens())
    tessera.append_paged_kv(cache, listed, ai, nk, nv)
    with raises_named(TypeError, "kv_indices[0]", "expected an integer"):
        tessera.PageTable([0, 1], [1.5], [1], 4)


def test_unimportable_arrays_say_their_dtype_or_layout():
    q, k, v = qkv()
    for bad, what in ((q.astype(">f4"), "of dtype >f4"), (q.astype(object), "of dtype object")):
        with raises_named(TypeError, "q", "in native byte order", what):
            tessera.attention(bad, k, v)
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    with raises_named(TypeError, "q", "with layout torch.sparse_coo"):
        tessera.attention(tq.to_sparse(), tk, tv)


def test_batch_layout_split_and_query_device_arguments_are_named():
    for kw, name in ((dict(layout=None), "layout"), (dict(split=0), "split")):
        with raises_named(TypeError, name, "expected '"):
            tessera.BatchAttention(4, 2, 32, dtype="fp32", **kw)
    with raises_named(TypeError, "device", "expected 'cpu' or 'cuda', got None"):
        tessera.query_device(None)
    with raises_named(tessera.InvalidArgumentError, "index", "expected an integer in [0, 2147483647]"):
        tessera.query_device("cpu", 2 ** 40)
    assert tessera.query_device("cpu") >= 1
