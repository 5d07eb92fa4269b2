// The CUDA backend's entry points, as dispatch sees them. Compiled only when tessera is built
// with CUDA (TESSERA_WITH_CUDA); this header itself needs no CUDA headers.
#pragma once

#include <string>

#include "params/attention_params.h"
#include "params/paged_params.h"

namespace tessera::cuda {

// Number of visible CUDA devices (0 when the driver or a GPU is missing).
int device_count() noexcept;

// Each `supports_*` returns true, or false with a sentence in *why saying what is supported.
bool supports_forward(const AttentionParams& p, std::string* why);
bool supports_backward(const BackwardParams& p, std::string* why);

void attention_forward(const AttentionParams& p);
void attention_backward(const BackwardParams& p);
void merge_states(const MergeParams& p);
void append_paged_kv(const AppendParams& p);
void copy_pages(const CopyPagesParams& p);

}  // namespace tessera::cuda
