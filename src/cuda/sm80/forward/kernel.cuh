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
#include "math/ragged_tiles.h"
#include "math/online_softmax.h"

namespace tessera::cuda::sm80 {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(FwdTraits<kHeadDim>::kThreads, FwdTraits<kHeadDim>::kMinBlocks)
    forward_kernel(const __grid_constant__ FwdArgs a) {
  using Tr = FwdTraits<kHeadDim>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = kHeadDim;
  constexpr int RA = Tr::kRowAtoms, RW = Tr::kRowsPerWarp;
  constexpr bool kBf16 = Traits<T>::is_bf16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  const std::uint32_t sQ_addr = smem_u32(sQ);
  const std::uint32_t sK_addr = sQ_addr + 2u * BM * D;
  const std::uint32_t sV_addr = sK_addr + 2u * BN * D;
  // Per-thread visible key ranges of its 2 * RA rows, read only by masked tiles (kept out of
  // registers: O and S already fill the 255 of a 2-CTA/SM instance). Entry (ra, h) of thread
  // tid is at [(2 * ra + h) * kThreads + tid] (consecutive lanes, consecutive 8 bytes); entry
  // [2 * RA * kThreads + tid] holds the keys visible to every row of the thread's warp.
  math::KeyRange* sKeys = reinterpret_cast<math::KeyRange*>(smem_raw + Tr::kKeysOffset);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, q = lane & 3;
  const int h = blockIdx.y;
  // Later query tiles see more keys under a causal mask; start them first. Ragged batches on
  // a virtual grid (math/ragged_tiles.h) map the block back to its sequence.
  int b = blockIdx.z;
  int m_block = gridDim.x - 1 - blockIdx.x;
  if (a.virtual_batch > 0) {
    const math::RaggedBlock rb = math::ragged_block(a.cu_seqlens_q, a.virtual_batch, BM, m_block);
    if (!rb.active) return;  // a gap block between two sequences
    b = rb.seq;
    m_block = rb.block;
  }

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
  // The K and V base pointers, like the key ranges, wait in the thread's own smem slots and are
  // re-read once per tile load (each LDS.64 frees two registers for the whole mainloop).
  const T** sPtrs = reinterpret_cast<const T**>(smem_raw + Tr::kPtrsOffset);
  sPtrs[tid] = k_ptr;
  sPtrs[Tr::kThreads + tid] = v_ptr;

  // Prologue: Q (once) and the first K tile.
  load_tile_async<Tr, BM>(sQ_addr, q_ptr, a.q_row, q_len - m0, tid);
  cp_async_commit();
  if (n_begin < n_end) {
    load_tile_async<Tr, BN>(sK_addr, k_ptr + static_cast<std::int64_t>(n_begin) * BN * a.k_row, a.k_row,
                            k_len - n_begin * BN, tid);
    cp_async_commit();
  }

  // Warp state: its RW rows [wr0, wr0 + RW), as RA atoms of 16; two rows per thread and atom
  // (16a + g and 16a + g + 8).
  const int wr0 = m0 + RW * warp;
  const int wr_end = min(wr0 + RW, q_len);
  math::OnlineSoftmaxRow rows[RA][2];
#pragma unroll
  for (int ra = 0; ra < RA; ++ra) {
    sKeys[(2 * ra) * Tr::kThreads + tid] = math::visible_keys(spec, wr0 + 16 * ra + g);
    sKeys[(2 * ra + 1) * Tr::kThreads + tid] = math::visible_keys(spec, wr0 + 16 * ra + g + 8);
  }
  // math::tile_fully_visible(spec, wr0, wr_end, n0, n0 + BN) for every tile, with its two
  // visible_keys calls hoisted: keys [full_begin, full_end) are visible to all warp rows.
  {
    math::KeyRange full{-1, 0x7fffffff};  // a warp without rows needs no mask
    if (wr_end > wr0) {
      full.begin = math::visible_keys(spec, wr_end - 1).begin;
      full.end = math::visible_keys(spec, wr0).end;
    }
    sKeys[2 * RA * Tr::kThreads + tid] = full;
  }
  float o[RA][D / 8][4];
#pragma unroll
  for (int ra = 0; ra < RA; ++ra)
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[ra][d][0] = o[ra][d][1] = o[ra][d][2] = o[ra][d][3] = 0.0f;
  FragAddrs qa, ka, va;
  init_a_addrs<D>(qa, sQ_addr + 2u * (RW * warp) * D, lane);
  init_k_addrs<D>(ka, sK_addr, lane);
  init_a_addrs<D>(va, sV_addr, lane);

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int n0 = nb * BN;
    cp_async_wait<0>();
    __syncthreads();  // K_nb visible to all; every warp is done with V_nb-1
    load_tile_async<Tr, BN>(sV_addr, sPtrs[Tr::kThreads + tid] + static_cast<std::int64_t>(n0) * a.v_row, a.v_row,
                            k_len - n0, tid);
    cp_async_commit();

    float s[RA][BN / 8][4];
    gemm_qk<Tr, kBf16>(s, qa, ka);

    cp_async_wait<0>();
    __syncthreads();  // V_nb visible to all; every warp is done with K_nb
    if (nb + 1 < n_end) {
      const int n1 = n0 + BN;
      load_tile_async<Tr, BN>(sK_addr, sPtrs[tid] + static_cast<std::int64_t>(n1) * a.k_row, a.k_row, k_len - n1,
                              tid);
      cp_async_commit();
    }

    // Per-element masks only where some key of the tile is hidden from some row of the warp.
    const math::KeyRange full = sKeys[2 * RA * Tr::kThreads + tid];
    const bool masked = !(full.begin <= n0 && n0 + BN <= full.end);
    std::uint32_t p[RA][BN / 16][4];
#pragma unroll
    for (int ra = 0; ra < RA; ++ra) {
      math::KeyRange keys[2];
      if (masked) {
        keys[0] = sKeys[(2 * ra) * Tr::kThreads + tid];
        keys[1] = sKeys[(2 * ra + 1) * Tr::kThreads + tid];
      }
      softmax_tile<T, BN, D>(s[ra], p[ra], o[ra], rows[ra], keys, masked, n0, q, a.scale_log2,
                             DividingSoftcap{a.scale, a.softcap});
    }
    gemm_pv<Tr, kBf16>(o, p, va);
  }

  // Q is still in flight when no KV tile was visited; the epilogue reuses its rows.
  cp_async_wait<0>();
  __syncthreads();
  // Sequence offsets are fetched again rather than kept live through the mainloop (they
  // would only occupy registers there; under a 128-register cap they spilled).
  int out_len = a.seq_q;
  std::int64_t out_row0 = 0;
  int eb = blockIdx.z, em = gridDim.x - 1 - blockIdx.x;  // b and m_block, derived again
  if (a.virtual_batch > 0) {
    const math::RaggedBlock rb = math::ragged_block(a.cu_seqlens_q, a.virtual_batch, BM, em);
    eb = rb.seq;
    em = rb.block;
  }
  if (a.cu_seqlens_q != nullptr) {
    out_row0 = a.cu_seqlens_q[eb];
    out_len = a.cu_seqlens_q[eb + 1] - static_cast<int>(out_row0);
  }
  const int out_r0 = em * BM + RW * (threadIdx.x >> 5);  // = wr0
  out_row0 += out_r0;
  T* o_ptr = static_cast<T*>(a.o) + eb * a.o_batch + out_row0 * a.o_row + h * a.o_head;
  float* lse_ptr = a.lse == nullptr ? nullptr : a.lse + eb * a.lse_batch + h * a.lse_head + out_row0;
#pragma unroll
  for (int ra = 0; ra < RA; ++ra)
    epilogue_store<Tr, T>(o[ra], rows[ra], sQ + (RW * warp + 16 * ra) * D, o_ptr + 16 * ra * a.o_row, a.o_row,
                          min(out_len - out_r0 - 16 * ra, 16), lse_ptr == nullptr ? nullptr : lse_ptr + 16 * ra, lane);
}

}  // namespace tessera::cuda::sm80
