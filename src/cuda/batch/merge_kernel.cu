// The merge of split query rows: for merge row m, token merge_row[m] combines its partial
// rows merge_partial[merge_indptr[m] .. merge_indptr[m + 1]) (fp32 O normalised over each
// chunk, natural-log LSE per chunk) with the LseMerger recurrence (math/lse_merge.h), in KV
// order (deterministic), into out (dtype) and lse. Same arithmetic as the CPU executor's merge
// pass, in the same order.
//
// Two kernels, picked per run() by launch_merge from the plan's host summary:
//   merge_rows_kernel (main's): one thread per (merge row, query head, 8 values): 2 x 16-byte
//     loads per partial, issued 8 partials at a time, one 16-byte store. For plans with no
//     split row, or split rows with few partials (batch >= 8 decode: 8 partials or none).
//   merge_fan_in_kernel (wip/decode-merge-only, cf364c5 with the grid cap of d9c11bd): one
//     thread per output value, lane i of a warp computing the merge weights of partial i of a
//     round of 32 (a prefix max by shuffles). For few split rows carrying many partials (one
//     long decode request split across the SMs, e.g. 1 x 128k: 33 partials).
// Both are a grid-stride loop over the count read from the plan header (grid from capacity),
// so a CUDA graph captured on one plan and replayed on another stays correct with either.
//
// Same bits from both (include/tessera/batch.h: with disabled / fixed split a request's
// output does not depend on the batch it runs in, and the batch decides the kernel). Every
// output element goes through the same scalar operations in the same order in both kernels:
// math/lse_merge.h's step (lse_merge_weights / _sum / _acc / _out_scale / _lse), which the CPU
// executor runs too, written there with explicitly rounded operations on the device so that no
// contraction or reassociation choice of the compiler can differ between the two kernels (a
// plain `acc * s + w * x` may become fma(acc, s, w * x) in one and fma(w, x, acc * s) in the
// other). The only step computed differently is the running max: the rows kernel folds
// fmaxf sequentially, the fan-in kernel takes prefix maxima over the lanes by shuffles (lane
// i gets max(max_before_round, lse_0..lse_i) for m_new, lane i - 1's for the max before it).
// fmaxf is exact, commutative and associative over the values that occur (a NaN operand is
// dropped in every order, -inf is the identity), so each partial sees the same m_new and max
// as values; the one freedom is the sign of a zero max, which changes no result (x - (+-0) = x
// for x != 0, expf(+-0) = 1, and +-0 + logf(sum) gives the same bits: logf never returns -0).
// Everything else (the x_i loads, the weight == 0 select, 1/sum, pack2's round-to-nearest) is
// the same per element. The GPU tests MergeShapeDoesNotChangeTheResult and
// RequestResultsDoNotDependOnTheBatch run both kernels on the same request and compare bits.
//
// On sm_90 the merge is launched as a programmatic dependent of the attention kernel: its
// launch and block scheduling overlap the attention kernel, and griddepcontrol.wait holds
// every thread until the attention grid has completed and its writes are visible. The fan-in
// kernel reads the plan arrays (header, merge_indptr, merge_row, merge_partial) BEFORE the
// wait: plan() copied them ahead of the attention kernel in stream order, and a dependent
// starts only after that kernel has started; only partial_lse / partial_o (the attention
// kernel's output) are read after it. The rows kernel does the same since wip/decode-s11 (the
// header, its first slot's indptr, merge_row and first 8 partial indices).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/batch/batch_args.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "math/lse_merge.h"

namespace tessera::cuda::batch {
namespace {

// ---- The per-element arithmetic shared by both kernels (see the top of the file). ----

// The per-element arithmetic of both kernels is math/lse_merge.h's (the top of the file).
using math::lse_merge_acc;
using math::lse_merge_lse;
using math::lse_merge_out_scale;
using math::lse_merge_sum;
using math::lse_merge_weights;

// ---- merge_rows_kernel: one thread per (merge row, query head, 8 values) (main's). ----

constexpr int kRowsThreads = kMergeRowsThreads;
constexpr int kBatch = 8;  // partials whose loads are in flight together

template <typename T>
__global__ void __launch_bounds__(kRowsThreads) merge_rows_kernel(const __grid_constant__ BatchArgs a, int head_dim) {
  const int C = head_dim / 8;
  const long long per_row = static_cast<long long>(a.heads_q) * C;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long w = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Before the wait: the plan (header, merge_indptr, merge_row, and the first kBatch partial
  // indices of the thread's first slot). plan() copied it ahead of the attention kernel in
  // stream order, and a dependent starts only after that kernel has started, so it is visible
  // now; only partial_lse / partial_o (the attention kernel's output) wait for its completion.
  // Where a merge block is resident before the attention grid ends (a decode CTA without a
  // second unit exits early and frees its registers), these four dependent loads (the header,
  // indptr, the partial indices, merge_row, which the compiler left behind the merge loop)
  // leave the critical path: after the wait only the LSE / O loads and the store remain.
  const long long total = static_cast<long long>(a.header->num_merge_rows) * per_row;
  int m = 0, h = 0, c = 0, e0 = 0, e1 = 0;
  long long token = 0;
  int pre[kBatch];  // partial rows of entries e0 .. e0 + kBatch - 1 of the first slot
  auto slot = [&](long long ww) {
    // 32-bit division unless the index space needs more (no division call on the common path).
    m = ww < 0x7fffffffLL ? static_cast<int>(static_cast<unsigned>(ww) / static_cast<unsigned>(per_row))
                          : static_cast<int>(ww / per_row);
    const int rem = static_cast<int>(ww - static_cast<long long>(m) * per_row);
    h = rem / C, c = rem % C;
    e0 = a.merge_indptr[m], e1 = a.merge_indptr[m + 1];
    token = a.merge_row[m];
  };
  auto first_batch = [&](int e) {
    const int n = min(kBatch, e1 - e);
#pragma unroll
    for (int i = 0; i < kBatch; ++i) pre[i] = i < n ? a.merge_partial[e + i] : a.merge_partial[e];
  };
  if (w < total) {
    slot(w);
    if (e1 > e0) first_batch(e0);
  }
  sm90::griddepcontrol_wait();  // no-op unless launched as a dependent
  for (bool first = true; w < total; w += stride, first = false) {
    if (!first) {
      slot(w);
      if (e1 > e0) first_batch(e0);
    }
    float mx = -INFINITY, sum = 0.0f;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // Batches of kBatch partials: every load of a batch is issued before the first one is
    // used (a long split, e.g. 33 partials, would otherwise pay one dependent round trip per
    // partial); the merge itself stays sequential in KV order, as on the CPU.
    for (int e = e0; e < e1; e += kBatch) {
      const int n = min(kBatch, e1 - e);
      if (e != e0) first_batch(e);
      long long prow[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) prow[i] = pre[i];
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
        const float m_new = fmaxf(mx, lse[i]);
        float scale_old, weight_new;
        lse_merge_weights(lse[i], mx, m_new, &scale_old, &weight_new);
        sum = lse_merge_sum(sum, scale_old, weight_new);
        mx = m_new;
        const float x[8] = {x0[i].x, x0[i].y, x0[i].z, x0[i].w, x1[i].x, x1[i].y, x1[i].z, x1[i].w};
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[d] = lse_merge_acc(acc[d], scale_old, weight_new, x[d]);
      }
    }
    const float sc = lse_merge_out_scale(sum);
    uint4 v;
    v.x = cuda::Traits<T>::pack2(__fmul_rn(acc[0], sc), __fmul_rn(acc[1], sc));
    v.y = cuda::Traits<T>::pack2(__fmul_rn(acc[2], sc), __fmul_rn(acc[3], sc));
    v.z = cuda::Traits<T>::pack2(__fmul_rn(acc[4], sc), __fmul_rn(acc[5], sc));
    v.w = cuda::Traits<T>::pack2(__fmul_rn(acc[6], sc), __fmul_rn(acc[7], sc));
    T* dst = static_cast<T*>(a.o) + token * a.o_row + static_cast<long long>(h) * a.o_head + 8 * c;
    *reinterpret_cast<uint4*>(dst) = v;
    if (c == 0 && a.lse != nullptr) a.lse[static_cast<long long>(h) * a.lse_head + token] = lse_merge_lse(mx, sum);
  }
}

// ---- merge_fan_in_kernel: one thread per output value, 32 partials' weights per warp step. ----
//
// A warp serves one (merge row, query head): each thread owns one of head_dim's values
// (head_dim threads per (row, head), a multiple of 32, so the warp's 32 lanes share (m, h)),
// lane i loads the index and the LSE of partial i of a round of up to 32 and computes its merge
// weights, and every thread issues the O loads of the round's partials at once (one 4-byte load
// each; a warp reads 128 contiguous bytes per partial). Blocks of 128 threads and at most 128
// registers (launch bounds: 4 blocks per SM): a merge block (16 K registers) fits beside the
// two head_dim 128 decode CTAs of an SM, so it becomes resident early and its plan reads are
// done by the time the attention grid completes.

constexpr int kFanInThreads = 128;
constexpr int kRound = 32;  // partials per round: one per lane for the index, LSE and weights

// Where thread index w works: merge row m, head h, value p.
struct MergeSlot {
  int m, h, p;
};
__device__ __forceinline__ MergeSlot merge_slot(long long w, long long per_row, int per_head) {
  // 32-bit division unless the index space needs more (no division call on the common path).
  const int m = w < 0x7fffffffLL ? static_cast<int>(static_cast<unsigned>(w) / static_cast<unsigned>(per_row))
                                 : static_cast<int>(w / per_row);
  const int rem = static_cast<int>(w - static_cast<long long>(m) * per_row);
  return {m, rem / per_head, rem % per_head};
}

template <typename T>
__global__ void __launch_bounds__(kFanInThreads, 4) merge_fan_in_kernel(const __grid_constant__ BatchArgs a,
                                                                        int head_dim, int max_rows) {
  const int per_head = head_dim;  // threads per (row, head): 64, 128 or 256
  const long long per_row = static_cast<long long>(a.heads_q) * per_head;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  long long w = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Before the wait: the count, and the first slot's row, loaded with the header (the row is
  // clamped into the arrays' capacity, max_rows; it is used only if w < total, and then it is
  // below num_merge_rows <= max_rows unchanged).
  const long long total = static_cast<long long>(a.header->num_merge_rows) * per_row;
  MergeSlot s = merge_slot(w, per_row, per_head);
  const int m0 = min(s.m, max_rows - 1);
  int e0 = 0, e1 = 0;
  long long token = 0;
  int prow = 0;  // lane i: partial row of entry e + i of the current round
  if (w < total) {  // a slot past the plan's rows reads nothing (plan() copies only its rows)
    e0 = a.merge_indptr[m0], e1 = a.merge_indptr[m0 + 1];
    token = a.merge_row[m0];
    if (lane < e1 - e0) prow = a.merge_partial[e0 + lane];
  }
  sm90::griddepcontrol_wait();  // no-op unless launched as a dependent
  for (bool first = true; w < total; w += stride, first = false) {
    if (!first) {
      s = merge_slot(w, per_row, per_head);
      e0 = a.merge_indptr[s.m];
      e1 = a.merge_indptr[s.m + 1];
      token = a.merge_row[s.m];
      prow = lane < e1 - e0 ? a.merge_partial[e0 + lane] : 0;
    }
    float mx = -INFINITY, sum = 0.0f;
    float acc = 0.0f;
    // The warp's 32 lanes share (m, h), so e0, e1 and the round bounds are warp-uniform.
    for (int e = e0; e < e1; e += kRound) {
      const int n = min(kRound, e1 - e);
      if (e != e0) prow = lane < n ? a.merge_partial[e + lane] : 0;
      const float lse = lane < n ? a.partial_lse[static_cast<long long>(prow) * a.heads_q + s.h] : -INFINITY;
      float x[kRound];
      const float* o_base = a.partial_o + static_cast<long long>(s.h) * head_dim + s.p;
      const long long row_stride = static_cast<long long>(a.heads_q) * head_dim;
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        const int pr = __shfl_sync(0xffffffffu, prow, i);
        if (i < n) x[i] = o_base[pr * row_stride];
      }
      // Lane i computes merge_weights for partial e + i from the running max before it and
      // after it (prefix maxima over the lanes; fmaxf is exact, so the values are those of the
      // rows kernel's sequential fold); every thread then applies them in KV order.
      float m_incl = fmaxf(mx, lse);
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, m_incl, d);
        if (lane >= d) m_incl = fmaxf(m_incl, up);
      }
      float m_prev = __shfl_up_sync(0xffffffffu, m_incl, 1);
      if (lane == 0) m_prev = mx;
      float scale_lane, weight_lane;  // lanes past n hold lse = -inf: scale 1, weight 0
      lse_merge_weights(lse, m_prev, m_incl, &scale_lane, &weight_lane);
      mx = __shfl_sync(0xffffffffu, m_incl, 31);  // lanes past n hold -inf: no change
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        if (i >= n) break;
        const float scale_old = __shfl_sync(0xffffffffu, scale_lane, i);
        const float weight_new = __shfl_sync(0xffffffffu, weight_lane, i);
        sum = lse_merge_sum(sum, scale_old, weight_new);
        acc = lse_merge_acc(acc, scale_old, weight_new, x[i]);
      }
    }
    const float sc = lse_merge_out_scale(sum);
    T* dst = static_cast<T*>(a.o) + token * a.o_row + static_cast<long long>(s.h) * a.o_head + s.p;
    // Two neighbouring values per store (lane pairs; per_head is even): 4-byte stores.
    const float mine = __fmul_rn(acc, sc), next = __shfl_down_sync(0xffffffffu, mine, 1);
    if ((s.p & 1) == 0) *reinterpret_cast<std::uint32_t*>(dst) = cuda::Traits<T>::pack2(mine, next);
    if (s.p == 0 && a.lse != nullptr) a.lse[static_cast<long long>(s.h) * a.lse_head + token] = lse_merge_lse(mx, sum);
  }
}

// ---- Launch. ----

// Only where the code that runs is sm_90 code: the attention kernel's trigger and the merge's
// wait exist only there (an sm_80 binary on a Hopper device launches plainly). Both kernels
// come from this translation unit, so one query answers for both.
int merge_binary_version() {
  static const int version = [] {
    cudaFuncAttributes fa = {};
    // griddepcontrol exists only in code compiled from compute_90+ PTX (not in sm_90 SASS JIT-compiled from compute_80).
    if (cudaFuncGetAttributes(&fa, merge_rows_kernel<__half>) == cudaSuccess) return std::min(fa.binaryVersion, fa.ptxVersion);
    (void)cudaGetLastError();  // not fatal here: the launch below reports a real problem
    return 0;
  }();
  return version;
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, long long blocks, int threads, bool programmatic, void* stream, const Args&... args) {
  launch_on_stream(kernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream, programmatic, args...);
}

}  // namespace

void launch_merge(const BatchArgs& args, bool bf16, int head_dim, int max_rows, int merge_rows, int merge_fan_in,
                  int num_sms, bool programmatic, void* stream) {
  if (static_cast<long long>(max_rows) * args.heads_q * head_dim <= 0) return;
  programmatic = programmatic && merge_binary_version() >= 90;
  // The rule (a hint from the host plan; either kernel gives the same bits, so a graph
  // captured on one plan and replayed on another only keeps the captured kernel's speed):
  // the fan-in kernel when the split rows carry more than 16 partials on average AND main's
  // kernel would not have one 256-thread block per SM (merge_rows x heads x head_dim / 8 <=
  // 256 x SMs). 1 x 128k (1 row, 33 partials, 32 heads x 16 threads = 512 threads: 2 blocks of
  // main's kernel walking 5 rounds of 8, against 4096 threads and 2 rounds of 32) takes it,
  // measured -3.2 % eager / -3.5 % graph with this kernel alone. Batch >= 8 decode (8 partials
  // per row, or no split at all) keeps main's kernel, where the fan-in kernel measured +0.4 to
  // +1.6 %. 16: up to 16 partials main's kernel needs at most two rounds of 8 loads in flight;
  // fan-ins between 8 and 33 were not measured, and the cut errs towards main's kernel. Many
  // rows (a long prefill chunk split many ways) already fill the device with main's kernel.
  const bool fan_in = merge_uses_fan_in_kernel(merge_rows, merge_fan_in, args.heads_q, head_dim, num_sms);
  if (fan_in) {
    // Grid capped at one wave (4 blocks per SM by the launch bounds), as measured (d9c11bd).
    const long long capacity = static_cast<long long>(max_rows) * args.heads_q * head_dim;
    const long long blocks = std::min<long long>((capacity + kFanInThreads - 1) / kFanInThreads, 4LL * num_sms);
    if (bf16)
      launch(merge_fan_in_kernel<__nv_bfloat16>, blocks, kFanInThreads, programmatic, stream, args, head_dim, max_rows);
    else
      launch(merge_fan_in_kernel<__half>, blocks, kFanInThreads, programmatic, stream, args, head_dim, max_rows);
  } else {
    const long long capacity = static_cast<long long>(max_rows) * args.heads_q * (head_dim / 8);
    const long long blocks = std::min<long long>((capacity + kRowsThreads - 1) / kRowsThreads, 8LL * num_sms);
    if (bf16)
      launch(merge_rows_kernel<__nv_bfloat16>, blocks, kRowsThreads, programmatic, stream, args, head_dim);
    else
      launch(merge_rows_kernel<__half>, blocks, kRowsThreads, programmatic, stream, args, head_dim);
  }
}

}  // namespace tessera::cuda::batch
