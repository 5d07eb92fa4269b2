// Backward main-kernel instances for head_dim 128, layout 0, in the tile-major CTA order
// (backward.h launch_backward_main_tile_major; a file of their own keeps builds parallel). The
// only tile-major instances: dense causal inputs at head_dim 128 are where the order was modelled
// to pay (docs/perf/backward_sm80.md, "wave tail and CTA order").
#include "cuda/sm80/backward/launch.cuh"

namespace tessera::cuda::sm80 {

template <>
void launch_backward_main_tile_major<__half, 128>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__half, 128, 0, true>(args, stream);
}
template <>
void launch_backward_main_tile_major<__nv_bfloat16, 128>(const BwdArgs& args, void* stream) {
  bwd::launch_main<__nv_bfloat16, 128, 0, true>(args, stream);
}

}  // namespace tessera::cuda::sm80
