#!/usr/bin/env python3
# Host emulation of the sm90 backward's stage-2 kernel (src/cuda/sm90/backward/kernel.cuh) for a
# machine without a GPU: its data movement and index arithmetic, not its timing, proxies or
# barriers. Shared memory is an array of 16-bit slots holding float64 values (no rounding);
# wgmma operands are read through the descriptor and 128-byte swizzle rules of wgmma.cuh /
# smem_desc.h, accumulator and register-A fragments as wgmma.cuh documents them, stmatrix .trans
# as stmatrix.cuh does (those rules passed the GPU tests of tests/gpu/test_primitives_sm90.cu).
# The kernel's own address and fragment expressions are transcribed (load_tile, the GEMM
# descriptors and advances, the P/dS steps, the dS stmatrix addresses, the dQ RED indices) and
# the gradients compared with a direct float64 backward: an index slip gives O(1) errors,
# agreement is ~1e-15. schedule_hazards() checks, separately, that the one barrier per step
# orders every conflicting pair of shared-memory accesses across warpgroups (a model of the
# schedule, not of the hardware). It mirrors stage 2 only: update it with the kernel, or delete it once
# the kernel has passed on a GPU.   Usage: python3 scripts/emulate_bwd_sm90.py  (~5 s)
import numpy as np, math, sys

D, Bc, Br = 128, 128, 64
KV_PANEL, Q_PANEL, DS_PANEL = Bc * 128, Br * 128, Br * 128
OFF_K, OFF_V = 0, 2 * KV_PANEL
STAGE = 2 * 2 * Q_PANEL + 2 * DS_PANEL
OFF_Q = OFF_V + 2 * KV_PANEL
OFF_DO = OFF_Q + 2 * Q_PANEL
OFF_DS = OFF_DO + 2 * Q_PANEL
assert (OFF_Q, STAGE, OFF_DS) == (65536, 49152, 98304)
SMEM = OFF_Q + 2 * STAGE

def swz(addr):  # the hardware's 128-byte swizzle on a 1024-aligned atom: bits 4-6 ^= bits 7-9
    return addr ^ (((addr >> 7) & 7) << 4)

def sw128_offset(R, r, ch):  # kernel.cuh bwd::sw128_offset
    return (ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4)

class Smem:
    def __init__(self): self.m = np.full(SMEM // 2, np.nan)
    def load_tile(self, base, R, mat, valid):  # bwd::load_tile: 16-byte chunks, rows >= valid zero
        for r in range(R):
            for ch in range(D // 8):
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
def acc_to_frag(M):  # M: 64 x N -> per thread array [128][N/8][4]
    N = M.shape[1]; f = np.zeros((128, N // 8, 4))
    for t in range(128):
        w, lane = t // 32, t % 32; g, q = lane // 4, lane % 4
        for j in range(N // 8):
            for h in range(2):
                for e in range(2):
                    f[t, j, 2 * h + e] = M[16 * w + g + 8 * h, 8 * j + 2 * q + e]
    return f

def frag_to_acc(f):
    N = f.shape[1] * 8; M = np.zeros((64, N))
    for t in range(128):
        w, lane = t // 32, t % 32; g, q = lane // 4, lane % 4
        for j in range(N // 8):
            for h in range(2):
                for e in range(2):
                    M[16 * w + g + 8 * h, 8 * j + 2 * q + e] = f[t, j, 2 * h + e]
    return M

def pack_weights(f):  # softmax_fragment.cuh pack_weights: a[t][i] = pair (lo, hi)
    T = f.shape[1] // 2; a = np.zeros((128, T, 4, 2))
    for t in range(T):
        a[:, t, 0] = f[:, 2 * t, 0:2]; a[:, t, 1] = f[:, 2 * t, 2:4]
        a[:, t, 2] = f[:, 2 * t + 1, 0:2]; a[:, t, 3] = f[:, 2 * t + 1, 2:4]
    return a

def rs_a_matrix(a, t):  # the A (64 x 16) the hardware sees from register fragments of k-step t
    A = np.full((64, 16), np.nan)
    for th in range(128):
        w, lane = th // 32, th % 32; g, q = lane // 4, lane % 4
        for i, (dr, dk) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8)]):
            A[16 * w + g + dr, 2 * q + dk] = a[th, t, i, 0]
            A[16 * w + g + dr, 2 * q + dk + 1] = a[th, t, i, 1]
    return A

def stmatrix_x4_trans(sm, lane_addrs, regs):  # regs[lane][i] = pair; lane_addrs[lane]
    for i in range(4):
        for r in range(8):
            addr = lane_addrs[8 * i + r]
            for c in range(8):  # stored (r, c) = fragment (c, r): lane 4c + r//2, element r%2
                sm.m[addr // 2 + c] = regs[4 * c + r // 2][i][r % 2]

def visible_keys(seq_q, seq_k, left, right, i):
    diag = i + seq_k - seq_q; lo, hi = 0, seq_k
    if left >= 0 and diag - left > lo: lo = diag - left
    if right >= 0 and diag + right + 1 < hi: hi = diag + right + 1
    if hi < lo: hi = lo
    if lo > seq_k: lo = hi = seq_k
    if hi < 0: lo = hi = 0
    return lo, hi

def run(q_len, k_len, causal, wl, wr, softcap, seed):
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

    dq_acc = np.zeros((q_len, D)); dK = np.zeros((k_len, D)); dV = np.zeros((k_len, D))
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
        sm = Smem()
        sm.load_tile(OFF_K, Bc, np.vstack([K[kv0:kv1], np.zeros((Bc - (kv1 - kv0), D))]), kv1 - kv0)
        sm.load_tile(OFF_V, Bc, np.vstack([V[kv0:kv1], np.zeros((Bc - (kv1 - kv0), D))]), kv1 - kv0)
        dk_f = [np.zeros((128, D // 8, 4)) for _ in range(2)]; dv_f = [np.zeros((128, D // 8, 4)) for _ in range(2)]
        for item, it in enumerate(range(it0, it1)):
            st = item & 1; q0 = it * Br; valid = q_len - q0
            pad = lambda X: np.vstack([X[q0:q0 + Br], np.zeros((max(0, Br - (q_len - q0)), D))])[:Br]
            sQ, sDO, sDS = OFF_Q + st * STAGE, OFF_DO + st * STAGE, OFF_DS + st * STAGE
            sm.load_tile(sQ, Br, pad(Q), valid); sm.load_tile(sDO, Br, pad(dO), valid)
            lse_t = np.array([lse2[q0 + r] if r < valid else 0.0 for r in range(Br)])
            del_t = np.array([Dsum[q0 + r] if r < valid else 0.0 for r in range(Br)])
            need_mask = kv1 < kv0 + Bc or not fully_visible(q0, min(q0 + Br, q_len), kv0, kv1)
            da_all = {}
            for wg in range(2):
                def gemm_kmajor(sM, sY):
                    acc = np.zeros((64, Br))
                    for ks in range(D // 16):
                        off = 32 * (ks % 4)
                        A = kmajor_operand(sm, sM + wg * 64 * 128 + (ks // 4) * KV_PANEL + off, 64)
                        B = kmajor_operand(sm, sY + (ks // 4) * Q_PANEL + off, Br)  # N rows x 16
                        acc += A @ B.T
                    return acc_to_frag(acc)
                def gemm_rs(acc_f, a, sY):
                    acc = frag_to_acc(acc_f)
                    for t in range(Br // 16):
                        acc += rs_a_matrix(a, t) @ mnmajor_operand(sm, sY + 2048 * t, Q_PANEL, D)
                    return acc_to_frag(acc)
                s = gemm_kmajor(OFF_K, sQ)
                general = need_mask or softcap > 0
                for th in range(128):
                    w, lane = th // 32, th % 32; g, q4 = lane // 4, lane % 4
                    kv_row_t = 64 * wg + 16 * w + g
                    for n in range(Br // 8):
                        for e in range(2):
                            col = n * 8 + 2 * q4 + e
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
                dv_f[wg] = gemm_rs(dv_f[wg], pa, sDO)
                dp = gemm_kmajor(OFF_V, sDO)
                for th in range(128):
                    lane = th % 32; q4 = lane % 4
                    for n in range(Br // 8):
                        t, hi_ = n // 2, (n % 2) * 2
                        pf = [pa[th, t, hi_], pa[th, t, hi_ + 1]]
                        for e in range(2):
                            col = n * 8 + 2 * q4 + e
                            for hr in range(2):
                                pv = pf[hr][e]
                                ds = pv * (dp[th, n, 2 * hr + e] - del_t[col])
                                if softcap > 0 and pv > 0:
                                    tt = (math.log2(pv) + lse_t[col]) * (0.6931471805599453 / softcap)
                                    ds *= 1 - tt * tt
                                dp[th, n, 2 * hr + e] = ds
                da = pack_weights(dp)
                dk_f[wg] = gemm_rs(dk_f[wg], da, sQ)
                da_all[wg] = da
            # stmatrix .trans of dS^T (both warpgroups), then the dQ GEMM
            for wg in range(2):
                da = da_all[wg]
                for w in range(4):
                    for t in range(Br // 16):
                        addrs, regs = [], []
                        for lane in range(32):
                            mi, r = lane >> 3, lane & 7
                            chunk = 2 * w + (mi & 1)
                            addrs.append(sDS + wg * DS_PANEL + (8 * (mi >> 1) + r) * 128 + ((chunk ^ r) << 4) + t * 16 * 128)
                            regs.append([da[128 * 0 + 32 * w + lane, t, i] for i in range(4)])
                        stmatrix_x4_trans(sm, addrs, regs)
            for wg in range(2):
                acc = np.zeros((64, 64))
                for ks in range(Bc // 16):
                    A = kmajor_operand(sm, sDS + (ks // 4) * DS_PANEL + 32 * (ks % 4), 64)
                    B = mnmajor_operand(sm, OFF_K + wg * KV_PANEL + 2048 * ks, KV_PANEL, 64)
                    acc += A @ B
                f = acc_to_frag(acc)
                for th in range(128):
                    w, lane = th // 32, th % 32; g, q4 = lane // 4, lane % 4
                    for hr in range(2):
                        r = 16 * w + g + 8 * hr
                        if q0 + r < q_len:
                            for n in range(8):
                                dq_acc[q0 + r, 64 * wg + 8 * n + 2 * q4] += f[th, n, 2 * hr]
                                dq_acc[q0 + r, 64 * wg + 8 * n + 2 * q4 + 1] += f[th, n, 2 * hr + 1]
        for wg in range(2):
            dk_m, dv_m = frag_to_acc(dk_f[wg]), frag_to_acc(dv_f[wg])
            for rr in range(64):
                j = kv0 + 64 * wg + rr
                if j < k_len:
                    dK[j] = dk_m[rr] * scale; dV[j] = dv_m[rr]
    dQ = dq_acc * scale
    errs = [np.nanmax(np.abs(a - b)) if a.size else 0.0 for a, b in ((dQ, dQ_ref), (dK, dK_ref), (dV, dV_ref))]
    bad = any(not (e < 1e-9) for e in errs) or any(np.isnan(x).any() for x in (dQ, dK, dV))
    print(f"q{q_len} k{k_len} causal={causal} win=({wl},{wr}) cap={softcap}: dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} {'FAIL' if bad else 'ok'}")
    return not bad

def schedule_hazards(n_items=7, ds_buffers=2):
    """Happens-before model of the one-barrier-per-step schedule (review addition): returns the
    pairs of conflicting shared-memory accesses by different warpgroups (or a cp.async and
    anyone) that no barrier orders. Program positions per warpgroup: step i's GEMMs and
    elementwise work at 3i (read Q/dO/LSE2/D[st], K, V; write its own dS[st] panel), B(i) at
    3i + 1, the dQ part at 3i + 2 (read both dS[st] panels and K; issue item i+2's cp.async into
    stage st, in flight until the issuer's wait before B(i+1)); step 0's wait + barrier at -1.
    Copies of different threads hit disjoint chunks, so only dS is checked for write/write."""
    bars = [-1] + [3 * i + 1 for i in range(n_items)]
    ev = []  # (warpgroup, first position, last position, buffer, kind)
    for w in range(2):
        for buf in ("Q", "dO", "LSE2", "D"):
            ev.append((w, -3, -2, (buf, 0), "w"))
            if n_items > 1: ev.append((w, -3, 0, (buf, 1), "w"))  # waited for before B(0)
        for i in range(n_items):
            st, ds = i & 1, (i % ds_buffers)
            ev += [(w, 3 * i, 3 * i, (buf, st), "r") for buf in ("Q", "dO", "LSE2", "D")]
            ev.append((w, 3 * i, 3 * i, ("dS", ds, w), "w"))
            ev += [(w, 3 * i + 2, 3 * i + 2, ("dS", ds, c), "r") for c in range(2)]
            if i + 2 < n_items:
                ev += [(w, 3 * i + 2, 3 * i + 3, (buf, st), "w") for buf in ("Q", "dO", "LSE2", "D")]
    def hb(a, b):
        return (a[0] == b[0] and a[2] < b[1]) or any(a[2] < p < b[1] for p in bars)
    bad = []
    for x, a in enumerate(ev):
        for b in ev[x + 1:]:
            if a[3] != b[3] or (a[4] == "r" and b[4] == "r"): continue
            if a[4] == b[4] == "w" and a[3][0] != "dS": continue
            if not (hb(a, b) or hb(b, a)): bad.append((a, b))
    return bad

ok = True
hz = schedule_hazards()
print(f"schedule (2 dS buffers): {len(hz)} unordered conflicting accesses {'ok' if not hz else 'FAIL'}")
ok &= not hz
hz1 = schedule_hazards(ds_buffers=1)  # control: one dS buffer must race (dQ of step i vs dS of step i+1)
print(f"schedule control (1 dS buffer): {len(hz1)} unordered {'ok (races found, as expected)' if hz1 else 'FAIL'}")
ok &= bool(hz1)
for args in [(64, 128, False, -1, -1, 0.0), (113, 200, True, -1, -1, 0.0), (17, 300, False, -1, -1, 3.0),
             (200, 113, True, -1, -1, 0.0), (150, 150, False, 40, 8, 0.0), (1, 1, False, -1, -1, 2.0),
             (130, 260, True, 100, -1, 5.0)]:
    ok &= run(*args, seed=1)
print("ALL OK" if ok else "SOME FAILED")
