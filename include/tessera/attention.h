// tessera: dense and ragged attention, forward and backward.
//
// Layouts (strides in elements, any strides except unit stride on head_dim):
//   dense : q (batch, seq_q, heads_q, head_dim), k/v (batch, seq_k, heads_kv, head_dim),
//           out like q, lse (batch, heads_q, seq_q) fp32.
//   ragged: q (total_q, heads_q, head_dim), k/v (total_k, heads_kv, head_dim),
//           cu_seqlens_q/k int32 (batch + 1), lse (heads_q, total_q) fp32.
// All tensors of one call live on one device. fp16 and bf16 everywhere (fp32 on the CPU
// too); accumulation in fp32. fp8 e4m3 inputs go through attention_forward_fp8 below.
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

// FP8 dequantisation factors: fp32 tensors of shape (batch, heads_kv), any non-negative
// strides (strides (0, 0) give one factor for the whole tensor), on the device of q. An absent
// Tensor (default-constructed) means 1.0 for every (sequence, kv head). Host-resident factors
// must be finite (checked); device-resident ones are trusted.
struct Fp8Descale {
  Tensor q, k, v;
};

// FP8 forward: q, k, v are fp8_e4m3 (layouts as attention_forward), out is bf16 (shape of q),
// lse fp32 as for the other dtypes. Computes attention_forward of the dequantised inputs
//   q[b, :, h, :] * descale.q[b, h / (heads_q / heads_kv)],  k[b, :, g, :] * descale.k[b, g],
//   v[b, :, g, :] * descale.v[b, g]
// (a query head uses its kv head's factor); scale, softcap and masks apply as usual to
// (q * dq) . (k * dk). There is no fp8 backward (attention_backward refuses fp8 inputs).
// CUDA: Hopper (sm90) only; the CPU backend runs it everywhere.
void attention_forward_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Fp8Descale& descale,
                           const Tensor& out, const Tensor& lse, const AttentionOptions& options = {},
                           const ExecutionContext& ctx = {});

// Same on ragged batches (layouts as attention_forward_ragged; batch = cu_seqlens_q size - 1
// in the descales' shape).
void attention_forward_fp8_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                  const Fp8Descale& descale, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options = {},
                                  const ExecutionContext& ctx = {});

// Gradients from dout, the forward output and its LSE (recomputing P; nothing N x N is
// stored). dq/dk/dv have the shapes of q/k/v and are overwritten.
// CUDA: an fp32 workspace of about heads_q x tokens_q x (head_dim + 2) x 4 bytes (plus dK/dV
// partials when a GQA group is split over CTAs) is taken, stream-ordered, from a per-device pool
// that keeps up to 1 GiB between calls, so that calls after a synchronisation need not map it
// again (a larger workspace is given back at the next synchronisation); when an allocation
// fails the pool gives back all it holds unused and the allocation is retried once.
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
