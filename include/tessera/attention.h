// tessera: dense and ragged attention, forward and backward.
//
// Layouts (strides in elements, any strides except unit stride on head_dim):
//   dense : q (batch, seq_q, heads_q, head_dim), k/v (batch, seq_k, heads_kv, head_dim),
//           out like q, lse (batch, heads_q, seq_q) fp32.
//   ragged: q (total_q, heads_q, head_dim), k/v (total_k, heads_kv, head_dim),
//           cu_seqlens_q/k int32 (batch + 1), lse (heads_q, total_q) fp32.
// All tensors of one call live on one device. fp16 and bf16 everywhere (fp32 on the CPU
// too); accumulation in fp32.
#pragma once

#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera {

// out = softmax(mask(scale * q k^T)) v.  `lse` is written when options.return_lse and may
// be absent otherwise.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, const AttentionOptions& options = {},
                       const ExecutionContext& ctx = {});

// Variable-length batch packed along the token axis. cu_seqlens_* are int32 prefix sums
// starting at 0; they may live on the host or on the tensors' device (host-visible ones
// are checked element by element).
void attention_forward_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                              const Tensor& out, const Tensor& lse,
                              const AttentionOptions& options = {},
                              const ExecutionContext& ctx = {});

// Gradients from dout, the forward output and its LSE (recomputing P; nothing N x N is
// stored). dq/dk/dv have the shapes of q/k/v and are overwritten.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& lse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv,
                        const AttentionOptions& options = {},
                        const ExecutionContext& ctx = {});

// Same on ragged batches (layouts as attention_forward_ragged).
void attention_backward_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                               const Tensor& out, const Tensor& dout, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const AttentionOptions& options = {},
                               const ExecutionContext& ctx = {});

// Merge attention states computed over disjoint key sets of the same queries:
//   lse = log(sum_i exp(lse_i)),  o = sum_i exp(lse_i - lse) o_i.
// states: o (num_states, tokens, heads, head_dim), lse (num_states, tokens, heads) fp32;
// out (tokens, heads, head_dim), out_lse (tokens, heads) fp32 (may be absent).
// An all-empty row (every lse_i = -inf) gives o = 0, lse = -inf.
void merge_states(const Tensor& o_states, const Tensor& lse_states, const Tensor& out,
                  const Tensor& out_lse, const ExecutionContext& ctx = {});

}  // namespace tessera
