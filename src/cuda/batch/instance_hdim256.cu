// Batch-attention instances for head_dim 256: f16 and bf16, decode-shaped units only and prefill-shaped units only (a fused
// kernel spills at this head dim, and with one CTA per SM it has no SM to share anyway). One file per head dim keeps parallel builds balanced.
#include "cuda/batch/launch_template.cuh"

namespace tessera::cuda::batch {
template void launch_attention<__half, 256, kDecodeOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__half, 256, kPrefillOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__nv_bfloat16, 256, kDecodeOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
template void launch_attention<__nv_bfloat16, 256, kPrefillOnly>(const BatchArgs&, long long, int, void*, LaunchOptions);
}  // namespace tessera::cuda::batch
