#include "tessera/error.h"

namespace tessera {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::workspace_too_small: return "workspace_too_small";
    case ErrorCode::plan_mismatch: return "plan_mismatch";
    case ErrorCode::backend_failure: return "backend_failure";
    case ErrorCode::out_of_memory: return "out_of_memory";
  }
  return "unknown";
}

}  // namespace tessera
