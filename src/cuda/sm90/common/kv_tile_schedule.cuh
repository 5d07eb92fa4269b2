// The order in which a consumer warpgroup of the sm90 attention kernels runs its GEMMs and
// softmax over the K/V tiles of one Q tile (FA3): the K/V ring's barriers, the pingpong turns,
// the intra-warpgroup overlap (S_i = Q K_i^T and P_{i-1} V_{i-1} in flight together, the softmax
// of tile i between their two waits), or, where registers cannot hold O, P and S at once
// (kSerialGemms), P_{i-1} V_{i-1} completed before Q K_i^T. What a kernel computes per tile
// (its descriptors, masks, score scale, P packing) comes in as TileOps; the schedule is written
// once so that every kernel built on it keeps the order the forward's SASS studies settled
// (docs/perf/forward_sm90.md).
#pragma once

#include <cstdint>

#include "cuda/primitives/sm80/nanosleep.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "math/online_softmax.h"
#include "cuda/primitives/sm90/wgmma.cuh"

namespace tessera::cuda::sm90 {

// Ring position (K/V tiles through the ring so far, never negative) -> its stage and the phase
// of that stage's barriers. Taken as unsigned, the modulo and the division by a power-of-two
// stage count are a mask and a shift; on int, nvcc adds the round-toward-zero fix-ups (SHF,
// LEA.HI, LOP3 for each: ~10 instructions per K/V tile in the forward's loop at d64).
template <int S>
__device__ __forceinline__ int ring_stage(int pos) {
  return static_cast<int>(static_cast<unsigned>(pos) % static_cast<unsigned>(S));
}
template <int S>
__device__ __forceinline__ std::uint32_t ring_phase(int pos) {
  return (static_cast<unsigned>(pos) / static_cast<unsigned>(S)) & 1u;
}

// Pins the softmax of a K/V tile above the wait for the previous tile's P V product. Without it
// ptxas hoists that wgmma.wait_group 0 (WARPGROUP.DEPBAR) to the top of the softmax's basic
// block, before the row max, so the warpgroup waited for its P V before any of its softmax ran
// and the intra-warpgroup overlap described at the top of this file did not happen in SASS (seen
// in every bf16 / fp16 / fp8 instance of main at c560264). A branch on the softmax's result ends the
// block: the row sums are >= 0 (sums of exp2 values, the old sum times alpha in [0, 1]) or NaN,
// so it is never taken, and its body (a nanosleep) would change no value if it were; the cost
// is ~4 instructions per tile. The body must not leave the kernel: with __trap() ptxas saw an
// exit while wgmmas were in flight and serialized every wgmma (C7512, 1.6 KB of spills at
// d128 x 176).
__device__ __forceinline__ void end_softmax_block(const math::OnlineSoftmaxRow (&rows)[2]) {
  if (fminf(rows[0].l, rows[1].l) < 0.0f) sm80::nanosleep_ordered<1>();
}

// The per-tile operations a kernel supplies (each a callable, inlined):
//   take_turn(), pass_turn()    the pingpong turn at the tensor cores
//   issue_qk(stage)             S = Q K^T of the K tile in `stage` (fence, wgmmas, commit)
//   issue_pv(stage)             O += P V of the V tile in `stage`
//   weights(i)                  mask + online softmax of tile i's S (into weights, alpha)
//   pin()                       keeps the softmax above the next wait (end_softmax_block), or nothing
//   rescale()                   O *= alpha
//   pack()                      P = the weights as the A fragments of P V (or stored where P V
//                               reads them: pack always runs after the warp's wait for the
//                               previous P V, and the next take_turn orders it before the next)
//   release_k(stage), release_v(stage)   give a ring stage back to the producer
//   k_full(stage), pv_full(stage)        the barriers that say a K tile / a P V operand is ready
template <class TakeTurn, class PassTurn, class IssueQK, class IssuePV, class Weights, class Pin, class Rescale,
          class Pack, class ReleaseK, class ReleaseV, class KFull, class PvFull>
struct TileOps {
  TakeTurn take_turn;
  PassTurn pass_turn;
  IssueQK issue_qk;
  IssuePV issue_pv;
  Weights weights;
  Pin pin;
  Rescale rescale;
  Pack pack;
  ReleaseK release_k;
  ReleaseV release_v;
  KFull k_full;
  PvFull pv_full;
};
template <class... F>
TileOps(F...) -> TileOps<F...>;

// Runs tiles 0 .. n_tiles - 1 (n_tiles > 0) from ring position `it` (K/V tiles consumed so
// far; advanced by n_tiles). Tile i's K and V are in stage (it + i) % S, with phase
// ((it + i) / S) & 1. s and o: the S and O accumulators of the wgmmas (fenced after each wait).
// kTurnsAtEnds false: the tile's first Q K^T and its last P V are issued without a turn (FA3's
// order), only the steady-state steps take one, so every warpgroup takes n_tiles - 1 turns a
// tile. With turns there, a warpgroup's second step waited for the turn the other warpgroup
// takes for its first Q K^T, i.e. for that warpgroup's epilogue of the tile before.
// after_first_qk(): runs while the tile's first Q K^T is in flight (the forward gives back the
// Q buffer of its tile before last there, once its O store has read it).
// extra_turns: turns taken empty (take, pass) after the loop, before the last P V: the first of
// the tiles a warpgroup skips (the forward's own diagonals), so that the round robin stays whole
// and the next warpgroup's turn is not held behind this one's last P V.
struct NoStep {
  __device__ void operator()() const {}
};
// kCarryRing: the ring's stage and phase carried through the loop (a step, a compare and two
// selects per tile) rather than derived from the position each tile. The forward's K/V loop
// path is 6 instructions shorter at d64 with it (scripts/sass_loop_path.py); the sm90 batch
// prefill gave up uniform registers with it (R2UR 27 -> 60 at d128, path 442 -> 481), so it
// derives them.
template <int S, bool kSerialGemms, bool kTurnsAtEnds = true, bool kCarryRing = false, class Ops, int kS, int kO,
          class AfterFirstQk = NoStep>
__device__ __forceinline__ void run_kv_tiles(int n_tiles, int& it, Ops& op, float (&s)[kS], float (&o)[kO],
                                             AfterFirstQk after_first_qk = {}, int extra_turns = 0) {
  mbarrier_wait_parity(op.k_full(ring_stage<S>(it)), ring_phase<S>(it));
  if constexpr (kTurnsAtEnds) op.take_turn();
  op.issue_qk(ring_stage<S>(it));
  if constexpr (kTurnsAtEnds) op.pass_turn();
  after_first_qk();
  wgmma_wait<0>();
  wgmma_fence_operand(s);
  op.release_k(ring_stage<S>(it));
  op.weights(0);  // O is still zero: no rescale
  op.pack();
  int stage = ring_stage<S>(it);
  std::uint32_t phase = ring_phase<S>(it);
  for (int i = 1; i < n_tiles; ++i) {
    int prev;
    std::uint32_t prev_phase;
    if constexpr (kCarryRing) {
      prev = stage;
      prev_phase = phase;
      const bool wraps = stage == S - 1;
      stage = wraps ? 0 : stage + 1;
      phase = wraps ? phase ^ 1u : phase;
    } else {
      prev = ring_stage<S>(it);
      prev_phase = ring_phase<S>(it);
      ++it;
      stage = ring_stage<S>(it);
      phase = ring_phase<S>(it);
    }
    mbarrier_wait_parity(op.k_full(stage), phase);
    mbarrier_wait_parity(op.pv_full(prev), prev_phase);
    if constexpr (kSerialGemms) {
      // P_{i-1} V_{i-1} completes before S_i is issued: at most O + P or S are in flight at
      // once, not O + P + S.
      op.take_turn();
      op.issue_pv(prev);
      wgmma_wait<0>();
      wgmma_fence_operand(o);
      op.release_v(prev);
      op.issue_qk(stage);
      op.pass_turn();
      wgmma_wait<0>();
      wgmma_fence_operand(s);
      op.release_k(stage);
      op.weights(i);
    } else {
      op.take_turn();
      op.issue_qk(stage);
      op.issue_pv(prev);
      op.pass_turn();
      wgmma_wait<1>();  // S_i has landed; P_{i-1} V_{i-1} may still run
      wgmma_fence_operand(s);
      op.release_k(stage);
      op.weights(i);
      op.pin();
      wgmma_wait<0>();
      wgmma_fence_operand(o);
      op.release_v(prev);
    }
    op.rescale();
    op.pack();
  }
  if constexpr (kCarryRing) it += n_tiles - 1;  // (n_tiles > 0)
  for (int e = 0; e < extra_turns; ++e) {
    op.take_turn();
    op.pass_turn();
  }
  const int last = ring_stage<S>(it);
  mbarrier_wait_parity(op.pv_full(last), ring_phase<S>(it));
  if constexpr (kTurnsAtEnds) op.take_turn();
  op.issue_pv(last);
  if constexpr (kTurnsAtEnds) op.pass_turn();
  wgmma_wait<0>();
  wgmma_fence_operand(o);
  op.release_v(last);
  ++it;
}

// Gives back, without computing them, the n (>= 0) K/V tiles at ring positions it .. it + n - 1
// (`it` is advanced by n): each stage once it has been filled, since the ring's empty barriers
// count every consumer warp, and an arrival before the fill would count towards the wrong phase.
template <int S, class Ops>
__device__ __forceinline__ void skip_kv_tiles(int n, int& it, Ops& op) {
  for (const int end = it + n; it < end; ++it) {
    mbarrier_wait_parity(op.k_full(ring_stage<S>(it)), ring_phase<S>(it));
    op.release_k(ring_stage<S>(it));
    mbarrier_wait_parity(op.pv_full(ring_stage<S>(it)), ring_phase<S>(it));
    op.release_v(ring_stage<S>(it));
  }
}

// One warpgroup's share of a Q tile that every warpgroup computes on the same rows (the sm90
// forward's tail-row instance, kernel.cuh): of the n_tiles (>= 0) K/V tiles at ring positions
// it .. it + n_tiles - 1 (`it` is advanced by n_tiles), it computes first, first + stride, ...
// and only waits for and gives back the others, since the ring's empty barriers count every
// consumer warp. No turns: the warpgroups run different tiles at once, and one's softmax runs
// under another's GEMMs. Serial per tile (S, softmax, P V), so that a warpgroup holds one ring
// stage at a time and the three shares fit a ring of 4 stages together: the overlapped order
// holds two per warpgroup (the next K with the last V), which starved the ring (measured: the
// tail-row launch as slow as a whole tile). No deadlock: a warpgroup gives tiles back in ring
// order and, while it waits, holds only the tile it computes, so the earliest tile still held
// is always finished and the producer refills its stage.
template <int S, class Ops, int kS, int kO>
__device__ __forceinline__ void run_kv_share(int n_tiles, int first, int stride, int& it, Ops& op, float (&s)[kS],
                                             float (&o)[kO]) {
  const int end = it + n_tiles;
  int pos = it;  // the next ring position this warpgroup has not given back
  auto skip_to = [&](int target) { skip_kv_tiles<S>(target - pos, pos, op); };  // the other shares' tiles
  for (int i = first; i < n_tiles; i += stride) {
    skip_to(it + i);
    const int stage = ring_stage<S>(pos);
    const std::uint32_t phase = ring_phase<S>(pos);
    mbarrier_wait_parity(op.k_full(stage), phase);
    op.issue_qk(stage);
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    op.release_k(stage);
    op.weights(i);
    if (i != first) op.rescale();  // O is still zero before the first
    op.pack();
    mbarrier_wait_parity(op.pv_full(stage), phase);
    op.issue_pv(stage);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    op.release_v(stage);
    ++pos;
  }
  skip_to(end);
  it = end;
}

}  // namespace tessera::cuda::sm90
