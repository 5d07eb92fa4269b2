// The sm90 forward kernel (FA3 structure): one CTA per (query tile, query head, sequence),
// a producer warpgroup that feeds K/V tiles by TMA into a ring of shared-memory stages, and two
// consumer warpgroups that run S = Q K^T and O += P V on wgmma with the online softmax in
// registers. See kernel_traits.cuh for tiles and layout, forward_args.h for the arguments.
//
// Consumer loop (intra-warpgroup overlap): while the tensor cores compute S_i = Q K_i^T and
// O += P_{i-1} V_{i-1}, nothing waits; after S_i lands the softmax turns it into weights, and
// only then does the warpgroup wait for the P V product, rescale O and pack P_i. So the
// softmax of tile i runs under the P V GEMM of tile i - 1.
//
// Pingpong between the two consumer warpgroups: each issues its GEMMs of a tile only in its
// turn (named barrier of 256 threads: its own 128 wait, the other's 128 arrive when they have
// issued theirs), so one warpgroup's softmax runs while the other's GEMMs occupy the tensor
// cores. Warpgroup 0 goes first (warpgroup 1 arrives once at the start); both take the same
// number of turns, and warpgroup 0 consumes the last arrival at the end.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/softmax_fragment.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/named_barrier.cuh"
#include "cuda/primitives/sm90/setmaxnreg.cuh"
#include "cuda/primitives/sm90/tma.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/kernel_traits.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cuda::sm90 {

// Named barrier ids (0 is __syncthreads): one per consumer warpgroup for its epilogue, and one
// per consumer warpgroup for its turn at the tensor cores (pingpong).
constexpr std::uint32_t kEpilogueBarrier0 = 1;
constexpr std::uint32_t kTurnBarrier0 = 3;

// One box of a tile: rank 4 (dense: column, row, head, sequence) or 3 (ragged: column, packed
// row, head).
__device__ __forceinline__ void load_box(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, bool ragged,
                                         int col, int row, int head, int seq) {
  if (ragged) tma_load_3d(dst, map, bar, col, row, head);
  else tma_load_4d(dst, map, bar, col, row, head, seq);
}

// Releases a ring stage: every consumer warp arrives once (the empty barriers count warps),
// after its own wgmma reading the stage has completed.
__device__ __forceinline__ void release_stage(std::uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

template <typename T, int kHeadDim, int kBlockN>
__global__ void __launch_bounds__(FwdTraits<kHeadDim, kBlockN>::kThreads, 1)
    forward_kernel(const __grid_constant__ FwdArgs a) {
  using Tr = FwdTraits<kHeadDim, kBlockN>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = kHeadDim, S = Tr::kStages;
  constexpr bool kBf16 = Traits<T>::is_bf16;
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base (128-byte swizzle atoms and wgmma descriptors need it).
  const std::uint32_t raw_addr = smem_u32(smem_raw);
  const std::uint32_t base = (raw_addr + 1023u) & ~1023u;
  unsigned char* base_ptr = smem_raw + (base - raw_addr);
  const std::uint32_t sQ = base + Tr::kQOffset;
  auto sK = [&](int stage) { return base + Tr::kKOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes); };
  auto sV = [&](int stage) { return base + Tr::kVOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes); };
  const std::uint32_t bars = base + Tr::kBarrierOffset;
  const std::uint32_t q_full = bars;
  auto k_full = [&](int stage) { return bars + 8u * (1 + stage); };
  auto k_empty = [&](int stage) { return bars + 8u * (1 + S + stage); };
  auto v_full = [&](int stage) { return bars + 8u * (1 + 2 * S + stage); };
  auto v_empty = [&](int stage) { return bars + 8u * (1 + 3 * S + stage); };

  const int b = blockIdx.z;
  const int h = blockIdx.y;
  // Later query tiles see more keys under a causal mask; start them first.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const bool ragged = a.cu_seqlens_q != nullptr;
  int q_row0 = 0, k_row0 = 0;
  int q_len = a.seq_q, k_len = a.seq_k;
  if (ragged) {
    q_row0 = a.cu_seqlens_q[b];
    q_len = a.cu_seqlens_q[b + 1] - q_row0;
    k_row0 = a.cu_seqlens_k[b];
    k_len = a.cu_seqlens_k[b + 1] - k_row0;
  }
  const int m0 = m_block * BM;
  if (m0 >= q_len) return;  // the grid is sized for the longest sequence

  const math::MaskSpec spec = math::MaskSpec::make(q_len, k_len, a.causal, a.window_left, a.window_right);
  const math::KeyRange tile_keys = math::visible_keys_of_rows(spec, m0, min(m0 + BM, q_len));
  const int n_begin = tile_keys.begin / BN;
  const int n_tiles = tile_keys.empty() ? 0 : (tile_keys.end + BN - 1) / BN - n_begin;
  const int h_kv = h / a.group;

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    for (int s = 0; s < S; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(k_empty(s), Tr::kConsumerWarps);
      mbarrier_init(v_empty(s), Tr::kConsumerWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    // ---- producer: one thread issues every copy ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&a.map_q);
      prefetch_tensor_map(&a.map_k);
      prefetch_tensor_map(&a.map_v);
      mbarrier_arrive_expect_tx(q_full, Tr::kQBytes);
#pragma unroll
      for (int p = 0; p < Tr::kPanels; ++p)
        load_box(sQ + p * Tr::kQPanelBytes, &a.map_q, q_full, ragged, 64 * p, q_row0 + m0, h, b);
      for (int i = 0; i < n_tiles; ++i) {
        const int stage = i % S;
        const std::uint32_t parity = ((i / S) & 1) ^ 1;  // round 0 passes at once
        const int row = k_row0 + (n_begin + i) * BN;
        mbarrier_wait_parity(k_empty(stage), parity);
        mbarrier_arrive_expect_tx(k_full(stage), Tr::kKVTileBytes);
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p)
          load_box(sK(stage) + p * Tr::kKVPanelBytes, &a.map_k, k_full(stage), ragged, 64 * p, row, h_kv, b);
        mbarrier_wait_parity(v_empty(stage), parity);
        mbarrier_arrive_expect_tx(v_full(stage), Tr::kKVTileBytes);
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p)
          load_box(sV(stage) + p * Tr::kKVPanelBytes, &a.map_v, v_full(stage), ragged, 64 * p, row, h_kv, b);
      }
    }
    return;
  }

  // ---- consumers: warpgroup c owns tile rows [64 c, 64 c + 64) ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int c = warpgroup - 1;
  const int t = threadIdx.x - 128 * warpgroup;
  const int warp = t / 32, lane = t % 32;
  const int g = lane / 4, q = lane % 4;
  const int wg_row0 = m0 + 64 * c;  // first row of the warpgroup (sequence-relative)
  const int row = wg_row0 + 16 * warp + g;  // the thread's rows: row and row + 8
  const math::KeyRange keys[2] = {math::visible_keys(spec, row), math::visible_keys(spec, row + 8)};
  // Keys [full.begin, full.end) are visible to every row of the warpgroup: tiles inside need no
  // per-element mask (math::tile_fully_visible with its two visible_keys calls hoisted).
  math::KeyRange full{-1, 0x7fffffff};  // a warpgroup without rows needs no mask
  if (wg_row0 < q_len) {
    full.begin = math::visible_keys(spec, min(wg_row0 + 64, q_len) - 1).begin;
    full.end = math::visible_keys(spec, wg_row0).end;
  }

  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float s[BN / 8][4];
  std::uint32_t p[BN / 16][4];
  math::OnlineSoftmaxRow rows[2];
  float alpha[2];
  auto& s_flat = reinterpret_cast<float(&)[BN / 2]>(s);
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);

  // S = Q K^T over head_dim in k16 steps: panel ks / 4, 32 bytes per step inside a panel.
  auto issue_qk = [&](int stage) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const std::uint32_t off = 32u * (ks % 4);
      const std::uint64_t da = make_smem_desc_sw128_kmajor(sQ + (ks / 4) * Tr::kQPanelBytes + 64u * 128u * c + off);
      const std::uint64_t db = make_smem_desc_sw128_kmajor(sK(stage) + (ks / 4) * Tr::kKVPanelBytes + off);
      wgmma_ss<BN, kBf16>(s_flat, da, db, ks > 0);
    }
    wgmma_commit();
  };
  // O += P V over the tile's keys in k16 steps (16 rows of V = 2048 bytes each).
  auto issue_pv = [&](int stage) {
    wgmma_fence();
#pragma unroll
    for (int kt = 0; kt < BN / 16; ++kt) {
      const std::uint64_t db = make_smem_desc_sw128_mnmajor(sV(stage) + 2048u * kt, Tr::kKVPanelBytes);
      wgmma_rs<D, kBf16, true>(o_flat, p[kt], db, true);
    }
    wgmma_commit();
  };
  auto weights = [&](int i) {
    const int n0 = (n_begin + i) * BN;
    const bool masked = !(full.begin <= n0 && n0 + BN <= full.end);
    scores_to_weights<BN>(s, rows, keys, masked, n0, q, a.scale, a.scale_log2, a.softcap, alpha);
  };

  auto take_turn = [&] { named_barrier_sync(kTurnBarrier0 + c, 256); };
  auto pass_turn = [&] { named_barrier_arrive(kTurnBarrier0 + (c ^ 1), 256); };
  if (c == 1) named_barrier_arrive(kTurnBarrier0, 256);  // warpgroup 0 starts

  mbarrier_wait_parity(q_full, 0);
  if (n_tiles > 0) {
    mbarrier_wait_parity(k_full(0), 0);
    take_turn();
    issue_qk(0);
    pass_turn();
    wgmma_wait<0>();
    wgmma_fence_operand(s_flat);
    release_stage(k_empty(0), lane);
    weights(0);  // O is still zero: no rescale
    pack_weights<T, BN>(s, p);
    for (int i = 1; i < n_tiles; ++i) {
      const int stage = i % S, prev = (i - 1) % S;
      mbarrier_wait_parity(k_full(stage), (i / S) & 1);
      mbarrier_wait_parity(v_full(prev), ((i - 1) / S) & 1);
      take_turn();
      issue_qk(stage);
      issue_pv(prev);
      pass_turn();
      wgmma_wait<1>();  // S_i has landed; P_{i-1} V_{i-1} may still run
      wgmma_fence_operand(s_flat);
      release_stage(k_empty(stage), lane);
      weights(i);
      wgmma_wait<0>();
      wgmma_fence_operand(o_flat);
      release_stage(v_empty(prev), lane);
      rescale_rows<D, false>(o, alpha);
      pack_weights<T, BN>(s, p);
    }
    const int last = (n_tiles - 1) % S;
    mbarrier_wait_parity(v_full(last), ((n_tiles - 1) / S) & 1);
    take_turn();
    issue_pv(last);
    pass_turn();
    wgmma_wait<0>();
    wgmma_fence_operand(o_flat);
    release_stage(v_empty(last), lane);
  }
  if (c == 0) take_turn();  // the last arrival of warpgroup 1: leave the barrier balanced

  // ---- epilogue: normalise, stage the warpgroup's 64 rows in its own rows of the Q tile
  // (its last Q K^T has completed), then one TMA store per panel (dense) or 16-byte row stores
  // (ragged, where a box past the sequence would write into the next one). ----
  // The sequence's offsets are fetched again rather than kept live through the mainloop (held
  // across setmaxnreg they spilled).
  int out_row0 = 0, out_len = a.seq_q;
  if (a.cu_seqlens_q != nullptr) {
    out_row0 = a.cu_seqlens_q[blockIdx.z];
    out_len = a.cu_seqlens_q[blockIdx.z + 1] - out_row0;
  }
  const int valid_rows = min(64, out_len - wg_row0);  // rows of this warpgroup inside the sequence
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    rows[hh].l = sm80::quad_sum(rows[hh].l);
    const float sc = rows[hh].output_scale();
    const int r = 64 * c + 16 * warp + g + 8 * hh;  // tile row
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      const int chunk = (d % 8) ^ (r % 8);
      *reinterpret_cast<std::uint32_t*>(base_ptr + Tr::kQOffset + (d / 8) * Tr::kQPanelBytes + r * 128 + chunk * 16 +
                                        4 * q) = Traits<T>::pack2(o[d][2 * hh] * sc, o[d][2 * hh + 1] * sc);
    }
    const int rr = 16 * warp + g + 8 * hh;  // row within the warpgroup
    if (a.lse != nullptr && q == 0 && rr < valid_rows)
      a.lse[b * a.lse_batch + h * a.lse_head + out_row0 + wg_row0 + rr] = rows[hh].lse();
  }
  fence_proxy_async_shared_cta();  // the TMA store reads what these generic stores wrote
  named_barrier_sync(kEpilogueBarrier0 + c, 128);
  if (valid_rows <= 0) return;
  if (!ragged) {
    if (t == 0) {
#pragma unroll
      for (int p = 0; p < Tr::kPanels; ++p)
        tma_store_4d(&a.map_o, sQ + p * Tr::kQPanelBytes + 64u * 128u * c, 64 * p, wg_row0, h, b);
      tma_store_commit();
      tma_store_wait<0>();  // the smem source must outlive the copy
    }
  } else {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    T* out = static_cast<T*>(a.o) + (out_row0 + static_cast<std::int64_t>(wg_row0)) * a.o_row + h * a.o_head;
#pragma unroll
    for (int it = 0; it < 64 * kChunks / 128; ++it) {
      const int idx = t + 128 * it;
      const int r = idx / kChunks, ch = idx % kChunks;
      if (r < valid_rows) {
        const int tr = 64 * c + r;
        const uint4 v = *reinterpret_cast<const uint4*>(base_ptr + Tr::kQOffset + (ch / 8) * Tr::kQPanelBytes +
                                                        tr * 128 + (((ch % 8) ^ (tr % 8)) * 16));
        *reinterpret_cast<uint4*>(out + r * a.o_row + ch * 8) = v;
      }
    }
  }
}

}  // namespace tessera::cuda::sm90
