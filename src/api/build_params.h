// The API layer's second half: after validation, public tensors become typed params.
// Exposed (internally) so tests can hand the very same params to the oracle.
#pragma once

#include "params/attention_params.h"
#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera::api {

// Validate every argument of attention_forward / attention_forward_ragged and build params.
// cu_seqlens_q / cu_seqlens_k absent for the dense form. Throws tessera::Error; writes nothing.
AttentionParams build_forward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& lse,
                                     const AttentionOptions& options, const ExecutionContext& ctx);

BackwardParams build_backward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& dout,
                                     const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const AttentionOptions& options, const ExecutionContext& ctx);

MergeParams build_merge_params(const Tensor& o_states, const Tensor& lse_states, const Tensor& out,
                               const Tensor& out_lse, const ExecutionContext& ctx);

}  // namespace tessera::api
