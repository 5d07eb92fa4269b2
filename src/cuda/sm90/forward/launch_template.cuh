// launch_forward<T, kHeadDim, kBlockN, kMasked, kConsumerWGs>: the host side of one sm90 instance (included by instance_hdim*.cu).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/kernel.cuh"

namespace tessera::cuda::sm90 {

template <typename T, int kHeadDim, int kBlockN, bool kMasked, int kConsumerWGs>
void launch_forward(const FwdArgs& args, int num_sms, void* stream) {
  using Tr = FwdTraits<kHeadDim, kBlockN, std::is_same_v<T, __nv_fp8_e4m3> ? 1 : 2, kConsumerWGs>;
  const long long tiles = args.num_tiles;
  if (tiles == 0) return;
  auto* kernel = &forward_kernel<T, kHeadDim, kBlockN, kMasked, kConsumerWGs>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  // Unmasked dense tiles all cost the same: persistent CTAs, one per SM (shared memory allows
  // no more), each walking its tiles, so a tile's epilogue and the next one's loads overlap.
  // Masked (causal, window) tiles differ by up to the sequence length: one CTA per tile, so
  // that the hardware hands the next tile to whichever SM frees first (a static walk measured
  // 1.36x slower at 16k causal: its heaviest CTA carried 1.57x the mean). Ragged batches sized
  // by a bound on the longest sequence too: most of their tiles are empty, and a static walk
  // would leave the real ones to a few CTAs. Unmasked ragged batches on the virtual block grid
  // (math/ragged_tiles.h: at most one empty block per sequence) of short sequences (on average
  // at most two Q tiles) walk persistently: their tiles are small and alike, and a CTA per
  // tile pays its launch, setup and Q load each time (measured: 16k tokens as 128 sequences
  // -13 %); with longer sequences tiles differ by up to the longest sequence and the static
  // walk lost (16 sequences of 512-1536 tokens: +13 %; docs/perf/forward_sm90.md).
  const bool ragged = args.cu_seqlens_q != nullptr;
  const long long persistent = tiles < num_sms ? tiles : num_sms;
  const bool short_ragged = args.ragged_virtual && args.total_q <= 2LL * Tr::kBlockM * args.batch;
  const bool tile_per_cta = kMasked || (ragged && !short_ragged);
  const unsigned grid = static_cast<unsigned>(tile_per_cta ? tiles : persistent);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::sm90
