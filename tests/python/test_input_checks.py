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
