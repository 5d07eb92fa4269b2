// sm90 forward instances for head_dim 256 (f16, bf16; K tiles of 64 and 80).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm90/forward/launch_template.cuh"

namespace tessera::cuda::sm90 {
template void launch_forward<__half, 256, 64>(const FwdArgs&, int, int, void*);
template void launch_forward<__nv_bfloat16, 256, 64>(const FwdArgs&, int, int, void*);
template void launch_forward<__half, 256, 80>(const FwdArgs&, int, int, void*);
template void launch_forward<__nv_bfloat16, 256, 80>(const FwdArgs&, int, int, void*);
}  // namespace tessera::cuda::sm90
