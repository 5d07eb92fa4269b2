// Developer overrides of the CUDA kernel path, read from the environment in one place:
//   TESSERA_CUDA_FORWARD  = portable                                  (the sm80 kernels on Hopper)
//   TESSERA_CUDA_BACKWARD = portable | portable-compact | portable-compact2
//                           (the sm80 main kernel; the compact ones also force its compact
//                           head_dim 128 layouts, see docs/TESTING.md)
// Unset or empty: the default path. Any other value throws tessera::Error (invalid_argument)
// naming the variable, the accepted values and the value found, before anything is launched:
// a misspelt override must not silently run the default path.
#pragma once

namespace tessera::dispatch {

enum class ForwardPath { automatic, portable };
enum class BackwardPath { automatic, portable, portable_compact, portable_compact2 };

ForwardPath forward_path_override();
BackwardPath backward_path_override();

// The parsers behind them (testable without touching the environment); `value` may be null.
ForwardPath parse_forward_path(const char* value);
BackwardPath parse_backward_path(const char* value);

}  // namespace tessera::dispatch
