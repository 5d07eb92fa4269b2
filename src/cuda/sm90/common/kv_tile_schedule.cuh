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

#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"

namespace tessera::cuda::sm90 {

// The per-tile operations a kernel supplies (each a callable, inlined):
//   take_turn(), pass_turn()    the pingpong turn at the tensor cores
//   issue_qk(stage)             S = Q K^T of the K tile in `stage` (fence, wgmmas, commit)
//   issue_pv(stage)             O += P V of the V tile in `stage`
//   s_landed(), o_landed()      wgmma_fence_operand of the S / O accumulators after a wait
//   weights(i)                  mask + online softmax of tile i's S (into weights, alpha)
//   pin()                       keeps the softmax above the next wait (end_softmax_block), or nothing
//   rescale()                   O *= alpha
//   pack()                      P = the weights as the A fragments of P V
//   release_k(stage), release_v(stage)   give a ring stage back to the producer
//   k_full(stage), pv_full(stage)        the barriers that say a K tile / a P V operand is ready
template <class TakeTurn, class PassTurn, class IssueQK, class IssuePV, class SLanded, class OLanded, class Weights,
          class Pin, class Rescale, class Pack, class ReleaseK, class ReleaseV, class KFull, class PvFull>
struct TileOps {
  TakeTurn take_turn;
  PassTurn pass_turn;
  IssueQK issue_qk;
  IssuePV issue_pv;
  SLanded s_landed;
  OLanded o_landed;
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
// ((it + i) / S) & 1.
template <int S, bool kSerialGemms, class Ops>
__device__ __forceinline__ void run_kv_tiles(int n_tiles, int& it, Ops& op) {
  mbarrier_wait_parity(op.k_full(it % S), (it / S) & 1);
  op.take_turn();
  op.issue_qk(it % S);
  op.pass_turn();
  wgmma_wait<0>();
  op.s_landed();
  op.release_k(it % S);
  op.weights(0);  // O is still zero: no rescale
  op.pack();
  for (int i = 1; i < n_tiles; ++i) {
    const int prev = it % S;
    ++it;
    const int stage = it % S;
    mbarrier_wait_parity(op.k_full(stage), (it / S) & 1);
    mbarrier_wait_parity(op.pv_full(prev), ((it - 1) / S) & 1);
    if constexpr (kSerialGemms) {
      // P_{i-1} V_{i-1} completes before S_i is issued: at most O + P or S are in flight at
      // once, not O + P + S.
      op.take_turn();
      op.issue_pv(prev);
      wgmma_wait<0>();
      op.o_landed();
      op.release_v(prev);
      op.issue_qk(stage);
      op.pass_turn();
      wgmma_wait<0>();
      op.s_landed();
      op.release_k(stage);
      op.weights(i);
    } else {
      op.take_turn();
      op.issue_qk(stage);
      op.issue_pv(prev);
      op.pass_turn();
      wgmma_wait<1>();  // S_i has landed; P_{i-1} V_{i-1} may still run
      op.s_landed();
      op.release_k(stage);
      op.weights(i);
      op.pin();
      wgmma_wait<0>();
      op.o_landed();
      op.release_v(prev);
    }
    op.rescale();
    op.pack();
  }
  const int last = it % S;
  mbarrier_wait_parity(op.pv_full(last), (it / S) & 1);
  op.take_turn();
  op.issue_pv(last);
  op.pass_turn();
  wgmma_wait<0>();
  op.o_landed();
  op.release_v(last);
  ++it;
}

}  // namespace tessera::cuda::sm90
