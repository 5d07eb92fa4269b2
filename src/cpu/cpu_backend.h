// The CPU backend: real (tiled, multi-threaded) implementations with tessera's semantics.
// Entry points take validated params; dispatch calls them for tensors on the CPU.
#pragma once

#include "params/attention_params.h"
#include "params/paged_params.h"

namespace tessera::cpu {

void attention_forward(const AttentionParams& p);   // FA2-order tiled forward, online softmax
void attention_backward(const BackwardParams& p);   // recomputes P from the saved LSE
void merge_states(const MergeParams& p);
void append_paged_kv(const AppendParams& p);
void copy_pages(const CopyPagesParams& p);

}  // namespace tessera::cpu
