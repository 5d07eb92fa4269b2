// The merge of a split tail (FwdArgs::split_begin): each split tile's split_parts parts left fp32
// O / l and their LSE in the workspace; one warp per query row combines them exactly, in part
// order (math/lse_merge.h: O = sum_h exp(lse_h - lse) O_h, an empty part ignored) and writes the
// output row and, if asked, the LSE. Dense unmasked launches only (the instances that split).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/types.cuh"
#include "cuda/sm90/forward/forward_args.h"
#include "math/lse_merge.h"

namespace tessera::cuda::sm90 {

constexpr int kSplitMergeThreads = 256;  // 8 rows per block

// Out: the output dtype (bf16 for FP8 inputs; the input dtype for fp16 / bf16).
template <int D, int BM, typename Out>
__global__ void __launch_bounds__(kSplitMergeThreads) split_merge_kernel(const __grid_constant__ FwdArgs a, int n_split) {
  static_assert(D % 64 == 0, "two columns per lane and step");
  const long long row_id = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= static_cast<long long>(n_split) * BM) return;
  const int j = static_cast<int>(row_id / BM), r = static_cast<int>(row_id % BM);
  // The split tile's coordinates, as tile_coords gives them for a dense launch.
  const int tile = a.split_begin + j;
  const int head_seq = tile / a.m_blocks;
  const int m0 = (a.m_blocks - 1 - tile % a.m_blocks) * BM;
  const int head = head_seq % a.heads, seq = head_seq / a.heads;
  if (m0 + r >= a.seq_q) return;  // past the sequence: no row (the parts wrote none)
  math::LseMerger merger;
  float2 acc[D / 64];
#pragma unroll
  for (int k = 0; k < D / 64; ++k) acc[k] = make_float2(0.0f, 0.0f);
#pragma unroll 2
  for (int h = 0; h < a.split_parts; ++h) {  // (unrolled by 2: halves, the common case, load at once)
    const std::int64_t slot = (static_cast<std::int64_t>(j) * a.split_parts + h) * BM + r;
    float scale_old, weight_new;
    merger.add(a.split_lse[slot], &scale_old, &weight_new);
    const float* o = a.split_o + slot * D;
#pragma unroll
    for (int k = 0; k < D / 64; ++k) {
      const float2 x = *reinterpret_cast<const float2*>(o + 64 * k + 2 * lane);
      acc[k].x = math::lse_merge_acc(acc[k].x, scale_old, weight_new, x.x);
      acc[k].y = math::lse_merge_acc(acc[k].y, scale_old, weight_new, x.y);
    }
  }
  const float norm = merger.output_scale();
  Out* out = static_cast<Out*>(a.o) + seq * a.o_batch + static_cast<std::int64_t>(m0 + r) * a.o_row +
                       head * a.o_head;
#pragma unroll
  for (int k = 0; k < D / 64; ++k)
    *reinterpret_cast<std::uint32_t*>(out + 64 * k + 2 * lane) =
        Traits<Out>::pack2(acc[k].x * norm, acc[k].y * norm);
  if (a.lse != nullptr && lane == 0) a.lse[seq * a.lse_batch + head * a.lse_head + m0 + r] = merger.lse();
}

}  // namespace tessera::cuda::sm90
