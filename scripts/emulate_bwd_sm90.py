#!/usr/bin/env python3
# Host emulation of the sm90 backward kernel (src/cuda/sm90/backward/kernel.cuh) at head_dim 64,
# 128 and 256, for a machine without a GPU: its data movement and index arithmetic, not its
# timing, proxies or barriers. Shared memory is an array of 16-bit slots holding float64 values
# (no rounding); wgmma operands are read through the descriptor and 128-byte swizzle rules of
# wgmma.cuh / smem_desc.h, accumulator and register-A fragments as wgmma.cuh documents them,
# stmatrix (plain and .trans) as stmatrix.cuh does (those rules passed the GPU tests of
# tests/gpu/test_*_sm90.cu; the N = 32 SS wgmma of d256 is the same K-major rule with
# 32 B rows and has its own, not yet run, GPU test). The kernel's own address and fragment
# expressions are transcribed (Cfg mirrors BwdTraits; load_tile, the GEMM descriptors and
# advances, the P/dS steps, the stmatrix addresses, the dQ RED indices, the dK/dV epilogue) and
# the gradients compared with a direct float64 backward: an index slip gives O(1) errors,
# agreement is ~1e-15. Deliberately broken variants (MUTANTS) must fail it, so that the check
# is known to see the transcribed expressions. schedule_hazards() checks, separately, that the
# barriers of each schedule order every conflicting pair of shared-memory accesses across
# warpgroups (a model of the schedule, not of the hardware), with controls that must race.
# Update it with the kernel, or delete it once the kernel has passed on a GPU.
#   Usage: python3 scripts/emulate_bwd_sm90.py [64|128|256 ...]  (~1 min for all)
import numpy as np, math, sys

class Cfg:  # kernel_traits.cuh BwdTraits<D>
    def __init__(self, D):
        self.D = D
        self.split = D == 256                       # kSplitN
        self.Bc = 64 if self.split else 128
        self.Br = 128 if D == 64 else 64
        self.SN = self.Br // 2 if self.split else self.Br   # kSN
        self.DN = D // 2 if self.split else D               # kDN
        self.dq_split_rows = self.Br == 128                  # kDqSplitRows
        self.DQN = D * self.Br // 128                        # kDqN
        self.KV_PANEL, self.Q_PANEL = self.Bc * 128, self.Br * 128
        self.DS_PANEL, self.PT_PANEL = self.Br * 128, self.Bc * 128
        panels = D // 64
        kv_bytes, q_bytes = panels * self.KV_PANEL, panels * self.Q_PANEL
        ds_bytes, pt_bytes = (self.Bc // 64) * self.DS_PANEL, (self.Br // 64) * self.PT_PANEL
        self.OFF_K, self.OFF_V = 0, kv_bytes
        self.STAGE = 2 * q_bytes + (0 if self.split else ds_bytes)
        self.OFF_Q = self.OFF_V + kv_bytes
        self.OFF_DO = self.OFF_Q + q_bytes
        self.OFF_DS = self.OFF_Q + 2 * self.STAGE if self.split else self.OFF_DO + q_bytes
        self.OFF_PT = self.OFF_Q + 2 * self.STAGE + (ds_bytes if self.split else 0)
        self.OFF_DST = self.OFF_PT + (pt_bytes if self.split else 0)
        self.OFF_LSE = self.OFF_DST + (pt_bytes if self.split else 0)
        self.SMEM = self.OFF_LSE + 2 * 2 * self.Br * 4
        assert self.SMEM + 1024 <= 227 * 1024
        for o in (self.OFF_Q, self.STAGE, self.OFF_DS, self.OFF_PT, self.OFF_DST, self.OFF_LSE):
            assert o % 1024 == 0

# The figures the kernel_traits.cuh comment gives (kSmemBytes = SMEM + 1024).
assert Cfg(128).SMEM + 1024 == 165888 and (Cfg(128).OFF_Q, Cfg(128).STAGE, Cfg(128).OFF_DS) == (65536, 49152, 98304)
assert Cfg(64).SMEM + 1024 == 166912 and Cfg(256).SMEM + 1024 == 223232

MUTANT = None  # name of the deliberate defect being tried (see MUTANTS), None for the kernel

def swz(addr):  # the hardware's 128-byte swizzle on a 1024-aligned atom: bits 4-6 ^= bits 7-9
    return addr ^ (((addr >> 7) & 7) << 4)

def sw128_offset(R, r, ch):  # kernel.cuh bwd::sw128_offset
    return (ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4)

class Smem:
    def __init__(self, c): self.c = c; self.m = np.full(c.SMEM // 2, np.nan)
    def load_tile(self, base, R, mat, valid):  # bwd::load_tile: 16-byte chunks, rows >= valid zero
        for r in range(R):
            for ch in range(self.c.D // 8):
                off = base + sw128_offset(R, r, ch)
                vals = mat[r, ch * 8:ch * 8 + 8] if r < valid else np.zeros(8)
                self.m[off // 2: off // 2 + 8] = vals
    def read(self, addr): return self.m[addr // 2]

# Descriptor reads for one k16 instruction (start = the advanced start address).
def kmajor_operand(sm, start, rows):  # (rows x 16): element (m, k) at start + (m/8)*1024 + (m%8)*128 + 2k
    m = np.arange(rows)[:, None]; k = np.arange(16)[None, :]
    return sm.read(swz(start + (m // 8) * 1024 + (m % 8) * 128 + 2 * k))

def mnmajor_operand(sm, start, lbo, n_cols):  # (16 x N): element (k, n)
    k = np.arange(16)[:, None]; n = np.arange(n_cols)[None, :]
    return sm.read(swz(start + (n // 64) * lbo + (n % 64) * 2 + (k // 8) * 1024 + (k % 8) * 128))

# Fragments: accumulator d[4j + 2h + e] = (16w + g + 8h, 8j + 2q + e); thread t of a warpgroup.
TH = np.arange(128); W_, G_, Q_ = TH // 32, (TH % 32) // 4, TH % 4
def acc_to_frag(M):  # M: 64 x N -> per thread array [128][N/8][4]
    N = M.shape[1]; f = np.zeros((128, N // 8, 4))
    for j in range(N // 8):
        for h in range(2):
            for e in range(2):
                f[:, j, 2 * h + e] = M[16 * W_ + G_ + 8 * h, 8 * j + 2 * Q_ + e]
    return f

def frag_to_acc(f):
    N = f.shape[1] * 8; M = np.zeros((64, N))
    for j in range(N // 8):
        for h in range(2):
            for e in range(2):
                M[16 * W_ + G_ + 8 * h, 8 * j + 2 * Q_ + e] = f[:, j, 2 * h + e]
    return M

def pack_weights(f):  # softmax_fragment.cuh pack_weights: a[t][i] = pair (lo, hi)
    T = f.shape[1] // 2; a = np.zeros((128, T, 4, 2))
    for t in range(T):
        a[:, t, 0] = f[:, 2 * t, 0:2]; a[:, t, 1] = f[:, 2 * t, 2:4]
        a[:, t, 2] = f[:, 2 * t + 1, 0:2]; a[:, t, 3] = f[:, 2 * t + 1, 2:4]
        if MUTANT == "swap_p_frag": a[:, t, [1, 2]] = a[:, t, [2, 1]]
    return a

def rs_a_matrix(a, t):  # the A (64 x 16) the hardware sees from register fragments of k-step t
    A = np.full((64, 16), np.nan)
    for i, (dr, dk) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8)]):
        A[16 * W_ + G_ + dr, 2 * Q_ + dk] = a[:, t, i, 0]
        A[16 * W_ + G_ + dr, 2 * Q_ + dk + 1] = a[:, t, i, 1]
    return A

def stmatrix_x4(sm, lane_addrs, regs, trans):  # regs[lane][i] = pair; lane_addrs[lane]
    for i in range(4):
        for r in range(8):
            addr = lane_addrs[8 * i + r]
            for c in range(8):
                if trans:  # stored (r, c) = fragment (c, r): lane 4c + r//2, element r%2
                    sm.m[addr // 2 + c] = regs[4 * c + r // 2][i][r % 2]
                else:      # stored (r, c) = fragment (r, c): lane 4r + c//2, element c%2
                    sm.m[addr // 2 + c] = regs[4 * r + c // 2][i][c % 2]

def visible_keys(seq_q, seq_k, left, right, i):
    diag = i + seq_k - seq_q; lo, hi = 0, seq_k
    if left >= 0 and diag - left > lo: lo = diag - left
    if right >= 0 and diag + right + 1 < hi: hi = diag + right + 1
    if hi < lo: hi = lo
    if lo > seq_k: lo = hi = seq_k
    if hi < 0: lo = hi = 0
    return lo, hi

def run(c, q_len, k_len, causal, wl, wr, softcap, seed, quiet=False):
    D, Bc, Br, SN, DN, DQN = c.D, c.Bc, c.Br, c.SN, c.DN, c.DQN
    rng = np.random.default_rng(seed)
    Q, K, V, dO = (rng.standard_normal((n, D)) for n in (q_len, k_len, k_len, q_len))
    scale = 1 / math.sqrt(D); L2E = 1.4426950408889634
    left = wl if wl >= 0 else -1; right = wr if wr >= 0 else -1
    if causal: right = 0 if (right < 0 or right > 0) else right
    vis = np.zeros((q_len, k_len), bool)
    for i in range(q_len):
        lo, hi = visible_keys(q_len, k_len, left, right, i); vis[i, lo:hi] = True
    # reference (float64)
    S = Q @ K.T * scale
    Sc = softcap * np.tanh(S / softcap) if softcap > 0 else S
    Sm = np.where(vis, Sc, -np.inf)
    mx = Sm.max(axis=1, initial=-np.inf, keepdims=True)
    with np.errstate(invalid='ignore', divide='ignore'):
        lse = (np.log(np.exp(Sm - np.where(np.isfinite(mx), mx, 0)).sum(1, keepdims=True)) + np.where(np.isfinite(mx), mx, 0))
    lse[~np.isfinite(mx)] = -np.inf
    P = np.where(vis, np.exp(Sm - np.where(np.isfinite(lse), lse, 0)), 0.0)
    O = P @ V
    Dsum = (dO * O).sum(1)
    dP = dO @ V.T
    dS = P * (dP - Dsum[:, None])
    if softcap > 0: dS = dS * (1 - np.tanh(S / softcap) ** 2)
    dQ_ref, dK_ref, dV_ref = dS @ K * scale, dS.T @ Q * scale, P.T @ dO
    lse2 = np.where(np.isfinite(lse[:, 0]), lse[:, 0] * L2E, np.inf)

    dq_acc = np.zeros((q_len, D)); dK = np.full((k_len, D), np.nan); dV = np.full((k_len, D), np.nan)
    n_qt = (q_len + Br - 1) // Br
    def tile_keys(it):
        r0 = it * Br; r1 = min(r0 + Br, q_len)
        if r1 <= r0: return 0, 0
        f = visible_keys(q_len, k_len, left, right, r0); l = visible_keys(q_len, k_len, left, right, r1 - 1)
        return f[0], (l[1] if l[1] > f[0] else f[0])
    def fully_visible(r0, r1, c0, c1):
        if r1 <= r0 or c1 <= c0: return True
        f = visible_keys(q_len, k_len, left, right, r0); l = visible_keys(q_len, k_len, left, right, r1 - 1)
        return l[0] <= c0 and c1 <= f[1]
    # Per warpgroup (kernel.cuh): kv_row_wg, q_col_wg, d_col_wg, dq_row_wg, dq_col_wg.
    kv_row_wg = lambda wg: 0 if c.split else 64 * wg
    q_col_wg = lambda wg: (0 if MUTANT == "no_q_col" else SN * wg) if c.split else 0
    d_col_wg = lambda wg: DN * wg if c.split else 0
    dq_row_wg = lambda wg: (0 if MUTANT == "no_dq_row" else 64 * wg) if c.dq_split_rows else 0
    dq_col_wg = lambda wg: 0 if c.dq_split_rows else DQN * wg
    for j_tile in range((k_len + Bc - 1) // Bc):
        kv0 = j_tile * Bc; kv1 = min(kv0 + Bc, k_len)
        lo, hi = 0, n_qt
        while lo < hi:
            mid = (lo + hi) // 2
            if tile_keys(mid)[1] > kv0: hi = mid
            else: lo = mid + 1
        it0 = lo; hi = n_qt
        while lo < hi:
            mid = (lo + hi) // 2
            if tile_keys(mid)[0] >= kv1: hi = mid
            else: lo = mid + 1
        it1 = lo
        sm = Smem(c)
        sm.load_tile(c.OFF_K, Bc, np.vstack([K[kv0:kv1], np.zeros((Bc - (kv1 - kv0), D))]), kv1 - kv0)
        sm.load_tile(c.OFF_V, Bc, np.vstack([V[kv0:kv1], np.zeros((Bc - (kv1 - kv0), D))]), kv1 - kv0)
        dk_f = [np.zeros((128, DN // 8, 4)) for _ in range(2)]; dv_f = [np.zeros((128, DN // 8, 4)) for _ in range(2)]
        for item, it in enumerate(range(it0, it1)):
            st = item & 1; q0 = it * Br; valid = q_len - q0
            pad = lambda X: np.vstack([X[q0:q0 + Br], np.zeros((max(0, Br - (q_len - q0)), D))])[:Br]
            sQ, sDO = c.OFF_Q + st * c.STAGE, c.OFF_DO + st * c.STAGE
            sDS = c.OFF_DS + (0 if c.split else st * c.STAGE)
            sm.load_tile(sQ, Br, pad(Q), valid); sm.load_tile(sDO, Br, pad(dO), valid)
            lse_t = np.array([lse2[q0 + r] if r < valid else 0.0 for r in range(Br)])
            del_t = np.array([Dsum[q0 + r] if r < valid else 0.0 for r in range(Br)])
            need_mask = kv1 < kv0 + Bc or not fully_visible(q0, min(q0 + Br, q_len), kv0, kv1)
            general = need_mask or softcap > 0

            def gemm_kmajor(wg, sM, sY):  # kernel gemm_kmajor: 64 x SN over D
                acc = np.zeros((64, SN))
                a_panel = c.Q_PANEL if MUTANT == "panel_step" else c.KV_PANEL
                for ks in range(D // 16):
                    off = 32 * (ks % 4)
                    A = kmajor_operand(sm, sM + kv_row_wg(wg) * 128 + (ks // 4) * a_panel + off, 64)
                    B = kmajor_operand(sm, sY + q_col_wg(wg) * 128 + (ks // 4) * c.Q_PANEL + off, SN)
                    acc += A @ B.T
                return acc_to_frag(acc)
            def gemm_rs(acc_f, a, sY):  # kernel gemm_rs (d64/d128)
                acc = frag_to_acc(acc_f)
                for t in range(SN // 16):
                    acc += rs_a_matrix(a, t) @ mnmajor_operand(sm, sY + 2048 * t, c.Q_PANEL, DN)
                return acc_to_frag(acc)
            def gemm_ss_mn(wg, acc_f, sX, sY):  # kernel gemm_ss_mn (d256)
                acc = frag_to_acc(acc_f)
                y = sY + (0 if MUTANT == "no_d_col" else (d_col_wg(wg) // 64) * c.Q_PANEL)
                kstep = 1024 if MUTANT == "mn_k_step" else 2048
                for ks in range(Br // 16):
                    A = kmajor_operand(sm, sX + (ks // 4) * c.PT_PANEL + 32 * (ks % 4), 64)
                    acc += A @ mnmajor_operand(sm, y + kstep * ks, c.Q_PANEL, DN)
                return acc_to_frag(acc)
            def store_ds(wg, a, s_dst):  # kernel store_ds: .trans into dS [Br][Bc]
                for w in range(4):
                    for t in range(SN // 16):
                        addrs, regs = [], []
                        for lane in range(32):
                            mi, r = lane >> 3, lane & 7
                            chunk = (kv_row_wg(wg) + 16 * w) // 8 + (mi & 1)
                            xr = (r + 1) & 7 if MUTANT == "ds_chunk" else r
                            addrs.append(s_dst + (chunk // 8) * c.DS_PANEL + (q_col_wg(wg) + 8 * (mi >> 1) + r) * 128 +
                                         (((chunk % 8) ^ xr) << 4) + t * 16 * 128)
                            regs.append([a[32 * w + lane, t, i] for i in range(4)])
                        stmatrix_x4(sm, addrs, regs, True)
            def store_t(wg, a, s_dst):  # kernel store_t (d256): P^T / dS^T [Bc][Br]
                for w in range(4):
                    for t in range(SN // 16):
                        addrs, regs = [], []
                        for lane in range(32):
                            mi, r = lane >> 3, lane & 7
                            chunk = q_col_wg(wg) // 8 + 2 * t + (0 if MUTANT == "pt_chunk" else (mi >> 1))
                            addrs.append(s_dst + (16 * w + 8 * (mi & 1) + r) * 128 + (chunk // 8) * c.PT_PANEL +
                                         (((chunk % 8) ^ r) << 4))
                            regs.append([a[32 * w + lane, t, i] for i in range(4)])
                        stmatrix_x4(sm, addrs, regs, False)

            for wg in range(2):  # up to barrier A(i) (d256) / B(i) (d64, d128)
                s = gemm_kmajor(wg, c.OFF_K, sQ)
                for th in range(128):
                    w, lane = th // 32, th % 32; g, q4 = lane // 4, lane % 4
                    kv_row_t = kv_row_wg(wg) + 16 * w + g
                    for n in range(SN // 8):
                        for e in range(2):
                            col = q_col_wg(wg) + n * 8 + 2 * q4 + e
                            v0 = v1 = True
                            if general and need_mask:
                                b_, e_ = visible_keys(q_len, k_len, left, right, q0 + col)
                                j0 = kv0 + kv_row_t; j1 = j0 + 8
                                v0 = b_ <= j0 < e_; v1 = b_ <= j1 < e_
                            for hr in range(2):
                                x = s[th, n, 2 * hr + e]
                                if general:
                                    vv = softcap * L2E * math.tanh(x * scale / softcap) if softcap > 0 else x * scale * L2E
                                    s[th, n, 2 * hr + e] = 2.0 ** (vv - lse_t[col]) if (v0 if hr == 0 else v1) else 0.0
                                else:
                                    s[th, n, 2 * hr + e] = 2.0 ** (x * scale * L2E - lse_t[col])
                pa = pack_weights(s)
                if c.split: store_t(wg, pa, c.OFF_PT)
                else: dv_f[wg] = gemm_rs(dv_f[wg], pa, sDO)
                dp = gemm_kmajor(wg, c.OFF_V, sDO)
                for th in range(128):
                    lane = th % 32; q4 = lane % 4
                    for n in range(SN // 8):
                        t, hi_ = n // 2, (n % 2) * 2
                        pf = [pa[th, t, hi_], pa[th, t, hi_ + 1]]
                        for e in range(2):
                            col = q_col_wg(wg) + n * 8 + 2 * q4 + e
                            for hr in range(2):
                                pv = pf[hr][e]
                                ds = pv * (dp[th, n, 2 * hr + e] - del_t[col])
                                if softcap > 0 and pv > 0:
                                    tt = (math.log2(pv) + lse_t[col]) * (0.6931471805599453 / softcap)
                                    ds *= 1 - tt * tt
                                dp[th, n, 2 * hr + e] = ds
                da = pack_weights(dp)
                if not c.split: dk_f[wg] = gemm_rs(dk_f[wg], da, sQ)
                store_ds(wg, da, sDS)
                if c.split: store_t(wg, da, c.OFF_DST)
            if c.split:  # after barrier A(i)
                for wg in range(2):
                    dv_f[wg] = gemm_ss_mn(wg, dv_f[wg], c.OFF_PT, sDO)
                    dk_f[wg] = gemm_ss_mn(wg, dk_f[wg], c.OFF_DST, sQ)
            for wg in range(2):  # dQ: rows dq_row_wg.., columns dq_col_wg..
                acc = np.zeros((64, DQN))
                for ks in range(Bc // 16):
                    A = kmajor_operand(sm, sDS + dq_row_wg(wg) * 128 + (ks // 4) * c.DS_PANEL + 32 * (ks % 4), 64)
                    B = mnmajor_operand(sm, c.OFF_K + (dq_col_wg(wg) // 64) * c.KV_PANEL + 2048 * ks, c.KV_PANEL, DQN)
                    acc += A @ B
                f = acc_to_frag(acc)
                for th in range(128):
                    w, lane = th // 32, th % 32; g, q4 = lane // 4, lane % 4
                    for hr in range(2):
                        r = dq_row_wg(wg) + 16 * w + g + 8 * hr
                        if q0 + r < q_len:
                            for n in range(DQN // 8):
                                dq_acc[q0 + r, dq_col_wg(wg) + 8 * n + 2 * q4] += f[th, n, 2 * hr]
                                dq_acc[q0 + r, dq_col_wg(wg) + 8 * n + 2 * q4 + 1] += f[th, n, 2 * hr + 1]
        for wg in range(2):  # epilogue: rows kv0 + kv_row_wg + 16 w + g (+8), columns d_col_wg..
            dk_m, dv_m = frag_to_acc(dk_f[wg]), frag_to_acc(dv_f[wg])
            for rr in range(64):
                j = kv0 + kv_row_wg(wg) + rr
                if j < k_len:
                    dK[j, d_col_wg(wg):d_col_wg(wg) + DN] = dk_m[rr] * scale
                    dV[j, d_col_wg(wg):d_col_wg(wg) + DN] = dv_m[rr]
    dQ = dq_acc * scale
    errs = [np.max(np.abs(a - b)) if a.size else 0.0 for a, b in ((dQ, dQ_ref), (dK, dK_ref), (dV, dV_ref))]
    bad = any(not (e < 1e-9) for e in errs) or any(np.isnan(x).any() for x in (dQ, dK, dV))
    if not quiet:
        print(f"  d{D} q{q_len} k{k_len} causal={causal} win=({wl},{wr}) cap={softcap}: "
              f"dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} {'FAIL' if bad else 'ok'}")
    return not bad

def schedule_hazards(split, n_items=7, ds_buffers=2, end_barrier=True):
    """Happens-before model of the step schedule: returns the pairs of conflicting shared-memory
    accesses by different warpgroups (or a cp.async and anyone) that no barrier orders.
    d64/d128 (split False), one barrier per step: step i's GEMMs and elementwise work at 3i (read
    Q/dO/LSE2/D[st], K, V; write its own dS[st] panel), B(i) at 3i + 1, the dQ part at 3i + 2 (read
    both dS[st] panels and K; issue item i+2's cp.async into stage st, in flight until the
    issuer's wait before B(i+1)). d256 (split True), two barriers per step: part 1 at 4i (read
    Q/dO/LSE2/D[st]; write its own columns of P^T, dS^T and rows of dS, single buffers), A(i) at
    4i + 1, part 2 at 4i + 2 (read both warpgroups' P^T, dS^T, dS and Q/dO[st]), B(i) at 4i + 3,
    then item i+2's cp.async into stage st, in flight until the wait before B(i+1). Step 0's wait
    + barrier at -1. Copies of different threads hit disjoint chunks, so only the stmatrix
    buffers are checked for write/write."""
    per = 4 if split else 3
    bars = [-1] + [per * i + 1 for i in range(n_items)]
    if split and end_barrier: bars += [per * i + 3 for i in range(n_items)]
    ev = []  # (warpgroup, first position, last position, buffer, kind)
    stage_bufs = ("Q", "dO", "LSE2", "D")
    for w in range(2):
        for buf in stage_bufs:
            ev.append((w, -3, -2, (buf, 0), "w"))
            if n_items > 1: ev.append((w, -3, 2.5 if split else 0, (buf, 1), "w"))  # waited before B(0)
        for i in range(n_items):
            st = i & 1
            ev += [(w, per * i, per * i, (buf, st), "r") for buf in stage_bufs]
            if split:
                for buf in ("PT", "dST", "dS"):
                    ev.append((w, per * i, per * i, (buf, 0, w), "w"))
                    ev += [(w, per * i + 2, per * i + 2, (buf, 0, cc), "r") for cc in range(2)]
                ev += [(w, per * i + 2, per * i + 2, (buf, st), "r") for buf in ("Q", "dO")]
                if i + 2 < n_items:
                    ev += [(w, per * i + 3.5, per * i + 6.5, (buf, st), "w") for buf in stage_bufs]
            else:
                ds = i % ds_buffers
                ev.append((w, per * i, per * i, ("dS", ds, w), "w"))
                ev += [(w, per * i + 2, per * i + 2, ("dS", ds, cc), "r") for cc in range(2)]
                if i + 2 < n_items:
                    ev += [(w, per * i + 2, per * i + 3, (buf, st), "w") for buf in stage_bufs]
    def hb(a, b):
        return (a[0] == b[0] and a[2] < b[1]) or any(a[2] < p < b[1] for p in bars)
    bad = []
    for x, a in enumerate(ev):
        for b in ev[x + 1:]:
            if a[3] != b[3] or (a[4] == "r" and b[4] == "r"): continue
            if a[4] == b[4] == "w" and a[3][0] in stage_bufs: continue
            if not (hb(a, b) or hb(b, a)): bad.append((a, b))
    return bad

CASES = {  # (q_len, k_len, causal, window left, right, softcap)
    128: [(64, 128, False, -1, -1, 0.0), (113, 200, True, -1, -1, 0.0), (17, 300, False, -1, -1, 3.0),
          (200, 113, True, -1, -1, 0.0), (150, 150, False, 40, 8, 0.0), (1, 1, False, -1, -1, 2.0),
          (130, 260, True, 100, -1, 5.0)],
    64: [(128, 128, False, -1, -1, 0.0), (129, 255, True, -1, -1, 0.0), (257, 128, False, 100, 20, 4.0),
         (300, 113, True, -1, -1, 0.0), (1, 1, False, -1, -1, 2.0), (40, 300, False, -1, -1, 3.0)],
    256: [(64, 64, False, -1, -1, 0.0), (31, 65, False, -1, -1, 0.0), (63, 127, True, -1, -1, 2.5),
          (113, 17, True, -1, -1, 0.0), (1, 1, False, -1, -1, 2.0), (150, 150, False, 40, 8, 0.0)],
}
# Deliberate defects: each must make some gradient wrong on the case given (d, case).
MUTANTS = [("swap_p_frag", 128, (64, 128, False, -1, -1, 0.0)),   # P^T fragments 1 and 2 swapped
           ("ds_chunk", 128, (64, 128, False, -1, -1, 0.0)),      # wrong XOR in the dS stmatrix address
           ("panel_step", 128, (64, 128, False, -1, -1, 0.0)),    # A panel step of Q, not K/V
           ("ds_chunk", 64, (128, 128, False, -1, -1, 0.0)),
           ("no_dq_row", 64, (128, 128, False, -1, -1, 0.0)),     # dQ rows not split by warpgroup
           ("swap_p_frag", 256, (64, 64, False, -1, -1, 0.0)),
           ("pt_chunk", 256, (64, 64, False, -1, -1, 0.0)),       # P^T / dS^T stmatrix chunk off
           ("no_q_col", 256, (64, 64, False, -1, -1, 0.0)),       # both warpgroups on query cols 0..31
           ("no_d_col", 256, (64, 64, False, -1, -1, 0.0)),       # dV / dK B at column panel 0 for both
           ("mn_k_step", 256, (64, 64, False, -1, -1, 0.0))]      # MN-major k16 step of 8 rows, not 16
# (panel_step is no defect at d64 / d256: there the K/V and Q/dO panels are equally large.)

dims = [int(a) for a in sys.argv[1:]] or [64, 128, 256]
ok = True
for split in (False, True):
    hz = schedule_hazards(split)
    print(f"schedule ({'d256, two barriers' if split else 'd64/d128, 2 dS buffers'}): {len(hz)} unordered "
          f"conflicting accesses {'ok' if not hz else 'FAIL'}")
    ok &= not hz
hz1 = schedule_hazards(False, ds_buffers=1)  # control: one dS buffer must race (dQ of step i vs dS of step i+1)
print(f"schedule control (d64/d128, 1 dS buffer): {len(hz1)} unordered {'ok (races, as expected)' if hz1 else 'FAIL'}")
ok &= bool(hz1)
hz2 = schedule_hazards(True, end_barrier=False)  # control: d256 without B(i) must race
print(f"schedule control (d256 without the end-of-step barrier): {len(hz2)} unordered "
      f"{'ok (races, as expected)' if hz2 else 'FAIL'}")
ok &= bool(hz2)
for d in dims:
    c = Cfg(d)
    print(f"head_dim {d}: Bc {c.Bc} Br {c.Br} kSN {c.SN} kDN {c.DN} kDqN {c.DQN} split {c.split} smem {c.SMEM + 1024}")
    for args in CASES[d]:
        ok &= run(c, *args, seed=1)
for name, d, args in MUTANTS:
    if d not in dims: continue
    MUTANT = name
    caught = not run(Cfg(d), *args, seed=2, quiet=True)
    MUTANT = None
    print(f"mutant {name} at d{d}: {'fails (ok)' if caught else 'PASSES (the emulation does not see it)'}")
    ok &= caught
print("ALL OK" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
