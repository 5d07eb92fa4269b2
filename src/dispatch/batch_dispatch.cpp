#include "dispatch/batch_dispatch.h"

#include "tessera/error.h"

namespace tessera::dispatch {

void batch_attention_run(const BatchRunParams& p) {
  if (p.device.kind == DeviceKind::cpu) return cpu::batch_attention_run(p);
  // The CUDA serving kernels (decode / prefill / merge families) are a later issue; plan()
  // already refuses CUDA workspaces, so this is reached only through a hand-built params.
  throw Error(ErrorCode::unsupported, "device",
              "BatchAttention::run: device: expected cpu (batch attention on CUDA is not built yet), got " +
                  device_name(p.device));
}

}  // namespace tessera::dispatch
