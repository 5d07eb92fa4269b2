// sm90 forward instances for head_dim 128 (f16, bf16; unmasked on 176-key tiles and, up to
// kShortUnmaskedMaxKeysD128 keys, 128-key tiles; masked on 128-key tiles and, for long causal
// calls, 176-key tiles; short dense causal calls on three consumer warpgroups, 192-row tiles,
// which TESSERA_CUDA_D128_WARPGROUPS=3 gives every call).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm90/forward/launch_template.cuh"

namespace tessera::cuda::sm90 {
template void launch_forward<__half, 128, 176, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 128, 176, false>(const FwdArgs&, int, void*);
template void launch_forward<__half, 128, 128, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 128, 128, false>(const FwdArgs&, int, void*);
template void launch_forward<__half, 128, 128, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 128, 128, true>(const FwdArgs&, int, void*);
// Long causal problems: 176-key tiles (kShortCausalMaxKeysD128).
template void launch_forward<__half, 128, 176, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 128, 176, true>(const FwdArgs&, int, void*);
// Short dense causal problems on three consumer warpgroups (kThreeWarpgroupCausalMinKeysD128);
// every call under TESSERA_CUDA_D128_WARPGROUPS=3.
template void launch_forward<__half, 128, 128, true, 3>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 128, 128, true, 3>(const FwdArgs&, int, void*);
}  // namespace tessera::cuda::sm90
