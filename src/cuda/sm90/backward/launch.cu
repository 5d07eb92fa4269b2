// Host entry of the sm90 backward main kernel: applicability (TESSERA_CUDA_BACKWARD=portable
// opts out; device, dtype, head dim) and the (dtype, head dim) instance.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/sm80/backward/tiles.h"
#include "cuda/sm90/backward/backward_sm90.h"
#include "cuda/sm90/backward/kernel_traits.cuh"
#include "tessera/error.h"

namespace tessera::cuda::sm90 {

// One instance per (dtype, head dim), in instance_hdim*.cu (launch_template.cuh).
template <typename T, int kHeadDim>
void launch_backward(const sm80::BwdArgs& args, void* stream);

// The sm80 host code sizes the grid, the GQA split and the deterministic counters from its own
// tiles: this kernel must use the same.
static_assert(BwdTraits<128>::Bc == sm80::bwd::Layout<128>::Bc && BwdTraits<128>::Br == sm80::bwd::Layout<128>::Br,
              "the sm90 backward walks the sm80 backward's tiles");

namespace {

bool fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what;
  return false;
}

}  // namespace

bool backward_applicable(const BackwardParams& p, std::string* why) {
  const char* path = std::getenv("TESSERA_CUDA_BACKWARD");
  if (path != nullptr && std::strcmp(path, "portable") == 0)
    return fail(why, "TESSERA_CUDA_BACKWARD=portable selects the sm80 main kernel");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return fail(why, "dtype: f16 or bf16 only");
  if (p.head_dim != 128) return fail(why, "head_dim: 128 only (stage 2)");
  int major = 0, minor = 0, optin = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, p.device.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p.device.index) != cudaSuccess) {
    (void)cudaGetLastError();
    return fail(why, "device attributes unreadable");
  }
  // sm_90a code runs on compute capability 9.0 only.
  if (major != 9 || minor != 0) return fail(why, "device: compute capability 9.0 only");
  if (optin < BwdTraits<128>::kSmemBytes) return fail(why, "device: not enough opt-in shared memory");
  if (why != nullptr) why->clear();
  return true;
}

void launch_backward_main(const BackwardParams& p, const sm80::BwdArgs& args, void* stream) {
  if (p.head_dim == 128) {
    if (p.dtype == DType::bf16) return launch_backward<__nv_bfloat16, 128>(args, stream);
    if (p.dtype == DType::f16) return launch_backward<__half, 128>(args, stream);
  }
  throw Error(ErrorCode::unsupported, "q",
              "sm90 backward: expected f16 or bf16 with head_dim 128, got head_dim " + std::to_string(p.head_dim));
}

}  // namespace tessera::cuda::sm90
