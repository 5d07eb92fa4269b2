// Backward main-kernel instances for head_dim 128 (one file per head dim keeps builds parallel).
#include "cuda/sm80/backward/launch.cuh"

namespace tessera::cuda::sm80 {

template <>
void launch_backward_main<__half, 128>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__half, 128>(args, stream);
}
template <>
void launch_backward_main<__nv_bfloat16, 128>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__nv_bfloat16, 128>(args, stream);
}

template <>
void launch_backward_main_d128_tiles<__half>(const BwdArgs& args, int kv_tiles, bool programmatic, void* stream) {
  bwd::launch_main<__half, 128>(args, stream, kv_tiles, programmatic);
}
template <>
void launch_backward_main_d128_tiles<__nv_bfloat16>(const BwdArgs& args, int kv_tiles, bool programmatic,
                                                    void* stream) {
  bwd::launch_main<__nv_bfloat16, 128>(args, stream, kv_tiles, programmatic);
}

template <>
bool backward_main_d128_has_sm90_code<__half>() {
  return bwd::has_sm90_code(bwd::backward_main_kernel<__half, 128, 0, false>);
}
template <>
bool backward_main_d128_has_sm90_code<__nv_bfloat16>() {
  return bwd::has_sm90_code(bwd::backward_main_kernel<__nv_bfloat16, 128, 0, false>);
}

}  // namespace tessera::cuda::sm80
