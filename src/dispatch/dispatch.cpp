// The dispatch table. Validated params arrive here; the device of the tensors picks the
// backend, and the CUDA backend says which instantiations it has.
#include "dispatch/dispatch.h"

#include <string>

#include "cpu/cpu_backend.h"
#include "tessera/error.h"
#if defined(TESSERA_WITH_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace tessera::dispatch {
namespace {

#if !defined(TESSERA_WITH_CUDA)
[[noreturn]] void no_cuda(const char* op) {
  throw Error(ErrorCode::unsupported, "device",
              std::string(op) + ": device: expected cpu (this build of tessera has no CUDA backend), got cuda");
}
#endif

#if defined(TESSERA_WITH_CUDA)
template <typename P, typename Check>
void require(const P& p, Check&& check, const char* op) {
  std::string why;
  if (!check(p, &why)) throw Error(ErrorCode::unsupported, "q", std::string(op) + ": " + why);
}
#endif

}  // namespace

void attention_forward(const AttentionParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::attention_forward(p);
#if defined(TESSERA_WITH_CUDA)
  require(p, cuda::supports_forward, "attention_forward");
  return cuda::attention_forward(p);
#else
  no_cuda("attention_forward");
#endif
}

void attention_backward(const BackwardParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::attention_backward(p);
#if defined(TESSERA_WITH_CUDA)
  require(p, cuda::supports_backward, "attention_backward");
  return cuda::attention_backward(p);
#else
  no_cuda("attention_backward");
#endif
}

void merge_states(const MergeParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::merge_states(p);
#if defined(TESSERA_WITH_CUDA)
  return cuda::merge_states(p);
#else
  no_cuda("merge_states");
#endif
}

void append_paged_kv(const AppendParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::append_paged_kv(p);
#if defined(TESSERA_WITH_CUDA)
  return cuda::append_paged_kv(p);
#else
  no_cuda("append_paged_kv");
#endif
}

void copy_pages(const CopyPagesParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::copy_pages(p);
#if defined(TESSERA_WITH_CUDA)
  return cuda::copy_pages(p);
#else
  no_cuda("copy_pages");
#endif
}

}  // namespace tessera::dispatch
