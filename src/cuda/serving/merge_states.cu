// merge_states on CUDA: one block per (token, head) row; each thread owns a few dims and
// streams the states through the shared LSE merger of math/lse_merge.h, so the result is the
// same exact merge the CPU computes (O = sum exp(lse_i - lse) O_i, empty rows -> 0, -inf).
#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/element_io.cuh"
#include "cuda/cuda_backend.h"
#include "math/lse_merge.h"

namespace tessera::cuda {
namespace {

constexpr int kMaxDimsPerThread = 8;

__global__ void merge_states_kernel(MergeParams p) {
  const std::int64_t row = blockIdx.x;  // token * heads + head
  const std::int64_t token = row / p.heads;
  const int head = static_cast<int>(row % p.heads);
  float acc[kMaxDimsPerThread];
#pragma unroll
  for (int j = 0; j < kMaxDimsPerThread; ++j) acc[j] = 0.0f;

  math::LseMerger merger;
  for (int s = 0; s < p.num_states; ++s) {
    const float lse = p.lse_states[s * p.lse_state_stride + token * p.lse_token_stride + head * p.lse_head_stride];
    float scale_old, weight_new;
    merger.add(lse, &scale_old, &weight_new);
    if (weight_new == 0.0f) continue;  // empty state: its O is never read (may be garbage)
    const std::int64_t base = s * p.o_state_stride + token * p.o_token_stride + head * p.o_head_stride;
#pragma unroll
    for (int j = 0; j < kMaxDimsPerThread; ++j) {
      const int d = threadIdx.x + j * blockDim.x;
      if (d < p.head_dim) acc[j] = acc[j] * scale_old + weight_new * load_element(p.o_states, base + d, p.dtype);
    }
  }
  const float norm = merger.output_scale();
  const std::int64_t out_base = token * p.out_token_stride + head * p.out_head_stride;
#pragma unroll
  for (int j = 0; j < kMaxDimsPerThread; ++j) {
    const int d = threadIdx.x + j * blockDim.x;
    if (d < p.head_dim) store_element(p.out, out_base + d, p.out_dtype, acc[j] * norm);
  }
  if (p.out_lse != nullptr && threadIdx.x == 0)
    p.out_lse[token * p.out_lse_token_stride + head * p.out_lse_head_stride] = merger.lse();
}

}  // namespace

void merge_states(const MergeParams& p) {
  const std::int64_t rows = p.tokens * p.heads;
  if (rows == 0 || p.head_dim == 0) return;
  int threads = 32;
  while (threads * kMaxDimsPerThread < p.head_dim) threads *= 2;
  if (threads > 1024)
    throw Error(ErrorCode::unsupported, "o_states",
                "merge_states: o_states: expected head_dim <= 8192 on CUDA, got " + std::to_string(p.head_dim));
  if (rows > 0x7fffffff)
    throw Error(ErrorCode::unsupported, "o_states",
                "merge_states: o_states: expected tokens * heads < 2^31 on CUDA, got " + std::to_string(rows));
  merge_states_kernel<<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
