// tessera: options shared by every attention entry point.
#pragma once

#include <cstdint>
#include <optional>

namespace tessera {

// Semantics (docs/SEMANTICS.md): query i of seq_q sees key j of seq_k iff
//   i + (seq_k - seq_q) - left <= j <= i + (seq_k - seq_q) + right,
// with causal meaning right = 0 (bottom-right alignment) and -1 meaning unbounded.
struct AttentionOptions {
  std::optional<float> scale;  // default 1/sqrt(head_dim); must be finite and > 0
  bool causal = false;
  int window_left = -1;   // keys allowed to the left of the diagonal; -1 = unbounded
  int window_right = -1;  // keys allowed to the right of the diagonal; -1 = unbounded
  float softcap = 0.0f;   // c > 0: s = c * tanh(scale * q.k / c); 0 = off
  bool return_lse = false;  // write the natural-log LSE into the `lse` argument
  bool deterministic = false;  // backward: bit-identical gradients run to run
};

// Where and how work runs. `stream` is a cudaStream_t for CUDA tensors (nullptr = the
// default stream); ignored on the CPU. `num_threads` bounds CPU threads (0 = all cores).
struct ExecutionContext {
  void* stream = nullptr;
  int num_threads = 0;
};

}  // namespace tessera
