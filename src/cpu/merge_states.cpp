// CPU merge of attention states over disjoint key sets, one (token, head) row at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/lse_merge.h"

namespace tessera::cpu {

void merge_states(const MergeParams& p) {
  const std::int64_t rows = p.tokens * p.heads;
  parallel_for(rows, p.num_threads, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> acc(static_cast<std::size_t>(p.head_dim));
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t t = r / p.heads, h = r % p.heads;
      math::LseMerger merger;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int s = 0; s < p.num_states; ++s) {
        const float lse = p.lse_states[s * p.lse_state_stride + t * p.lse_token_stride + h * p.lse_head_stride];
        float scale_old = 1.0f, weight_new = 0.0f;
        merger.add(lse, &scale_old, &weight_new);
        // An empty state's O is never read: it may hold anything (even NaN) without harm.
        if (lse == -INFINITY) continue;
        const std::int64_t base = s * p.o_state_stride + t * p.o_token_stride + h * p.o_head_stride;
        for (int d = 0; d < p.head_dim; ++d)
          acc[d] = math::lse_merge_acc(acc[d], scale_old, weight_new, math::load_as_float(p.o_states, base + d, p.dtype));
      }
      const float inv = merger.output_scale();
      const std::int64_t ob = t * p.out_token_stride + h * p.out_head_stride;
      for (int d = 0; d < p.head_dim; ++d) math::store_from_float(p.out, ob + d, p.out_dtype, acc[d] * inv);
      if (p.out_lse != nullptr) p.out_lse[t * p.out_lse_token_stride + h * p.out_lse_head_stride] = merger.lse();
    }
  });
}

}  // namespace tessera::cpu
