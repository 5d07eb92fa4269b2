// The API layer's second half: after validation, public tensors become typed params.
// Exposed (internally) so tests can hand the very same params to the oracle.
#pragma once

#include "params/attention_params.h"
#include "tessera/attention.h"
#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera::api {

// Validate every argument of attention_forward / attention_forward_ragged and build params.
// cu_seqlens_q / cu_seqlens_k absent for the dense form. Throws tessera::Error; writes nothing.
AttentionParams build_forward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& lse,
                                     const AttentionOptions& options, const ExecutionContext& ctx);

// The same for attention_forward_fp8 / attention_forward_fp8_ragged: q/k/v fp8_e4m3, out bf16,
// descales checked and set in the params (absent ones stay nullptr, meaning 1).
AttentionParams build_forward_fp8_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                         const Tensor& cu_seqlens_k, const Fp8Descale& descale, const Tensor& out,
                                         const Tensor& lse, const AttentionOptions& options,
                                         const ExecutionContext& ctx);

BackwardParams build_backward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& dout,
                                     const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const AttentionOptions& options, const ExecutionContext& ctx);

MergeParams build_merge_params(const Tensor& o_states, const Tensor& lse_states, const Tensor& out,
                               const Tensor& out_lse, const ExecutionContext& ctx);

// A saved LSE given to a public function (attention_backward's lse; build_merge_params calls it
// for lse_states): host-resident values must be finite or -inf (an empty row); +inf and NaN are
// refused, naming the element. Device-resident ones are trusted (a scan would cost a pass).
void check_saved_lse(const Tensor& lse, const char* name);

}  // namespace tessera::api
