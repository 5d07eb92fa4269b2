// The CUDA backend's entry points (see cuda_backend.h): what is supported, and the forward.
// The backward's supports_backward / attention_backward live in backward/backward_entry.cu.
#include "cuda/common/device_limits.h"
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/common/check.h"
#include "cuda/sm80/forward/forward.h"
#include "cuda/sm90/forward/forward_sm90.h"
#include "tessera/error.h"

namespace tessera::cuda {
namespace {

constexpr const char* kForwardSupport =
    "supported on CUDA: fp16 or bf16, head_dim 64, 128 or 256, compute capability >= 8.0; fp8_e4m3 with head_dim "
    "128 or 256 on compute capability 9.0; 16-byte aligned pointers and 16-byte multiple batch/row/head strides";

bool fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what + " (" + kForwardSupport + ")";
  return false;
}

bool aligned_16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Element strides that keep every row start 16-byte aligned (elements of elem_bytes bytes).
bool strides_ok(const StridedPtr& t, const char* name, int elem_bytes, std::string* why) {
  const std::int64_t s[3] = {t.batch, t.row, t.head};
  const char* dims[3] = {"batch", "row", "head"};
  const int multiple = 16 / elem_bytes;
  for (int i = 0; i < 3; ++i)
    if (s[i] % multiple != 0)
      return fail(why, std::string(name) + " " + dims[i] + " stride: expected a multiple of " + std::to_string(multiple) +
                           " elements (16 bytes), got " + std::to_string(s[i]));
  if (!aligned_16(t.ptr)) return fail(why, std::string(name) + ": expected a 16-byte aligned data pointer, got a misaligned one");
  return true;
}

}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

bool supports_forward(const AttentionParams& p, std::string* why) {
  if (p.dtype == DType::e4m3) {
#if defined(TESSERA_HAS_SM90_KERNELS)
    std::string sm90_why;
    if (!sm90::forward_applicable(p, &sm90_why))
      return fail(why, "dtype fp8_e4m3: needs the sm90 kernels, which do not apply here (" + sm90_why + ")");
#else
    return fail(why, "dtype fp8_e4m3: this build has no sm90 kernels (CUDA architectures without 90)");
#endif
  } else if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return fail(why, std::string("dtype: expected fp16 or bf16 on CUDA, got ") + dtype_name(p.dtype));
  }
  if (!sm80::forward_head_dim_compiled(p.head_dim))
    return fail(why, "head_dim: expected 64, 128 or 256 on CUDA, got " + std::to_string(p.head_dim));
  if (p.batch > 65535 || p.heads_q > 65535)
    return fail(why, "batch and heads_q: expected at most 65535 each on CUDA, got " + std::to_string(p.batch) +
                         " and " + std::to_string(p.heads_q));
  const int in_bytes = p.dtype == DType::e4m3 ? 1 : 2;
  const std::pair<const StridedPtr*, const char*> inputs[] = {{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}};
  for (const auto& [t, name] : inputs)
    if (!strides_ok(*t, name, in_bytes, why)) return false;
  if (!strides_ok(p.o, "out", 2, why)) return false;
  DeviceLimits dev;
  std::string unreadable;
  if (!read_device_limits(p.device.index, &dev, &unreadable)) return fail(why, unreadable);
  const int major = dev.major, optin = dev.smem_optin;
  if (major < 8)
    return fail(why, "device: expected compute capability >= 8.0, got " + std::to_string(major) + ".x");
  const int smem = sm80::forward_smem_bytes(p.head_dim);
  if (optin < smem)
    return fail(why, "head_dim " + std::to_string(p.head_dim) + ": needs " + std::to_string(smem / 1024) +
                         " KB of shared memory per block, the device allows " + std::to_string(optin / 1024) + " KB");
  if (why != nullptr) why->clear();
  return true;
}

// Hopper takes the sm90 (TMA + wgmma) kernels whenever they apply; everything else, and any
// case whose strides the copy engine cannot describe, the portable sm80 kernels.
void attention_forward(const AttentionParams& p) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (sm90::forward_applicable(p) && sm90::run_forward(p)) return;
#endif
  if (p.dtype == DType::e4m3)
    throw Error(ErrorCode::unsupported, "q",
                "attention_forward_fp8: the sm90 kernels cannot take this call (a tensor map refused for these "
                "strides, or more than 2^31 - 1 tiles of 128 query rows x heads x sequences); " +
                    std::string(kForwardSupport));
  sm80::run_forward(p);
}

// merge_states, append_paged_kv and copy_pages live in src/cuda/serving/.

}  // namespace tessera::cuda
