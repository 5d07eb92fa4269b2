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

#include "cuda/backward/backward_args.h"

namespace tessera::cuda::sm80 {

using backward::BwdArgs;  // cuda/backward/backward_args.h

// Tile shapes of each instance (the host sizes grids and workspaces from these).
struct BwdShape {
  int block_kv;   // Bc: KV rows per CTA
  int block_q;    // Br: query rows per step
  int threads;
  int smem_bytes;
  bool dq_pairs = false;  // dq_accum columns pair-interleaved (tiles.h Layout::kDqPairs); false: in order
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

// The same kernel in the tile-major CTA order (grid (heads_kv * n_splits, kv tiles, batch),
// cuda/backward/cta_work.cuh): a sequence's KV tile 0 of every kv head first, then tile 1, ...,
// which under a causal mask dispatches the heaviest CTAs first. Instances only where
// has_tile_major_order (instance_hdim128_tile_major.cu: head_dim 128, layout 0); kv tiles must
// be at most 65535.
template <typename T, int kHeadDim, int kVariant = 0>
void launch_backward_main_tile_major(const BwdArgs& args, void* stream);
constexpr bool has_tile_major_order(int head_dim, int variant) { return head_dim == 128 && variant == 0; }

// The tail pieces of a dense non-causal backward (backward_entry.cu, docs/perf/backward_sm80.md
// "Tail pieces"), head_dim 128, default layout: the main kernel on its first `kv_tiles` KV tiles
// of every (sequence, kv head), or, with `programmatic`, a launch (a pieces view of the
// arguments) as a programmatic dependent of the launch before it on `stream`. In
// instance_hdim128.cu.
template <typename T>
void launch_backward_main_d128_tiles(const BwdArgs& args, int kv_tiles, bool programmatic, void* stream);
// Whether that kernel was built with sm_90 code (its griddepcontrol instructions): a build for
// compute capability 8.x only runs JIT-compiled PTX on a 9.x device, without them.
template <typename T>
bool backward_main_d128_has_sm90_code();

}  // namespace tessera::cuda::sm80
