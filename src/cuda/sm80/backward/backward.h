// The sm80 (FA2-class) backward: host-side view, free of CUDA headers.
//
// Three kernels on p.stream:
//   1. preprocess: per (head, row) D = rowsum(dO * O) and lse2 = LSE * log2(e) (+inf for rows
//      that saw no key, so exp2(s - lse2) = 0 there), and zero the fp32 dQ accumulator.
//   2. main: one CTA per (KV tile, kv head x group split, batch). K_j and V_j stay in shared
//      memory; the CTA walks the query tiles (and the query heads of its group share) that can
//      see the tile, recomputes P from the saved LSE and accumulates dK_j, dV_j in registers.
//      dQ goes to the fp32 accumulator with atomics; in deterministic mode each (head, Q tile)
//      takes the KV tiles' contributions in ascending KV-tile order (a per-tile counter).
//   3. postprocess: dQ = scale * accumulator in the output dtype; when the GQA group was split
//      over several CTAs, their fp32 dK/dV partials are summed in fixed order.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

struct BwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* dout = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  std::int64_t q_batch = 0, q_row = 0, q_head = 0;
  std::int64_t k_batch = 0, k_row = 0, k_head = 0;
  std::int64_t v_batch = 0, v_row = 0, v_head = 0;
  std::int64_t do_batch = 0, do_row = 0, do_head = 0;
  std::int64_t dk_batch = 0, dk_row = 0, dk_head = 0;
  std::int64_t dv_batch = 0, dv_row = 0, dv_head = 0;

  // Workspace (fp32). Rows are "global rows": b * seq_q + i (dense) or cu_q[b] + i (ragged).
  float* dq_accum = nullptr;   // [heads_q][total_q][head_dim]
  const float* lse2 = nullptr;  // [heads_q][total_q]
  const float* dsum = nullptr;  // [heads_q][total_q]
  float* dk_part = nullptr;    // [n_splits][total_k][heads_kv][head_dim] when n_splits > 1
  float* dv_part = nullptr;
  // Deterministic mode: one counter per (query head, query tile), else null. Sequence b's
  // tiles start at gr0 / Br + b (gr0 its first global row), which never overlaps sequence
  // b + 1's, so lock_stride = total_q / Br + batch + 1 counters per head suffice.
  int* locks = nullptr;

  const std::int32_t* cu_seqlens_q = nullptr;  // device; both null for dense input
  const std::int32_t* cu_seqlens_k = nullptr;
  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;
  int seq_q = 0, seq_k = 0;  // dense lengths, or upper bounds (ragged)
  std::int64_t total_q = 0, total_k = 0;
  int n_splits = 1;         // CTAs sharing one kv head's query heads
  int heads_per_split = 1;  // group / n_splits
  std::int64_t lock_stride = 0;
  float scale = 1.0f;
  float scale_log2 = 1.0f;  // scale * log2(e)
  float softcap = 0.0f;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
};

// Tile shapes of each instance (the host sizes grids and workspaces from these).
struct BwdShape {
  int block_kv;   // Bc: KV rows per CTA
  int block_q;    // Br: query rows per step
  int threads;
  int smem_bytes;
};
// head_dim in {64, 128, 256}; variant: the layout (tiles.h Cfg<D, V>; 0 the default). A variant
// head_dim does not have gives {0, 0, 0, 0}.
BwdShape backward_shape(int head_dim, int variant = 0);

// The layout variant the sm80 kernel runs at `head_dim` on a device allowing `optin_smem` bytes
// of dynamic shared memory per block: the first (largest) that fits, or at least the one
// TESSERA_CUDA_BACKWARD=portable-compact (1) / portable-compact2 (2) forces (capped at the
// head dim's last); -1 when none fits. attention_backward and supports_backward both use it.
int backward_variant(int head_dim, int optin_smem);

// One instance per (dtype, head dim, layout variant), in instance_hdim*.cu. Launches the main
// kernel on `stream` with grid (kv tiles, heads_kv * n_splits, batch).
template <typename T, int kHeadDim, int kVariant = 0>
void launch_backward_main(const BwdArgs& args, void* stream);

}  // namespace tessera::cuda::sm80
