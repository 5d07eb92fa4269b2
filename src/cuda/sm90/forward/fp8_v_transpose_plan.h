// Whether a dense FP8 forward call makes V^T by the pass of fp8_v_transpose.h (host only; CPU-
// tested in tests/cpu/test_tail_plan.cpp). The kernel's own transpose costs one shared-memory
// transpose of each K/V tile per query tile that visits it, i.e. m_blocks x group times the
// K/V bytes (half under a causal mask); the pass costs one read and one write of V, ~50 us at
// 16k tokens x 2048 columns on the H200 (seventeenth session). Measured (bench/RESULTS.md,
// seventeenth session; time with the pass / without): d128 16k (reuse 86) 0.971, causal 0.996;
// d256 16k (128) 0.938, causal 0.960; d256 4k (32) 0.960, causal 1.088; d128 4k (22) 1.039;
// 1k (6-8) 1.24-1.32. The pass runs where the reuse is at least kFp8VtMinReuse (twice that
// under a mask), which takes every winner of those and no loser.
#pragma once

namespace tessera::cuda::sm90 {

constexpr long long kFp8VtMinReuse = 32;

inline bool fp8_v_transpose_pays(long long m_blocks, long long group, bool masked) {
  const long long reuse = m_blocks * group;
  return reuse >= (masked ? 2 * kFp8VtMinReuse : kFp8VtMinReuse);
}

}  // namespace tessera::cuda::sm90
