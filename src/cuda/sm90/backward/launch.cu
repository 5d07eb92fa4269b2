// Host entry of the sm90 backward main kernel: applicability (TESSERA_CUDA_BACKWARD=portable,
// portable-compact, portable-compact2 opt out; device, dtype, head dim) and the (dtype, head dim) instance.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/device_limits.h"
#include "cuda/sm80/backward/tiles.h"
#include "cuda/sm90/backward/backward_sm90.h"
#include "cuda/sm90/backward/kernel_traits.cuh"
#include "dispatch/path_override.h"
#include "tessera/error.h"

namespace tessera::cuda::sm90 {

// One instance per (dtype, head dim), in instance_hdim*.cu (launch_template.cuh).
template <typename T, int kHeadDim>
void launch_backward(const backward::BwdArgs& args, void* stream);

// The sm80 host code sizes the grid, the GQA split and the deterministic counters from the
// tiles backward_shape returns: the sm90 kernel's own (at d128 and d256 the sm80 kernel's; at
// d64 Br = 128 instead of 64). The grid's KV tile must be what launch_backward launches.
static_assert(BwdTraits<128>::Bc == sm80::bwd::Layout<128>::Bc && BwdTraits<128>::Br == sm80::bwd::Layout<128>::Br &&
                  BwdTraits<256>::Bc == sm80::bwd::Layout<256>::Bc && BwdTraits<256>::Br == sm80::bwd::Layout<256>::Br &&
                  BwdTraits<64>::Bc == sm80::bwd::Layout<64>::Bc,
              "the sm90 backward walks the sm80 backward's tiles except for d64's Br (see backward_shape)");

namespace {

bool fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what;
  return false;
}

}  // namespace

bool backward_applicable(const BackwardParams& p, std::string* why) {
  // "portable", and "portable-compact" / "portable-compact2" (which also force the sm80 kernel's
  // compact layouts, see sm80::backward_variant).
  if (dispatch::backward_path_override() != dispatch::BackwardPath::automatic)
    return fail(why, "TESSERA_CUDA_BACKWARD selects the sm80 main kernel");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return fail(why, "dtype: f16 or bf16 only");
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return fail(why, "head_dim: 64, 128 or 256 only");
  DeviceLimits dev;
  std::string unreadable;
  if (!read_device_limits(p.device.index, &dev, &unreadable)) return fail(why, unreadable);
  const int major = dev.major, minor = dev.minor, optin = dev.smem_optin;
  // sm_90a code runs on compute capability 9.0 only.
  if (major != 9 || minor != 0) return fail(why, "device: compute capability 9.0 only");
  if (optin < backward_shape(p.head_dim).smem_bytes) return fail(why, "device: not enough opt-in shared memory");
  if (why != nullptr) why->clear();
  return true;
}

sm80::BwdShape backward_shape(int head_dim) {
  switch (head_dim) {
    case 64: return {BwdTraits<64>::Bc, BwdTraits<64>::Br, BwdTraits<64>::kThreads, BwdTraits<64>::kSmemBytes};
    case 128: return {BwdTraits<128>::Bc, BwdTraits<128>::Br, BwdTraits<128>::kThreads, BwdTraits<128>::kSmemBytes};
    case 256: return {BwdTraits<256>::Bc, BwdTraits<256>::Br, BwdTraits<256>::kThreads, BwdTraits<256>::kSmemBytes};
    default: return {0, 0, 0, 0};
  }
}

void launch_backward_main(const BackwardParams& p, const backward::BwdArgs& args, void* stream) {
  const bool bf16 = p.dtype == DType::bf16, f16 = p.dtype == DType::f16;
  switch (p.head_dim) {
    case 64:
      if (bf16) return launch_backward<__nv_bfloat16, 64>(args, stream);
      if (f16) return launch_backward<__half, 64>(args, stream);
      break;
    case 128:
      if (bf16) return launch_backward<__nv_bfloat16, 128>(args, stream);
      if (f16) return launch_backward<__half, 128>(args, stream);
      break;
    case 256:
      if (bf16) return launch_backward<__nv_bfloat16, 256>(args, stream);
      if (f16) return launch_backward<__half, 256>(args, stream);
      break;
    default: break;
  }
  throw Error(ErrorCode::unsupported, "q",
              "sm90 backward: expected f16 or bf16 with head_dim 64, 128 or 256, got head_dim " +
                  std::to_string(p.head_dim));
}

}  // namespace tessera::cuda::sm90
