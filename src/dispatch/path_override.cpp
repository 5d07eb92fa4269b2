#include "dispatch/path_override.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/error.h"

namespace tessera::dispatch {
namespace {

[[noreturn]] void bad_value(const char* variable, const char* accepted, const char* value) {
  throw Error(ErrorCode::invalid_argument, variable,
              std::string(variable) + ": expected unset or one of " + accepted + ", got '" + value + "'");
}

}  // namespace

ForwardPath parse_forward_path(const char* value) {
  if (value == nullptr || *value == '\0') return ForwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return ForwardPath::portable;
  bad_value("TESSERA_CUDA_FORWARD", "'portable'", value);
}

BackwardPath parse_backward_path(const char* value) {
  if (value == nullptr || *value == '\0') return BackwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return BackwardPath::portable;
  if (std::strcmp(value, "portable-compact") == 0) return BackwardPath::portable_compact;
  if (std::strcmp(value, "portable-compact2") == 0) return BackwardPath::portable_compact2;
  bad_value("TESSERA_CUDA_BACKWARD", "'portable', 'portable-compact', 'portable-compact2'", value);
}

ForwardPath forward_path_override() { return parse_forward_path(std::getenv("TESSERA_CUDA_FORWARD")); }
BackwardPath backward_path_override() { return parse_backward_path(std::getenv("TESSERA_CUDA_BACKWARD")); }

}  // namespace tessera::dispatch
