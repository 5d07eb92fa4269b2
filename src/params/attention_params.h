// Typed, validated parameters handed from the API layer to dispatch and the backends.
// Plain data: pointers, sizes and strides in elements. Nothing here is checked again.
#pragma once

#include <cstdint>

#include "tessera/tensor.h"

namespace tessera {

// A (batch, row, head, dim) addressed tensor with unit stride on dim. Ragged tensors have
// batch = 0 and rows offset by cu_seqlens.
struct StridedPtr {
  void* ptr = nullptr;
  std::int64_t batch = 0;
  std::int64_t row = 0;
  std::int64_t head = 0;

  std::int64_t offset(std::int64_t b, std::int64_t r, std::int64_t h) const {
    return b * batch + r * row + h * head;
  }
};

// LSE is fp32 (batch, heads, rows) for dense or (heads, total_rows) for ragged; unit row stride.
struct LsePtr {
  float* ptr = nullptr;  // nullptr: not requested
  std::int64_t batch = 0;
  std::int64_t head = 0;
  std::int64_t offset(std::int64_t b, std::int64_t r, std::int64_t h) const { return b * batch + h * head + r; }
};

// FP8 dequantisation factors, fp32, one per (sequence, kv head); ptr == nullptr means 1.
struct DescalePtr {
  const float* ptr = nullptr;
  std::int64_t batch = 0;
  std::int64_t head = 0;
  float at(int b, int h_kv) const { return ptr == nullptr ? 1.0f : ptr[b * batch + h_kv * head]; }
};

struct MaskOptions {
  float scale = 1.0f;       // resolved (default already applied)
  float softcap = 0.0f;     // 0 = off
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
};

struct AttentionParams {
  DType dtype = DType::bf16;
  Device device;
  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  // Dense: every sequence has seq_q / seq_k rows. Ragged: these are the maxima, and
  // cu_seqlens_* (device-visible, same memory as the tensors) give each sequence's rows.
  int seq_q = 0;
  int seq_k = 0;
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t total_q = 0;  // rows of q (ragged) or batch * seq_q
  std::int64_t total_k = 0;

  StridedPtr q, k, v, o;
  LsePtr lse;
  MaskOptions mask;
  bool deterministic = false;
  // FP8 forward (dtype e4m3 for q, k, v): the attention of q * q_descale, k * k_descale and
  // v * v_descale, factors per (sequence, kv head; a query head uses its kv head's). The output
  // is then bf16 (out_dtype()); every other dtype writes out in its own dtype.
  DescalePtr q_descale, k_descale, v_descale;

  void* stream = nullptr;
  int num_threads = 0;

  bool ragged() const { return cu_seqlens_q != nullptr; }
  DType out_dtype() const { return dtype == DType::e4m3 ? DType::bf16 : dtype; }
  // Row offset and length of sequence b (host-visible cu_seqlens only when ragged).
  std::int64_t q_start(int b) const { return ragged() ? cu_seqlens_q[b] : 0; }
  std::int64_t k_start(int b) const { return ragged() ? cu_seqlens_k[b] : 0; }
  int q_len(int b) const { return ragged() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seq_q; }
  int k_len(int b) const { return ragged() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seq_k; }
  int group() const { return heads_q / heads_kv; }
  // Packed row (0 .. total_q / total_k) of sequence b's first query / key: the order of
  // ragged tensors, and of the oracle's arrays for dense ones.
  std::int64_t q_packed_start(int b) const { return ragged() ? q_start(b) : static_cast<std::int64_t>(b) * seq_q; }
  std::int64_t k_packed_start(int b) const { return ragged() ? k_start(b) : static_cast<std::int64_t>(b) * seq_k; }
};

// Backward adds the incoming gradient, the saved LSE (required) and the three gradients.
struct BackwardParams : AttentionParams {
  StridedPtr dout, dq, dk, dv;
  // lse (inherited) is the forward's saved LSE here: read, not written.
};

// merge_states: n states of (tokens, heads, head_dim) rows.
struct MergeParams {
  DType dtype = DType::f32;      // of o_states
  DType out_dtype = DType::f32;  // of out
  Device device;
  int num_states = 0;
  std::int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  const void* o_states = nullptr;
  std::int64_t o_state_stride = 0, o_token_stride = 0, o_head_stride = 0;
  const float* lse_states = nullptr;
  std::int64_t lse_state_stride = 0, lse_token_stride = 0, lse_head_stride = 0;
  void* out = nullptr;
  std::int64_t out_token_stride = 0, out_head_stride = 0;
  float* out_lse = nullptr;  // may be null
  std::int64_t out_lse_token_stride = 0, out_lse_head_stride = 0;
  void* stream = nullptr;
  int num_threads = 0;
};

}  // namespace tessera
