// launch_forward<T, kHeadDim, kBlockN, kMasked, kConsumerWGs, kVtOnly, kTailRows>: the host side of one sm90 instance
// (included by instance_*.cu).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/common/scratch_pool.h"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/kernel.cuh"
#include "cuda/sm90/forward/split_merge.cuh"
#include "cuda/sm90/forward/split_tail_plan.h"
#include "dispatch/path_override.h"
#include "tessera/error.h"

namespace tessera::cuda::sm90 {

template <typename T, int kHeadDim, int kBlockN, bool kMasked, int kConsumerWGs, bool kVtOnly, bool kTailRows>
void launch_forward(const FwdArgs& args, int num_sms, void* stream) {
  using Tr = FwdTraits<kHeadDim, kBlockN, std::is_same_v<T, __nv_fp8_e4m3> ? 1 : 2, kConsumerWGs, kVtOnly, kMasked,
                       kTailRows>;
  const long long tiles = args.num_tiles;
  if (tiles == 0) return;
  if (kVtOnly && !args.vt_global)
    throw Error(ErrorCode::backend_failure, "v",
                "sm90 fp8 forward: expected the V^T workspace for the V^T-only instance, got none (an internal error)");
  auto* kernel = &forward_kernel<T, kHeadDim, kBlockN, kMasked, kConsumerWGs, kVtOnly, kTailRows>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  // Unmasked dense tiles all cost the same: persistent CTAs, one per SM (shared memory allows
  // no more), CTA x walking tiles x, x + grid, ..., so a tile's epilogue and the next one's
  // loads overlap. Masked (causal, window) tiles differ by up to the sequence length, and
  // ragged ones by their sequences' lengths: a static walk measured 1.36x slower at 16k causal
  // (its heaviest CTA carried 1.57x the mean) and 1.13x slower on 16 ragged sequences. Those
  // walk dynamically: persistent CTAs take their next tile from a counter in index order (the
  // longest query block of a head first), as a grid of one CTA per tile would be scheduled but
  // without a CTA launch, setup and exposed Q load per tile. Only where sequences are short
  // (at most kDynamicMaxKeys keys on average): measured against one CTA per tile, causal d128
  // 1k -4 %, d64 1k -11 %, 128 ragged sequences -6 %, but causal 16k +3.7 % (not understood;
  // docs/perf/forward_sm90.md), so long sequences keep one CTA per tile. The counter is a 4-byte
  // stream-ordered allocation from tessera's scratch pool (which, unlike the default pool, keeps
  // its memory across synchronizations), zeroed before the launch (graph-capturable); if it
  // cannot be had, one CTA per tile.
  // (An unmasked dense call that a warpgroup knob sends to a masked instance, TESSERA_CUDA_D64_WARPGROUPS=2
  // or TESSERA_CUDA_D128_WARPGROUPS=3, has even tiles too: it walks statically, so that the knob
  // changes the instance and not the walk. Only the split tail stays the unmasked instances'.)
  const bool ragged = args.cu_seqlens_q != nullptr;
  const bool masked_call = args.causal || args.window_left >= 0 || args.window_right >= 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const long long persistent = tiles < num_sms ? tiles : num_sms;
  FwdArgs run_args = args;
  unsigned int* counter = nullptr;
  long long grid = persistent;
  constexpr long long kDynamicMaxKeys = 2048;
  if ((kMasked && masked_call) || ragged) {
    grid = tiles;
    if (tiles > num_sms && args.mean_keys <= kDynamicMaxKeys) {
      int device = 0;
      TESSERA_CUDA_CHECK(cudaGetDevice(&device));
      const cudaMemPool_t pool = scratch_pool(device);
      const cudaError_t alloc = pool == nullptr ? cudaErrorNotSupported
                                                : cudaMallocFromPoolAsync(reinterpret_cast<void**>(&counter), sizeof(unsigned int), pool, s);
      if (alloc == cudaErrorMemoryAllocation || alloc == cudaErrorNotSupported) {
        (void)cudaGetLastError();  // no memory or no stream-ordered allocator: one CTA per tile
        counter = nullptr;
      } else if (alloc != cudaSuccess) {
        TESSERA_CUDA_CHECK(alloc);  // e.g. an invalidated stream capture: report, do not hide
      } else if (const cudaError_t zeroed = cudaMemsetAsync(counter, 0, sizeof(unsigned int), s); zeroed != cudaSuccess) {
        (void)cudaFreeAsync(counter, s);
        TESSERA_CUDA_CHECK(zeroed);
      } else {
        run_args.tile_counter = counter;
        grid = persistent;
      }
    }
  }
  // Dense unmasked launches: the last round's tiles split in parts over their K/V tiles where that
  // shortens the round (split_tail_plan.h); the parts' O / l and LSE go to a workspace from the
  // scratch pool and split_merge_kernel writes their rows. Without the workspace (no memory, no
  // pool), no split.
  long long n_split = 0;
  int parts = 1;
  float* split_ws = nullptr;
  if constexpr (!kMasked && !kTailRows) {
    if (!ragged && args.split_allowed) {
      const dispatch::ForwardSplitTail forced = dispatch::forward_split_tail_override();
      const SplitTail plan = forward_split_tail(
          tiles, persistent, (static_cast<long long>(args.seq_k) + kBlockN - 1) / kBlockN, kBlockN, kHeadDim, forced.tiles,
          forced.parts);
      n_split = plan.tiles;
      parts = plan.parts;
      if (n_split > 0) {
        const std::size_t floats = static_cast<std::size_t>(parts * n_split) * Tr::kBlockM * (kHeadDim + 1);
        int device = 0;
        TESSERA_CUDA_CHECK(cudaGetDevice(&device));
        const cudaMemPool_t pool = scratch_pool(device);
        const cudaError_t alloc = pool == nullptr ? cudaErrorNotSupported
                                                  : cudaMallocFromPoolAsync(reinterpret_cast<void**>(&split_ws),
                                                                            floats * sizeof(float), pool, s);
        if (alloc == cudaErrorMemoryAllocation || alloc == cudaErrorNotSupported) {
          (void)cudaGetLastError();
          split_ws = nullptr;
          n_split = 0;
        } else {
          TESSERA_CUDA_CHECK(alloc);
          run_args.split_begin = static_cast<int>(tiles - n_split);
          run_args.split_parts = parts;
          run_args.num_tiles = static_cast<int>(tiles + (parts - 1) * n_split);  // a split tile counts once per part
          run_args.split_o = split_ws;
          run_args.split_lse = split_ws + static_cast<std::size_t>(parts * n_split) * Tr::kBlockM * kHeadDim;
          const long long virtual_tiles = tiles + (parts - 1) * n_split;
          grid = virtual_tiles < num_sms ? virtual_tiles : num_sms;
        }
      }
    }
  }
  // (The tail-row launch of a pair (launch.cu) brings its tile counter zeroed from the caller:
  // persistent CTAs walking dynamically, those that start in the whole blocks' last round taking
  // more tiles; its grid is the persistent one already.)
  run_args.m_blocks_div = math::FastDivisor(run_args.m_blocks);
  run_args.heads_div = math::FastDivisor(run_args.heads);
  run_args.group_div = math::FastDivisor(run_args.group);
  cudaError_t launched = cudaSuccess;
  if (args.programmatic) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(Tr::kThreads);
    cfg.dynamicSmemBytes = Tr::kSmemBytes;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    launched = cudaLaunchKernelEx(&cfg, kernel, run_args);
    if (launched != cudaSuccess) (void)cudaGetLastError();
    if (launched == cudaErrorNotSupported) {
      // No programmatic launch here (a driver or a capture without programmatic edges): the plain
      // launch is as correct (the kernel's griddepcontrol.wait returns at once), only serial.
      kernel<<<static_cast<unsigned>(grid), Tr::kThreads, Tr::kSmemBytes, s>>>(run_args);
      launched = cudaGetLastError();
    }
  } else {
    kernel<<<static_cast<unsigned>(grid), Tr::kThreads, Tr::kSmemBytes, s>>>(run_args);
    launched = cudaGetLastError();
  }
  if (launched == cudaSuccess && n_split > 0) {
    const long long threads = n_split * Tr::kBlockM * 32;
    using Out = std::conditional_t<std::is_same_v<T, __nv_fp8_e4m3>, __nv_bfloat16, T>;
    split_merge_kernel<kHeadDim, Tr::kBlockM, Out>
        <<<static_cast<unsigned>((threads + kSplitMergeThreads - 1) / kSplitMergeThreads), kSplitMergeThreads, 0, s>>>(
            run_args, static_cast<int>(n_split));
    launched = cudaGetLastError();
  }
  for (void* p : {static_cast<void*>(counter), static_cast<void*>(split_ws)}) {
    if (p == nullptr) continue;
    const cudaError_t freed = cudaFreeAsync(p, s);
    if (launched == cudaSuccess) TESSERA_CUDA_CHECK(freed);  // else the launch's error is the one to report
  }
  TESSERA_CUDA_CHECK(launched);
}

}  // namespace tessera::cuda::sm90
