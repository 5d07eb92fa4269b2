// The sm80 (FA2-class) forward kernel: one CTA per (query tile, query head, sequence).
// Pieces: kernel_traits.cuh (tiles, swizzle), mainloop.cuh (loads, GEMMs), softmax.cuh
// (mask + online softmax), epilogue.cuh (normalise, store O and LSE).
#pragma once

#include <cstdint>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/sm80/forward/epilogue.cuh"
#include "cuda/sm80/forward/forward.h"
#include "cuda/sm80/forward/kernel_traits.cuh"
#include "cuda/sm80/forward/mainloop.cuh"
#include "cuda/sm80/forward/softmax.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cuda::sm80 {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(FwdTraits<kHeadDim>::kThreads, FwdTraits<kHeadDim>::kMinBlocks)
    forward_kernel(const __grid_constant__ FwdArgs a) {
  using Tr = FwdTraits<kHeadDim>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = kHeadDim;
  constexpr bool kBf16 = Traits<T>::is_bf16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  const std::uint32_t sQ_addr = smem_u32(sQ);
  const std::uint32_t sK_addr = sQ_addr + 2u * BM * D;
  const std::uint32_t sV_addr = sK_addr + 2u * BN * D;

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, q = lane & 3;
  const int b = blockIdx.z;
  const int h = blockIdx.y;
  // Later query tiles see more keys under a causal mask; start them first.
  const int m_block = gridDim.x - 1 - blockIdx.x;

  // Sequence b's rows: dense tensors index b through the batch stride; ragged ones through
  // cu_seqlens (batch strides are 0 there).
  std::int64_t q_row0 = 0, k_row0 = 0;
  int q_len = a.seq_q, k_len = a.seq_k;
  if (a.cu_seqlens_q != nullptr) {
    q_row0 = a.cu_seqlens_q[b];
    q_len = a.cu_seqlens_q[b + 1] - static_cast<int>(q_row0);
    k_row0 = a.cu_seqlens_k[b];
    k_len = a.cu_seqlens_k[b + 1] - static_cast<int>(k_row0);
  }
  const int m0 = m_block * BM;
  if (m0 >= q_len) return;  // the grid is sized for the longest (or total) length

  const math::MaskSpec spec = math::MaskSpec::make(q_len, k_len, a.causal, a.window_left, a.window_right);
  const int m_end = min(m0 + BM, q_len);
  const math::KeyRange tile_keys = math::visible_keys_of_rows(spec, m0, m_end);
  const int n_begin = tile_keys.begin / BN;
  const int n_end = tile_keys.empty() ? n_begin : (tile_keys.end + BN - 1) / BN;

  const int h_kv = h / a.group;
  const T* q_ptr = static_cast<const T*>(a.q) + b * a.q_batch + (q_row0 + m0) * a.q_row + h * a.q_head;
  const T* k_ptr = static_cast<const T*>(a.k) + b * a.k_batch + k_row0 * a.k_row + h_kv * a.k_head;
  const T* v_ptr = static_cast<const T*>(a.v) + b * a.v_batch + k_row0 * a.v_row + h_kv * a.v_head;

  // Prologue: Q (once) and the first K tile.
  load_tile_async<Tr, BM>(sQ_addr, q_ptr, a.q_row, q_len - m0, tid);
  cp_async_commit();
  if (n_begin < n_end) {
    load_tile_async<Tr, BN>(sK_addr, k_ptr + static_cast<std::int64_t>(n_begin) * BN * a.k_row, a.k_row,
                            k_len - n_begin * BN, tid);
    cp_async_commit();
  }

  // Warp state: its 16 rows [wr0, wr0 + 16), two per thread (g and g + 8).
  const int wr0 = m0 + 16 * warp;
  const int wr_end = min(wr0 + 16, q_len);
  math::OnlineSoftmaxRow rows[2];
  math::KeyRange keys[2];
  keys[0] = math::visible_keys(spec, wr0 + g);
  keys[1] = math::visible_keys(spec, wr0 + g + 8);
  // math::tile_fully_visible(spec, wr0, wr_end, n0, n0 + BN) for every tile, with its two
  // visible_keys calls hoisted: keys [full_begin, full_end) are visible to all warp rows.
  int full_begin = -1, full_end = 0x7fffffff;  // a warp without rows needs no mask
  if (wr_end > wr0) {
    full_begin = math::visible_keys(spec, wr_end - 1).begin;
    full_end = math::visible_keys(spec, wr0).end;
  }
  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  FragAddrs qa, ka, va;
  init_a_addrs<D>(qa, sQ_addr + 2u * (16 * warp) * D, lane);
  init_k_addrs<D>(ka, sK_addr, lane);
  init_a_addrs<D>(va, sV_addr, lane);

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int n0 = nb * BN;
    cp_async_wait<0>();
    __syncthreads();  // K_nb visible to all; every warp is done with V_nb-1
    load_tile_async<Tr, BN>(sV_addr, v_ptr + static_cast<std::int64_t>(n0) * a.v_row, a.v_row, k_len - n0, tid);
    cp_async_commit();

    float s[BN / 8][4];
    gemm_qk<Tr, kBf16>(s, qa, ka);

    cp_async_wait<0>();
    __syncthreads();  // V_nb visible to all; every warp is done with K_nb
    if (nb + 1 < n_end) {
      const int n1 = n0 + BN;
      load_tile_async<Tr, BN>(sK_addr, k_ptr + static_cast<std::int64_t>(n1) * a.k_row, a.k_row, k_len - n1, tid);
      cp_async_commit();
    }

    // Per-element masks only where some key of the tile is hidden from some row of the warp.
    const bool masked = !(full_begin <= n0 && n0 + BN <= full_end);
    std::uint32_t p[BN / 16][4];
    softmax_tile<T, BN, D>(s, p, o, rows, keys, masked, n0, q, a.scale, a.scale_log2, a.softcap);
    gemm_pv<Tr, kBf16>(o, p, va);
  }

  // Q is still in flight when no KV tile was visited; the epilogue reuses its rows.
  cp_async_wait<0>();
  __syncthreads();
  // Sequence offsets are fetched again rather than kept live through the mainloop (they
  // would only occupy registers there; under a 128-register cap they spilled).
  int out_len = a.seq_q;
  std::int64_t out_row0 = 0;
  if (a.cu_seqlens_q != nullptr) {
    out_row0 = a.cu_seqlens_q[b];
    out_len = a.cu_seqlens_q[b + 1] - static_cast<int>(out_row0);
  }
  const int out_r0 = m_block * BM + 16 * (threadIdx.x >> 5);  // = wr0
  out_row0 += out_r0;
  T* o_ptr = static_cast<T*>(a.o) + b * a.o_batch + out_row0 * a.o_row + h * a.o_head;
  float* lse_ptr = a.lse == nullptr ? nullptr : a.lse + b * a.lse_batch + h * a.lse_head + out_row0;
  epilogue_store<Tr, T>(o, rows, sQ + 16 * warp * D, o_ptr, a.o_row, min(out_len - out_r0, 16), lse_ptr, lane);
}

}  // namespace tessera::cuda::sm80
