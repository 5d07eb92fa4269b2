#include "tessera/tessera.h"

#if defined(TESSERA_WITH_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace tessera {

const char* version() noexcept { return "0.1.0"; }

bool cuda_available() noexcept {
#if defined(TESSERA_WITH_CUDA)
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

}  // namespace tessera
