#include "dispatch/batch_dispatch.h"

#include <string>

#include "tessera/error.h"
#if defined(TESSERA_WITH_CUDA)
#include "cuda/batch/batch_attention.h"
#endif

namespace tessera::dispatch {

void batch_attention_run(const BatchRunParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::batch_attention_run(p);
#if defined(TESSERA_WITH_CUDA)
  std::string why;
  if (!cuda::batch_attention_supported(p, &why))
    throw Error(ErrorCode::unsupported, "q", "BatchAttention::run: " + why);
  return cuda::batch_attention_run(p);
#else
  throw Error(ErrorCode::unsupported, "device",
              "BatchAttention::run: device: expected cpu (this build of tessera has no CUDA backend), got " +
                  device_name(p.device));
#endif
}

}  // namespace tessera::dispatch
