// Kernel arguments of the batch-attention kernels (passed by value, __grid_constant__), and
// the host-side view of the instances. Plain C++: included by the .cu files and by launch.cu.
#pragma once

#include <cstdint>

#include "plan/batch_plan.h"

namespace tessera::cuda::batch {

struct BatchArgs {
  // q and out: (total_q, heads_q, head_dim), element strides; lse: (heads_q, total_q) or null.
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  std::int64_t q_row = 0, q_head = 0;
  std::int64_t o_row = 0, o_head = 0;
  std::int64_t lse_head = 0;

  // Paged cache: element (page, token, head, d) at page * x_page + token * x_token + head * x_head + d.
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t k_page = 0, k_token = 0, k_head = 0;
  std::int64_t v_page = 0, v_token = 0, v_head = 0;
  int page_size = 1;
  int page_shift = -1;  // log2(page_size) when it is a power of two (token -> page by a shift), else -1
  const std::int32_t* kv_indptr = nullptr;   // page table (device memory)
  const std::int32_t* kv_indices = nullptr;

  // The plan in the workspace (device memory).
  const plan::PlanHeader* header = nullptr;
  const std::int32_t* qo_indptr = nullptr;
  const std::int32_t* kv_len = nullptr;
  const plan::WorkItem* items = nullptr;
  const std::int32_t* merge_indptr = nullptr;
  const std::int32_t* merge_row = nullptr;
  const std::int32_t* merge_partial = nullptr;
  float* partial_lse = nullptr;
  float* partial_o = nullptr;

  int heads_q = 0;
  int heads_kv = 0;
  int group = 1;       // heads_q / heads_kv
  // Units per item: ceil(q_tile_rows * group / U), U = plan::packed_q_rows(head_dim) vectors
  // (> 1 only for a group larger than U).
  int row_blocks = 1;

  float scale = 1.0f;       // resolved softmax scale
  float scale_log2 = 1.0f;  // scale * log2(e)
  float softcap = 0.0f;     // 0 = off
  float scale_over_cap = 0.0f;  // scale / softcap (softcap > 0; SoftcapScore, softcap_score.cuh)
  float softcap_log2 = 0.0f;    // softcap * log2(e)
  bool causal = false;
  int window_left = -1;
  int window_right = -1;

  // Decode-only instance: null, the static walk (CTA x runs units x, x + grid, ...); else the
  // plan header's decode_claim word, and CTAs claim the decode-shaped items one at a time
  // (batch_attention_kernel, claim_decode_units). Set by the SM split (the default on compute
  // capability 9.0) and by TESSERA_CUDA_BATCH=sm90-coresident.
  // Last, so that the other fields keep their parameter offsets.
  std::uint32_t* decode_claim = nullptr;

  // Builds with -DTESSERA_BATCH_TRACE=ON only (cuda/batch/trace.h): the device buffer of the
  // traced run's timestamps, null otherwise. Present in every build so that the struct is the
  // same in every translation unit.
  unsigned long long* trace = nullptr;

  // Decode-only instance launched as a run's first kernel and as the programmatic dependent of
  // the stream's kernel before it (TESSERA_CUDA_BATCH_PDL, launch.cu): every thread waits for
  // that grid (griddepcontrol.wait) before touching memory. Off beside the sm90 prefill, where
  // the grid must overlap that kernel (it waits at its end instead).
  bool wait_first = false;
};

// Packed query vectors at or below which an item runs on the decode-shaped kernel (the plan's
// split between decode- and prefill-shaped items).
inline constexpr int kDecodeMaxRows = plan::kDecodeMaxVectors;

// How an attention instance is launched (launch_attention). The defaults are the plain launch.
//   ctas_per_sm   grid = min(max_units, num_sms x this); 0: as many as fit alone (occupancy).
//   programmatic  launch as a programmatic dependent of the kernel before it on the stream
//                 (cudaLaunchAttributeProgrammaticStreamSerialization), where the instance's
//                 code is sm_90 code (else a plain launch: the kernel then lacks the
//                 griddepcontrol.wait that makes it complete only after that kernel). Used for
//                 the decode-only instance after the sm90 prefill kernel by the SM split (the
//                 default, docs/perf/mixed_batch.md "SM split") and by sm90-coresident, and for
//                 the decode-only instance opening a run (launch.cu, launch_decode_only, with
//                 BatchArgs::wait_first: it then waits at its start).
struct LaunchOptions {
  int ctas_per_sm = 0;
  bool programmatic = false;
};

// Two instances per (dtype, head dim), defined in instance_hdim*.cu, kKind an InstanceKind
// (kernel_traits.cuh): decode-only and fused at head_dim 64/128, decode-only and prefill-only
// at 256. Launches on `stream` with a grid of at most `max_units` CTAs.
template <typename T, int kHeadDim, int kKind>
void launch_attention(const BatchArgs& args, long long max_units, int num_sms, void* stream,
                      LaunchOptions options = {});

// Which merge kernel launch_merge runs (merge_kernel.cu), from the plan's host summary: the
// fan-in kernel when the split rows carry more than kMergeFanInThreshold partials on average
// (plan::mean_merge_fan_in) AND the rows kernel would not have one block of kMergeRowsThreads
// per SM (merge_rows x heads_q x head_dim / 8 threads); the rows kernel otherwise. One
// definition for the launcher and the tests that assert which kernel a plan takes.
inline constexpr int kMergeFanInThreshold = 16;
inline constexpr int kMergeRowsThreads = 256;
inline bool merge_uses_fan_in_kernel(int merge_rows, int merge_fan_in, int heads_q, int head_dim, int num_sms) {
  return merge_fan_in > kMergeFanInThreshold &&
         static_cast<long long>(merge_rows) * heads_q * (head_dim / 8) <= static_cast<long long>(kMergeRowsThreads) * num_sms;
}

// The merge of split rows (merge_kernel.cu); max_rows = capacity of merge rows. programmatic:
// launch as a programmatic dependent of the kernel before it on the stream (sm_90, whose
// attention kernels trigger their dependents at their start). merge_rows / merge_fan_in: the
// current plan's split rows and their mean partials per row (host summary), which pick the
// merge kernel (many partials on few rows: one thread per value, lanes computing 32 partials'
// weights at once; otherwise 8 values per thread). A hint only: both kernels compute every
// output element with the same operations in the same order, so the choice changes no bit.
void launch_merge(const BatchArgs& args, bool bf16, int head_dim, int max_rows, int merge_rows, int merge_fan_in,
                  int num_sms, bool programmatic, void* stream);

}  // namespace tessera::cuda::batch
