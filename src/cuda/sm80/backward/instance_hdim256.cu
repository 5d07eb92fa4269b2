// Backward main-kernel instances for head_dim 256 (one file per head dim keeps builds parallel).
#include "cuda/sm80/backward/launch.cuh"

namespace tessera::cuda::sm80 {

template <>
void launch_backward_main<__half, 256>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__half, 256>(args, stream);
}
template <>
void launch_backward_main<__nv_bfloat16, 256>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__nv_bfloat16, 256>(args, stream);
}

}  // namespace tessera::cuda::sm80
