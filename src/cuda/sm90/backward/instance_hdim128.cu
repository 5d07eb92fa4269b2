// sm90 backward instances for head_dim 128 (f16, bf16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm90/backward/launch_template.cuh"

namespace tessera::cuda::sm90 {
template void launch_backward<__half, 128>(const backward::BwdArgs&, void*);
template void launch_backward<__nv_bfloat16, 128>(const backward::BwdArgs&, void*);
}  // namespace tessera::cuda::sm90
