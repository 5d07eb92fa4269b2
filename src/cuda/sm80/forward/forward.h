// The sm80 (FA2-class) forward: what the host side needs, free of CUDA headers so that
// cuda_backend.cpp can include it.
#pragma once

#include <cstdint>
#include <string>

#include "params/attention_params.h"

namespace tessera::cuda::sm80 {

// Kernel arguments, passed by value. Strides are in elements; ragged inputs have zero batch
// strides and their row offsets come from cu_seqlens (device memory).
struct FwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  std::int64_t q_batch = 0, q_row = 0, q_head = 0;
  std::int64_t k_batch = 0, k_row = 0, k_head = 0;
  std::int64_t v_batch = 0, v_row = 0, v_head = 0;
  std::int64_t o_batch = 0, o_row = 0, o_head = 0;
  float* lse = nullptr;  // nullptr: not requested
  std::int64_t lse_batch = 0, lse_head = 0;
  const std::int32_t* cu_seqlens_q = nullptr;  // both null for dense input
  const std::int32_t* cu_seqlens_k = nullptr;
  int seq_q = 0;  // dense: every sequence's length; ragged: an upper bound (sizes the grid)
  int seq_k = 0;
  // Ragged: > 0 when grid x counts virtual query blocks over this many sequences
  // (math/ragged_tiles.h; grid z is then 1); total_q sizes that grid (host side only).
  int virtual_batch = 0;
  std::int64_t total_q = 0;
  int group = 1;  // heads_q / heads_kv
  float scale = 1.0f;
  float scale_log2 = 1.0f;  // scale * log2(e), for exp2 softmax
  float softcap = 0.0f;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
};

// Head dims with an instantiation.
bool forward_head_dim_compiled(int head_dim);
// Dynamic shared memory one CTA of the instance for head_dim needs.
int forward_smem_bytes(int head_dim);

// Runs the forward for validated params (dtype f16/bf16, a compiled head dim, 16-byte
// aligned rows) on p.stream. Throws tessera::Error(backend_failure) on a CUDA error.
void run_forward(const AttentionParams& p);

// One instance per (dtype, head dim), defined in instance_hdim*.cu.
template <typename T, int kHeadDim>
void launch_forward(const FwdArgs& args, int batch, int heads_q, void* stream);

}  // namespace tessera::cuda::sm80
