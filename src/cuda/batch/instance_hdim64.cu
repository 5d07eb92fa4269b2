// Batch-attention instances for head_dim 64: f16 and bf16, decode shape (KG = 4) and
// prefill shape (KG = 1). One file per head dim keeps parallel builds balanced.
#include "cuda/batch/launch_template.cuh"

namespace tessera::cuda::batch {
template void launch_attention<__half, 64, 1>(const BatchArgs&, long long, int, void*);
template void launch_attention<__half, 64, 4>(const BatchArgs&, long long, int, void*);
template void launch_attention<__nv_bfloat16, 64, 1>(const BatchArgs&, long long, int, void*);
template void launch_attention<__nv_bfloat16, 64, 4>(const BatchArgs&, long long, int, void*);
}  // namespace tessera::cuda::batch
