// Tile shapes and shared-memory layout of the sm90 backward, stage 2 of
// docs/perf/backward_sm90_plan.md (a simple correct wgmma kernel; no warp specialisation).
//
// A CTA = (KV tile of Bc = 128 rows, kv head x group split, batch), as in the sm80 backward,
// so that the sm80 host code (grid, GQA split, workspace, pre/post kernels) serves both.
// 256 threads = two warpgroups, warpgroup c owning KV rows [64 c, 64 c + 64) of the tile
// (the M dimension of every GEMM whose result it keeps: S^T, dP^T, dK, dV); the dQ GEMM is
// split by head-dim columns instead (warpgroup c: columns [64 c, 64 c + 64)).
//
// Every 16-bit tile is stored as TMA with SWIZZLE_128B would write it (the layout the wgmma
// descriptors of wgmma.cuh describe): 128-byte panels of 64 columns, row r of a panel at
// r * 128, its 16-byte chunk c at chunk c ^ (r % 8), every panel 1024-byte aligned. Stage 2
// fills them with cp.async (zero-filled rows past a sequence's end, any 16-byte strides,
// ragged batches as they are); TMA comes with the producer warpgroup of stage 3.
//
// head_dim 128 (the only instance of stage 2), bytes:
//   K 32 K | V 32 K | 2 stages x (Q 16 K | dO 16 K | dS 16 K) | 2 x LSE2 256 | 2 x D 256
//   = 161 KB + 1 KB (the dynamic base is rounded up to 1024)
// dS is [Br query rows][Bc keys] (K-major A of dQ = dS K), double-buffered with the stage so
// that the dQ GEMM of step i may still read it while the other warpgroup starts step i + 1.
#pragma once

namespace tessera::cuda::sm90 {

template <int kHeadDim_>
struct BwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int Bc = 128, Br = 64;  // must match sm80::bwd::Cfg (the host sizes grids from it)
  static constexpr int kStages = 2;
  static constexpr int kWarpgroups = Bc / 64;
  static constexpr int kThreads = 128 * kWarpgroups;
  static_assert(kHeadDim == 128, "stage 2: head_dim 128 only (d64 / d256 tilings are stage 6)");
  static_assert(kHeadDim / 64 == kWarpgroups, "the dQ GEMM gives each warpgroup one 64-column panel");

  static constexpr int kPanels = kHeadDim / 64;   // 128-byte column panels of Q, dO, K, V
  static constexpr int kKVPanelBytes = Bc * 128;  // 16 KB
  static constexpr int kQPanelBytes = Br * 128;   // 8 KB
  static constexpr int kDSPanelBytes = Br * 128;  // dS: Bc / 64 panels of 64 keys
  static constexpr int kKVBytes = kPanels * kKVPanelBytes;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kDSBytes = (Bc / 64) * kDSPanelBytes;

  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kStageBytes = 2 * kQBytes + kDSBytes;  // [Q | dO | dS] per stage
  static constexpr int kOffQ = kOffV + kKVBytes;              // + st * kStageBytes
  static constexpr int kOffDO = kOffQ + kQBytes;              // + st * kStageBytes
  static constexpr int kOffDS = kOffDO + kQBytes;             // + st * kStageBytes
  static constexpr int kOffLse = kOffQ + kStages * kStageBytes;  // kStages x Br floats
  static constexpr int kOffDel = kOffLse + kStages * Br * 4;
  static constexpr int kSmemUsed = kOffDel + kStages * Br * 4;
  static constexpr int kSmemBytes = kSmemUsed + 1024;  // + rounding the base up to 1024
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM must fit");
  static_assert(kOffQ % 1024 == 0 && kStageBytes % 1024 == 0 && kQBytes % 1024 == 0 && kOffDS % 1024 == 0,
                "swizzled tiles are 1024-byte aligned");
};

}  // namespace tessera::cuda::sm90
