// The arguments of a backward main kernel, shared by the sm80 (FA2-class) and the sm90 (wgmma)
// kernels and filled by the backward's host code (backward_entry.cu): the tensors, the fp32
// workspace (dQ accumulator, scaled LSE, rowsum(dO * O), GQA split partials, deterministic-mode
// counters) and the problem's shape and mask. Host-side view, free of CUDA headers.
#pragma once

#include <cstdint>

namespace tessera::cuda::backward {

struct BwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* dout = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  std::int64_t q_batch = 0, q_row = 0, q_head = 0;
  std::int64_t k_batch = 0, k_row = 0, k_head = 0;
  std::int64_t v_batch = 0, v_row = 0, v_head = 0;
  std::int64_t do_batch = 0, do_row = 0, do_head = 0;
  std::int64_t dk_batch = 0, dk_row = 0, dk_head = 0;
  std::int64_t dv_batch = 0, dv_row = 0, dv_head = 0;

  // Workspace (fp32). Rows are "global rows": b * seq_q + i (dense) or cu_q[b] + i (ragged).
  float* dq_accum = nullptr;   // [heads_q][total_q][head_dim]
  const float* lse2 = nullptr;  // [heads_q][total_q]
  const float* dsum = nullptr;  // [heads_q][total_q]
  float* dk_part = nullptr;    // [n_splits][total_k][heads_kv][head_dim] when n_splits > 1
  float* dv_part = nullptr;
  // Deterministic mode: one counter per (query head, query tile), else null. Sequence b's
  // tiles start at gr0 / Br + b (gr0 its first global row), which never overlaps sequence
  // b + 1's, so lock_stride = total_q / Br + batch + 1 counters per head suffice.
  int* locks = nullptr;

  const std::int32_t* cu_seqlens_q = nullptr;  // device; both null for dense input
  const std::int32_t* cu_seqlens_k = nullptr;
  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;
  int seq_q = 0, seq_k = 0;  // dense lengths, or upper bounds (ragged)
  std::int64_t total_q = 0, total_k = 0;
  int n_splits = 1;         // CTAs sharing one kv head's query heads
  int heads_per_split = 1;  // group / n_splits
  // dK/dV as fp32 partials into dk_part / dv_part (at split 0) even with n_splits == 1: the
  // tail pieces of the sm80 kernel (backward_entry.cu), summed by a post kernel.
  bool partial_out = false;
  std::int64_t lock_stride = 0;
  float scale = 1.0f;
  float scale_log2 = 1.0f;  // scale * log2(e)
  float softcap = 0.0f;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
};

}  // namespace tessera::cuda::backward
