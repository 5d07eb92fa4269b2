// Tile shapes and shared-memory layout of the sm90 backward (docs/perf/backward_sm90_plan.md:
// stage 2, a simple correct wgmma kernel without warp specialisation; stage 6 adds head_dim 64
// and 256).
//
// A CTA = (KV tile of Bc rows, kv head x group split, batch), walking query tiles of Br rows, as
// in the sm80 backward, so that the sm80 host code (grid, GQA split, workspace, pre/post
// kernels) serves both; the host sizes the grid and the deterministic counters from these tiles
// (sm90::backward_shape). 256 threads = two warpgroups in every instance. Two layouts:
//
// * head_dim 64 and 128 (kSplitN false): warpgroup c owns KV rows [64 c, 64 c + 64) of the
//   Bc = 128 tile, the M dimension of every GEMM whose result it keeps (S^T, dP^T, dK, dV over
//   all head_dim columns). P^T and dS^T stay in registers (the A of the RS GEMMs dV += P^T dO,
//   dK += dS^T Q); dS goes to shared memory for dQ = dS K. d128: Br = 64, dQ split by head-dim
//   columns (warpgroup c: columns [64 c, 64 c + 64)). d64: Br = 128 (twice the sm80 kernel's 64,
//   so that S^T is 64 x 128 per warpgroup, as many FLOPs per step as at d128), dQ split by query
//   rows (warpgroup c: rows [64 c, 64 c + 64), all 64 columns).
// * head_dim 256 (kSplitN true): Bc = Br = 64 (the sm80 kernel's tiles). dK and dV for 64 KV
//   rows x 256 columns would need 256 fp32 registers per thread, so warpgroup c keeps dK, dV for
//   all 64 KV rows x head-dim columns [128 c, 128 c + 128) (2 x 64 registers), and computes
//   S^T, dP^T for all 64 KV rows x query columns [32 c, 32 c + 32) (wgmma N = 32, K = 256).
//   P^T and dS^T are exchanged through shared memory ([Bc][Br], K-major A of dV / dK, both SS),
//   dS as for the others; dQ split by head-dim columns (warpgroup c: [128 c, 128 c + 128)).
//
// Every 16-bit tile is stored as TMA with SWIZZLE_128B would write it (the layout the wgmma
// descriptors of wgmma.cuh describe): 128-byte panels of 64 columns, row r of a panel at
// r * 128, its 16-byte chunk c at chunk c ^ (r % 8), every panel 1024-byte aligned. The tiles are
// filled with cp.async (zero-filled rows past a sequence's end, any 16-byte strides, ragged
// batches as they are); TMA comes with the producer warpgroup of stage 3.
//
// Bytes (+ 1 KB: the dynamic base is rounded up to 1024):
//   d128: K 32 K | V 32 K | 2 stages x (Q 16 K | dO 16 K | dS 16 K) | 2 x LSE2 256 | 2 x D 256
//         = 161 KB + 1 KB
//   d64:  K 16 K | V 16 K | 2 stages x (Q 16 K | dO 16 K | dS 32 K) | 2 x LSE2 512 | 2 x D 512
//         = 162 KB + 1 KB
//   d256: K 32 K | V 32 K | 2 stages x (Q 32 K | dO 32 K) | P^T 8 K | dS^T 8 K | dS 8 K |
//         2 x LSE2 256 | 2 x D 256 = 217 KB + 1 KB
// dS is [Br query rows][Bc keys] (K-major A of dQ = dS K). Without kSplitN it is double-buffered
// with the stage (one barrier per step: the dQ GEMM of step i may still read it while the other
// warpgroup starts step i + 1). With kSplitN the dV / dK / dQ GEMMs of step i read Q, dO, P^T,
// dS^T and dS after the barrier that publishes P^T / dS^T / dS, so a second barrier ends the step
// and the P^T / dS^T / dS buffers are single (no room for two at 256 columns).
#pragma once

namespace tessera::cuda::sm90 {

template <int kHeadDim_>
struct BwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim 64, 128 or 256");
  static constexpr bool kSplitN = kHeadDim == 256;
  static constexpr int Bc = kSplitN ? 64 : 128;
  static constexpr int Br = kHeadDim == 64 ? 128 : 64;
  static constexpr int kStages = 2;
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;

  // Per warpgroup: KV rows (M of S^T, dP^T, dK, dV; always one m64), the query columns of its
  // S^T / dP^T (their N; the K of the dV / dK GEMMs when those are RS), dK / dV columns.
  static constexpr int kRowsWg = 64;
  static constexpr int kSN = kSplitN ? Br / 2 : Br;
  static constexpr int kDN = kSplitN ? kHeadDim / 2 : kHeadDim;
  // dQ per warpgroup: 64 query rows x kDqN columns (Br * D / 2 values).
  static constexpr bool kDqSplitRows = Br == 128;
  static constexpr int kDqN = kHeadDim * Br / 128;
  static_assert(Bc == (kSplitN ? 64 : 64 * kWarpgroups), "warpgroups own KV rows, or share them (kSplitN)");
  static_assert(kSN % 16 == 0 && kSN >= 32 && kDN % 64 == 0 && (kDqN == 64 || kDqN == 128), "wgmma shapes");

  static constexpr int kPanels = kHeadDim / 64;   // 128-byte column panels of Q, dO, K, V
  static constexpr int kKVPanelBytes = Bc * 128;
  static constexpr int kQPanelBytes = Br * 128;
  static constexpr int kDSPanelBytes = Br * 128;  // dS: Bc / 64 panels of 64 keys
  static constexpr int kPTPanelBytes = Bc * 128;  // P^T, dS^T (kSplitN): Br / 64 panels of 64 queries
  static constexpr int kKVBytes = kPanels * kKVPanelBytes;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kDSBytes = (Bc / 64) * kDSPanelBytes;
  static constexpr int kPTBytes = (Br / 64) * kPTPanelBytes;

  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kStageBytes = 2 * kQBytes + (kSplitN ? 0 : kDSBytes);  // [Q | dO | dS?] per stage
  static constexpr int kOffQ = kOffV + kKVBytes;                              // + st * kStageBytes
  static constexpr int kOffDO = kOffQ + kQBytes;                              // + st * kStageBytes
  // dS: in the stage (+ st * kStageBytes) without kSplitN; one buffer after the stages with it.
  static constexpr int kOffDS = kSplitN ? kOffQ + kStages * kStageBytes : kOffDO + kQBytes;
  static constexpr int kOffPT = kOffQ + kStages * kStageBytes + (kSplitN ? kDSBytes : 0);  // kSplitN only
  static constexpr int kOffDST = kOffPT + (kSplitN ? kPTBytes : 0);                         // kSplitN only
  static constexpr int kOffLse = kOffDST + (kSplitN ? kPTBytes : 0);  // kStages x Br floats
  static constexpr int kOffDel = kOffLse + kStages * Br * 4;
  static constexpr int kSmemUsed = kOffDel + kStages * Br * 4;
  static constexpr int kSmemBytes = kSmemUsed + 1024;  // + rounding the base up to 1024
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM must fit");
  static_assert(kOffQ % 1024 == 0 && kStageBytes % 1024 == 0 && kQBytes % 1024 == 0 && kOffDS % 1024 == 0 &&
                    kOffPT % 1024 == 0 && kOffDST % 1024 == 0 && kOffLse % 1024 == 0,
                "swizzled tiles are 1024-byte aligned");
};

}  // namespace tessera::cuda::sm90
