// Developer overrides of the CUDA kernel path, read from the environment in one place:
//   TESSERA_CUDA_FORWARD  = portable                                  (the sm80 kernels on Hopper)
//   TESSERA_CUDA_BACKWARD = portable | portable-compact | portable-compact2
//                           (the sm80 main kernel; the compact ones also force its compact
//                           head_dim 128 layouts, see docs/TESTING.md)
//   TESSERA_CUDA_BATCH    = portable | sm90 | sm90-coresident         (BatchAttention's prefill
//                           units: on compute capability 9.0 at head_dim 64 and 128 they run on
//                           the sm90 WGMMA kernel by default (sm90 asks for it explicitly);
//                           portable keeps the mma.sync kernels: docs/perf/batch_prefill_sm90.md.
//                           sm90-coresident: at head_dim 128 a register- and smem-slim instance of
//                           that kernel, with the decode-only kernel launched as its programmatic
//                           dependent so that one decode CTA shares each SM with a prefill CTA;
//                           elsewhere the same as sm90)
// Unset or empty: the default path. Any other value throws tessera::Error (invalid_argument)
// naming the variable, the accepted values and the value found, before anything is launched:
// a misspelt override must not silently run the default path.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/error.h"

// Header-only: the CUDA launchers (libtessera_cuda) read it, and the host library comes before
// them on the link line.
namespace tessera::dispatch {

enum class ForwardPath { automatic, portable };
enum class BackwardPath { automatic, portable, portable_compact, portable_compact2 };
enum class BatchPath { automatic, sm90, portable, sm90_coresident };

[[noreturn]] inline void bad_path_override(const char* variable, const char* accepted, const char* value) {
  throw Error(ErrorCode::invalid_argument, variable,
              std::string(variable) + ": expected unset or one of " + accepted + ", got '" + value + "'");
}

// The parsers (testable without touching the environment); `value` may be null.
inline ForwardPath parse_forward_path(const char* value) {
  if (value == nullptr || *value == '\0') return ForwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return ForwardPath::portable;
  bad_path_override("TESSERA_CUDA_FORWARD", "'portable'", value);
}

inline BackwardPath parse_backward_path(const char* value) {
  if (value == nullptr || *value == '\0') return BackwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return BackwardPath::portable;
  if (std::strcmp(value, "portable-compact") == 0) return BackwardPath::portable_compact;
  if (std::strcmp(value, "portable-compact2") == 0) return BackwardPath::portable_compact2;
  bad_path_override("TESSERA_CUDA_BACKWARD", "'portable', 'portable-compact', 'portable-compact2'", value);
}

inline BatchPath parse_batch_path(const char* value) {
  if (value == nullptr || *value == '\0') return BatchPath::automatic;
  if (std::strcmp(value, "sm90") == 0) return BatchPath::sm90;
  if (std::strcmp(value, "portable") == 0) return BatchPath::portable;
  if (std::strcmp(value, "sm90-coresident") == 0) return BatchPath::sm90_coresident;
  bad_path_override("TESSERA_CUDA_BATCH", "'portable', 'sm90', 'sm90-coresident'", value);
}

inline ForwardPath forward_path_override() { return parse_forward_path(std::getenv("TESSERA_CUDA_FORWARD")); }
inline BackwardPath backward_path_override() { return parse_backward_path(std::getenv("TESSERA_CUDA_BACKWARD")); }
inline BatchPath batch_path_override() { return parse_batch_path(std::getenv("TESSERA_CUDA_BATCH")); }

}  // namespace tessera::dispatch
