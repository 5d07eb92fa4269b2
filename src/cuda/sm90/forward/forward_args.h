// Kernel arguments of the sm90 forward, passed by value as one __grid_constant__ parameter so
// that the tensor maps stay in the parameter space where the copy engine reads them.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "math/fast_divisor.h"

namespace tessera::cuda::sm90 {

struct FwdArgs {
  // Dense tensors: rank-4 maps (head_dim, seq, heads, batch). Ragged: rank-3 maps (head_dim,
  // packed rows, heads), sequence b's rows start at cu_seqlens[b]. Boxes: 64 columns x
  // kBlockM (Q) / kBlockN (K, V) / 64 (O) rows.
  CUtensorMap map_q;
  CUtensorMap map_k;
  CUtensorMap map_v;
  CUtensorMap map_o;  // dense only: the epilogue's TMA store
  // FP8 with vt_global: V^T from the pass of fp8_v_transpose.h, rank 4 (keys, head_dim, kv
  // heads, batch), one box of 128 keys x head_dim rows per K/V tile; the producer loads it in
  // place of V and the kernel's transposing warps stand idle. Otherwise unused.
  CUtensorMap map_vt;
  bool vt_global = false;
  void* o = nullptr;  // ragged and fp8: the epilogue stores rows itself (no TMA store); split tails: the merge
  std::int64_t o_batch = 0, o_row = 0, o_head = 0;
  float* lse = nullptr;  // nullptr: not requested
  std::int64_t lse_batch = 0, lse_head = 0;
  const std::int32_t* cu_seqlens_q = nullptr;  // both null for dense input
  const std::int32_t* cu_seqlens_k = nullptr;
  int seq_q = 0;  // dense: every sequence's length; ragged: a bound on the longest (the total with device cu_seqlens)
  int seq_k = 0;
  int group = 1;  // heads_q / heads_kv
  float scale = 1.0f;
  float scale_log2 = 1.0f;
  float softcap = 0.0f;
  // softcap > 0: its factors, scale / softcap and softcap * log2(e) (SoftcapScore,
  // cuda/common/softcap_score.cuh); FP8 tiles multiply the first by their descales.
  float scale_over_cap = 0.0f;
  float softcap_log2 = 0.0f;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  // FP8: dequantisation factors per (sequence, kv head), ptr == nullptr means 1.
  struct Descale {
    const float* ptr = nullptr;
    std::int64_t batch = 0, head = 0;
    __device__ float at(int seq, int h_kv) const { return ptr == nullptr ? 1.0f : ptr[seq * batch + h_kv * head]; }
  };
  Descale q_descale, k_descale, v_descale;
  // The grid's work: m_blocks x heads x batch tiles of kBlockM query rows; CTA i takes tile i
  // first, then i + gridDim.x, ... or the counter's next (tile_coords in tile_coords.cuh gives the order).
  // With the head_dim 64 tail-row launch (launch.cu) the whole blocks' launch counts m_blocks - 1
  // per (head, sequence) and the tail launch one tile per (head, sequence), its last block.
  int m_blocks = 0;
  int block_m = 0;  // query rows per tile (the instance's; host-side choice of the instance)
  int heads = 0;
  int batch = 0;
  // Ragged batches with device cu_seqlens: m_blocks counts virtual query blocks over all
  // sequences (math/ragged_tiles.h) and the tile space is m_blocks x heads (no batch factor).
  bool ragged_virtual = false;
  // Dynamic tile walk: a zeroed counter the CTAs take their next tiles from (after their first,
  // blockIdx.x); nullptr: CTA x walks x, x + gridDim.x, ...
  unsigned int* tile_counter = nullptr;
  // Keys per sequence, on average (dense: seq_k; ragged: total_k / batch): the launch walks
  // dynamically only where tiles are short (launch_template.cuh).
  std::int64_t mean_keys = 0;
  // m_blocks x heads x batch (x heads when ragged_virtual; the tail-row launches: see m_blocks), computed on the host: read from the parameter bank where the
  // kernel needs it (a product computed in the kernel stayed live across setmaxnreg and spilled).
  int num_tiles = 0;
  // Split tail (dense, unmasked; launch_template.cuh, split_tail_plan.h): tiles from
  // split_begin on are the last round's tiles taken in split_parts parts of their K/V tiles,
  // virtual tile split_begin + k j + h being part h of tile split_begin + j (num_tiles then
  // counts the parts). A part writes its O / l (fp32, [j][h][kBlockM][head_dim]) and its LSE
  // ([j][h][kBlockM]) here; a merge kernel writes the output rows. split_begin == num_tiles: no
  // split.
  int split_begin = 0x7fffffff;
  int split_parts = 2;
  float* split_o = nullptr;
  float* split_lse = nullptr;
  // m_blocks, heads and group as divisors for a tile's coordinates (tile_coords.cuh) and its K/V
  // head, set by the launch from the values above once they are final (launch_template.cuh):
  // the consumers' tile start then divides with multiply-highs, not nvcc's ~20-instruction
  // division.
  math::FastDivisor m_blocks_div, heads_div, group_div;
  // Host only (launch_template.cuh; last, so that the kernel's parameter offsets stay as they
  // were). split_allowed: whether the launch may split its tail; programmatic: launched as the
  // programmatic dependent of the launch just before it on the stream. The head_dim 64 tail-row
  // pair (launch.cu) sets both: the whole blocks' launch leaves its last round to the tail
  // launch, whose CTAs take the SMs that round leaves free (walking from a tile_counter the caller
  // zeroed before the first launch).
  bool split_allowed = true;
  bool programmatic = false;
};

// One instance per (dtype, head dim, K tile width, mask kind, consumer warpgroups: 0 = the head
// dim's default, V^T-only: FP8 launches with vt_global, tail rows: head_dim 64's last query
// blocks of at most 64 rows, kernel_traits.cuh), defined in instance_*.cu; a grid of
// min(tiles, num_sms) persistent CTAs (launch_template.cuh says when one per tile).
template <typename T, int kHeadDim, int kBlockN, bool kMasked, int kConsumerWGs = 0, bool kVtOnly = false,
          bool kTailRows = false>
void launch_forward(const FwdArgs& args, int num_sms, void* stream);

}  // namespace tessera::cuda::sm90
