#!/usr/bin/env python3
# Host emulation of the sm80 backward main kernel at head_dim 128 in its FA2-style warp layout
# (src/cuda/sm80/backward/kernel.cuh with Cfg<128>: WQ = 2, MR = 2, MQ = 2), for a machine
# without a GPU: its data movement and index arithmetic, not its timing. Shared memory is an
# array of 16-bit slots holding float64 values (no rounding). ldmatrix (.x4, .trans) and the
# mma.sync m16n8k16 fragments follow the PTX ISA's documented layouts; the kernel's own address
# expressions are transcribed (swz, chunk_at, load_tile, gemm_xyT, gemm_sy, frag_off and the
# P^T / dS^T stores and read-backs, the dQ A/B addresses and atomic indices, the epilogue).
# Gradients are compared with a direct float64 backward: an index slip gives O(1) errors,
# agreement is ~1e-13. Also checked on every access: 16-byte alignment of ldmatrix rows, no bank
# conflicts (each 8-row ldmatrix phase hits 8 distinct 16-byte bank groups; each warp-wide
# 4-byte store hits 32 distinct banks), and a model of the barrier schedule: the dV/dK GEMMs
# read only P^T/dS^T written this step by their own warp pair (pair barrier), the dS step uses
# its own P (registers, 16-bit rounded), the dQ GEMM reads only dS^T of this step (CTA barrier
# B(i)), and every Q/dO/LSE/D read is of the step being computed: the tiles are written where
# the kernel issues their cp.async (items 0 and 1 before the loop, item i+2 after step i's dQ
# GEMM, into stage i & 1) and tagged with their item.
# Phase order per step (kernel.cuh, head_dim 128): S^T, P, dP^T, dS, P^T + dS^T stores | pair
# barrier | dV, dK | wait + barrier B(i) | dQ GEMM, prefetch of item i+2, dQ reductions. The sm_90
# build's non-deterministic mode skews it (kSkew): warps with qg = 1 issue their share of item i+2
# right after B(i) and run dQ of item i in step i+1, after their P^T + dS^T stores and before the
# pair barrier (on the last step, after B(i) like the others); --sm80 and --det replay the
# unskewed order, --break skew_stage has the deferred dQ read the wrong stage's dS^T.
# Update it with the kernel, or delete it once the kernel has passed on a GPU.
# Usage: python3 scripts/emulate_bwd_sm80.py [--sm80] [--compact] [--det] [--break NAME] [--quick]   (~20 s)
# --sm80 replays the sm_80 build's double-buffered S^T/dP^T GEMM order (kDoubleBuffer) and its
# general copy's P^T stores before the dP^T GEMM (kEarlyPT).
# --compact replays Cfg<128, 1> (Stages = 1: one Q/dO/dS^T stage, 128.5 KB; A100/A30): item 0
# alone is loaded before the loop, item i+1 into stage 0 after barrier B(i), before the dQ GEMM
# (kPrefetchAfterDq is false), and the general copy stores P^T early on every arch
# (kRegMeasures). Cfg<128, 2> (64-row KV tiles, MR = 1: head_dim 256's code path) is not emulated.
import argparse, math, sys
import numpy as np

D, Bc, Br, WQ, MR, MQ = 128, 128, 64, 2, 2, 2  # tiles.h Cfg<128, 0> and Cfg<128, 1>
STAGES = 1 if "--compact" in sys.argv[1:] else 2  # Cfg<128, 1> : Cfg<128, 0>
kRowsW = 16 * MR
kWarpsKV = Bc // kRowsW
kWarps = kWarpsKV * WQ
kQCols, kDCols = Br // WQ, D // WQ
kDqWarpsM = Br // (16 * MQ)
kDqWarpsN = kWarps // kDqWarpsM
kDqCols = D // kDqWarpsN
kTileKV, kTileQ, kTileDS = Bc * D * 2, Br * D * 2, Bc * Br * 2
kStage = 2 * kTileQ + kTileDS
kOffK, kOffV = 0, kTileKV
kOffQ = kOffV + kTileKV
kOffDO = kOffQ + kTileQ
kOffDS = kOffDO + kTileQ
kOffPT = kOffQ + STAGES * kStage
kOffLse = kOffPT + Bc * Br * 2
kSmem = kOffLse + 2 * STAGES * Br * 4
assert (kWarps, kQCols, kDCols, kDqWarpsM, kDqCols, kSmem) == (8, 32, 64, 2, 32, 181248 if STAGES == 2 else 131584)
LOG2E = 1.4426950408889634

lane = np.arange(32)
g, t4 = lane >> 2, lane & 3

BREAK = None  # deliberately broken variants (must fail)
BREAKS = {
    "dq_chunk": "dQ A address without the MQ factor (the 4 x 2 layout's 2 wm)",
    "pt_atom": "P^T / dS^T fragment stores without the 16 m row offset of atom m",
    "sy_swizzle": "gemm_sy A address without the (row & 7) swizzle",
    "epi_atom": "epilogue rows without 16 (mh / 2)",
    "db_buffer": "double-buffered S^T/dP^T GEMM consuming the buffer being refilled (with --sm80)",
    "prefetch_early": "step i+2's Q/dO prefetch issued before the pair barrier (before dV/dK read the stage)",
    "prefetch_stage": "step i+2's Q/dO prefetched into the other stage (the one step i+1 reads)",
    "skew_stage": "the skewed dQ of item i-1 (qg = 1) reads this step's dS^T buffer instead of the other stage's",
}
DOUBLE_BUFFER = False  # --sm80: replay the sm_80 build's double-buffered gemm_xyT
SKEW = False  # the sm_90 build's skewed dQ at Stages = 2, non-deterministic mode (set in main)


def swz(W, r, ch):
    return r * (W * 2) + ((ch ^ (r & 7)) << 4)


def chunk_at(lane_addr, c):
    return (lane_addr ^ ((c & 7) << 4)) + ((c & ~7) << 4)


class Stats:
    ldsm = 0
    stores = 0


class Smem:
    def __init__(self):
        self.v = np.full(kSmem // 2, np.nan)
        self.step = np.full(kSmem // 2, -1)
        self.warp = np.full(kSmem // 2, -1)

    def write(self, slots, vals, step, warp):
        self.v[slots] = vals
        self.step[slots] = step
        self.warp[slots] = warp

    def ldmatrix(self, addr, trans, check=None):
        addr = np.asarray(addr)
        assert addr.shape == (32,) and np.all(addr % 16 == 0), "ldmatrix rows must be 16-byte aligned"
        Stats.ldsm += 1
        out = np.zeros((32, 4, 2))
        for i in range(4):
            rows = addr[8 * i:8 * i + 8]
            assert len(set(((rows >> 4) & 7).tolist())) == 8, "bank conflict in an ldmatrix phase"
            slots = (rows // 2)[:, None] + np.arange(8)[None, :]
            if check is not None:
                check(slots)
            M = self.v[slots]
            assert not np.any(np.isnan(M)), "ldmatrix reads unwritten shared memory"
            if trans:
                out[:, i, 0], out[:, i, 1] = M[2 * t4, g], M[2 * t4 + 1, g]
            else:
                out[:, i, 0], out[:, i, 1] = M[g, 2 * t4], M[g, 2 * t4 + 1]
        return out

    def store32(self, off, v0, v1, step, warp):  # one warp-wide 4-byte store per lane
        off = np.asarray(off)
        assert np.all(off % 4 == 0) and len(set(((off >> 2) & 31).tolist())) == 32, "bank conflict in a store"
        Stats.stores += 1
        self.write(off // 2, v0, step, warp)
        self.write(off // 2 + 1, v1, step, warp)

    def load32(self, off):
        return self.v[off // 2], self.v[off // 2 + 1]


def mma(acc, a, b0, b1):  # acc (32, 4) += A (16x16, fragments a (32,4,2)) . B (16x8, b0/b1 (32,2))
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for e in range(2):
        A[g, 2 * t4 + e] = a[:, 0, e]
        A[g + 8, 2 * t4 + e] = a[:, 1, e]
        A[g, 2 * t4 + 8 + e] = a[:, 2, e]
        A[g + 8, 2 * t4 + 8 + e] = a[:, 3, e]
        B[2 * t4 + e, g] = b0[:, e]
        B[2 * t4 + 8 + e, g] = b1[:, e]
    C = A @ B
    acc[:, 0] += C[g, 2 * t4]
    acc[:, 1] += C[g, 2 * t4 + 1]
    acc[:, 2] += C[g + 8, 2 * t4]
    acc[:, 3] += C[g + 8, 2 * t4 + 1]


def gemm_xyT(sm, sX, x_row0, sY, y_row0, NCOLS, bcheck=None):  # kernel.cuh gemm_xyT<kBf16, D, NCOLS, MR>
    acc = np.zeros((32, MR * NCOLS // 8, 4))
    a_addr = sX + (x_row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (((lane >> 4) ^ (lane & 7)) << 4)
    b_addr = sY + (y_row0 + (lane & 7) + (lane >> 4) * 8) * (D * 2) + ((((lane >> 3) & 1) ^ (lane & 7)) << 4)
    if DOUBLE_BUFFER:  # the sm_80 build's kDoubleBuffer branch: registers a[2][MR], b[2][NP]
        ra, rb = [[None] * MR for _ in range(2)], [[None] * (NCOLS // 16) for _ in range(2)]

        def load(kk, buf):
            for m in range(MR): ra[buf][m] = sm.ldmatrix(chunk_at(a_addr + m * 16 * (D * 2), kk * 2), False)
            for np_ in range(NCOLS // 16): rb[buf][np_] = sm.ldmatrix(chunk_at(b_addr + np_ * 16 * (D * 2), kk * 2), False, bcheck)
        load(0, 0)
        for kk in range(D // 16):
            if kk + 1 < D // 16: load(kk + 1, (kk + 1) & 1)
            cur = (kk + (1 if BREAK == "db_buffer" else 0)) & 1
            for np_ in range(NCOLS // 16):
                for m in range(MR):
                    mma(acc[:, m * (NCOLS // 8) + 2 * np_], ra[cur][m], rb[cur][np_][:, 0], rb[cur][np_][:, 1])
                    mma(acc[:, m * (NCOLS // 8) + 2 * np_ + 1], ra[cur][m], rb[cur][np_][:, 2], rb[cur][np_][:, 3])
        return acc
    for kk in range(D // 16):
        a = [sm.ldmatrix(chunk_at(a_addr + m * 16 * (D * 2), kk * 2), False) for m in range(MR)]
        for np_ in range(NCOLS // 16):
            b = sm.ldmatrix(chunk_at(b_addr + np_ * 16 * (D * 2), kk * 2), False, bcheck)
            for m in range(MR):
                mma(acc[:, m * (NCOLS // 8) + 2 * np_], a[m], b[:, 0], b[:, 1])
                mma(acc[:, m * (NCOLS // 8) + 2 * np_ + 1], a[m], b[:, 2], b[:, 3])
    return acc


def gemm_sy(sm, acc, sA, a_row0, sY, col0, check, bcheck=None):  # kernel.cuh gemm_sy<kBf16, D, Br, kDCols, MR>
    KROWS, NCOLS = Br, kDCols
    r = a_row0 + (lane & 7) + ((lane >> 3) & 1) * 8
    if BREAK == "sy_swizzle":
        a_addr = sA + r * (KROWS * 2) + ((lane >> 4) << 4)
    else:
        a_addr = sA + swz(KROWS, r, lane >> 4)
    b_addr = sY + ((lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (col0 // 8) * 16 + (((lane >> 4) ^ (lane & 7)) << 4)
    for t in range(KROWS // 16):
        a = [sm.ldmatrix(chunk_at(a_addr + m * 16 * (KROWS * 2), 2 * t), False, check) for m in range(MR)]
        for np_ in range(NCOLS // 16):
            b = sm.ldmatrix(chunk_at(b_addr + t * 16 * (D * 2), np_ * 2), True, bcheck)
            for m in range(MR):
                mma(acc[:, m * (NCOLS // 8) + 2 * np_], a[m], b[:, 0], b[:, 1])
                mma(acc[:, m * (NCOLS // 8) + 2 * np_ + 1], a[m], b[:, 2], b[:, 3])


# ---- mask (math/mask.h) ----
class Mask:
    def __init__(self, seq_q, seq_k, causal, wl, wr):
        self.seq_q, self.seq_k = seq_q, seq_k
        self.left = -1 if wl < 0 else wl
        self.right = -1 if wr < 0 else wr
        if causal:
            self.right = 0 if (self.right < 0 or self.right > 0) else self.right

    def visible(self, i):
        diag = i + self.seq_k - self.seq_q
        lo, hi = 0, self.seq_k
        if self.left >= 0 and diag - self.left > lo: lo = diag - self.left
        if self.right >= 0 and diag + self.right + 1 < hi: hi = diag + self.right + 1
        if hi < lo: hi = lo
        if lo > self.seq_k: lo = hi = self.seq_k
        if hi < 0: lo = hi = 0
        return lo, hi

    def of_rows(self, r0, r1):
        if r1 <= r0: return 0, 0
        f, l = self.visible(r0), self.visible(r1 - 1)
        return f[0], (l[1] if l[1] > f[0] else f[0])

    def fully_visible(self, r0, r1, c0, c1):
        if r1 <= r0 or c1 <= c0: return True
        f, l = self.visible(r0), self.visible(r1 - 1)
        return l[0] <= c0 and c1 <= f[1]


def load_tile(sm, base, R, mat, row0, valid, step):  # kernel.cuh load_tile<R, D>: rows >= valid zero
    for r in range(R):
        for ch in range(D // 8):
            off = base + swz(D, r, ch)
            vals = mat[row0 + r, ch * 8:ch * 8 + 8] if r < valid else np.zeros(8)
            sm.write(off // 2 + np.arange(8), vals, step, -2)


def run(case):
    q_len, k_len, hq, hkv_n = case["q"], case["k"], case["hq"], case["hkv"]
    group = hq // hkv_n
    rng = np.random.default_rng(case["seed"])
    Q, dO = rng.standard_normal((hq, q_len, D)), rng.standard_normal((hq, q_len, D))
    K, V = rng.standard_normal((hkv_n, k_len, D)), rng.standard_normal((hkv_n, k_len, D))
    scale, cap = 1.0 / math.sqrt(D), case.get("softcap", 0.0)
    mask = Mask(q_len, k_len, case.get("causal", False), case.get("wl", -1), case.get("wr", -1))

    # ---- float64 reference ----
    vis = np.zeros((q_len, k_len), bool)
    for i in range(q_len):
        lo, hi = mask.visible(i)
        vis[i, lo:hi] = True
    dQr, dKr, dVr = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    lse2, dsum = np.zeros((hq, q_len)), np.zeros((hq, q_len))
    for h in range(hq):
        kh = h // group
        S = Q[h] @ K[kh].T * scale
        T = np.tanh(S / cap) if cap > 0 else None
        Sp = cap * T if cap > 0 else S
        Sm = np.where(vis, Sp, -np.inf)
        mx = Sm.max(axis=1, keepdims=True)
        mx = np.where(np.isfinite(mx), mx, 0.0)
        with np.errstate(divide="ignore"):
            lse = np.log(np.exp(Sm - mx).sum(axis=1)) + mx[:, 0]  # -inf for rows that see nothing
        P = np.where(vis, np.exp(Sp - np.where(np.isfinite(lse), lse, 0.0)[:, None]), 0.0)
        P[~np.isfinite(lse)] = 0.0
        O = P @ V[kh]
        Dv = (dO[h] * O).sum(axis=1)
        dP = dO[h] @ V[kh].T
        dS = P * (dP - Dv[:, None])
        if cap > 0: dS *= 1.0 - T * T
        dQr[h] = dS @ K[kh] * scale
        dKr[kh] += dS.T @ Q[h] * scale
        dVr[kh] += P.T @ dO[h]
        lse2[h] = np.where(np.isfinite(lse), lse * LOG2E, np.inf)  # pre kernel: -inf -> +inf
        dsum[h] = Dv

    # ---- emulated kernel, one CTA per (KV tile, kv head); n_splits = 1, batch 1 ----
    dq_accum = np.zeros(hq * q_len * D)
    dk_out, dv_out = np.full((k_len, hkv_n, D), np.nan), np.full((k_len, hkv_n, D), np.nan)
    n_splits = case.get("splits", 1)  # GQA split groups: fp32 partials per split, summed in order
    hps = group // n_splits
    dk_part, dv_part = np.full(n_splits * k_len * hkv_n * D, np.nan), np.full(n_splits * k_len * hkv_n * D, np.nan)
    step = 0
    n_qt = (q_len + Br - 1) // Br
    for hkv, split in [(a, b) for a in range(hkv_n) for b in range(n_splits)]:
        for j_tile in range((k_len + Bc - 1) // Bc):
            sm = Smem()
            lse_s, del_s = np.zeros((STAGES, Br)), np.zeros((STAGES, Br))
            kv0 = j_tile * Bc
            kv1 = min(kv0 + Bc, k_len)
            tile_keys = lambda it: mask.of_rows(it * Br, min(it * Br + Br, q_len))
            lo, hi = 0, n_qt
            while lo < hi:
                mid = (lo + hi) >> 1
                if tile_keys(mid)[1] > kv0: hi = mid
                else: lo = mid + 1
            it0, hi = lo, n_qt
            while lo < hi:
                mid = (lo + hi) >> 1
                if tile_keys(mid)[0] >= kv1: hi = mid
                else: lo = mid + 1
            it1 = lo
            n_tiles = it1 - it0
            n_items = n_tiles * hps if n_tiles > 0 else 0
            h0 = hkv * group + split * hps
            load_tile(sm, kOffK, Bc, K[hkv], kv0, kv1 - kv0, -1)
            load_tile(sm, kOffV, Bc, V[hkv], kv0, kv1 - kv0, -1)
            dv_acc = np.zeros((kWarps, 32, MR * kDCols // 8, 4))
            dk_acc = np.zeros((kWarps, 32, MR * kDCols // 8, 4))
            stage_item = [None] * STAGES

            def load_item(item, st):  # kernel.cuh load_item: Q, dO, LSE, D of `item` into stage st
                h = h0 + item // n_tiles
                q0 = (it0 + item % n_tiles) * Br
                valid = q_len - q0
                load_tile(sm, kOffQ + st * kStage, Br, Q[h], q0, valid, -(100 + item))
                load_tile(sm, kOffDO + st * kStage, Br, dO[h], q0, valid, -(100 + item))
                for r in range(Br):
                    lse_s[st, r] = lse2[h, q0 + r] if r < valid else 0.0
                    del_s[st, r] = dsum[h, q0 + r] if r < valid else 0.0
                stage_item[st] = item

            def dq_warp(w, item, step, ds_off, prefetch=False):  # kernel.cuh dq_phase
                h = h0 + item // n_tiles
                q0 = (it0 + item % n_tiles) * Br
                st = item & 1 if STAGES == 2 else 0

                def step_check(slots):
                    assert np.all(sm.step[slots] == step), "dQ reads dS^T of another step"
                kN = kDqCols
                wm, wn = w % kDqWarpsM, w // kDqWarpsM
                dq = np.zeros((32, MQ * kN // 8, 4))
                mi = lane >> 3
                wmf = 1 if BREAK == "dq_chunk" else MQ
                a_addr = ds_off + swz(Br, (lane & 7) + (mi >> 1) * 8, 2 * wmf * wm + (mi & 1))
                cb = wn * kN // 8
                b_addr = kOffK + ((lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (cb & ~7) * 16 + \
                    ((((cb & 7) | (lane >> 4)) ^ (lane & 7)) << 4)
                for t in range(Bc // 16):
                    a = [sm.ldmatrix(chunk_at(a_addr + t * 16 * (Br * 2), 2 * mq), True, step_check)
                         for mq in range(MQ)]
                    for np_ in range(kN // 16):
                        bb = sm.ldmatrix(chunk_at(b_addr + t * 16 * (D * 2), np_ * 2), True)
                        for mq in range(MQ):
                            mma(dq[:, mq * (kN // 8) + 2 * np_], a[mq], bb[:, 0], bb[:, 1])
                            mma(dq[:, mq * (kN // 8) + 2 * np_ + 1], a[mq], bb[:, 2], bb[:, 3])
                if prefetch and STAGES == 2 and w == kWarps - 1 and item + 2 < n_items and BREAK != "prefetch_early":
                    load_item(item + 2, st ^ 1 if BREAK == "prefetch_stage" else st)  # after the dQ GEMM
                acc_base = (h * q_len + q0) * D  # (h * total_q + q_gr0 + q0) * D, one batch
                for mq in range(MQ):
                    for hr in range(2):
                        r = 16 * (MQ * wm + mq) + g + 8 * hr
                        ok = q0 + r < q_len
                        for n in range(kN // 8):
                            i = mq * (kN // 8) + n
                            # pair-interleaved columns (kernel.cuh dq_phase): tile n at 16 (n // 2) + 4 t4 + 2 (n % 2)
                            idx = acc_base + r * D + wn * kN + (4 * t4 + (n // 2) * 16 + 2 * (n % 2) if STAGES == 2 else 2 * t4 + n * 8)
                            np.add.at(dq_accum, idx[ok], dq[ok, i, 2 * hr])
                            np.add.at(dq_accum, idx[ok] + 1, dq[ok, i, 2 * hr + 1])

            if n_items > 0: load_item(0, 0)
            if STAGES == 2 and n_items > 1: load_item(1, 1)
            for item in range(n_items):
                step += 1
                st = item & 1 if STAGES == 2 else 0
                h = h0 + item // n_tiles
                it = it0 + item % n_tiles
                q0 = it * Br
                sQ, sDO = kOffQ + st * kStage, kOffDO + st * kStage

                def tile_check(slots, item=item):
                    assert np.all(sm.step[slots] == -(100 + item)), "Q/dO of another step read"
                assert stage_item[st] == item, "LSE/D of another step read"
                ds_off = kOffDS + st * kStage
                need_mask = kv1 < kv0 + Bc or not mask.fully_visible(q0, min(q0 + Br, q_len), kv0, kv1)
                general = need_mask or cap > 0
                roles = []
                for w in range(kWarps):
                    kvg, qg = w % kWarpsKV, w // kWarpsKV
                    kv_row_w, q_col_w, d_col_w = kRowsW * kvg, qg * kQCols, qg * kDCols
                    fo = (kv_row_w + g) * (Br * 2) + 4 * t4 + (((q_col_w // 8) ^ g) << 4)
                    roles.append((kvg, kv_row_w, q_col_w, d_col_w, fo))

                def atom_off(fo, m, n):
                    return (fo ^ (n << 4)) + (0 if BREAK == "pt_atom" else m * 16 * (Br * 2))

                def store_pt(w, fo, s):  # P^T -> smem (kernel.cuh front(): store_pt)
                    for m in range(MR):
                        for n in range(kQCols // 8):
                            i = m * (kQCols // 8) + n
                            off = atom_off(fo, m, n)
                            sm.store32(kOffPT + off, s[:, i, 0], s[:, i, 1], step, w)
                            sm.store32(kOffPT + off + 8 * Br * 2, s[:, i, 2], s[:, i, 3], step, w)

                def pair_check(w):
                    def chk(slots):
                        assert np.all(sm.step[slots] == step), "A operand not written this step"
                        assert np.all(sm.warp[slots] % kWarpsKV == w % kWarpsKV), "A operand from outside the warp pair"
                    return chk

                # per warp: S^T, P, dP^T, dS (own P from registers), then P^T and dS^T -> smem
                for w in range(kWarps):
                    kvg, kv_row_w, q_col_w, d_col_w, fo = roles[w]
                    s = gemm_xyT(sm, kOffK, kv_row_w, sQ, q_col_w, kQCols, tile_check)
                    for n in range(kQCols // 8):
                        for e in range(2):
                            col = q_col_w + n * 8 + 2 * t4 + e
                            l2 = lse_s[st, col]
                            for m in range(MR):
                                i = m * (kQCols // 8) + n
                                vis0 = vis1 = np.ones(32, bool)
                                if general and need_mask:
                                    kr = [mask.visible(q0 + c) for c in col]
                                    j0 = kv0 + kv_row_w + 16 * m + g
                                    j1 = j0 + 8
                                    vis0 = np.array([kr[x][0] <= j0[x] < kr[x][1] for x in range(32)])
                                    vis1 = np.array([kr[x][0] <= j1[x] < kr[x][1] for x in range(32)])
                                for hr in range(2):
                                    x = s[:, i, 2 * hr + e]
                                    v = cap * LOG2E * np.tanh(x * scale / cap) if cap > 0 else x * scale * LOG2E
                                    with np.errstate(invalid="ignore"):
                                        pv = np.exp2(v - l2)
                                    pv = np.where(np.isfinite(l2), pv, 0.0)  # exp2(-inf) = 0
                                    s[:, i, 2 * hr + e] = np.where(vis0 if hr == 0 else vis1, pv, 0.0)
                    # the sm_80 build's general copy stores P^T before the dP^T GEMM (kEarlyPT);
                    # Cfg<128, 1>'s on every arch (kRegMeasures)
                    early_pt = (DOUBLE_BUFFER or STAGES == 1) and general
                    if early_pt:
                        store_pt(w, fo, s)
                    dp = gemm_xyT(sm, kOffV, kv_row_w, sDO, q_col_w, kQCols, tile_check)
                    for i in range(MR * kQCols // 8):
                        m, n = i // (kQCols // 8), i % (kQCols // 8)
                        pf = [(s[:, i, 0], s[:, i, 1]), (s[:, i, 2], s[:, i, 3])]  # pk[i][hr], this thread's
                        for e in range(2):
                            col = q_col_w + n * 8 + 2 * t4 + e
                            de = del_s[st, col]
                            for hr in range(2):
                                pv = pf[hr][e]
                                ds = pv * (dp[:, i, 2 * hr + e] - de)
                                if cap > 0:
                                    pos = pv > 0
                                    with np.errstate(divide="ignore", invalid="ignore"):
                                        tt = (np.log2(np.where(pos, pv, 1.0)) + lse_s[st, col]) * (math.log(2) / cap)
                                    ds = np.where(pos, ds * (1.0 - tt * tt), ds)
                                dp[:, i, 2 * hr + e] = ds
                    if not early_pt:
                        store_pt(w, fo, s)
                    for m in range(MR):
                        for n in range(kQCols // 8):
                            i = m * (kQCols // 8) + n
                            off = atom_off(fo, m, n)
                            sm.store32(ds_off + off, dp[:, i, 0], dp[:, i, 1], step, w)
                            sm.store32(ds_off + off + 8 * Br * 2, dp[:, i, 2], dp[:, i, 3], step, w)
                if BREAK == "prefetch_early" and item + STAGES < n_items:
                    load_item(item + STAGES, st)
                # skewed schedule (kernel.cuh kSkew): qg = 1 runs dQ of item i-1 here, after its front
                # (dS^T(i-1) is in the other stage's block; --break skew_stage reads this step's)
                if SKEW and item > 0:
                    prev_off = kOffDS + ((st if BREAK == "skew_stage" else st ^ 1) * kStage)
                    for w in range(kWarps):
                        if w // kWarpsKV == 1:
                            dq_warp(w, item - 1, step - 1, prev_off)
                # pair barrier; dV += P^T dO, dK += dS^T Q
                for w in range(kWarps):
                    kvg, kv_row_w, q_col_w, d_col_w, fo = roles[w]
                    gemm_sy(sm, dv_acc[w], kOffPT, kv_row_w, sDO, d_col_w, pair_check(w), tile_check)
                    gemm_sy(sm, dk_acc[w], ds_off, kv_row_w, sQ, d_col_w, pair_check(w), tile_check)

                # barrier B(i); Stages = 1: item i+1 into stage 0 (before the dQ GEMM)
                if STAGES == 1 and item + 1 < n_items and BREAK != "prefetch_early":
                    load_item(item + 1, 0)
                # dQ_i += dS K_j, 2 x 4 warps of 32 x 32 (dq_warp above); with the skew, qg = 1 runs it
                # in the next step (above), and its share of item i+2 is issued right after B(i)
                if SKEW and item + 2 < n_items and BREAK != "prefetch_early":
                    load_item(item + 2, st ^ 1 if BREAK == "prefetch_stage" else st)
                for w in range(kWarps):
                    if SKEW and w // kWarpsKV == 1 and item + 1 < n_items:
                        continue  # deferred to step i+1, after its front
                    dq_warp(w, item, step, ds_off, prefetch=not SKEW)

            # epilogue (n_splits == 1): dK * scale, dV
            for w in range(kWarps):
                kvg, kv_row_w, q_col_w, d_col_w, fo = roles[w] if n_items else (
                    w % kWarpsKV, kRowsW * (w % kWarpsKV), 0, (w // kWarpsKV) * kDCols, 0)
                jr = kv0 + kv_row_w + g
                for mh in range(2 * MR):
                    hr, a0 = mh % 2, (mh // 2) * (kDCols // 8)
                    j = jr + (0 if BREAK == "epi_atom" else 16 * (mh // 2)) + 8 * hr
                    ok = j < k_len
                    for n in range(kDCols // 8):
                        c = d_col_w + 2 * t4 + n * 8
                        for e in range(2):
                            if n_splits == 1:
                                dk_out[j[ok], hkv, c[ok] + e] = dk_acc[w][ok, a0 + n, 2 * hr + e] * scale
                                dv_out[j[ok], hkv, c[ok] + e] = dv_acc[w][ok, a0 + n, 2 * hr + e]
                            else:  # ((split * total_k + k_gr0 + j) * heads_kv + hkv) * D + col
                                o = ((split * k_len + j[ok]) * hkv_n + hkv) * D + c[ok] + e
                                dk_part[o] = dk_acc[w][ok, a0 + n, 2 * hr + e] * scale
                                dv_part[o] = dv_acc[w][ok, a0 + n, 2 * hr + e]
    if n_splits > 1:  # post kernel: fixed-order sum of the partials
        dk_out = dk_part.reshape(n_splits, k_len, hkv_n, D).sum(axis=0)
        dv_out = dv_part.reshape(n_splits, k_len, hkv_n, D).sum(axis=0)
    # post kernel: dQ = scale * accumulator, columns read back in order (thread sub: pairs at
    # 16 (sub // 2) + 2 (sub % 2) + 4 k, k = 0..3)
    col = np.arange(D)
    sub, kk, e = col // 8, (col % 8) // 2, col % 2
    phys = (sub // 2) * 16 + 2 * (sub % 2) + 4 * kk + e if STAGES == 2 else col  # layout 0 only (kDqPairs)
    assert sorted(phys) == list(range(D))
    dq = dq_accum.reshape(hq, q_len, D)[:, :, phys] * scale
    errs = {}
    for name, got, ref in (("dQ", dq, dQr), ("dK", dk_out.transpose(1, 0, 2), dKr), ("dV", dv_out.transpose(1, 0, 2), dVr)):
        errs[name] = float(np.max(np.abs(got - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
        if np.any(np.isnan(got)): errs[name] = float("inf")
    return errs, step


CASES = [
    dict(name="q77 k150 GQA 2:1 dense", q=77, k=150, hq=2, hkv=1, seed=1),
    dict(name="q130 k70 causal (bottom-right, 60 rows see nothing)", q=130, k=70, hq=1, hkv=1, causal=True, seed=2),
    dict(name="q100 k190 window (37, 5) softcap 3", q=100, k=190, hq=2, hkv=2, wl=37, wr=5, softcap=3.0, seed=3),
    dict(name="q64 k128 causal softcap 30", q=64, k=128, hq=1, hkv=1, causal=True, softcap=30.0, seed=4),
    dict(name="q90 k200 GQA 4:1 in 2 split groups, causal", q=90, k=200, hq=4, hkv=1, splits=2, causal=True, seed=5),
]


def main():
    global BREAK
    ap = argparse.ArgumentParser()
    ap.add_argument("--break", dest="brk", choices=sorted(BREAKS), help="run a deliberately broken variant")
    ap.add_argument("--quick", action="store_true", help="first case only")
    ap.add_argument("--sm80", action="store_true", help="the sm_80 build's double-buffered gemm_xyT order")
    ap.add_argument("--compact", action="store_true", help="Cfg<128, 1>: Stages = 1 (read at import)")
    ap.add_argument("--det", action="store_true", help="deterministic mode's order (no skewed dQ)")
    a = ap.parse_args()
    if a.brk == "prefetch_stage" and STAGES == 1:
        ap.error("--break prefetch_stage needs two stages (not --compact)")
    global DOUBLE_BUFFER, SKEW
    BREAK, DOUBLE_BUFFER = a.brk, a.sm80
    # kernel.cuh kSkew: sm_90 builds, two stages, not the deterministic mode
    SKEW = STAGES == 2 and not a.sm80 and not a.det
    if a.brk == "skew_stage" and not SKEW:
        ap.error("--break skew_stage needs the skewed schedule (two stages, no --sm80 / --det)")
    print("gemm_xyT order:", "sm_80 build (double-buffered)" if DOUBLE_BUFFER else "sm_90 build (plain loop)")
    print("dQ schedule:", "skewed (qg = 1 one step late)" if SKEW else "every warp after B(i)")
    print(f"stages: {STAGES} (smem {kSmem} B)")
    if BREAK: print(f"broken variant: {BREAK}: {BREAKS[BREAK]}")
    ok = True
    for c in CASES[:1] if a.quick else CASES:
        try:
            errs, steps = run(c)
            good = all(v < 1e-10 for v in errs.values())
            msg = " ".join(f"{k} {v:.2e}" for k, v in errs.items())
        except AssertionError as ex:
            good, steps, msg = False, 0, f"assertion: {ex}"
        ok &= good
        print(f"{'PASS' if good else 'FAIL'}  {c['name']}: {msg} ({steps} steps)")
    print(f"ldmatrix x4 issued: {Stats.ldsm}, warp-wide 4-byte stores: {Stats.stores}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
