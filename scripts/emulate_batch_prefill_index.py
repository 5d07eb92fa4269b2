#!/usr/bin/env python3
"""Host emulation of the sm90 batch-prefill kernel's index logic (src/cuda/sm90/batch/
prefill_kernel.cuh), in float64 numpy: for random paged caches and work items it follows the
kernel's unit walk, the producer's gather (GQA-packed Q rows, K/V rows through the page table,
zero rows outside the item's keys, 128-key tiles aligned to absolute multiples of 128), the
consumers' per-row key ranges and their warpgroup-wide `full` range that skips the per-element
mask, the online softmax per tile, and the epilogue's writes (O and LSE of direct items, fp32
partials of split ones). The result is compared with attention computed directly per (query
row, head) over the item's keys under the request's mask. It checks the indexing, not the
shared-memory layout or the barrier protocol (emulate_batch_prefill_sm90.py).

  python3 scripts/emulate_batch_prefill_index.py [--cases 300] [--seed 1] [--break NAME]

--break: 'full' (the unmasked-tile test ignores the item's key range), 'pack' (the query head
of packed vector n taken as n // rows instead of n % G) must fail.
"""
import argparse
import math
import sys

import numpy as np

BN = 128
D = 16  # head_dim of the emulation (the index logic does not depend on it)


def visible_keys(q_len, k_len, causal, left, right, i):
    right_ = right if right >= 0 else -1
    if causal:
        right_ = 0 if (right_ < 0 or right_ > 0) else right_
    left_ = left if left >= 0 else -1
    diag = i + k_len - q_len
    lo, hi = 0, k_len
    if left_ >= 0 and diag - left_ > lo:
        lo = diag - left_
    if right_ >= 0 and diag + right_ + 1 < hi:
        hi = diag + right_ + 1
    if hi < lo:
        hi = lo
    if lo > k_len:
        lo = hi = k_len
    if hi < 0:
        lo = hi = 0
    return lo, hi


def run_case(rng, brk):
    G = int(rng.choice([1, 3, 4, 5, 8, 24, 256]))
    heads_kv = 1 if G == 256 else int(rng.choice([1, 2]))
    heads_q = G * heads_kv
    page = int(rng.choice([1, 5, 16, 48, 256]))
    causal = bool(rng.integers(2))
    left = int(rng.choice([-1, -1, 40]))
    right = -1 if causal else int(rng.choice([-1, -1, 10]))
    scale = 0.3
    packed = 128
    t_rows = max(1, packed // G)
    n_req = int(rng.integers(1, 4))
    q_lens = [int(rng.choice([1, 2, 5, 17, 40, 113, 300])) for _ in range(n_req)]
    kv_lens = [int(max(0, q + rng.choice([-3, 0, 0, 50, 700]))) for q in q_lens]
    # Paged cache: pages in random order, unowned slots NaN.
    n_pages = sum((k + page - 1) // page for k in kv_lens) + 3
    K = np.full((n_pages, page, heads_kv, D), np.nan)
    V = np.full((n_pages, page, heads_kv, D), np.nan)
    perm = list(rng.permutation(n_pages))
    tables = []
    Kd, Vd = [], []
    for k in kv_lens:
        np_ = (k + page - 1) // page
        pg = [int(perm.pop()) for _ in range(np_)]
        tables.append(pg)
        kd = rng.standard_normal((k, heads_kv, D))
        vd = rng.standard_normal((k, heads_kv, D))
        for j in range(k):
            K[pg[j // page], j % page] = kd[j]
            V[pg[j // page], j % page] = vd[j]
        Kd.append(kd)
        Vd.append(vd)
    Q = [rng.standard_normal((q, heads_q, D)) for q in q_lens]
    # Items: tiles of t_rows rows, optionally split into chunks of `chunk` keys (multiples of 64).
    chunk = int(rng.choice([0, 64, 96, 192]))
    items = []
    prow = 0
    for b in range(n_req):
        for q0 in range(0, q_lens[b], t_rows):
            q1 = min(q_lens[b], q0 + t_rows)
            f = visible_keys(q_lens[b], kv_lens[b], causal, left, right, q0)
            l_ = visible_keys(q_lens[b], kv_lens[b], causal, left, right, q1 - 1)
            kb, ke = f[0], max(l_[1], f[0])
            if ke <= kb:
                kb = ke = 0
            if chunk and ke - kb > chunk:
                for c, s0 in enumerate(range(kb, ke, chunk)):
                    for h in range(heads_kv):
                        items.append(dict(req=b, kvh=h, q0=q0, q1=q1, kb=s0, ke=min(ke, s0 + chunk), prow=prow + c * (q1 - q0)))
                prow += ((ke - kb + chunk - 1) // chunk) * (q1 - q0)
            else:
                for h in range(heads_kv):
                    items.append(dict(req=b, kvh=h, q0=q0, q1=q1, kb=kb, ke=ke, prow=-1))
    items = [it for it in items if (it["q1"] - it["q0"]) * G > 16]  # the prefill-shaped ones
    row_blocks = max(1, -(-t_rows * G // packed))
    out = {}
    partial = {}
    for u in range(len(items) * row_blocks):
        it = items[u // row_blocks]
        rb = u % row_blocks
        row0 = rb * 128
        n_rows = min(128, (it["q1"] - it["q0"]) * G - row0)
        if n_rows <= 0:
            continue
        t0 = it["kb"] // BN
        n_tiles = (it["ke"] + BN - 1) // BN - t0 if it["ke"] > it["kb"] else 0
        b, kvh = it["req"], it["kvh"]
        ql, kl = q_lens[b], kv_lens[b]
        # producer: Q rows (packed), zero past the unit
        Qt = np.zeros((128, D))
        for r in range(n_rows):
            n = row0 + r
            qr = it["q0"] + n // G
            h = kvh * G + (n // max(1, n_rows) if brk == "pack" else n % G)
            Qt[r] = Q[b][qr, h]
        # consumers: per-row keys, warpgroup `full`
        keys = []
        for r in range(128):
            if r < n_rows:
                lo, hi = visible_keys(ql, kl, causal, left, right, it["q0"] + (row0 + r) // G)
                keys.append((max(lo, it["kb"]), min(hi, it["ke"])))
            else:
                keys.append((it["kb"], it["ke"]))
        full = []
        for c in range(2):
            first_row, wg_rows = 64 * c, min(64, n_rows - 64 * c)
            fb, fe = it["kb"], it["ke"]
            if wg_rows > 0:
                f = visible_keys(ql, kl, causal, left, right, it["q0"] + (row0 + first_row) // G)
                l_ = visible_keys(ql, kl, causal, left, right, it["q0"] + (row0 + first_row + wg_rows - 1) // G)
                fb, fe = (l_[0], f[1]) if brk == "full" else (max(l_[0], it["kb"]), min(f[1], it["ke"]))
            full.append((fb, fe))
        m = np.full(128, -np.inf)
        lsum = np.zeros(128)
        O = np.zeros((128, D))
        for i in range(n_tiles):
            n0 = (t0 + i) * BN
            Kt = np.zeros((BN, D))
            Vt = np.zeros((BN, D))
            for r in range(BN):
                j = n0 + r
                if it["kb"] <= j < it["ke"]:
                    pg = tables[b][j // page]
                    Kt[r] = K[pg, j % page, kvh]
                    Vt[r] = V[pg, j % page, kvh]
            Sx = Qt @ Kt.T * scale
            for r in range(128):
                c = r // 64
                masked = not (full[c][0] <= n0 and n0 + BN <= full[c][1])
                s = Sx[r].copy()
                if masked:
                    cols = np.arange(n0, n0 + BN)
                    s[(cols < keys[r][0]) | (cols >= keys[r][1])] = -np.inf
                mx = max(m[r], s.max())
                if mx == -np.inf:
                    continue
                alpha = math.exp(m[r] - mx) if m[r] != -np.inf else 0.0
                p = np.exp(s - mx)
                O[r] = O[r] * alpha + p @ Vt
                lsum[r] = lsum[r] * alpha + p.sum()
                m[r] = mx
        for r in range(n_rows):
            n = row0 + r
            qr = n // G
            h = kvh * G + n % G
            o = O[r] / lsum[r] if lsum[r] > 0 else np.zeros(D)
            lse = m[r] + math.log(lsum[r]) if lsum[r] > 0 else -np.inf
            key = (b, it["q0"] + qr, h)
            if it["prow"] < 0:
                assert key not in out, f"row {key} written twice"
                out[key] = (o, lse)
            else:
                partial.setdefault(key, []).append((it["kb"], o, lse))
    # merge partials in KV order (LSE merge) and compare with direct attention
    for key, parts in partial.items():
        parts.sort(key=lambda x: x[0])
        lses = np.array([p[2] for p in parts])
        mx = lses.max()
        if mx == -np.inf:
            out[key] = (np.zeros(D), -np.inf)
            continue
        w = np.exp(lses - mx)
        o = sum(wi * p[1] for wi, p in zip(w, parts)) / w.sum()
        out[key] = (o, mx + math.log(w.sum()))
    worst = 0.0
    for b in range(n_req):
        for i in range(q_lens[b]):
            for h in range(heads_q):
                lo, hi = visible_keys(q_lens[b], kv_lens[b], causal, left, right, i)
                got = out.get((b, i, h))
                if (q_lens[b] * 0 + 1) and got is None:
                    # a decode-shaped item (<= 16 vectors) is not this kernel's: skip such rows
                    tile_rows = min(t_rows, q_lens[b] - (i // t_rows) * t_rows)
                    if tile_rows * G <= 16:
                        continue
                    raise AssertionError(f"row (req {b}, q {i}, head {h}) never written")
                kvh = h // G
                if hi <= lo:
                    ref_o, ref_l = np.zeros(D), -np.inf
                else:
                    s = Kd[b][lo:hi, kvh] @ Q[b][i, h] * scale
                    mx = s.max()
                    p = np.exp(s - mx)
                    ref_o = p @ Vd[b][lo:hi, kvh] / p.sum()
                    ref_l = mx + math.log(p.sum())
                if not (np.all(np.isfinite(got[0]))):
                    raise AssertionError(f"non-finite O at (req {b}, q {i}, head {h})")
                err = np.abs(got[0] - ref_o).max()
                lerr = 0.0 if (ref_l == -np.inf and got[1] == -np.inf) else abs(got[1] - ref_l)
                worst = max(worst, err, lerr)
                if err > 1e-9 or lerr > 1e-9:
                    raise AssertionError(f"(req {b}, q {i}, head {h}): O err {err:.3g}, LSE {got[1]} vs {ref_l}")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--break", dest="brk", choices=["full", "pack"], default=None)
    ap.add_argument("--bn", type=int, default=128, choices=[64, 128],
                    help="keys per tile: 128 (fat policy), 64 (slim, TESSERA_CUDA_BATCH=sm90-coresident)")
    a = ap.parse_args()
    global BN
    BN = a.bn
    rng = np.random.default_rng(a.seed)
    fails = 0
    worst = 0.0
    for c in range(a.cases):
        try:
            worst = max(worst, run_case(rng, a.brk))
        except AssertionError as e:
            fails += 1
            if fails <= 3:
                print(f"case {c}: {e}")
    print(f"{a.cases} cases, {fails} failures, worst error {worst:.2g}" + (f" (--break {a.brk})" if a.brk else ""))
    return (1 if fails else 0) if not a.brk else (0 if fails else 1)


if __name__ == "__main__":
    sys.exit(main())
