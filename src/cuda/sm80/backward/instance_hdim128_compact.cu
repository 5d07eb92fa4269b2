// Backward main-kernel instances for head_dim 128 in the compact layouts (tiles.h Cfg<128, 1>
// and Cfg<128, 2>), for devices whose opt-in shared memory per block is below the default's
// 177 KB (A100/A30: 163 KB; sm_86/sm_89: 99 KB).
#include "cuda/sm80/backward/launch.cuh"

namespace tessera::cuda::sm80 {

template <>
void launch_backward_main<__half, 128, 1>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__half, 128, 1>(args, stream);
}
template <>
void launch_backward_main<__nv_bfloat16, 128, 1>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__nv_bfloat16, 128, 1>(args, stream);
}
template <>
void launch_backward_main<__half, 128, 2>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__half, 128, 2>(args, stream);
}
template <>
void launch_backward_main<__nv_bfloat16, 128, 2>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__nv_bfloat16, 128, 2>(args, stream);
}

}  // namespace tessera::cuda::sm80
