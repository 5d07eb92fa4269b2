// The sm90 backward main kernel (docs/perf/backward_sm90_plan.md, stage 2; head_dim 64 and 256
// from stage 6): the sm80 backward's algorithm (sm80/backward/kernel.cuh) with every GEMM on
// wgmma. Simple on purpose: no warp specialisation, no pingpong, cp.async tile loads (not TMA),
// and a wgmma_wait<0> after every GEMM. See kernel_traits.cuh for tiles and the shared layout.
//
// CTA = (KV tile j of Bc rows, kv head x group split, batch); two warpgroups. Per query tile
// (Br rows) and query head, warpgroup c:
//   S^T  = K_c Q_c^T            wgmma SS, A = K (K-major), B = Q (K-major), 64 x kSN x D
//   P^T  = exp2(S^T * scale*log2e - lse2)   (masked -> 0; softcap as in sm80)
//   dP^T = V_c dO_c^T           wgmma SS, as S^T
//   dS^T = P^T (dP^T - D)  (* (1 - tanh^2) with softcap)
//   dV  += P^T dO               d64/d128: RS, A = P^T packed from registers, B = dO (MN-major)
//   dK  += dS^T Q               d64/d128: RS, B = Q (MN-major)
//                               d256: SS, A = P^T / dS^T from shared memory (both warpgroups'
//                               query columns), B = dO / Q columns [128 c, 128 c + 128)
//   dS^T -> shared memory as dS [Br][Bc] (stmatrix .trans), barrier of the CTA
//   dQ_i += dS K_j              wgmma SS, A = dS (K-major), B = K (MN-major), 64 rows x kDqN
//                               columns per warpgroup; fp32 RED adds into the accumulator the
//                               sm80 postprocess scales and converts.
// d64/d128: K_c, V_c = the warpgroup's 64 KV rows, Q_c, dO_c = all Br query rows. d256: K_c, V_c
// = all 64 KV rows, Q_c, dO_c = query rows [32 c, 32 c + 32).
// The elementwise steps are the sm80 kernel's, formula for formula (P is rounded to 16 bits
// before dS uses it there too), so both paths agree to rounding of the GEMM order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fast_math.cuh"
#include "cuda/common/recompute_p.cuh"
#include "cuda/common/softmax_fragment.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/red.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/stmatrix.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "cuda/backward/backward_args.h"
#include "cuda/backward/cta_work.cuh"
#include "cuda/backward/dq_turn.cuh"
#include "cuda/backward/tile_copy.cuh"
#include "cuda/sm90/backward/kernel_traits.cuh"
#include "math/mask.h"

namespace tessera::cuda::sm90 {
namespace bwd {

// Byte offset of 16-byte chunk `ch` of row `r` in a tile of R rows stored as 128-byte-swizzled
// panels of 8 chunks (kernel_traits.cuh).
template <int R>
__device__ __forceinline__ std::uint32_t sw128_offset(int r, int ch) {
  return static_cast<std::uint32_t>((ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// Copies R rows of W elements (rows past `valid` zero-filled) into a 128-byte-swizzled tile
// (backward::copy_rows_async). kStepRows: stepped row pointers (head_dim 64 and 128; head_dim
// 256 spilled 4 B with them).
template <int R, int W, int kThreads, bool kStepRows = false, typename T>
__device__ __forceinline__ void load_tile(std::uint32_t s_tile, const T* base, std::int64_t tile_off,
                                          std::int64_t row_stride, int valid, int tid) {
  backward::copy_rows_async<R, W, kThreads, kStepRows>(
      s_tile, [](int r, int ch) { return sw128_offset<R>(r, ch); }, base, tile_off, row_stride, valid, tid);
}

}  // namespace bwd

template <typename T, int D>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, 1) backward_kernel(const backward::BwdArgs p) {
  using Tr = BwdTraits<D>;
  constexpr int Bc = Tr::Bc, Br = Tr::Br, kThreads = Tr::kThreads;
  constexpr int kSN = Tr::kSN, kDN = Tr::kDN, kDqN = Tr::kDqN;
  constexpr bool kSplitN = Tr::kSplitN;
  constexpr bool kBf16 = Traits<T>::is_bf16;

  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base (128-byte swizzle atoms and wgmma descriptors need it).
  const std::uint32_t raw_addr = smem_u32(smem_raw);
  const std::uint32_t base = (raw_addr + 1023u) & ~1023u;
  unsigned char* base_ptr = smem_raw + (base - raw_addr);
  const std::uint32_t sK = base + Tr::kOffK, sV = base + Tr::kOffV;
  const float* sLse = reinterpret_cast<const float*>(base_ptr + Tr::kOffLse);
  const float* sDel = reinterpret_cast<const float*>(base_ptr + Tr::kOffDel);

  const int tid = threadIdx.x;
  const int wg = tid / 128;                          // warpgroup
  const int warp = (tid / 32) % 4, lane = tid % 32;  // warp within the warpgroup
  const int g = lane / 4, q4 = lane % 4;

  const int j_tile = blockIdx.x;
  const int hkv = blockIdx.y / p.n_splits, split = blockIdx.y % p.n_splits;
  const int b = blockIdx.z;

  // ---- the CTA's sequence bounds and query tiles: the sm80 kernel's (cuda/backward/cta_work.cuh) ----
  backward::CtaWork<Br> w;
  if (!backward::cta_work<Bc, Br>(p, w)) return;  // CTA-uniform: this tile lies past the sequence
  const int q_len = w.q_len, k_len = w.k_len;
  std::int64_t q_row0 = w.q_row0, k_row0 = w.k_row0, q_gr0 = w.q_gr0, k_gr0 = w.k_gr0;
  const int kv0 = w.kv0, kv1 = w.kv1;
  const math::MaskSpec mask = w.mask;
  const int it0 = w.it0, n_tiles = w.n_tiles, n_items = w.n_items, h0 = w.h0;
  auto tile_keys = [&](int it) { return w.tile_keys(it); };

  const T* qg_ptr = static_cast<const T*>(p.q);
  const T* kg_ptr = static_cast<const T*>(p.k);
  const T* vg_ptr = static_cast<const T*>(p.v);
  const T* dog_ptr = static_cast<const T*>(p.dout);

  // Issues the loads of work item `item` (query head, query tile) into stage `st`. Rows past
  // the sequence are zero (Q, dO, LSE2, D): their P may be non-zero but every product they
  // enter (dV via dO, dS via dP - D = 0, dK via Q) is zero, and their dQ rows are not written.
  auto load_item = [&](int item, int st) {
    const int h = h0 + item / n_tiles;
    const int q0 = (it0 + item % n_tiles) * Br;
    const int valid = q_len - q0;
    const std::int64_t qoff = b * p.q_batch + (q_row0 + q0) * p.q_row + h * p.q_head;
    const std::int64_t dooff = b * p.do_batch + (q_row0 + q0) * p.do_row + h * p.do_head;
    constexpr bool kStepRows = D != 256;  // (load_tile)
    bwd::load_tile<Br, D, kThreads, kStepRows>(base + Tr::kOffQ + st * Tr::kStageBytes, qg_ptr, qoff, p.q_row, valid, tid);
    bwd::load_tile<Br, D, kThreads, kStepRows>(base + Tr::kOffDO + st * Tr::kStageBytes, dog_ptr, dooff, p.do_row, valid, tid);
    static_assert(2 * Br <= kThreads, "one thread per LSE2 / D value");
    if (tid < 2 * Br) {
      const int r = tid % Br;
      const bool ok = r < valid;
      const std::int64_t idx = static_cast<std::int64_t>(h) * p.total_q + q_gr0 + q0 + r;
      const float* src = tid < Br ? p.lse2 : p.dsum;
      const std::uint32_t dst = base + (tid < Br ? Tr::kOffLse : Tr::kOffDel) + (st * Br + r) * 4;
      sm80::cp_async_4_zfill(dst, ok ? src + idx : src, ok);
    }
  };

  // dK, dV: 64 KV rows x kDN columns per warpgroup.
  float dv[kDN / 8][4], dk[kDN / 8][4];
#pragma unroll
  for (int n = 0; n < kDN / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[n][e] = dk[n][e] = 0.0f;
  auto& dv_flat = reinterpret_cast<float(&)[kDN / 2]>(dv);
  auto& dk_flat = reinterpret_cast<float(&)[kDN / 2]>(dk);

  // This warpgroup's first KV row in the tile (M of S^T, dP^T, dK, dV), first query column of its
  // S^T / dP^T, first dK / dV column; and its dQ block (first query row, first column).
  const int kv_row_wg = kSplitN ? 0 : 64 * wg;
  const int q_col_wg = kSplitN ? kSN * wg : 0;
  const int d_col_wg = kSplitN ? kDN * wg : 0;
  const int dq_row_wg = Tr::kDqSplitRows ? 64 * wg : 0;
  const int dq_col_wg = Tr::kDqSplitRows ? 0 : kDqN * wg;
  const int kv_row_t = kv_row_wg + 16 * warp + g;  // this thread's KV rows: kv_row_t, + 8
  const bool softcap_on = p.softcap > 0.0f;

  if (n_items > 0) {
    const std::int64_t koff = b * p.k_batch + (k_row0 + kv0) * p.k_row + hkv * p.k_head;
    const std::int64_t voff = b * p.v_batch + (k_row0 + kv0) * p.v_row + hkv * p.v_head;
    bwd::load_tile<Bc, D, kThreads>(sK, kg_ptr, koff, p.k_row, kv1 - kv0, tid);
    bwd::load_tile<Bc, D, kThreads>(sV, vg_ptr, voff, p.v_row, kv1 - kv0, tid);
    load_item(0, 0);
    sm80::cp_async_commit();
    if (n_items > 1) {
      load_item(1, 1);
      sm80::cp_async_commit();
    }
  }

  for (int item = 0; item < n_items; ++item) {
    const int st = item & 1;
    const int h = h0 + item / n_tiles;
    const int it = it0 + item % n_tiles;
    const int q0 = it * Br;
    if (item == 0) {
      // Step i + 1's tiles are waited for and published by barrier B(i) below; only step 0
      // needs a barrier here. wgmma reads the cp.async bytes through the async proxy: each
      // thread fences its own copies before the barrier.
      if (n_items > 1) sm80::cp_async_wait<1>(); else sm80::cp_async_wait<0>();
      fence_proxy_async_shared_cta();
      __syncthreads();
    }
    // Barrier B(i) of either schedule (what it guards is said where it is called): waits for this
    // thread's copies of step i+1's tiles, fences them (and any generic shared stores) to the async
    // proxy, joins the CTA barrier, then starts step i+2's copies into the stage this step is done with.
    auto barrier_b = [&] {
      if (item + 1 < n_items) sm80::cp_async_wait<0>();
      fence_proxy_async_shared_cta();
      __syncthreads();
      if (item + 2 < n_items) {
        load_item(item + 2, st);
        sm80::cp_async_commit();
      }
    };
    const std::uint32_t sQ = base + Tr::kOffQ + st * Tr::kStageBytes;
    const std::uint32_t sDO = base + Tr::kOffDO + st * Tr::kStageBytes;
    const std::uint32_t sDS = base + Tr::kOffDS + (kSplitN ? 0 : st * Tr::kStageBytes);
    const float* lse_t = sLse + st * Br;
    const float* del_t = sDel + st * Br;
    // Element masking only where the tile is not wholly visible or hangs over k_len.
    const bool need_mask = kv1 < kv0 + Bc || !math::tile_fully_visible(mask, q0, min(q0 + Br, q_len), kv0, kv1);

    // X^T = M_c Y_c^T over head_dim for M = K (S^T) or V (dP^T), Y = Q or dO: both K-major,
    // k16 step ks in panel ks / 4 at byte 32 (ks % 4) of the swizzled rows. A starts at the
    // warpgroup's KV row, B at its first query row (both multiples of 8 rows: 1024-aligned).
    // The addresses are made opaque to the compiler (empty asm) so that it forms each k-step's
    // descriptor at its use instead of hoisting the loop-invariant ones (K, V: 8 x 64 bits
    // each) out of the query-tile loop into registers (the sm90 forward does the same).
    // issue_* only issue a GEMM's wgmmas (the caller fences, commits and waits); gemm_* wrap
    // one GEMM with all three.
    auto issue_kmajor = [&](float (&acc)[kSN / 2], std::uint32_t sM, std::uint32_t sY) {
      std::uint32_t m_addr = sM + kv_row_wg * 128, y_addr = sY + q_col_wg * 128;
      asm volatile("" : "+r"(m_addr), "+r"(y_addr));
      const std::uint64_t da = make_smem_desc_sw128_kmajor(m_addr);
      const std::uint64_t db = make_smem_desc_sw128_kmajor(y_addr);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const std::uint32_t off = 32u * (ks % 4);
        wgmma_ss<kSN, kBf16>(acc, smem_desc_advance(da, (ks / 4) * Tr::kKVPanelBytes + off),
                             smem_desc_advance(db, (ks / 4) * Tr::kQPanelBytes + off), ks > 0);
      }
    };
    auto gemm_kmajor = [&](float (&acc)[kSN / 2], std::uint32_t sM, std::uint32_t sY) {
      wgmma_fence();
      issue_kmajor(acc, sM, sY);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
    };
    // d64/d128: acc (64 KV rows x D) += A Y over the Br query rows, A from registers, Y = dO or Q
    // read MN-major (K = query rows, 16 rows = 2048 bytes per k16 step; N = head_dim over
    // panels).
    auto issue_rs = [&](float (&acc)[kDN / 2], std::uint32_t (&a)[kSN / 16][4], std::uint32_t sY) {
      std::uint32_t y_addr = sY;
      asm volatile("" : "+r"(y_addr));
      const std::uint64_t db = make_smem_desc_sw128_mnmajor(y_addr, Tr::kQPanelBytes);
#pragma unroll
      for (int t = 0; t < kSN / 16; ++t)
        wgmma_rs<kDN, kBf16, true>(acc, a[t], smem_desc_advance(db, 2048u * t), true);
    };
    auto gemm_rs = [&](float (&acc)[kDN / 2], std::uint32_t (&a)[kSN / 16][4], std::uint32_t sY) {
      wgmma_fence();
      issue_rs(acc, a, sY);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
      wgmma_fence_operand(a);  // a stays untouched until the wgmma that reads it has completed
    };
    // d256: acc (64 KV rows x kDN columns from d_col_wg) += X Y, X = P^T or dS^T [Bc][Br] from
    // shared memory (K-major over the Br queries: panel ks / 4, 32 bytes per k16 step), Y = dO or
    // Q read MN-major from column panel d_col_wg / 64 on (N = kDN over kDN / 64 panels).
    auto issue_ss_mn = [&](float (&acc)[kDN / 2], std::uint32_t sX, std::uint32_t sY) {
      std::uint32_t x_addr = sX, y_addr = sY + (d_col_wg / 64) * Tr::kQPanelBytes;
      asm volatile("" : "+r"(x_addr), "+r"(y_addr));
      const std::uint64_t da = make_smem_desc_sw128_kmajor(x_addr);
      const std::uint64_t db = make_smem_desc_sw128_mnmajor(y_addr, Tr::kQPanelBytes);
#pragma unroll
      for (int ks = 0; ks < Br / 16; ++ks)
        wgmma_ss<kDN, kBf16, true>(acc, smem_desc_advance(da, (ks / 4) * Tr::kPTPanelBytes + 32u * (ks % 4)),
                                   smem_desc_advance(db, 2048u * ks), true);
    };
    // stmatrix of packed 16-bit fragments a[t] (64 KV rows of this warpgroup x kSN queries from
    // q_col_wg). Matrix i of k-step t is a[t][i]: KV rows 16 warp + 8 (i & 1) + 0..7 x queries
    // q_col_wg + 16 t + 8 (i >> 1) + 0..7.
    // - to_ds: .trans into dS [Br][Bc] (K-major over keys): lane 8 i + r addresses query row
    //   q_col_wg + 16 t + 8 (i >> 1) + r, keys 8 chunk.. with chunk = (kv_row_wg + 16 warp) / 8 +
    //   (i & 1): chunk % 8 of key panel chunk / 8, XOR r (the row's % 8: q_col_wg, 16 t are
    //   multiples of 8), so + 16 rows per t keeps the swizzle.
    // - else (kSplitN: P^T, dS^T [Bc][Br], K-major over queries): lane 8 i + r addresses KV row
    //   16 warp + 8 (i & 1) + r, query chunk q_col_wg / 8 + 2 t + (i >> 1), XOR r.
    auto store_ds = [&](std::uint32_t (&a)[kSN / 16][4], std::uint32_t s_dst) {
      const int mi = lane >> 3, r = lane & 7;
      const int chunk = (kv_row_wg + 16 * warp) / 8 + (mi & 1);
      const std::uint32_t lane_addr = s_dst + (chunk / 8) * Tr::kDSPanelBytes + (q_col_wg + 8 * (mi >> 1) + r) * 128 +
                                      (((chunk % 8) ^ r) << 4);
#pragma unroll
      for (int t = 0; t < kSN / 16; ++t)
        stmatrix_x4_trans(lane_addr + t * 16 * 128, a[t][0], a[t][1], a[t][2], a[t][3]);
    };
    auto store_t = [&](std::uint32_t (&a)[kSN / 16][4], std::uint32_t s_dst) {
      const int mi = lane >> 3, r = lane & 7;
      const std::uint32_t row_addr = s_dst + (16 * warp + 8 * (mi & 1) + r) * 128;
#pragma unroll
      for (int t = 0; t < kSN / 16; ++t) {
        const int chunk = q_col_wg / 8 + 2 * t + (mi >> 1);
        stmatrix_x4(row_addr + (chunk / 8) * Tr::kPTPanelBytes + (((chunk % 8) ^ r) << 4), a[t][0], a[t][1], a[t][2],
                    a[t][3]);
      }
    };

    // ---- S^T and P^T (in place, fp32) ----
    // d256: dP^T is issued right behind S^T as a second wgmma group, so that the P step below
    // runs while the tensor cores compute dP^T (S^T + dP^T = 32 accumulator registers there; at
    // d64 / d128 the 2 x 64 would not fit beside dK and dV).
    float s[kSN / 8][4], dp[kSN / 8][4];
    if constexpr (kSplitN) {
      wgmma_fence();
      issue_kmajor(reinterpret_cast<float(&)[kSN / 2]>(s), sK, sQ);
      wgmma_commit();
      issue_kmajor(reinterpret_cast<float(&)[kSN / 2]>(dp), sV, sDO);
      wgmma_commit();
      wgmma_wait<1>();  // S^T done; dP^T may still run
      wgmma_fence_operand(reinterpret_cast<float(&)[kSN / 2]>(s));
    } else {
      gemm_kmajor(reinterpret_cast<float(&)[kSN / 2]>(s), sK, sQ);
    }
    // The sm80 kernel's two copies of the elementwise step: straight-line for tiles wholly
    // visible without softcap, per-element tests otherwise; the same expression per element.
    auto p_step = [&](auto general_tag) {
      constexpr bool kGeneral = decltype(general_tag)::value;
#pragma unroll
      for (int n = 0; n < kSN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = q_col_wg + n * 8 + 2 * q4 + e;
          const float lse2 = lse_t[col];
          bool vis0 = true, vis1 = true;
          if (kGeneral && need_mask) {
            const math::KeyRange kr = math::visible_keys(mask, q0 + col);
            const int j0 = kv0 + kv_row_t, j1 = j0 + 8;
            vis0 = j0 >= kr.begin && j0 < kr.end;
            vis1 = j1 >= kr.begin && j1 < kr.end;
          }
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const float x = s[n][2 * hr + e];
            if constexpr (kGeneral) {
              const float v = score_log2(x, softcap_on, p.scale, p.scale_log2, p.softcap);
              s[n][2 * hr + e] = recompute_p(v, lse2, hr == 0 ? vis0 : vis1);
            } else {
              s[n][2 * hr + e] = recompute_p(x * p.scale_log2, lse2);
            }
          }
        }
      }
    };
    if (need_mask || softcap_on) p_step(std::true_type{}); else p_step(std::false_type{});

    // P^T rounded to 16 bits: the A fragments as the forward packs P, kept for the dS step.
    std::uint32_t pa[kSN / 16][4];
    pack_weights<T, kSN>(s, pa);
    // d64: dV and dP^T go out as two groups with one wait (the live registers are those of the
    // dS step anyway: dV, dK, P^T packed, dP^T); d128 keeps them apart (255 registers).
    constexpr bool kMergeDvDp = D == 64;
    if constexpr (kSplitN) {
      store_t(pa, base + Tr::kOffPT);  // both warpgroups' query columns feed dV after barrier A(i)
    } else if constexpr (kMergeDvDp) {
      wgmma_fence();
      issue_rs(dv_flat, pa, sDO);  // ---- dV += P^T dO ----
      wgmma_commit();
      issue_kmajor(reinterpret_cast<float(&)[kSN / 2]>(dp), sV, sDO);
      wgmma_commit();
    } else {
      gemm_rs(dv_flat, pa, sDO);  // ---- dV += P^T dO ----
    }

    // ---- dP^T, then dS^T = P^T (dP^T - D) [* (1 - tanh^2)] ----
    if constexpr (kSplitN || kMergeDvDp) {
      wgmma_wait<0>();
      wgmma_fence_operand(reinterpret_cast<float(&)[kSN / 2]>(dp));
      if constexpr (kMergeDvDp) {
        wgmma_fence_operand(dv_flat);
        wgmma_fence_operand(pa);
      }
    } else {
      gemm_kmajor(reinterpret_cast<float(&)[kSN / 2]>(dp), sV, sDO);
    }
    auto ds_step = [&](auto cap_tag) {
      constexpr bool kCap = decltype(cap_tag)::value;
#pragma unroll
      for (int n = 0; n < kSN / 8; ++n) {
        // This thread's own P^T values of n-tile n, from the packed A fragments (as the sm80
        // kernel reads back its 16-bit P^T).
        const int t = n / 2, hi = (n % 2) * 2;
        const float2 pf[2] = {Traits<T>::unpack2(pa[t][hi]), Traits<T>::unpack2(pa[t][hi + 1])};
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = q_col_wg + n * 8 + 2 * q4 + e;
          const float del = del_t[col];
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const float pv = e == 0 ? pf[hr].x : pf[hr].y;
            float ds = pv * (dp[n][2 * hr + e] - del);
            if (kCap && pv > 0.0f) {
              ds *= softcap_dtanh(pv, lse_t[col], p.softcap);  // tanh recovered from P
            }
            dp[n][2 * hr + e] = ds;
          }
        }
      }
    };
    if (softcap_on) ds_step(std::true_type{}); else ds_step(std::false_type{});

    std::uint32_t da[kSN / 16][4];
    pack_weights<T, kSN>(dp, da);  // dS^T as A fragments, packed as P^T is
    if constexpr (!kSplitN) gemm_rs(dk_flat, da, sQ);  // ---- dK += dS^T Q ----

    // ---- dS^T -> dS [Br query rows][Bc keys] for the dQ GEMM (K-major A, keys = K) ----
    store_ds(da, sDS);

    if constexpr (kSplitN) {
      store_t(da, base + Tr::kOffDST);
      // Barrier A(i): P^T, dS^T and dS of both warpgroups complete (generic-proxy stores that
      // wgmma reads through the async proxy: each thread fences its own first).
      // dV += P^T dO and dK += dS^T Q are issued with the dQ GEMM below.
      fence_proxy_async_shared_cta();
      __syncthreads();
    } else {
      // Barrier B(i): dS complete; every warpgroup is done with this stage's Q/dO/LSE/D (its
      // GEMMs have completed); it also publishes step i+1's tiles. The fence first: dS (stmatrix)
      // and the cp.async bytes are generic-proxy writes that wgmma reads through the async proxy.
      // The dS buffer read below is next written by step i+2, after B(i+1), which no thread
      // passes before its dQ GEMM of this step has completed.
      barrier_b();
    }

    // ---- dQ_i += dS K_j: warpgroup wg computes query rows [dq_row_wg, + 64) x head-dim
    // columns [dq_col_wg, + kDqN) ----
    {
      float dq[kDqN / 8][4];
      auto& dq_flat = reinterpret_cast<float(&)[kDqN / 2]>(dq);
      // A = dS rows from dq_row_wg (K-major over keys: panel ks / 4, 32 bytes per k16 step);
      // B = K (keys x head_dim, MN-major: columns from dq_col_wg are panel dq_col_wg / 64 on,
      // 16 key rows = 2048 bytes per k16 step).
      std::uint32_t ds_addr = sDS + dq_row_wg * 128, k_addr = sK + (dq_col_wg / 64) * Tr::kKVPanelBytes;
      asm volatile("" : "+r"(ds_addr), "+r"(k_addr));  // descriptors formed at their use (see gemm_kmajor)
      const std::uint64_t dsa = make_smem_desc_sw128_kmajor(ds_addr);
      const std::uint64_t kb = make_smem_desc_sw128_mnmajor(k_addr, Tr::kKVPanelBytes);
      wgmma_fence();
      if constexpr (kSplitN) {
        // d256: three groups back to back (one wait): dV += P^T dO, dK += dS^T Q, then dQ.
        issue_ss_mn(dv_flat, base + Tr::kOffPT, sDO);
        wgmma_commit();
        issue_ss_mn(dk_flat, base + Tr::kOffDST, sQ);
        wgmma_commit();
      }
#pragma unroll
      for (int ks = 0; ks < Bc / 16; ++ks)
        wgmma_ss<kDqN, kBf16, true>(dq_flat, smem_desc_advance(dsa, (ks / 4) * Tr::kDSPanelBytes + 32u * (ks % 4)),
                                    smem_desc_advance(kb, 2048u * ks), ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(dq_flat);
      if constexpr (kSplitN) {
        wgmma_fence_operand(dv_flat);
        wgmma_fence_operand(dk_flat);
      }

      int* lock = nullptr;
      if (p.locks != nullptr) {
        // Deterministic: add after exactly the KV tiles below this one that see tile `it`.
        lock = p.locks + static_cast<std::int64_t>(h) * p.lock_stride + q_gr0 / Br + b + it;
        backward::wait_for_dq_turn(lock, j_tile - tile_keys(it).begin / Bc, tid);
      }
      // Accumulator rows: query dq_row_wg + 16 warp + g (+ 8); columns dq_col_wg + 8 n + 2 q4 (+ 1).
      float* acc_base = p.dq_accum + (static_cast<std::int64_t>(h) * p.total_q + q_gr0 + q0) * D;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = dq_row_wg + 16 * warp + g + 8 * hr;
        if (q0 + r < q_len) {
          float* row = acc_base + static_cast<std::int64_t>(r) * D + dq_col_wg + 2 * q4;
#pragma unroll
          for (int n = 0; n < kDqN / 8; ++n) {
            if (lock != nullptr)  // as the sm80 kernel: returning atomics under the counter
              atomicAdd(reinterpret_cast<float2*>(row + n * 8), make_float2(dq[n][2 * hr], dq[n][2 * hr + 1]));
            else
              sm80::red_add_f32x2(row + n * 8, dq[n][2 * hr], dq[n][2 * hr + 1]);
          }
        }
      }
      if (lock != nullptr) {
        backward::pass_dq_turn(lock, tid);
      }
    }

    if constexpr (kSplitN) {
      // Barrier B(i): every warpgroup is done with this step's Q/dO/LSE/D and P^T / dS^T / dS
      // (its GEMMs have completed), so step i+1 may overwrite the single P^T / dS^T / dS buffers
      // and the stage may be refilled; it also publishes step i+1's tiles (fence first, as at
      // A(i)).
      barrier_b();
    }
  }

  // ---- epilogue: dK (times scale) and dV, rows < k_len, columns d_col_wg.. (the sm80 kernel's) ----
  // The sequence's first key row is read again rather than kept live through the loop (as a
  // 64-bit value it cost the bf16 d128 instance a spill).
  if (p.cu_seqlens_k != nullptr) {
    k_row0 = k_gr0 = p.cu_seqlens_k[b];
  } else {
    k_row0 = 0;
    k_gr0 = static_cast<std::int64_t>(b) * p.seq_k;
  }
  const int jr = kv0 + kv_row_t;
  if (p.n_splits == 1) {
    T* dk_out = static_cast<T*>(p.dk);
    T* dv_out = static_cast<T*>(p.dv);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int j = jr + 8 * hr;
      if (j < k_len) {
        const std::int64_t ko = b * p.dk_batch + (k_row0 + j) * p.dk_row + hkv * p.dk_head + d_col_wg + 2 * q4;
        const std::int64_t vo = b * p.dv_batch + (k_row0 + j) * p.dv_row + hkv * p.dv_head + d_col_wg + 2 * q4;
#pragma unroll
        for (int n = 0; n < kDN / 8; ++n) {
          *reinterpret_cast<std::uint32_t*>(dk_out + ko + n * 8) =
              Traits<T>::pack2(dk[n][2 * hr] * p.scale, dk[n][2 * hr + 1] * p.scale);
          *reinterpret_cast<std::uint32_t*>(dv_out + vo + n * 8) = Traits<T>::pack2(dv[n][2 * hr], dv[n][2 * hr + 1]);
        }
      }
    }
  } else {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int j = jr + 8 * hr;
      if (j < k_len) {
        const std::int64_t o =
            ((static_cast<std::int64_t>(split) * p.total_k + k_gr0 + j) * p.heads_kv + hkv) * D + d_col_wg + 2 * q4;
#pragma unroll
        for (int n = 0; n < kDN / 8; ++n) {
          *reinterpret_cast<float2*>(p.dk_part + o + n * 8) = make_float2(dk[n][2 * hr] * p.scale, dk[n][2 * hr + 1] * p.scale);
          *reinterpret_cast<float2*>(p.dv_part + o + n * 8) = make_float2(dv[n][2 * hr], dv[n][2 * hr + 1]);
        }
      }
    }
  }
}

}  // namespace tessera::cuda::sm90
