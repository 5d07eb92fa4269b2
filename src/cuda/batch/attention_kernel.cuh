// The batch-attention kernel: executes the work items of a plan (plan/batch_plan.h) with
// K/V read directly through the page table. Shapes and smem layout: kernel_traits.cuh.
//
// Per unit (work item, block of packed query vectors):
//   prologue  Q (packed vectors, zero-filled past the item's) and the page lookups of the
//             first kStages KV tiles (one lookup per token, into smem), then cp.async of the
//             first kStages - 1 tiles;
//   mainloop  per tile n: wait tile n | issue tile n + kStages - 1 | fetch the page indices of
//             tile n + kStages into registers | S = Q K^T (mma) | mask + online softmax in
//             exp2 | O += P V (mma) | store the prefetched lookups for the next issue;
//   epilogue  merge the KG per-warp states (KG = 4), normalise, and write out/lse (direct
//             items) or the fp32 partial O and LSE of the chunk (split items), 16 bytes a store.
// Semantics: math::MaskSpec per request (seq_q = q_len, seq_k = kv_len, bottom-right causal,
// window), soft cap before masking, keys limited to the item's [kv_begin, kv_end);
// math::OnlineSoftmaxRow for the running state (a row that sees no key: O = 0, LSE = -inf).
#pragma once

#include <math.h>

#include <cstdint>

#include "cuda/batch/batch_args.h"
#include "cuda/batch/kernel_traits.cuh"
#include "cuda/batch/trace.h"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/softcap_score.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/mma.cuh"
#include "cuda/primitives/sm80/special_registers.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "plan/batch_plan.h"

namespace tessera::cuda::batch {

using sm80::cp_async_16_zfill;
using sm80::cp_async_16_zfill_hint;
using sm80::l2_evict_first_policy;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::ldmatrix_x4;
using sm80::ldmatrix_x4_trans;
using sm80::mma_m16n8k16;
using sm80::smem_u32;
using sm80::sreg_ctaid_x;
using sm80::sreg_nctaid_x;
using sm80::sreg_tid_x;

// 2^x on the SFU (fast_math.cuh): the mainloop's only transcendental.
using cuda::fast_exp2;

// Shape of unit u (item u / row_blocks, vector block u % row_blocks, blocks of kUnitRows =
// the prefill shape's vectors): decode-shaped items (<= kDecodeMaxRows packed vectors, one
// unit) run on the KG = 4 path, all others on KG = 1; blocks past an item's vectors
// (row_blocks > 1 only) are empty.
enum class UnitKind { none, decode, prefill };
template <int kUnitRows>
__device__ __forceinline__ UnitKind unit_kind(const BatchArgs& a, int u) {
  const int item = a.row_blocks == 1 ? u : u / a.row_blocks;  // 32-bit: no division call
  const int rb = u - item * a.row_blocks;
  const int2 rows = *reinterpret_cast<const int2*>(&a.items[item].q_begin);  // q_begin, q_end
  const int n = (rows.y - rows.x) * a.group;
  if (n <= kDecodeMaxRows) return rb == 0 ? UnitKind::decode : UnitKind::none;
  return rb * kUnitRows < n ? UnitKind::prefill : UnitKind::none;
}

// Page-table lookup of token j of request (page list `pages`): element offsets of its K and
// V rows for kv head `head`, or -1 past the item's keys (the tile row is zero-filled).
struct TokenOffsets {
  std::int64_t k, v;
};

template <typename Tr>
struct Smem {
  unsigned char* base;
  __device__ __forceinline__ std::uint32_t q() const { return smem_u32(base + Tr::kOffQ); }
  __device__ __forceinline__ std::uint32_t k(int stage) const {
    return smem_u32(base + Tr::kOffStages + stage * Tr::kStageBytes);
  }
  __device__ __forceinline__ std::uint32_t v(int stage) const {
    return smem_u32(base + Tr::kOffStages + stage * Tr::kStageBytes + Tr::kTileBytes);
  }
  // Source addresses of the K and V rows of each token of a stage (see load_kv_tile).
  __device__ __forceinline__ ulonglong2* rows(int stage) const {
    return reinterpret_cast<ulonglong2*>(base + Tr::kOffRowAddrs) + stage * Tr::kBlockN;
  }
  __device__ __forceinline__ float* red() const { return reinterpret_cast<float*>(base + Tr::kOffRed); }
  __device__ __forceinline__ float* stat_m() const { return reinterpret_cast<float*>(base + Tr::kOffStats); }
  __device__ __forceinline__ float* stat_l() const { return stat_m() + Tr::kKG * Tr::kRows; }
  __device__ __forceinline__ float* fin_scale() const { return reinterpret_cast<float*>(base + Tr::kOffFin); }
  __device__ __forceinline__ float* fin_lse() const { return fin_scale() + Tr::kRows; }
};

// Issues the cp.async copies of one K and one V tile whose row addresses are in smem: per token
// {K row address | 1, V row address} (bit 0 marks a token of the item: rows are 16-byte
// aligned, as launch.cu's batch_attention_supported requires of the cache bases and strides),
// or the cache bases for a row past the item's keys (zero-filled, nothing read). The addresses
// were computed once per token (store_row_addresses), not once per 16-byte chunk.
//
// Thread mapping (kWide): 8 lanes per row, lane c copying chunks c, c + 8, c + 16, ... (kChunks / 8 of
// them) of rows r0, r0 + kRowStep, ... (r0 = tid / 8, kRowStep = kThreads / 8). A warp
// instruction thus covers 128 contiguous bytes of each of 4 rows (4 full 128-byte lines, as the
// previous mapping of 16 lanes per 256-byte row did: the same sectors per request), and every
// row address read from shared memory serves kChunks / 8 copies of K and as many of V instead
// of one each. The swizzled destination needs no per-copy arithmetic: (c + 8m) ^ (r & 7) =
// (c ^ (r & 7)) + 8m, and r & 7 is the same for all of a thread's rows (kRowStep is a multiple
// of 8), so copy (row r0 + i kRowStep, chunk c + 8m) lands at the thread's first destination +
// i kRowStep x row bytes + 128 m: immediates. Per row and thread: one 16-byte shared load, the
// validity bit, two 64-bit additions of the lane's chunk offset, 2 x kChunks / 8 copies (at
// head_dim 128: 4 rows x 4 copies a tile instead of 8 rows x 2). Same bytes to the same places
// as before: results are bit-identical. kWide: this mapping, taken by the decode-only instance
// only; the fused and prefill-only instances keep the previous one (one lane per chunk, one
// copy per row, operand and thread; code unchanged) so that the fused kernel, at the register
// cap, keeps its SASS.
template <typename Tr, bool kWide>
__device__ __forceinline__ void load_kv_tile(const Smem<Tr>& sm, int stage, int tid) {
  const ulonglong2* rows = sm.rows(stage);
  if constexpr (kWide) {
    constexpr int kLanesPerRow = 8;                        // 8 x 16 B: one 128-byte line
    constexpr int kPerRow = Tr::kChunks / kLanesPerRow;    // copies per row, operand and thread
    constexpr int kRowStep = Tr::kThreads / kLanesPerRow;  // rows covered by one pass
    constexpr int kPerThread = Tr::kBlockN / kRowStep;     // rows per thread
    constexpr int kRowBytes = Tr::kChunks * 16;
    static_assert(Tr::kChunks % kLanesPerRow == 0 && kRowStep % 8 == 0 && Tr::kBlockN % kRowStep == 0,
                  "whole 128-byte lines per row; a thread's rows share r % 8");
    const int c = tid % kLanesPerRow;
    const int r0 = tid / kLanesPerRow;
    const std::uint32_t dst0 = 2u * static_cast<std::uint32_t>(swizzle<Tr::kChunks>(r0, c));
    const std::uint32_t sk = sm.k(stage) + dst0, sv = sm.v(stage) + dst0;
    const unsigned long long chunk_bytes = 16u * static_cast<unsigned>(c);
    // Decode reads each K/V line once: evict it first, so that it does not displace the L2
    // lines of a prefill kernel running beside it (TESSERA_CUDA_BATCH=sm90-split/-coresident).
    const std::uint64_t policy = l2_evict_first_policy();
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      const ulonglong2 a = rows[r0 + it * kRowStep];
      const bool valid = (a.x & 1ull) != 0;
      const char* ksrc = reinterpret_cast<const char*>((a.x & ~1ull) + chunk_bytes);
      const char* vsrc = reinterpret_cast<const char*>(a.y + chunk_bytes);
      const std::uint32_t row_off = static_cast<std::uint32_t>(it * kRowStep * kRowBytes);
#pragma unroll
      for (int m = 0; m < kPerRow; ++m) {
        cp_async_16_zfill_hint(sk + row_off + 128u * m, ksrc + 128 * m, valid, policy);
        cp_async_16_zfill_hint(sv + row_off + 128u * m, vsrc + 128 * m, valid, policy);
      }
    }
  } else {
    constexpr int kRowStep = Tr::kThreads / Tr::kChunks;
    constexpr int kPerThread = Tr::kBlockN / kRowStep;
    const int c = tid % Tr::kChunks;
    const int r0 = tid / Tr::kChunks;
    const std::uint32_t sk = sm.k(stage), sv = sm.v(stage);
    const unsigned long long chunk_bytes = 16u * static_cast<unsigned>(c);
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      const int r = r0 + it * kRowStep;
      const ulonglong2 a = rows[r];
      const bool valid = (a.x & 1ull) != 0;
      const std::uint32_t dst = 2u * static_cast<std::uint32_t>(swizzle<Tr::kChunks>(r, c));
      cp_async_16_zfill(sk + dst, reinterpret_cast<const void*>((a.x & ~1ull) + chunk_bytes), valid);
      cp_async_16_zfill(sv + dst, reinterpret_cast<const void*>(a.y + chunk_bytes), valid);
    }
  }
}

// Swizzled ldmatrix addresses without per-(row, chunk) registers. With rows of D * 2 bytes
// (a multiple of 128) at 128-byte aligned tiles, swizzle() puts 16-byte chunk c of row r at
//   tile + r * 2D + (((c & 7) ^ (r & 7)) << 4) + ((c >> 3) << 7).
// A lane's base folds in its row and the lane-dependent chunk bits x (< 8):
//   base = tile + r * 2D + (((r & 7) ^ x) << 4);
// then chunk x ^ cc (cc a compile-time constant with cc & x == 0) of row r + 16 i is at
//   (base ^ ((cc & 7) << 4)) + ((cc >> 3) << 7) + 16 i * 2D,
// one XOR with an immediate and an immediate offset per ldmatrix.
template <int D>
__device__ __forceinline__ std::uint32_t lane_base(std::uint32_t tile, int row, int x) {
  return tile + static_cast<std::uint32_t>(row * D * 2) + static_cast<std::uint32_t>(((row & 7) ^ x) << 4);
}
__device__ __forceinline__ std::uint32_t chunk_addr(std::uint32_t base, int cc) {
  return (base ^ static_cast<std::uint32_t>((cc & 7) << 4)) + static_cast<std::uint32_t>((cc >> 3) << 7);
}

// S (this warp's 16 vectors x kWarpN keys) = Q K^T. q_row0 / k_row0: the warp's first Q row
// and first key row of the tile (multiples of 16).
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_qk(float (&s)[Tr::kWarpN / 8][4], std::uint32_t sQ, int q_row0, std::uint32_t sK,
                                        int k_row0, int lane) {
  constexpr int D = Tr::kHeadDim;
#pragma unroll
  for (int n = 0; n < Tr::kWarpN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  // A (Q, 16x16): matrices (rows 0-7, k lo), (rows 8-15, k lo), (rows 0-7, k hi), (rows 8-15, k hi).
  const std::uint32_t a_base = lane_base<D>(sQ, q_row0 + (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
  // B (K rows = keys, d contiguous = mma "col"): (keys 0-7, k lo), (keys 0-7, k hi),
  // (keys 8-15, k lo), (keys 8-15, k hi) -> b0/b1 of n-tile 2p, then of n-tile 2p + 1.
  const std::uint32_t b_base = lane_base<D>(sK, k_row0 + (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t af[4];
    ldmatrix_x4(af, chunk_addr(a_base, 2 * kk));
#pragma unroll
    for (int p = 0; p < Tr::kWarpN / 16; ++p) {
      std::uint32_t bf[4];
      ldmatrix_x4(bf, chunk_addr(b_base, 2 * kk) + static_cast<std::uint32_t>(16 * p * D * 2));
      mma_m16n8k16<kBf16>(s[2 * p], af, bf[0], bf[1]);
      mma_m16n8k16<kBf16>(s[2 * p + 1], af, bf[2], bf[3]);
    }
  }
}

// O (16 vectors x D) += P V, P as 16-bit A fragments (p[t] = keys 16t..16t+15 of the warp).
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_pv(float (&o)[Tr::kHeadDim / 8][4], const std::uint32_t (&p)[Tr::kWarpN / 16][4],
                                        std::uint32_t sV, int v_row0, int lane) {
  constexpr int D = Tr::kHeadDim;
  // ldmatrix.trans of V (keys x d): (keys lo, d-tile 2e), (keys hi, 2e), (keys lo, 2e+1), (keys hi, 2e+1).
  const std::uint32_t v_base = lane_base<D>(sV, v_row0 + (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
#pragma unroll
  for (int t = 0; t < Tr::kWarpN / 16; ++t) {
#pragma unroll
    for (int e = 0; e < D / 16; ++e) {
      std::uint32_t bf[4];
      ldmatrix_x4_trans(bf, chunk_addr(v_base, 2 * e) + static_cast<std::uint32_t>(16 * t * D * 2));
      mma_m16n8k16<kBf16>(o[2 * e], p[t], bf[0], bf[1]);
      mma_m16n8k16<kBf16>(o[2 * e + 1], p[t], bf[2], bf[3]);
    }
  }
}

// Mask and online softmax of one S tile in registers; rescales o, writes P fragments.
//   s       raw q.k of keys key0 + 8n + {0,1} (key0 includes 2q), rows g (e = 0,1), g+8 (e = 2,3)
//   lo, hi  visible keys [lo, hi) of the thread's two rows (mask and item range intersected)
template <typename Tr, typename T>
__device__ __forceinline__ void softmax_tile(float (&s)[Tr::kWarpN / 8][4], std::uint32_t (&p)[Tr::kWarpN / 16][4],
                                             float (&o)[Tr::kHeadDim / 8][4], math::OnlineSoftmaxRow (&rows)[2],
                                             const int (&lo)[2], const int (&hi)[2], bool masked, int key0,
                                             const BatchArgs& a) {
  constexpr int NT = Tr::kWarpN / 8;
  float mul = a.scale_log2;
  if (a.softcap > 0.0f) {
    // t = c tanh(s scale / c) log2 e in the kernels' one form (softcap_score.cuh; the host made
    // its two factors), then the mask (soft cap first).
    const SoftcapScore capped{a.scale_over_cap, a.softcap_log2};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = capped(s[n][e]);
    mul = 1.0f;
  }
  if (masked) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = key0 + 8 * n + (e & 1);
        if (j < lo[e >> 1] || j >= hi[e >> 1]) s[n][e] = -INFINITY;
      }
  }
  float m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    mx = sm80::quad_max(mx);
    const float alpha = rows[h].enter_tile(mx * mul);  // mul > 0: max(s * mul) = max(s) * mul
#pragma unroll
    for (int d = 0; d < Tr::kHeadDim / 8; ++d) {
      o[d][2 * h] *= alpha;
      o[d][2 * h + 1] *= alpha;
    }
    // While the row is empty (m = -inf) every t is -inf and exp2(-inf - 0) = 0: the weight()
    // of OnlineSoftmaxRow without a per-element select.
    m_use[h] = rows[h].m == -INFINITY ? 0.0f : rows[h].m;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(fmaf(s[n][e], mul, -m_use[e >> 1]));
      sum[e >> 1] += s[n][e];
    }
  rows[0].add(sum[0]);  // thread-partial sums; the quad's parts are added in the epilogue
  rows[1].add(sum[1]);
  // C fragments of n-tiles 2t and 2t+1 form the A fragment of k-step t (mma.cuh).
#pragma unroll
  for (int t = 0; t < NT / 2; ++t) {
    p[t][0] = cuda::Traits<T>::pack2(s[2 * t][0], s[2 * t][1]);
    p[t][1] = cuda::Traits<T>::pack2(s[2 * t][2], s[2 * t][3]);
    p[t][2] = cuda::Traits<T>::pack2(s[2 * t + 1][0], s[2 * t + 1][1]);
    p[t][3] = cuda::Traits<T>::pack2(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

// One unit: work item `item`, packed vectors [row0, row0 + kRows). With KG = 1 row r of the
// unit is held by warp (r % 64) / 16 (row group rg = r / 16 % kRowGroups, block mb = r / (16
// kRowGroups)), as row g (h = 0) or g + 8 (h = 1) of that warp's m16 block mb; with KG = 4
// every warp holds all 16 rows, for its quarter of each tile's keys.
// kWide: load_kv_tile's mapping with several copies per row address (decode-only instance).
template <typename T, int kHeadDim, int kKG, bool kWide = false>
__device__ __forceinline__ void run_unit(const BatchArgs& a, unsigned char* smem, int item, int row0) {
  using Tr = Traits<kHeadDim, kKG>;
  const Smem<Tr> sm{smem};
  constexpr int D = kHeadDim, BN = Tr::kBlockN, S = Tr::kStages, C = Tr::kChunks;
  constexpr bool kBf16 = cuda::Traits<T>::is_bf16;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, q = lane & 3;
  const int rg = warp % Tr::kRowGroups;  // row group: vectors [16 rg, +16) of each row block
  const int kg = warp / Tr::kRowGroups;  // key group: keys [kg * kWarpN, +kWarpN) of each tile
  constexpr int MB = Tr::kMB;
  // The unit row of (block mb, half h) of this thread.
  auto row_of = [&](int mb, int h) { return 16 * (rg + Tr::kRowGroups * mb) + g + 8 * h; };

  const plan::WorkItem it = a.items[item];
  const int b = it.request;
  const int G = a.group;
  const int n_vec = (it.q_end - it.q_begin) * G;  // packed vectors of the item
  const int n_rows = min(Tr::kRows, n_vec - row0);  // of this unit (> 0)
  const std::int64_t q0 = a.qo_indptr[b];
  const int q_len = a.qo_indptr[b + 1] - static_cast<int>(q0);
  const int kv_len = a.kv_len[b];
  const int* pages = a.kv_indices + a.kv_indptr[b];
  const int kv_begin = it.kv_begin, kv_end = it.kv_end;
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + BN - 1) / BN : 0;
  const T* kp = static_cast<const T*>(a.k);
  const T* vp = static_cast<const T*>(a.v);
  const std::int64_t k_head_off = static_cast<std::int64_t>(it.kv_head) * a.k_head;
  const std::int64_t v_head_off = static_cast<std::int64_t>(it.kv_head) * a.v_head;
  const int page_size = a.page_size;

  // Row addresses of token j (request-relative) into smem slot `stage`, row t (load_kv_tile).
  // Power-of-two pages (the usual case) take a shift and a mask instead of a division.
  const int page_shift = a.page_shift;
  auto page_of = [&](int j) { return page_shift >= 0 ? j >> page_shift : j / page_size; };
  auto store_row_addresses = [&](int stage, int t, int j, int page) {
    unsigned long long ka = reinterpret_cast<unsigned long long>(kp), va = reinterpret_cast<unsigned long long>(vp);
    if (j < kv_end) {
      const std::int64_t slot = page_shift >= 0 ? (j & (page_size - 1)) : j - (j / page_size) * page_size;
      ka = reinterpret_cast<unsigned long long>(kp + (static_cast<std::int64_t>(page) * a.k_page + slot * a.k_token +
                                                       k_head_off)) |
           1ull;
      va = reinterpret_cast<unsigned long long>(vp + (static_cast<std::int64_t>(page) * a.v_page + slot * a.v_token +
                                                       v_head_off));
    }
    sm.rows(stage)[t] = make_ulonglong2(ka, va);
  };
  auto fetch_page = [&](int j) { return j < kv_end ? __ldg(pages + page_of(j)) : 0; };

  // Prologue 1: page lookups of tiles 0 .. S-1 (one per token), Q (cp.async, own group).
  // Loops with compile-time trip counts, not unrolled: no per-thread trip counts hoisted to
  // the kernel's start (at the register cap of the two-block d64 kernel ptxas spilled them
  // on sm_80), and no burst of addresses (unrolled, it spilled more).
#pragma unroll 1
  for (int pass = 0; pass < (S * BN + Tr::kThreads - 1) / Tr::kThreads; ++pass) {
    const int idx = tid + pass * Tr::kThreads;
    if ((S * BN) % Tr::kThreads != 0 && idx >= S * BN) break;
    const int tile = idx / BN, t = idx % BN;
    const int j = kv_begin + tile * BN + t;
    store_row_addresses(tile, t, j, fetch_page(j));
  }
  {
    const T* qp = static_cast<const T*>(a.q);
    static_assert((Tr::kRows * C) % Tr::kThreads == 0, "Q chunks split evenly");
#pragma unroll 1
    for (int pass = 0; pass < Tr::kRows * C / Tr::kThreads; ++pass) {
      const int idx = tid + pass * Tr::kThreads;
      const int r = idx / C, c = idx % C;
      const int n = row0 + r;
      const bool valid = r < n_rows;
      const T* src = qp;
      if (valid) {
        const int qr = it.q_begin + n / G, h = it.kv_head * G + n % G;
        src = qp + (q0 + qr) * a.q_row + static_cast<std::int64_t>(h) * a.q_head + c * 8;
      }
      cp_async_16_zfill(sm.q() + 2u * swizzle<C>(r, c), src, valid);
    }
  }
  __syncthreads();  // offsets visible
  // Prologue 2: tiles 0 .. S-2, one commit group each (Q joins tile 0's group).
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < n_tiles) load_kv_tile<Tr, kWide>(sm, st, tid);
    cp_async_commit();
  }

  // Visible keys of the thread's two vectors per row block: the request's mask intersected
  // with the item's chunk. Vectors past the unit's rows are never written; they get the item's
  // whole range (zero Q, finite scores) so that they force no per-element masking.
  // skip_lo / skip_hi (prefill shape): the keys any row of the warp's block can see, as
  // [skip_lo, skip_hi) (warp-uniform); empty ([INT_MAX, INT_MIN)) when it has none in the unit.
  // The prefill shape keeps lo / hi in shared memory during the main loop (the stats area,
  // unused until the epilogue; row r's {lo, hi} at bounds[r]) to stay within 255 registers
  // with two blocks of O accumulators; the decode shape keeps them in registers.
  int lo[MB][2], hi[MB][2];
  int2* const bounds = reinterpret_cast<int2*>(sm.stat_m());
  int2* const warp_keys = reinterpret_cast<int2*>(sm.fin_scale());  // [warp][mb]: skip_lo, skip_hi
  static_assert(Tr::kKG != 1 || 2 * Tr::kKG * Tr::kRows * 4 >= Tr::kRows * 8, "bounds fit in the stats area");
  int skip_lo[MB], skip_hi[MB];
  const math::MaskSpec spec = math::MaskSpec::make(q_len, kv_len, a.causal, a.window_left, a.window_right);
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
    skip_lo[mb] = 0x7fffffff;
    skip_hi[mb] = -0x7fffffff - 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_of(mb, h);
      lo[mb][h] = kv_begin;
      hi[mb][h] = kv_end;
      if (r < n_rows) {
        const math::KeyRange keys = math::visible_keys(spec, it.q_begin + (row0 + r) / G);
        lo[mb][h] = max(lo[mb][h], keys.begin);
        hi[mb][h] = min(hi[mb][h], keys.end);
        if (lo[mb][h] < hi[mb][h]) {
          skip_lo[mb] = min(skip_lo[mb], lo[mb][h]);
          skip_hi[mb] = max(skip_hi[mb], hi[mb][h]);
        }
      }
      if (Tr::kKG == 1 && q == 0) bounds[r] = make_int2(lo[mb][h], hi[mb][h]);
    }
    if constexpr (Tr::kKG == 1) {
      skip_lo[mb] = __reduce_min_sync(0xffffffffu, skip_lo[mb]);  // redux.sync (sm_80)
      skip_hi[mb] = __reduce_max_sync(0xffffffffu, skip_hi[mb]);
      if (lane == 0) warp_keys[warp * MB + mb] = make_int2(skip_lo[mb], skip_hi[mb]);
    }
  }
  // bounds[r] is read by the quad of the lane that wrote it, warp_keys by the lane's warp.
  if constexpr (Tr::kKG == 1) __syncwarp();

  math::OnlineSoftmaxRow rows[MB][2];
  float o[MB][D / 8][4];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[mb][d][0] = o[mb][d][1] = o[mb][d][2] = o[mb][d][3] = 0.0f;

  // kWide (decode-only instance): the page indices of tile n + S are fetched one step early, at
  // step n - 1, so that the global load's latency (over a microsecond under load) is hidden by a
  // whole tile's work instead of being waited for at the end of step n: with the fetch in the
  // same step, a decode CTA moved one tile per load latency (~27 GB/s per CTA beside the sm90
  // prefill whatever its bytes in flight; docs/perf/mixed_batch.md, "Twelfth session"). Same
  // values into the same slots: bit-identical.
  int page_ahead = 0;
  if constexpr (kWide) {
    if (tid < BN && S < n_tiles) page_ahead = fetch_page(kv_begin + S * BN + tid);
  }
  for (int n = 0; n < n_tiles; ++n) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile n landed for all; everyone is done with tile n-1's stage
    const int st_issue = (n + S - 1) % S;
    if (n + S - 1 < n_tiles) load_kv_tile<Tr, kWide>(sm, st_issue, tid);
    cp_async_commit();
    // Page indices of tile n + S: in flight while this tile is computed.
    const int j_next = kv_begin + (n + S) * BN + tid;
    int page_next = 0;
    if constexpr (kWide) {
      page_next = page_ahead;
      if (tid < BN && n + S + 1 < n_tiles) page_ahead = fetch_page(j_next + BN);
    } else {
      if (tid < BN && n + S < n_tiles) page_next = fetch_page(j_next);
    }

    const int stage = n % S;
    const int tile_key0 = kv_begin + n * BN + kg * Tr::kWarpN;  // the warp's first key
    // Row blocks one after the other, both against the tile in smem (loaded once for both).
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      if constexpr (Tr::kKG == 1) {
        // No row of the warp's block sees a key of this tile: for every row the tile would be
        // an exact no-op (tile max -inf: alpha = 1, P = 0), so it is skipped: the second block
        // of a unit of <= 64 vectors, rows past a short item, the causal tail of the first
        // block (16 query rows x group 4 before the second's), windows.
        const int2 wk = warp_keys[warp * MB + mb];  // warp-uniform: no vote needed
        if (wk.y <= tile_key0 || wk.x >= tile_key0 + Tr::kWarpN) continue;
      }
      float s[Tr::kWarpN / 8][4];
      gemm_qk<Tr, kBf16>(s, sm.q(), 16 * (rg + Tr::kRowGroups * mb), sm.k(stage), kg * Tr::kWarpN, lane);
      int lo_t[2], hi_t[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (Tr::kKG == 1) {
          const int2 b = bounds[row_of(mb, h)];
          lo_t[h] = b.x, hi_t[h] = b.y;
        } else {
          lo_t[h] = lo[mb][h], hi_t[h] = hi[mb][h];
        }
      }
      const bool need = lo_t[0] > tile_key0 || hi_t[0] < tile_key0 + Tr::kWarpN || lo_t[1] > tile_key0 ||
                        hi_t[1] < tile_key0 + Tr::kWarpN;
      const bool masked = __any_sync(0xffffffffu, need);
      std::uint32_t p[Tr::kWarpN / 16][4];
      softmax_tile<Tr, T>(s, p, o[mb], rows[mb], lo_t, hi_t, masked, tile_key0 + 2 * q, a);
      gemm_pv<Tr, kBf16>(o[mb], p, sm.v(stage), kg * Tr::kWarpN, lane);
    }

    // Slot (n + S) % S = stage: tile n was issued long ago, its lookups are free.
    if (tid < BN && n + S < n_tiles) store_row_addresses(stage, tid, j_next, page_next);
  }

  // Epilogue. Every copy has landed (Q too when no tile was visited); Q and the stages become
  // the fp32 reduction buffer (it starts at offset 0).
  cp_async_wait<0>();
  __syncthreads();
  float* stat_m = sm.stat_m();
  float* stat_l = sm.stat_l();
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[mb][h].l = sm80::quad_sum(rows[mb][h].l);
      if (q == 0) {
        const int r = row_of(mb, h);
        stat_m[kg * Tr::kRows + r] = rows[mb][h].m;
        stat_l[kg * Tr::kRows + r] = rows[mb][h].l;
      }
    }
  __syncthreads();
  float* red = sm.red();
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_of(mb, h);
      // Weight of this warp's state in the merged one: exp2(m_kg - M), 0 for an empty state.
      float f = 1.0f;
      if (Tr::kKG > 1) {
        float m_all = -INFINITY;
#pragma unroll
        for (int w = 0; w < Tr::kKG; ++w) m_all = fmaxf(m_all, stat_m[w * Tr::kRows + r]);
        f = rows[mb][h].m == -INFINITY ? 0.0f : exp2f(rows[mb][h].m - m_all);
      }
      float* dst = red + (kg * Tr::kRows + r) * Tr::kRedStride + 2 * q;
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<float2*>(dst + 8 * d) = make_float2(o[mb][d][2 * h] * f, o[mb][d][2 * h + 1] * f);
    }
  for (int r = tid; r < Tr::kRows; r += Tr::kThreads) {
    math::OnlineSoftmaxRow fin;
    for (int w = 0; w < Tr::kKG; ++w) {
      const float m_w = stat_m[w * Tr::kRows + r];
      fin.m = fmaxf(fin.m, m_w);
    }
    for (int w = 0; w < Tr::kKG; ++w) {
      const float m_w = stat_m[w * Tr::kRows + r];
      if (m_w != -INFINITY) fin.l += stat_l[w * Tr::kRows + r] * (Tr::kKG > 1 ? exp2f(m_w - fin.m) : 1.0f);
    }
    sm.fin_scale()[r] = fin.output_scale();
    sm.fin_lse()[r] = fin.lse();
  }
  __syncthreads();

  // Write-out: 16-byte chunks (row, c), consecutive threads along a row.
  const bool direct = it.partial_row == plan::kDirect;
  for (int idx = tid; idx < n_rows * C; idx += Tr::kThreads) {
    const int r = idx / C, c = idx % C;
    float acc[8];
    {
      const float* src = red + r * Tr::kRedStride + 8 * c;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      acc[0] = x0.x, acc[1] = x0.y, acc[2] = x0.z, acc[3] = x0.w;
      acc[4] = x1.x, acc[5] = x1.y, acc[6] = x1.z, acc[7] = x1.w;
    }
#pragma unroll
    for (int w = 1; w < Tr::kKG; ++w) {
      const float* src = red + (w * Tr::kRows + r) * Tr::kRedStride + 8 * c;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      acc[0] += x0.x, acc[1] += x0.y, acc[2] += x0.z, acc[3] += x0.w;
      acc[4] += x1.x, acc[5] += x1.y, acc[6] += x1.z, acc[7] += x1.w;
    }
    const float sc = sm.fin_scale()[r];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= sc;
    const int n = row0 + r;
    const int qr = n / G, h = it.kv_head * G + n % G;  // qr relative to q_begin
    if (direct) {
      uint4 v;
      v.x = cuda::Traits<T>::pack2(acc[0], acc[1]);
      v.y = cuda::Traits<T>::pack2(acc[2], acc[3]);
      v.z = cuda::Traits<T>::pack2(acc[4], acc[5]);
      v.w = cuda::Traits<T>::pack2(acc[6], acc[7]);
      T* dst = static_cast<T*>(a.o) + (q0 + it.q_begin + qr) * a.o_row + static_cast<std::int64_t>(h) * a.o_head + 8 * c;
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      const std::int64_t prow = it.partial_row + qr;
      float* dst = a.partial_o + (prow * a.heads_q + h) * D + 8 * c;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
  }
  for (int r = tid; r < n_rows; r += Tr::kThreads) {
    const int n = row0 + r;
    const int qr = n / G, h = it.kv_head * G + n % G;
    const float lse = sm.fin_lse()[r];
    if (direct) {
      if (a.lse != nullptr) a.lse[static_cast<std::int64_t>(h) * a.lse_head + q0 + it.q_begin + qr] = lse;
    } else {
      a.partial_lse[(static_cast<std::int64_t>(it.partial_row) + qr) * a.heads_q + h] = lse;
    }
  }
  __syncthreads();  // the next unit overwrites Q, offsets, the reduction buffer, stats and fin
}

// Decode units by claims (decode-only instance, a.decode_claim set: the default SM split on
// compute capability 9.0, TESSERA_CUDA_BATCH=sm90-coresident, and decode-only launches under the
// TESSERA_CUDA_BATCH_DECODE_CLAIMS=1 knob). Beside a prefill the grid (2 CTAs per SM) is the
// programmatic dependent of the sm90 prefill kernel: its first CTAs take the SMs (or the room)
// the prefill leaves, the others start as prefill CTAs exit, so a static assignment would leave
// the early CTAs' share of the work to run alone at the end. Instead thread 0 takes the next decode item with one atomic
// increment of the header's counter (plan v2: decode-shaped items are [num_prefill_items,
// num_items), one unit each, row_blocks = 1 whenever there is one), broadcast through two
// alternating shared words (one barrier per claim: a word is rewritten only two claims later,
// after every thread has passed the barrier of the claim in between). A CTA stops at its first
// claim past the items, so the counter is incremented exactly n + grid times in all; the claim
// that returns n + grid - 1 is the last of the grid, and its CTA resets the counter to 0 (no
// other CTA touches it again): the next run starts from 0 with no host write, as a graph replay
// needs. No CTA waits for another. What a unit computes depends only on its item, not on the
// CTA or the order: decode rows keep the bits of the static walk.
template <typename T, int kHeadDim>
__device__ __forceinline__ int claim_decode_units(const BatchArgs& a, unsigned char* smem_raw, int* words) {
  const int first = a.header->num_prefill_items;
  const int n = a.header->num_items - first;
  const int tid = sreg_tid_x();
  for (int i = 0;; ++i) {
    int* word = words + (i & 1);
    if (tid == 0) *word = static_cast<int>(atomicAdd(a.decode_claim, 1u));
    __syncthreads();
    const int c = *word;  // uniform
    if (c >= n) {
      if (tid == 0 && c == n + sreg_nctaid_x() - 1) atomicExch(a.decode_claim, 0u);
      return i;  // items this CTA ran
    }
    const int u = (first + c) * a.row_blocks;  // the item's only unit
    if (unit_kind<Traits<kHeadDim, 1>::kRows>(a, u) == UnitKind::decode)
      run_unit<T, kHeadDim, 4, true>(a, smem_raw, first + c, 0);
  }
}

// Persistent CTAs. CTA x owns units x, x + grid, x + 2 grid, ... (a unit = item, block of
// Pre::kRows packed vectors); the unit count is read from the plan header in device memory, so the grid
// depends only on capacities. Each round classifies up to 128 of the CTA's units at once (one
// load each, in parallel) before running those of the instance's kind(s) (kernel_traits.cuh).
// Fused: half of the CTAs walk their units backwards, so that while one CTA of an SM streams
// decode items (memory-bound) the other computes prefill tiles (math-bound) instead of both
// doing the same kind: with the plan's kinds in blocks, a forward and a backward walker meet
// opposite kinds for most of the run. The assignment is unchanged, only the order.
template <typename T, int kHeadDim, int kKind>
__global__ void __launch_bounds__(Traits<kHeadDim, 4>::kThreads, min_ctas_per_sm<kHeadDim>())
    batch_attention_kernel(const __grid_constant__ BatchArgs a) {
  using Dec = Traits<kHeadDim, 4>;
  using Pre = Traits<kHeadDim, 1>;
  static_assert(Dec::kThreads == Pre::kThreads, "one block size for both paths");
  constexpr int kThreads = Dec::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A run's first kernel, launched as the programmatic dependent of the stream's kernel before
  // it (the last run's merge or attention kernel, whose rows and partials this grid rewrites):
  // wait for that grid before any global access (BatchArgs::wait_first).
  if constexpr (kKind == kDecodeOnly) {
    if (a.wait_first) sm90::griddepcontrol_wait();
  }
  // Lets the merge kernel (a programmatic dependent) launch now, or the next run's decode-only
  // kernel; each waits for this grid's completion before reading anything.
  sm90::griddepcontrol_launch_dependents();
#endif
  // The unit list sits past the data of both layouts (each path uses [0, its kOffUnits)).
  int* units = reinterpret_cast<int*>(smem_raw + units_offset<kHeadDim, kKind>());
  constexpr int kListEnd = -0x7fffffff - 1;  // list entry past the CTA's last unit
  bool claimed = false;
  if constexpr (kKind == kDecodeOnly) {
    if (a.decode_claim != nullptr) {
#if defined(TESSERA_BATCH_TRACE)
      const unsigned long long t0 = sm80::sreg_globaltimer();
      const int items = claim_decode_units<T, kHeadDim>(a, smem_raw, units);
      if (a.trace != nullptr && threadIdx.x == 0 && blockIdx.x < kTraceDecodeCtas) {
        unsigned long long* t = a.trace + kTraceDecodeOffset + 4 * blockIdx.x;
        t[0] = t0, t[1] = sm80::sreg_globaltimer(), t[2] = static_cast<unsigned long long>(items), t[3] = sm80::sreg_smid();
      }
#else
      claim_decode_units<T, kHeadDim>(a, smem_raw, units);
#endif
      claimed = true;
    }
  }
  for (int k0 = 0; !claimed; k0 += kThreads) {
    // The unit count, re-read each round (an L1/L2 hit), and the CTA's index and the grid:
    // not kept in registers while the units run (at the register cap ptxas spilled them).
    // The host keeps max_items x row_blocks below 2^30, so unit indices are 32-bit.
    const int x = sreg_ctaid_x(), grid = sreg_nctaid_x(), tid = sreg_tid_x();
    // Backward walkers: (x odd) != (x in the upper half) gives the two CTAs of an SM opposite
    // directions when blocks are placed one per SM in index order (x, x + grid/2 together) or in
    // consecutive pairs (2s, 2s + 1); on the H200, placement by TPC pairs, it did so on 116 of
    // 132 SMs, and a per-SM arrival counter (%smid, all 132) measured the same time.
    const bool backward = kKind == kFused && ((x & 1) != 0) != (x >= grid / 2);
    const int num_units = a.header->num_items * a.row_blocks;
    const int owned = x < num_units ? (num_units - 1 - x) / grid + 1 : 0;
    if (k0 >= owned) break;
    const int k = k0 + tid;
    int mine = k < owned ? -1 : kListEnd;
    if (k < owned) {
      const int u = x + (backward ? owned - 1 - k : k) * grid;
      const UnitKind kind = unit_kind<Pre::kRows>(a, u);
      if (kind == UnitKind::decode && kKind != kPrefillOnly) mine = u;
      if (kind == UnitKind::prefill && kKind != kDecodeOnly) mine = u | (1 << 30);  // tag: prefill path
    }
    units[tid] = mine;
    __syncthreads();
    for (int t = 0; t < kThreads; ++t) {
      const int tagged = units[t];  // uniform: every thread reads the same entry
      if (tagged == kListEnd) break;
      if (tagged < 0) continue;
      const int uu = tagged & ((1 << 30) - 1);
      const int item = a.row_blocks == 1 ? uu : uu / a.row_blocks;
      const int rb = uu - item * a.row_blocks;
      if (kKind != kDecodeOnly && (kKind == kPrefillOnly || (tagged >> 30) != 0))
        run_unit<T, kHeadDim, 1>(a, smem_raw, item, rb * Pre::kRows);
      else if (kKind != kPrefillOnly)
        run_unit<T, kHeadDim, 4, kKind == kDecodeOnly>(a, smem_raw, item, rb * Dec::kRows);
    }
    __syncthreads();  // before the next round rewrites the list
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Decode-only: launched as the programmatic dependent of the slim sm90 prefill kernel
  // (TESSERA_CUDA_BATCH=sm90-coresident), this grid must not complete before that one, whose
  // split items' partials the merge after this grid reads: every thread waits here, after its
  // last unit, for the prerequisite grid's completion and memory flush. Nothing before this
  // point reads what that kernel writes (its O / LSE rows and partial rows are other rows than
  // the decode items'). A plain launch has no prerequisite grid in flight, and one that waited
  // at its start (wait_first) has none left: returns at once.
  if constexpr (kKind == kDecodeOnly) sm90::griddepcontrol_wait();
#endif
}

}  // namespace tessera::cuda::batch
