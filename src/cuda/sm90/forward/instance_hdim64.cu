// sm90 forward instances for head_dim 64 (f16, bf16; unmasked on 128- and 192-key tiles, masked;
// masked also with two consumer warpgroups; unmasked tail rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm90/forward/launch_template.cuh"

namespace tessera::cuda::sm90 {
template void launch_forward<__half, 64, 128, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 64, 128, false>(const FwdArgs&, int, void*);
// 192-key tiles, P through shared memory: only TESSERA_CUDA_FORWARD_KEY_TILE=long takes them (they
// lost to 128-key tiles where measured, kShortUnmaskedMaxKeysD64).
template void launch_forward<__half, 64, kWideKeyTileD64, false>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 64, kWideKeyTileD64, false>(const FwdArgs&, int, void*);
template void launch_forward<__half, 64, 128, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 64, 128, true>(const FwdArgs&, int, void*);
// The last query blocks of dense unmasked problems whose last block is at most 64 rows (kTailRows).
template void launch_forward<__half, 64, 128, false, 0, false, true>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 64, 128, false, 0, false, true>(const FwdArgs&, int, void*);
// Masked problems over short sequences: two consumer warpgroups (kTwoWarpgroupMaxKeysD64).
template void launch_forward<__half, 64, 128, true, 2>(const FwdArgs&, int, void*);
template void launch_forward<__nv_bfloat16, 64, 128, true, 2>(const FwdArgs&, int, void*);
}  // namespace tessera::cuda::sm90
