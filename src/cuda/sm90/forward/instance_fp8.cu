// sm90 forward instances for fp8 e4m3 inputs (bf16 output): head_dim 128 and 256, K tiles of
// 128 keys, unmasked and masked; at head_dim 256 also the V^T-only pair (calls whose V^T the
// pass made: overlapped schedule, kernel_traits.cuh).
#include <cuda_fp8.h>

#include "cuda/sm90/forward/launch_template.cuh"

namespace tessera::cuda::sm90 {
template void launch_forward<__nv_fp8_e4m3, 128, 128, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_fp8_e4m3, 128, 128, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_fp8_e4m3, 256, 128, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_fp8_e4m3, 256, 128, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_fp8_e4m3, 256, 128, false, 0, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_fp8_e4m3, 256, 128, true, 0, true>(const FwdArgs&, int, void*);
}  // namespace tessera::cuda::sm90
