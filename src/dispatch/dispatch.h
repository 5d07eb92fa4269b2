// Dispatch: picks the backend (cpu, cuda) for validated params and says why when nothing fits.
#pragma once

#include "params/attention_params.h"
#include "params/paged_params.h"

namespace tessera::dispatch {

void attention_forward(const AttentionParams& p);
void attention_backward(const BackwardParams& p);
void merge_states(const MergeParams& p);
void append_paged_kv(const AppendParams& p);
void copy_pages(const CopyPagesParams& p);

}  // namespace tessera::dispatch
