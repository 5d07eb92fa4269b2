"""Paged KV cache, page pool, block-table conversion and BatchAttention on numpy arrays
(CPU backend), against the float64 oracle in naive.py."""

import numpy as np
import pytest

import naive
import tessera

RNG = np.random.default_rng(99)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def gather(cache, table, b):
    """K and V of request b read back from the pages: (kv_len, heads_kv, head_dim)."""
    ps = cache.page_size
    pages = table.kv_indices[table.kv_indptr[b]:table.kv_indptr[b + 1]]
    n = table.kv_lens()[b]
    if cache.layout == "NHD":
        k = cache.k_pages[pages].reshape(-1, cache.heads_kv, cache.head_dim)
        v = cache.v_pages[pages].reshape(-1, cache.heads_kv, cache.head_dim)
    else:
        k = cache.k_pages[pages].transpose(0, 2, 1, 3).reshape(-1, cache.heads_kv, cache.head_dim)
        v = cache.v_pages[pages].transpose(0, 2, 1, 3).reshape(-1, cache.heads_kv, cache.head_dim)
    assert k.shape[0] >= n and k.shape[0] - n < ps
    return k[:n], v[:n]


def test_page_pool_lifecycle():
    pool = tessera.PagePool(num_pages=8, page_size=4)
    assert (pool.num_pages, pool.page_size, pool.free_pages) == (8, 4, 8)
    a, b = pool.create_sequence(), pool.create_sequence()
    assert pool.pages_needed(a, 9) == 3
    pool.append_tokens(a, 9)
    pool.append_tokens(b, 1)
    assert pool.length(a) == 9 and pool.length(b) == 1 and pool.free_pages == 4
    np.testing.assert_array_equal(pool.pages(a), [0, 1, 2])  # lowest free page first
    np.testing.assert_array_equal(pool.pages(b), [3])
    table = pool.page_table([b, a])
    np.testing.assert_array_equal(table.kv_indptr, [0, 1, 4])
    np.testing.assert_array_equal(table.kv_indices, [3, 0, 1, 2])
    np.testing.assert_array_equal(table.kv_last_page_len, [1, 1])
    np.testing.assert_array_equal(table.kv_lens(), [1, 9])
    assert table.kv_indices.dtype == np.int32 and table.batch == 2 and table.page_size == 4
    pool.free_sequence(a)
    assert not pool.has_sequence(a) and pool.free_pages == 7
    c = pool.create_sequence()
    pool.append_tokens(c, 5)
    np.testing.assert_array_equal(pool.pages(c), [0, 1])
    with pytest.raises(MemoryError, match="pool: expected 25 free pages for 100 tokens"):  # nothing changed
        pool.append_tokens(c, 100)
    assert pool.length(c) == 5 and pool.free_pages == 5
    with pytest.raises(ValueError, match="seq: expected a live sequence id of this pool, got 12345"):
        pool.length(12345)


def test_block_table_to_page_table_matches_pool():
    pool = tessera.PagePool(32, 16)
    seqs = [pool.create_sequence() for _ in range(3)]
    for s, n in zip(seqs, [40, 1, 16]):
        pool.append_tokens(s, n)
    ref = pool.page_table(seqs)
    max_pages = 4
    block = np.full((3, max_pages), -7, np.int32)  # entries past the used ones are ignored
    for i, s in enumerate(seqs):
        p = pool.pages(s)
        block[i, :len(p)] = p
    got = tessera.block_table_to_page_table(block, [40, 1, 16], page_size=16)
    for name in ("kv_indptr", "kv_indices", "kv_last_page_len"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    np.testing.assert_array_equal(got.kv_lens(), [40, 1, 16])


def fill_cache(layout, dtype=np.float32, page_size=4, heads_kv=2, head_dim=32, lens=(7, 1, 12)):
    """A cache filled by two appends per request (a prefill chunk then one decode token)."""
    pool = tessera.PagePool(32, page_size)
    cache = tessera.PagedKVCache.zeros(32, page_size, heads_kv, head_dim, dtype=dtype, layout=layout)
    seqs = [pool.create_sequence() for _ in lens]
    full_k = [rand(n, heads_kv, head_dim, dtype=dtype) for n in lens]
    full_v = [rand(n, heads_kv, head_dim, dtype=dtype) for n in lens]
    for step in range(2):
        counts = [n - 1 if step == 0 else 1 for n in lens]
        for s, c in zip(seqs, counts):
            pool.append_tokens(s, c)
        table = pool.page_table(seqs)
        lo = [0 if step == 0 else n - 1 for n in lens]
        new_k = np.concatenate([k[a:a + c] for k, a, c in zip(full_k, lo, counts)])
        new_v = np.concatenate([v[a:a + c] for v, a, c in zip(full_v, lo, counts)])
        append_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        tessera.append_paged_kv(cache, table, append_indptr, new_k, new_v)
    return pool, seqs, cache, table, full_k, full_v


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_and_copy_pages(layout):
    pool, seqs, cache, table, full_k, full_v = fill_cache(layout)
    for b in range(len(seqs)):
        k, v = gather(cache, table, b)
        np.testing.assert_array_equal(k, full_k[b])
        np.testing.assert_array_equal(v, full_v[b])
    # Copy request 0's pages to fresh pages; the copy reads back the same.
    src = pool.pages(seqs[0])
    dst = np.arange(32 - len(src), 32, dtype=np.int32)
    tessera.copy_pages(cache, src, dst)
    np.testing.assert_array_equal(cache.k_pages[dst], cache.k_pages[src])
    np.testing.assert_array_equal(cache.v_pages[dst], cache.v_pages[src])
    tessera.copy_pages(cache, [int(src[0])], [int(dst[0])])  # lists work too


def test_from_combined_views():
    kv = np.zeros((5, 2, 4, 2, 32), np.float32)
    cache = tessera.PagedKVCache.from_combined(kv, "NHD")
    assert (cache.num_pages, cache.page_size, cache.heads_kv, cache.head_dim) == (5, 4, 2, 32)
    cache.k_pages[1, 2, 0, 3] = 7.0
    assert kv[1, 0, 2, 0, 3] == 7.0  # a view, not a copy
    pool = tessera.PagePool(5, 4)
    s = pool.create_sequence()
    pool.append_tokens(s, 3)
    new = rand(3, 2, 32)
    tessera.append_paged_kv(cache, pool.page_table([s]), [0, 3], new, new * 2)
    np.testing.assert_array_equal(kv[0, 0, :3], new)
    np.testing.assert_array_equal(kv[0, 1, :3], new * 2)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("split", [("auto", 0), ("disabled", 0), ("fixed", 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_batch_attention_mixed_batch(layout, split, causal):
    heads_q, heads_kv, d, ps = 4, 2, 32, 4
    lens = (7, 1, 12, 9)
    pool, seqs, cache, table, full_k, full_v = fill_cache(layout, page_size=ps, heads_kv=heads_kv, head_dim=d,
                                                          lens=lens)
    q_lens = [3, 1, 1, 9]  # prefill chunk, decode, decode, whole prefill
    q = rand(sum(q_lens), heads_q, d)
    ba = tessera.BatchAttention(heads_q, heads_kv, d, dtype="fp32", layout=layout, page_size=ps, causal=causal,
                                return_lse=True, split=split[0], kv_chunk_tokens=split[1], max_requests=8,
                                max_q_tokens=64)
    ba.plan(q_lens, table.kv_lens())
    assert ba.planned_batch == 4 and ba.planned_q_tokens == sum(q_lens)
    if split[0] == "fixed":
        assert ba.planned_splits(2) == 3  # 12 tokens in chunks of 4
    out, lse = ba.run(q, cache, table)
    assert out.shape == q.shape and lse.shape == (heads_q, q.shape[0])
    row = 0
    for b, ql in enumerate(q_lens):
        k, v = full_k[b], full_v[b]
        ref, ref_lse = naive.attention(q[None, row:row + ql], k[None], v[None], causal)
        np.testing.assert_allclose(out[row:row + ql], ref[0], atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(lse[:, row:row + ql], ref_lse[0], atol=1e-4, rtol=1e-4)
        row += ql
    # A second plan reuses the workspace; run again with a smaller batch.
    ws = ba.workspace
    ba.plan(q_lens[:2], table.kv_lens()[:2])
    assert ba.workspace is ws
    small = tessera.PageTable(table.kv_indptr[:3], table.kv_indices[:table.kv_indptr[2]], table.kv_last_page_len[:2],
                              ps)
    out2, _ = ba.run(q[:4], cache, small)
    np.testing.assert_allclose(out2, out[:4], atol=1e-5, rtol=1e-5)


def test_batch_attention_empty_and_fully_masked_requests():
    # An empty query, queries that see no key (causal, q_len > kv_len) and a request with no cached
    # key: their rows must come out as O = 0, LSE = -inf.
    heads_q, heads_kv, d, ps = 4, 2, 32, 4
    pool, seqs, cache, table, full_k, full_v = fill_cache("NHD", page_size=ps, heads_kv=heads_kv, head_dim=d,
                                                          lens=(7, 2, 3))
    seqs.append(pool.create_sequence())  # kv_len 0
    full_k.append(np.zeros((0, heads_kv, d), np.float32))
    full_v.append(np.zeros((0, heads_kv, d), np.float32))
    table = pool.page_table(seqs)
    q_lens = [3, 0, 6, 2]
    q = rand(sum(q_lens), heads_q, d)
    ba = tessera.BatchAttention(heads_q, heads_kv, d, dtype="fp32", page_size=ps, causal=True, return_lse=True)
    ba.plan(q_lens, table.kv_lens())
    out, lse = ba.run(q, cache, table)
    row = 0
    for b, ql in enumerate(q_lens):
        ref, ref_lse = naive.attention(q[None, row:row + ql], full_k[b][None], full_v[b][None], True)
        np.testing.assert_allclose(out[row:row + ql], ref[0], atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(lse[:, row:row + ql], ref_lse[0], atol=1e-4, rtol=1e-4)  # -inf only as -inf
        row += ql
    assert np.all(out[3:6] == 0) and np.all(np.isneginf(lse[:, 3:6]))  # rows 0..2 of request 2 see no key
    assert np.all(out[9:] == 0) and np.all(np.isneginf(lse[:, 9:]))


def test_batch_attention_errors():
    ba = tessera.BatchAttention(4, 2, 32, dtype="fp32", page_size=4, max_requests=2, max_q_tokens=16)
    q = rand(3, 4, 32)
    pool, seqs, cache, table, _, _ = fill_cache("NHD", lens=(3,))
    with pytest.raises(ValueError, match=r"workspace: expected plan\(\) to have been called before run\(\)"):
        ba.run(q, cache, table)  # no plan yet
    ba.plan([3], table.kv_lens())
    with pytest.raises(tessera.PlanMismatchError, match="run: q: expected size 3 at dim 0") as e:
        ba.run(rand(5, 4, 32), cache, table)  # 5 query rows, 3 planned
    assert e.value.argument == "q"
    with pytest.raises(ValueError, match="q_lens: expected at most config.max_requests = 2 requests, got 3"):
        ba.plan([1, 1, 1], [1, 1, 1])
    with pytest.raises(tessera.WorkspaceTooSmallError,
                       match=r"workspace: expected at least \d+ bytes .*, got 1 bytes") as e:
        ba.plan([3], table.kv_lens(), workspace=np.empty(1, np.uint8))
    assert e.value.code == "workspace_too_small" and isinstance(e.value, ValueError)
    assert e.value.argument == "workspace"
    with pytest.raises(TypeError, match="dtype"):
        tessera.BatchAttention(4, 2, 32, dtype="float64")
    with pytest.raises(ValueError, match="split"):
        tessera.BatchAttention(4, 2, 32, split="sometimes")
