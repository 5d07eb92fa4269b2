// The oracle: naive attention in double precision that materialises S and P.
// Every test compares against it. Inputs are read through the same params the backends get
// (any storage dtype; fp8 inputs are multiplied by their descales in double); outputs are
// packed double arrays:
//   o, dq       [(row * heads_q + h) * head_dim + d]    row = b * seq_q + i (dense) or cu_q[b] + i
//   dk, dv      [(row * heads_kv + h) * head_dim + d]   row = b * seq_k + j (dense) or cu_k[b] + j
//   lse         [h * total_q + row]                      natural log; -inf for rows that see no key
#pragma once

#include <vector>

#include "params/attention_params.h"

namespace tessera::cpu::reference {

struct ForwardResult {
  std::vector<double> o;
  std::vector<double> lse;
};
struct BackwardResult {
  std::vector<double> dq, dk, dv;
};

// cu_seqlens in p must be host-visible. p.o / p.lse are ignored.
ForwardResult forward(const AttentionParams& p);
// Exact gradients of the loss <dout, O> (O recomputed in double; p.lse and p.o are ignored).
BackwardResult backward(const BackwardParams& p);

}  // namespace tessera::cpu::reference
