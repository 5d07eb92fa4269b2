// The merge of split query rows: for merge row m, token merge_row[m] combines its partial
// rows merge_partial[merge_indptr[m] .. merge_indptr[m + 1]) (fp32 O normalised over each
// chunk, natural-log LSE per chunk) with math::LseMerger, in KV order (deterministic), into
// out (dtype) and lse. Same arithmetic as the CPU executor's merge pass.
//
// One thread per (merge row, query head, 8 dims): 2 x 16-byte loads per partial (issued 8
// partials at a time), one 16-byte store; a grid-stride loop over the count read from the plan header (grid from capacity).
// On sm_90 the merge is launched as a programmatic dependent of the attention kernel: its
// launch and block scheduling overlap the attention kernel's tail, and griddepcontrol.wait
// holds every thread until the attention grid has completed and its writes are visible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/batch/batch_args.h"
#include "cuda/common/check.h"
#include "cuda/common/types.cuh"
#include "math/lse_merge.h"

namespace tessera::cuda::batch {
namespace {

constexpr int kMergeThreads = 256;
constexpr int kBatch = 8;  // partials whose loads are in flight together

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const __grid_constant__ BatchArgs a, int head_dim) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // no-op unless launched as a dependent
#endif
  const int C = head_dim / 8;
  const long long per_row = static_cast<long long>(a.heads_q) * C;
  const long long total = static_cast<long long>(a.header->num_merge_rows) * per_row;
  for (long long w = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; w < total;
       w += static_cast<long long>(gridDim.x) * blockDim.x) {
    // 32-bit division unless the index space needs more (no division call on the common path).
    const int m = w < 0x7fffffffLL ? static_cast<int>(static_cast<unsigned>(w) / static_cast<unsigned>(per_row))
                                   : static_cast<int>(w / per_row);
    const int rem = static_cast<int>(w - static_cast<long long>(m) * per_row);
    const int h = rem / C, c = rem % C;
    const int e0 = a.merge_indptr[m], e1 = a.merge_indptr[m + 1];
    math::LseMerger merger;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // Batches of kBatch partials: every load of a batch is issued before the first one is
    // used (a long split, e.g. 33 partials, would otherwise pay one dependent round trip per
    // partial); the merge itself stays sequential in KV order, as on the CPU.
    for (int e = e0; e < e1; e += kBatch) {
      const int n = min(kBatch, e1 - e);
      long long prow[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) prow[i] = i < n ? a.merge_partial[e + i] : a.merge_partial[e];
      float lse[kBatch];
      float4 x0[kBatch], x1[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        lse[i] = a.partial_lse[prow[i] * a.heads_q + h];
        const float* src = a.partial_o + (prow[i] * a.heads_q + h) * head_dim + 8 * c;
        x0[i] = *reinterpret_cast<const float4*>(src);
        x1[i] = *reinterpret_cast<const float4*>(src + 4);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if (i >= n) break;
        float scale_old, weight_new;
        merger.add(lse[i], &scale_old, &weight_new);
        if (weight_new == 0.0f) continue;  // empty partial: its O is 0 and changes nothing
        const float x[8] = {x0[i].x, x0[i].y, x0[i].z, x0[i].w, x1[i].x, x1[i].y, x1[i].z, x1[i].w};
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[d] = acc[d] * scale_old + weight_new * x[d];
      }
    }
    const float sc = merger.output_scale();
    const long long token = a.merge_row[m];
    uint4 v;
    v.x = cuda::Traits<T>::pack2(acc[0] * sc, acc[1] * sc);
    v.y = cuda::Traits<T>::pack2(acc[2] * sc, acc[3] * sc);
    v.z = cuda::Traits<T>::pack2(acc[4] * sc, acc[5] * sc);
    v.w = cuda::Traits<T>::pack2(acc[6] * sc, acc[7] * sc);
    T* dst = static_cast<T*>(a.o) + token * a.o_row + static_cast<long long>(h) * a.o_head + 8 * c;
    *reinterpret_cast<uint4*>(dst) = v;
    if (c == 0 && a.lse != nullptr) a.lse[static_cast<long long>(h) * a.lse_head + token] = merger.lse();
  }
}

}  // namespace

void launch_merge(const BatchArgs& args, bool bf16, int head_dim, int max_rows, int /*merge_rows*/,
                  int /*merge_fan_in*/, int num_sms, bool programmatic, void* stream) {
  const long long capacity = static_cast<long long>(max_rows) * args.heads_q * (head_dim / 8);
  if (capacity <= 0) return;
  const long long blocks = std::min<long long>((capacity + kMergeThreads - 1) / kMergeThreads, 8LL * num_sms);
  // Only where the code that runs is sm_90 code: the attention kernel's trigger and the
  // merge's wait exist only there (an sm_80 binary on a Hopper device launches plainly).
  static const int binary_version = [] {
    cudaFuncAttributes fa = {};
    if (cudaFuncGetAttributes(&fa, merge_kernel<__half>) == cudaSuccess) return fa.binaryVersion;
    (void)cudaGetLastError();  // not fatal here: the launch below reports a real problem
    return 0;
  }();
  programmatic = programmatic && binary_version >= 90;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kMergeThreads);
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  if (bf16)
    TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, merge_kernel<__nv_bfloat16>, args, head_dim));
  else
    TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, merge_kernel<__half>, args, head_dim));
}

}  // namespace tessera::cuda::batch
