// The naive baseline: attention as frameworks ran it before FlashAttention, kept to show what
// the fused kernels save. Three passes over device memory:
//   S = scale * Q K^T    cuBLAS strided-batched GEMM (fp32 accumulate, S stored in the dtype)
//   P = softmax(mask(softcap(S)))   one block per row; rows that see no key -> zeros
//   O = P V              cuBLAS strided-batched GEMM
// S and P are materialised: batch * heads_q * seq_q * seq_k elements each.
// Dense tensors only (no cu_seqlens), f16 or bf16; GQA by pointing a group's query heads at
// one kv head (stride 0 in the batched GEMM).
#pragma once

#include <cstddef>

#include "params/attention_params.h"

namespace tessera::cuda::naive {

// Device memory the baseline needs for these params (S and P); may be tens of GB: the
// benchmark reports it even where it cannot run.
std::size_t naive_workspace_bytes(const AttentionParams& p);

// Runs on p.stream; writes p.o, and p.lse when requested. `workspace` is device memory of at
// least naive_workspace_bytes(p). Throws tessera::Error (unsupported for ragged input or
// other dtypes, workspace_too_small, backend_failure for CUDA/cuBLAS errors).
void naive_attention_forward(const AttentionParams& p, void* workspace, std::size_t bytes);

}  // namespace tessera::cuda::naive
