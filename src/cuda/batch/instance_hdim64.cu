// Batch-attention instances for head_dim 64: f16 and bf16, decode-shaped units only and fused (every unit on the path of
// its shape). One file per head dim keeps parallel builds balanced.
#include "cuda/batch/launch_template.cuh"

namespace tessera::cuda::batch {
template void launch_attention<__half, 64, kDecodeOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__half, 64, kFused>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__nv_bfloat16, 64, kDecodeOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__nv_bfloat16, 64, kFused>(const BatchArgs&, long long, int, void*, LaunchOptions);
}  // namespace tessera::cuda::batch
