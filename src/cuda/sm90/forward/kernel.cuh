// The sm90 forward kernel (FA3 structure): a CTA walks tiles of (query block, query head,
// sequence) (persistent, one per SM: a static walk for unmasked dense problems, whichever
// instance a knob sends them to, a dynamic one from a global counter for masked and ragged ones;
// one tile per CTA without the counter); a
// producer warpgroup feeds Q and K/V tiles by TMA into a ring of shared-memory stages, and two
// (three at head_dim 64, at FP8 head_dim 128 and for dense causal head_dim 128 calls of
// 1025-4096 keys, or any under TESSERA_CUDA_D128_WARPGROUPS=3) consumer warpgroups run S = Q K^T
// and O += P V on wgmma with the online
// softmax in registers.
// See kernel_traits.cuh for tiles and layout, smem_layout.cuh for the shared-memory addresses, the
// barriers and the tile ring, producer.cuh for the producer warpgroup's code, forward_args.h for
// the arguments. This file: the barriers' set-up, the split into roles, and the consumers.
//
// Consumer loop (intra-warpgroup overlap): while the tensor cores compute S_i = Q K_i^T and
// O += P_{i-1} V_{i-1}, nothing waits; after S_i lands the softmax turns it into weights, and
// only then does the warpgroup wait for the P V product, rescale O and pack P_i. So the
// softmax of tile i runs under the P V GEMM of tile i - 1.
//
// Pingpong between the consumer warpgroups (two, or three): each issues its
// GEMMs of a tile only in its turn, round robin (named barrier of 256 threads: its own 128
// wait, the previous warpgroup's 128 arrive when they have issued theirs), so the others'
// softmax runs while one warpgroup's GEMMs occupy the tensor cores. Warpgroup 0 goes first (the
// last warpgroup arrives once at the start); all take the same number of turns, and warpgroup 0
// consumes the last arrival at the end. Not in the masked 16-bit three-warpgroup instances
// (head_dim 64 and 128), whose warpgroups each compute only their own rows' K/V tiles
// (kOwnDiagonal, below); masked head_dim 256 computes its own diagonals too and keeps its turns.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/common/softcap_score.cuh"
#include "cuda/common/softmax_fragment.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/named_barrier.cuh"
#include "cuda/primitives/sm90/setmaxnreg.cuh"
#include "cuda/primitives/sm90/stmatrix.cuh"
#include "cuda/primitives/sm90/tma.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "cuda/sm90/common/kv_tile_schedule.cuh"
#include "cuda/sm90/common/weights_smem.cuh"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/fp8_operands.cuh"
#include "cuda/sm90/forward/kernel_traits.cuh"
#include "cuda/sm90/forward/producer.cuh"
#include "cuda/sm90/forward/smem_layout.cuh"
#include "cuda/sm90/forward/tile_coords.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "math/ragged_tiles.h"

namespace tessera::cuda::sm90 {

// Named barrier ids (0 is __syncthreads): one per consumer warpgroup (up to 3) for its
// epilogue (and, with P through shared memory, before each tile's P stores), and one per
// consumer warpgroup for its turn at the tensor cores (pingpong).
constexpr std::uint32_t kEpilogueBarrier0 = 1;
constexpr std::uint32_t kTurnBarrier0 = 4;
// The tail-row instance's merge (every consumer thread): warpgroups 1.. have left their shares in
// the merge slots (full), and warpgroup 0 has read the previous tile's (empty).
constexpr std::uint32_t kMergeFullBarrier = 7;
constexpr std::uint32_t kMergeEmptyBarrier = 8;

// Releases a ring stage: every consumer warp arrives once (the empty barriers count warps),
// after its own wgmma reading the stage has completed.
__device__ __forceinline__ void release_stage(std::uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

// kMasked: the instance for causal / sliding-window problems (per-row key ranges); otherwise
// every row sees keys [0, k_len) and only the tail tile needs a mask.
// T: __half, __nv_bfloat16, or __nv_fp8_e4m3 (FP8: inputs times per-(sequence, kv head)
// descales, P scaled by 2^8 into e4m3 range and rounded, V^T either loaded by TMA from the pass
// of fp8_v_transpose.h (FwdArgs::vt_global) or transposed in shared memory by three producer
// warps, bf16 output). kVtOnly: an FP8 instance for vt_global launches only (kernel_traits.cuh).
// kTailRows: the tail-row instance (kernel_traits.cuh): tile t is the last query block of
// (head, sequence) t, at most 64 rows inside the sequence, which every consumer warpgroup
// computes over its own share of the K/V tiles; warpgroup 0 merges the shares.
template <typename T, int kHeadDim, int kBlockN, bool kMasked, int kConsumerWGs = 0, bool kVtOnly = false,
          bool kTailRows = false>
__global__ void __launch_bounds__(
    FwdTraits<kHeadDim, kBlockN, std::is_same_v<T, __nv_fp8_e4m3> ? 1 : 2, kConsumerWGs, kVtOnly, kMasked, kTailRows>::kThreads, 1)
    forward_kernel(const __grid_constant__ FwdArgs a) {
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_e4m3>;
  using Tr = FwdTraits<kHeadDim, kBlockN, kFp8 ? 1 : 2, kConsumerWGs, kVtOnly, kMasked, kTailRows>;
  static_assert(!kTailRows || !kMasked, "tail rows: unmasked dense launches");
  constexpr bool kSplit = Tr::kSplit;
  using Out = std::conditional_t<kFp8, __nv_bfloat16, T>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = kHeadDim, S = Tr::kStages;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  // FP8: P is stored as 2^8 * exp2(t - m) (e4m3 has normals down to 2^-6 and a max of 448).
  constexpr float kLog2WeightScale = kFp8 ? 7.0f : 0.0f;  // (variant: 2^7 with a lazy 2^1.5, P <= 2^8.5)
  // Lazy rescale (softmax_fragment.cuh): O is rescaled only when a row's max rises by more than
  // this (log2 units), so on long rows almost no tile pays the O rescale (D / 2 FMUL per thread).
  // P then reaches 2^(kLog2WeightScale + kLazyRescaleLog2): 256 for fp16 / bf16, 2^8.5 = 362 for
  // e4m3 (max 448).
  constexpr float kLazyRescaleLog2 = kFp8 ? 1.5f : 8.0f;
  static_assert(kLog2WeightScale + kLazyRescaleLog2 <= (kFp8 ? 8.8f : 15.0f),
                "lazy rescale: P must stay below e4m3's 448 (2^8.8) and fp16's 65504");
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base (128-byte swizzle atoms and wgmma descriptors need it).
  const std::uint32_t raw_addr = smem_u32(smem_raw);
  const std::uint32_t base = (raw_addr + 1023u) & ~1023u;
  unsigned char* base_ptr = smem_raw + (base - raw_addr);
  const FwdSmem<Tr> sm(base);  // the Q buffers, the K/V ring, the barriers, the tile ring (smem_layout.cuh)
  constexpr int QB = Tr::kQBuffers;
  constexpr int W = Tr::kConsumerWarpgroups;
  constexpr int QG = Tr::kQGroups;  // Q barrier pairs per buffer: W or 1
  constexpr int kSlots = Tr::kTileSlots;
  constexpr bool kOriginFromSlot = Tr::kOriginInSlot;
  static_assert(!kOriginFromSlot || !kTailRows, "the tile slot's origin: no tail-row instance");
  const int num_tiles = a.num_tiles;
  const bool ragged = a.cu_seqlens_q != nullptr;
  // One tile per CTA (masked or ragged launches without the tile counter): the CTA of an empty
  // tile (past its sequence) leaves before any setup.
  if (gridDim.x >= static_cast<unsigned>(num_tiles) && !tile_coords<BM, BN, kMasked, kSplit, kTailRows>(a, blockIdx.x).active) return;
  // The head_dim 64 tail-row pair (launch.cu): the whole blocks' launch lets its programmatic
  // dependent, the tail-row launch, be scheduled at once; its CTAs then take the SMs this grid's
  // CTAs leave in the last round (one CTA per SM: they cannot share one). A no-op for a launch
  // without dependents (every launch of this instance issues it; a caller's kernel launched as
  // its dependent must griddepcontrol.wait before reading this one's output anyway).
  if constexpr (kHeadDim == 64 && kBlockN == 128 && !kMasked && !kFp8 && !kTailRows && kConsumerWGs == 0)
    griddepcontrol_launch_dependents();

  if (threadIdx.x == 0) {
    for (int b = 0; b < QB; ++b) {
      for (int wg = 0; wg < QG; ++wg) {
        mbarrier_init(sm.q_full(b, wg), 1);
        mbarrier_init(sm.q_empty(b, wg), W / QG);  // thread 0 of each warpgroup, after its epilogue
      }
    }
    for (int s = 0; s < S; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.k_empty(s), Tr::kConsumerWarps);
      // FP8: the transposing warps free the V tile, the consumers the transposed one (V^T-only:
      // no V stage, the barrier unused; a count of 0 is not allowed).
      mbarrier_init(sm.v_empty(s), kFp8 ? (Tr::kTransposing ? Tr::kTransposeWarps : 1) : Tr::kConsumerWarps);
      if constexpr (kFp8) {
        mbarrier_init(sm.vt_full(s), vt_from_workspace<Tr>(a) ? 1 : Tr::kTransposeWarps);  // the TMA's one arrival, or each warp's
        mbarrier_init(sm.vt_empty(s), Tr::kConsumerWarps);
      }
    }
    for (int slot = 0; slot < kSlots; ++slot) {
      mbarrier_init(sm.tile_full(slot), 1);
      mbarrier_init(sm.tile_empty(slot), Tr::kConsumerWarps + Tr::kTransposeWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    // ---- producer (producer.cuh): thread 0 issues every TMA copy; FP8's warps 1-3 transpose V ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x == 0) produce_tiles<kMasked, kTailRows>(a, sm);
    if constexpr (Tr::kTransposing) {
      if (threadIdx.x >= 32) transpose_tiles<kMasked, kTailRows>(a, sm);
    }
    return;
  }

  // ---- consumers: warpgroup c owns rows [64 c, 64 c + 64) of every tile (the tail-row instance:
  // every warpgroup computes rows [0, 64) over its share of the K/V tiles, warpgroup 0 writes) ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  // Broadcast from lane 0: the same value, but ptxas then knows it is warp-uniform and keeps the
  // Q descriptors derived from it in uniform registers (d128 x 176: 40 fewer instructions between
  // the turn barrier and the last wgmma of a tile).
  const int c = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
  const int t = threadIdx.x - 128 * warpgroup;
  const int warp = t / 32, lane = t % 32;
  const int g = lane / 4, q = lane % 4;

  // Pingpong turns (see the top of this file): warpgroup 0 goes first; the sequence of turns
  // runs on across tiles (every warpgroup takes the same turns per tile) and warpgroup 0 takes
  // the last arrival at the end.
  constexpr int kWarpgroups = Tr::kConsumerWarpgroups;
  static_assert(kWarpgroups <= kTurnBarrier0 - kEpilogueBarrier0, "one epilogue barrier per warpgroup");
  static_assert(kTurnBarrier0 + kWarpgroups <= 16, "named barrier ids 0..15");
  // Own diagonals (masked 16-bit head_dim 64, and causal head_dim 128 of kThreeWarpgroupCausalMinKeysD128
  // to kShortCausalMaxKeysD128 mean keys, on three warpgroups, 192-row Q tiles): a warpgroup
  // computes only the K/V tiles its own 64 rows can see and gives the tile's later ones back
  // unread (skip_kv_tiles). On a causal diagonal a 192-row tile spans 1.5 K/V tiles of 128 keys,
  // which its first warpgroups' rows do not see: at 1k the three warpgroups then compute the
  // same 72 warpgroup-tiles per head as two on 128-row tiles (96 with every warpgroup on every
  // tile), and a tile past the sequence's end costs only its live warpgroups. The warpgroups
  // then take different numbers of steps per tile, so they run without pingpong turns, and
  // one that finishes its tile early starts its next while the others finish theirs.
  // Masked 16-bit head_dim 256 (two warpgroups, 128-row tiles of 64-key K/V tiles): on a causal
  // diagonal the first warpgroup's rows end one K/V tile before the second's (at 1k, 136
  // warpgroup-tiles a head instead of 144). There the warpgroups keep their turns: one that
  // computes fewer tiles takes the turns of the tiles it skips as empty ones (take, pass), so
  // that every warpgroup still takes n_tiles - 1 turns a tile (below, where they go).
  constexpr bool kOwnDiagonal =
      kMasked && !kFp8 && (((D == 64 || D == 128) && kWarpgroups == 3) || D == 256);
  constexpr bool kNoTurns = kOwnDiagonal && kWarpgroups == 3;
  static_assert(!kOwnDiagonal || !Tr::kPInSmem, "own diagonals: no turn orders P's stores before the P V");
  auto take_turn = [&] {
    if constexpr (!kNoTurns) named_barrier_sync(kTurnBarrier0 + c, 256);
  };
  // The next warpgroup's id, computed where it is used (a value kept live across the loop cost
  // the d128 x 176 instance a spill).
  auto pass_turn = [&] {
    if constexpr (kNoTurns) return;
    else if constexpr (kWarpgroups == 2) named_barrier_arrive(kTurnBarrier0 + (c ^ 1), 256);
    else named_barrier_arrive(kTurnBarrier0 + (c + 1 == kWarpgroups ? 0 : c + 1), 256);
  };
  if (c == kWarpgroups - 1) pass_turn();
  // Tail rows: the merge's empty barrier starts armed (warpgroup 0's first arrival: the slots are
  // free) and ends balanced (warpgroups 1.. consume its last arrival after the loop).
  if constexpr (kTailRows) {
    static_assert(Tr::kQGroups == 1 && kMergeFullBarrier >= kTurnBarrier0 + kWarpgroups && kMergeEmptyBarrier < 16,
                  "tail rows: one Q barrier pair for all rows; merge barriers of their own");
    if (c == 0) named_barrier_arrive(kMergeEmptyBarrier, 128 * kWarpgroups);
  }

  int it = 0;       // K/V tiles consumed so far (ring position)
  int q_round = 0;  // Q tiles consumed so far
  // Two Q buffers: the buffer whose O this warpgroup's TMA store may still be reading (-1: none).
  // Thread 0 waits for that read and gives the buffer back to the producer while the next tile's
  // first Q K^T runs (or at the next epilogue), not right after issuing the store: the producer
  // needs the buffer only for the tile after next. One buffer: at once (the next Q goes there);
  // tail rows too (run_kv_share has no first Q K^T to hide it under: the release would wait for
  // the next epilogue, and the Q after it would load late).
  constexpr bool kDeferQRelease = QB > 1 && !kTailRows;
  int pending_q = -1;
  auto release_pending_q = [&] {
    if constexpr (kDeferQRelease) {
      if (pending_q >= 0 && t == 0) {
        tma_store_wait_read<0>();
        mbarrier_arrive(sm.q_empty(pending_q, c));
      }
      pending_q = -1;
    }
  };
  for (;;) {  // q_round counts the tiles taken so far: the tile ring's position too
    TileOrigin origin;
    const int tile = sm.template read_tile<kSplit>(q_round, lane, origin);
    if (tile >= num_tiles) break;
    const TileCoords tc = ring_tile_coords<BM, BN, kMasked, kSplit, kTailRows, kOriginFromSlot>(a, tile, origin);
    const int qb = q_round % QB;  // this tile's Q buffer (and O staging buffer)
    unsigned char* q_ptr = base_ptr + Tr::kQOffset + qb * Tr::kQBytes;
    const int wg_row0 = tc.m0 + 64 * c;        // first row of the warpgroup (sequence-relative)
    // Tail rows: every warpgroup computes the tile's first 64 rows (the producer put them in each
    // warpgroup's part of the Q buffer, so the Q descriptors stay as they are); the epilogue
    // still goes by wg_row0, so that warpgroups 1.. write nothing.
    const int rows0 = kTailRows ? tc.m0 : wg_row0;
    const int row = rows0 + 16 * warp + g;   // the thread's rows: row and row + 8
    math::KeyRange keys[2] = {{0, tc.k_len}, {0, tc.k_len}};
    // Keys [full.begin, full.end) are visible to every row of the warpgroup: tiles inside need
    // no per-element mask (math::tile_fully_visible with its visible_keys calls hoisted).
    math::KeyRange full{0, tc.k_len};
    [[maybe_unused]] int n_own = tc.n_tiles;  // the K/V tiles this warpgroup computes (kOwnDiagonal: its rows' own)
    if constexpr (kMasked) {
      const math::MaskSpec spec = math::MaskSpec::make(tc.q_len, tc.k_len, a.causal, a.window_left, a.window_right);
      // (32-bit forms, the same ranges: 64-bit compares lengthened the chain before the tile's
      // first wgmma.)
      keys[0] = math::visible_keys_narrow(spec, row);
      keys[1] = math::visible_keys_narrow(spec, row + 8);
      full = {-1, 0x7fffffff};  // a warpgroup without rows needs no mask
      if (wg_row0 < tc.q_len) {
        const math::KeyRange last_row = math::visible_keys_narrow(spec, min(wg_row0 + 64, tc.q_len) - 1);
        full.begin = last_row.begin;
        full.end = math::visible_keys_narrow(spec, wg_row0).end;
        // The last row sees the furthest keys (a row's end never falls as the row rises).
        if constexpr (kOwnDiagonal) n_own = min(tc.n_tiles, max(0, (last_row.end + BN - 1) / BN - tc.n_begin));
      } else if constexpr (kOwnDiagonal) {
        n_own = 0;  // no rows inside the sequence
      }
    }

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float s[BN / 8][4];
    std::uint32_t p[kFp8 ? BN / 32 : BN / 16][4];  // P as the A fragments of the P V k-steps
    math::OnlineSoftmaxRow rows[2];
    float alpha[2];
    bool rescale_o = true;  // whether this tile's alpha must be applied to O (lazy rescale)
    auto& s_flat = reinterpret_cast<float(&)[BN / 2]>(s);
    auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);

    // FP8: the q and k descales of the tile's (sequence, kv head) fold into the score scale (and
    // the soft cap's, softcap_score.cuh).
    float scale_log2 = a.scale_log2;
    GroupedSoftcapScore<Tr::kCapGroup> capped{{a.scale_over_cap, a.softcap_log2}};
    if constexpr (kFp8) {
      const int h_kv = a.group_div.div(tc.head);
      // Floored at 2^-60 (factors are >= 0): a zero factor (an all-zero head) must give scores of
      // ~0, i.e. uniform weights, while masked scores stay -inf; a multiplier of exactly 0 would
      // turn them into -inf * 0 = NaN in the exponent's FFMA.
      const float qk = fmaxf(a.q_descale.at(tc.seq, h_kv) * a.k_descale.at(tc.seq, h_kv), 0x1p-60f);
      scale_log2 *= qk;
      // Held at FLT_MAX: scale / c is finite (the API checks it) but times large descales can
      // overflow for a small cap, and a score of exactly 0 would then give 0 * inf = NaN. Any
      // other score is then far past tanh's saturation either way (|q.k| >= 2^-18 in e4m3).
      capped.scale_over_cap = fminf(capped.scale_over_cap * qk, FLT_MAX);
    }

    // S = Q K^T over head_dim in 32-byte k steps (k16 for 16-bit types, k32 for e4m3): panel
    // ks / 4, 32 bytes per step inside a panel.
    auto issue_qk = [&](int stage) {
      // c is warp-uniform to ptxas (see its definition), so the Q descriptors live in uniform
      // registers like the K ones. (An earlier version hid q_addr behind an empty asm to keep
      // 64-bit descriptors from being hoisted into vector registers, which spilled in the masked
      // d64 instances; that also forced ~40 R2UR / MOV / IADD3 per tile between the turn and
      // the last wgmma. With uniform descriptors no instance spills.)
      const std::uint32_t q_addr = sm.q(qb) + 64u * 128u * c;
      const std::uint64_t dq = make_smem_desc_sw128_kmajor(q_addr);
      const std::uint64_t dk = make_smem_desc_sw128_kmajor(sm.k(stage));
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D * Tr::kElemBytes / 32; ++ks) {
        const std::uint32_t off = 32u * (ks % 4);
        const std::uint64_t da = smem_desc_advance(dq, (ks / 4) * Tr::kQPanelBytes + off);
        const std::uint64_t db = smem_desc_advance(dk, (ks / 4) * Tr::kKVPanelBytes + off);
        if constexpr (kFp8) wgmma_ss_e4m3<BN>(s_flat, da, db, ks > 0);
        else wgmma_ss<BN, kBf16>(s_flat, da, db, ks > 0);
      }
      wgmma_commit();
    };
    // O += P V over the tile's keys: 16-bit types in k16 steps with V MN-major (16 rows of V =
    // 2048 bytes each), P from registers or (kPInSmem) from the warpgroup's P buffer (k16 step kt:
    // panel kt / 4, 32 bytes per step inside it, as Q K^T steps through Q); e4m3 in k32 steps
    // over V^T, K-major (32 bytes of each V^T row).
    auto issue_pv = [&](int stage) {
      wgmma_fence();
      if constexpr (Tr::kPInSmem) {
        const std::uint64_t dp = make_smem_desc_sw128_kmajor(sm.p(c));
        const std::uint64_t dv = make_smem_desc_sw128_mnmajor(sm.v(stage), Tr::kKVPanelBytes);
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt)
          wgmma_ss<D, kBf16, true>(o_flat, smem_desc_advance(dp, (kt / 4) * Tr::kPPanelBytes + 32u * (kt % 4)),
                                   smem_desc_advance(dv, 2048u * kt), true);
      } else if constexpr (kFp8) {
        const std::uint64_t dvt = make_smem_desc_sw128_kmajor(sm.vt(stage));
#pragma unroll
        for (int kt = 0; kt < BN / 32; ++kt) wgmma_rs_e4m3<D>(o_flat, p[kt], smem_desc_advance(dvt, 32u * kt), true);
      } else {
        const std::uint64_t dv = make_smem_desc_sw128_mnmajor(sm.v(stage), Tr::kKVPanelBytes);
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt) {
          const std::uint64_t db = smem_desc_advance(dv, 2048u * kt);
          wgmma_rs<D, kBf16, true>(o_flat, p[kt], db, true);
        }
      }
      wgmma_commit();
    };
    // Rows past the sequence (a ragged tile's next sequence) do not vote in the lazy rescale.
    // Formed once a query tile and kept opaque: ptxas otherwise recomputes the row from the
    // thread index on every K/V tile (7 instructions a tile on d64's path).
    int vote_bits = (row < tc.q_len ? 1 : 0) | (row + 8 < tc.q_len ? 2 : 0);
    asm volatile("" : "+r"(vote_bits));
    auto weights = [&](int i) {
      const bool vote0 = (vote_bits & 1) != 0, vote1 = (vote_bits & 2) != 0;
      const int n0 = (tc.n_begin + i) * BN;
      // Unmasked instances: full = [0, k_len) and n0 >= 0, so only the tail tile (n0 + BN > k_len)
      // needs the mask; the general test cost ~9 instructions per tile there.
      const bool masked = kMasked ? !(full.begin <= n0 && n0 + BN <= full.end) : n0 + BN > tc.k_len;
      // The tile's first K/V tile (run_kv_tiles calls weights(0) once, before its loop from 1)
      // enters the rows without the vote (scores_to_weights' kFirstTile); the tail-row shares
      // (run_kv_share) take the general form. The mask in the thread's frame
      // (softmax_fragment.cuh).
      if (!kTailRows && i == 0)
        rescale_o = scores_to_weights<BN, true, true, true>(s, rows, keys, masked, n0, q, scale_log2, capped,
                                                            alpha, kLog2WeightScale, kLazyRescaleLog2, vote0, vote1);
      else
        rescale_o = scores_to_weights<BN, true, false, true>(s, rows, keys, masked, n0, q, scale_log2, capped,
                                                             alpha, kLog2WeightScale, kLazyRescaleLog2, vote0, vote1);
    };
    auto pack = [&] {
      if constexpr (kFp8) pack_weights_e4m3<BN>(s, p);
      else pack_weights<T, BN>(s, p);
      if constexpr (Tr::kPInSmem) {
        // The warpgroup's previous P V read this buffer: every warp has waited for it (the
        // schedule's wait before pack) before any warp overwrites it. The turn barrier before the
        // next P V (all 128 threads of this warpgroup) orders the stores, fenced for the async
        // proxy, before that wgmma reads them.
        named_barrier_sync(kEpilogueBarrier0 + c, 128);
        store_weights_smem<BN>(sm.p(c), p, warp, lane);
        fence_proxy_async_shared_cta();
      }
    };
    // The barriers that say a V tile is ready for P V and that P V is done with it.
    auto pv_full = [&](int stage) { return kFp8 ? sm.vt_full(stage) : sm.v_full(stage); };
    auto pv_empty = [&](int stage) { return kFp8 ? sm.vt_empty(stage) : sm.v_empty(stage); };

    mbarrier_wait_parity(sm.q_full(qb, c), (q_round / QB) & 1);
    if (kTailRows || tc.n_tiles > 0) {
      // The schedule (kv_tile_schedule.cuh): the pinned softmax (end_softmax_block) only for
      // bf16 / fp16: for FP8 the pinned order measured 8 % slower at d128 16k and 4 % at 1k
      // (A/B on the H200, sixth session); FP8's P V is half the tensor time of bf16's, so
      // waiting for it first costs little, and the pinned softmax evidently delayed the next turn.
      TileOps ops{take_turn,
                  pass_turn,
                  issue_qk,
                  issue_pv,
                  weights,
                  [&] {
                    // The overlapped FP8 instance (V^T-only d256) needs the pin too: without it
                    // ptxas put the P V wait above the row max, and only the soft-cap path's exp2
                    // ran under P V (SASS, eighteenth session).
                    if constexpr (!kFp8 || !Tr::kSerialGemms) end_softmax_block(rows);
                  },
                  [&] {
                    if (rescale_o) rescale_rows<D, false>(o, alpha);
                  },
                  pack,
                  [&](int stage) { release_stage(sm.k_empty(stage), lane); },
                  [&](int stage) { release_stage(pv_empty(stage), lane); },
                  [&](int stage) { return sm.k_full(stage); },
                  pv_full};
      if constexpr (kTailRows) {
        // This warpgroup's share: every kWarpgroups-th K/V tile from its own index, no turns; the
        // ring holds one stage per share at a time.
        static_assert(S >= kWarpgroups, "run_kv_share: every share's tile in the ring at once");
        run_kv_share<S>(tc.n_tiles, c, kWarpgroups, it, ops, s_flat, o_flat);
      } else if constexpr (kOwnDiagonal) {
        // With turns a warpgroup computes at least one tile (a warpgroup without visible keys then
        // computes a masked one, as without own diagonals) and takes the skipped tiles' turns
        // empty, so that every warpgroup takes n_tiles - 1 turns a tile: the first just before
        // its last P V, each other one just before it gives back the next skipped tile. Taking
        // them all before the skips deadlocks (the protocol model, past the ring's reach): the
        // other warpgroup's step k needs K/V stages this one would hold while it waits for turn k.
        const int n_run = kNoTurns ? n_own : max(n_own, 1);
        const int n_skip = tc.n_tiles - n_run;
        if (n_run > 0)
          run_kv_tiles<S, Tr::kSerialGemms, false, true>(n_run, it, ops, s_flat, o_flat, release_pending_q,
                                                         kNoTurns ? 0 : min(n_skip, 1));
        if constexpr (kNoTurns) {
          skip_kv_tiles<S>(n_skip, it, ops);
        } else {
          for (int k = 0; k < n_skip; ++k) {
            if (k > 0) {
              take_turn();
              pass_turn();
            }
            skip_kv_tiles<S>(1, it, ops);
          }
        }
      } else {
        // The tile's first Q K^T and last P V without a turn (kv_tile_schedule.cuh).
        run_kv_tiles<S, Tr::kSerialGemms, false, true>(tc.n_tiles, it, ops, s_flat, o_flat, release_pending_q);
      }
    }
    if constexpr (kTailRows) {
      // Merge the shares: warpgroup w > 0 leaves its thread's accumulators, row maxima and
      // (thread-partial) row sums in slot w - 1, 16-byte chunk k of thread t at (128 k + t) x 16
      // (consecutive threads, consecutive chunks: no bank conflict); warpgroup 0 scales each
      // share to the larger max (an empty share, max -inf, by 0) and adds it to its own.
      constexpr int kChunks = D / 8;  // float4 chunks of O per thread
      constexpr int kMergeThreads = 128 * kWarpgroups;
      if (c > 0) {
        named_barrier_sync(kMergeEmptyBarrier, kMergeThreads);
        float4* slot = reinterpret_cast<float4*>(base_ptr + Tr::kMergeOffset + (c - 1) * Tr::kMergeSlotBytes) + t;
#pragma unroll
        for (int k = 0; k < kChunks; ++k) slot[128 * k] = make_float4(o[k][0], o[k][1], o[k][2], o[k][3]);
        slot[128 * kChunks] = make_float4(rows[0].m, rows[0].l, rows[1].m, rows[1].l);
        named_barrier_arrive(kMergeFullBarrier, kMergeThreads);
      } else {
        named_barrier_sync(kMergeFullBarrier, kMergeThreads);
#pragma unroll
        for (int w = 1; w < kWarpgroups; ++w) {
          const float4* slot =
              reinterpret_cast<const float4*>(base_ptr + Tr::kMergeOffset + (w - 1) * Tr::kMergeSlotBytes) + t;
          const float4 ml = slot[128 * kChunks];
          const float m_w[2] = {ml.x, ml.z}, l_w[2] = {ml.y, ml.w};
          float f_self[2], f_w[2];
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float m_new = fmaxf(rows[hh].m, m_w[hh]);
            f_self[hh] = rows[hh].m == -INFINITY ? 0.0f : exp2f(rows[hh].m - m_new);
            f_w[hh] = m_w[hh] == -INFINITY ? 0.0f : exp2f(m_w[hh] - m_new);
            rows[hh].m = m_new;
            rows[hh].l = rows[hh].l * f_self[hh] + l_w[hh] * f_w[hh];
          }
#pragma unroll
          for (int k = 0; k < kChunks; ++k) {
            const float4 v = slot[128 * k];
            o[k][0] = o[k][0] * f_self[0] + v.x * f_w[0];
            o[k][1] = o[k][1] * f_self[0] + v.y * f_w[0];
            o[k][2] = o[k][2] * f_self[1] + v.z * f_w[1];
            o[k][3] = o[k][3] * f_self[1] + v.w * f_w[1];
          }
        }
        named_barrier_arrive(kMergeEmptyBarrier, kMergeThreads);  // the slots are read
      }
    }

    // ---- epilogue: normalise, stage the warpgroup's 64 rows in its own rows of the Q buffer
    // (its last Q K^T has completed), then one TMA store per panel (dense) or 16-byte row stores
    // (ragged, where a box past the sequence would write into the next one); then give the Q
    // buffer back to the producer. ----
    release_pending_q();  // where no first Q K^T gave it back (no K/V tile, tail rows)
    const int valid_rows = min(64, tc.q_len - wg_row0);  // rows of this warpgroup inside the sequence
    // A part of a split tile (kSplit, tc.split >= 0): the thread's two columns of row rr of O
    // times sc (fp32 O / l, FP8's V descale folded in), and the row's LSE, into the part's
    // workspace slot for the merge kernel, which reads only the rows inside the sequence.
    auto store_split_row = [&](int hh, int rr, float sc, float lse) {
      if (rr >= valid_rows) return;
      const std::int64_t slot = (static_cast<std::int64_t>(tc.split) * a.split_parts + tc.part) * BM + 64 * c + rr;
      float* row_o = a.split_o + slot * D;
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<float2*>(row_o + 8 * d + 2 * q) = make_float2(o[d][2 * hh] * sc, o[d][2 * hh + 1] * sc);
      if (q == 0) a.split_lse[slot] = lse;
    };
    if constexpr (kFp8) {
      // bf16 O straight from the accumulators (the Q buffer of 1-byte elements is too small to
      // stage it): a quad writes 16 contiguous bytes of a row per column group.
      const float dv = a.v_descale.at(tc.seq, a.group_div.div(tc.head));
      Out* out = static_cast<Out*>(a.o) + tc.seq * a.o_batch + (tc.q_row0 + static_cast<std::int64_t>(wg_row0)) * a.o_row +
                 tc.head * a.o_head;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        rows[hh].l = sm80::quad_sum(rows[hh].l);
        const float sc = rows[hh].output_scale() * dv;  // the 2^8 of P cancels against l
        const int rr = 16 * warp + g + 8 * hh;          // row within the warpgroup
        bool to_output = true;
        if constexpr (kSplit) {
          if (tc.split >= 0) {
            // A part of a split tile: fp32 O / l and the LSE of its rows inside the sequence
            // into its workspace slot, for the merge kernel (which reads only those rows).
            to_output = false;
            rows[hh].l *= 1.0f / 128.0f;  // 2^-kLog2WeightScale (sc was taken before)
            store_split_row(hh, rr, sc, rows[hh].lse());
          }
        }
        if (to_output) {
          if (rr < valid_rows) {
#pragma unroll
            for (int d = 0; d < D / 8; ++d)
              *reinterpret_cast<std::uint32_t*>(out + rr * a.o_row + 8 * d + 2 * q) =
                  Traits<Out>::pack2(o[d][2 * hh] * sc, o[d][2 * hh + 1] * sc);
          }
          rows[hh].l *= 1.0f / 128.0f;  // 2^-kLog2WeightScale: the softmax's own sum, for the LSE
          if (a.lse != nullptr && q == 0 && rr < valid_rows)
            a.lse[tc.seq * a.lse_batch + tc.head * a.lse_head + tc.q_row0 + wg_row0 + rr] = rows[hh].lse();
        }
      }
      named_barrier_sync(kEpilogueBarrier0 + c, 128);  // every warp's last Q K^T is done
      if (t == 0) mbarrier_arrive(sm.q_empty(qb, c));
    } else if (kSplit && tc.split >= 0) {
      // A part of a split tile (16-bit): fp32 O / l and the LSE of its rows inside the sequence
      // into its workspace slot, as the FP8 parts above; no staging, no TMA store.
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        rows[hh].l = sm80::quad_sum(rows[hh].l);
        store_split_row(hh, 16 * warp + g + 8 * hh, rows[hh].output_scale(), rows[hh].lse());
      }
      named_barrier_sync(kEpilogueBarrier0 + c, 128);  // every warp's last Q K^T is done
      if (t == 0) mbarrier_arrive(sm.q_empty(qb, c));
    } else {
      float sc[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        rows[hh].l = sm80::quad_sum(rows[hh].l);
        sc[hh] = rows[hh].output_scale();
        const int rr = 16 * warp + g + 8 * hh;  // row within the warpgroup
        if (a.lse != nullptr && q == 0 && rr < valid_rows)
          a.lse[tc.seq * a.lse_batch + tc.head * a.lse_head + tc.q_row0 + wg_row0 + rr] = rows[hh].lse();
      }
      // O / l as 16-bit pairs into the warp's 16 rows of the staging buffer (128-byte swizzled
      // panels of 64 columns, the layout the TMA store reads), four 8 x 8 blocks per stmatrix:
      // n-tiles d and d + 1, rows g and g + 8 of each (the accumulator's layout, register i =
      // block i). Lane l gives the address of row l % 8 of block l / 8; its 16-byte chunk within
      // the row is (d % 8 + (l / 16)) ^ (l % 8), i.e. (d % 8) ^ k with k = (l / 16) ^ (l % 8)
      // (d even). Four stores a warp per two n-tiles instead of sixteen 4-byte ones.
      {
        const int blk = lane / 8, lrow = lane % 8;
        const int k = (blk >> 1) ^ lrow;
        const std::uint32_t row_addr = sm.q(qb) + static_cast<std::uint32_t>((64 * c + 16 * warp + 8 * (blk & 1) + lrow) * 128);
#pragma unroll
        for (int d = 0; d < D / 8; d += 2) {
          const std::uint32_t addr =
              row_addr + static_cast<std::uint32_t>((d / 8) * Tr::kQPanelBytes + (((d % 8) ^ k) << 4));
          stmatrix_x4(addr, Traits<Out>::pack2(o[d][0] * sc[0], o[d][1] * sc[0]),
                      Traits<Out>::pack2(o[d][2] * sc[1], o[d][3] * sc[1]),
                      Traits<Out>::pack2(o[d + 1][0] * sc[0], o[d + 1][1] * sc[0]),
                      Traits<Out>::pack2(o[d + 1][2] * sc[1], o[d + 1][3] * sc[1]));
        }
      }
      fence_proxy_async_shared_cta();  // the TMA store reads what these generic stores wrote
      named_barrier_sync(kEpilogueBarrier0 + c, 128);
      if (!ragged) {
        if (t == 0) {
          if (valid_rows > 0) {
#pragma unroll
            for (int p = 0; p < Tr::kPanels; ++p)
              tma_store_4d(&a.map_o, sm.q(qb) + p * Tr::kQPanelBytes + 64u * 128u * c, 64 * p, wg_row0, tc.head, tc.seq);
            tma_store_commit();
            // The Q buffer may be refilled once the copy has read it: now with one buffer, later
            // with two (release_pending_q).
            if constexpr (!kDeferQRelease) tma_store_wait_read<0>();
          }
          if constexpr (!kDeferQRelease) mbarrier_arrive(sm.q_empty(qb, c));
        }
        if constexpr (kDeferQRelease) pending_q = qb;
      } else {
        constexpr int kChunks = D / 8;  // 16-byte chunks per row
        Out* out = static_cast<Out*>(a.o) + (tc.q_row0 + static_cast<std::int64_t>(wg_row0)) * a.o_row +
                 tc.head * a.o_head;
#pragma unroll
        for (int k = 0; k < 64 * kChunks / 128; ++k) {
          const int idx = t + 128 * k;
          const int r = idx / kChunks, ch = idx % kChunks;
          if (r < valid_rows) {
            const int tr = 64 * c + r;
            const uint4 v = *reinterpret_cast<const uint4*>(q_ptr + (ch / 8) * Tr::kQPanelBytes +
                                                            tr * 128 + (((ch % 8) ^ (tr % 8)) * 16));
            *reinterpret_cast<uint4*>(out + r * a.o_row + ch * 8) = v;
          }
        }
        named_barrier_sync(kEpilogueBarrier0 + c, 128);  // every row read out of the Q buffer
        if (t == 0) mbarrier_arrive(sm.q_empty(qb, c));
      }
    }
    ++q_round;
  }
  if (c == 0) take_turn();  // the last warpgroup's last arrival: leave the barrier balanced
  if constexpr (kTailRows) {
    if (c > 0) named_barrier_sync(kMergeEmptyBarrier, 128 * kWarpgroups);  // warpgroup 0's last arrival
  }
  if (t == 0) tma_store_wait<0>();
  if constexpr (kTailRows) {
    // Launched as the whole blocks' programmatic dependent, this grid must not complete before
    // that one: whatever follows on the stream waits for this grid only. Every consumer thread
    // waits, after its last store, for that grid's completion and memory flush (a plain launch
    // has no prerequisite in flight: returns at once).
    griddepcontrol_wait();
  }
}

}  // namespace tessera::cuda::sm90
