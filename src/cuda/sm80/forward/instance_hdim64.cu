// sm80 forward instances for head_dim 64 (f16 and bf16). One file per head dim keeps
// parallel builds balanced.
#include "cuda/sm80/forward/launch_template.cuh"

namespace tessera::cuda::sm80 {
template void launch_forward<__half, 64>(const FwdArgs&, int, int, void*);
template void launch_forward<__nv_bfloat16, 64>(const FwdArgs&, int, int, void*);
}  // namespace tessera::cuda::sm80
