// Tile shapes of the sm80 backward instances (plain C++: the host sizes grids and
// workspaces from the same constants the kernels use).
#pragma once

namespace tessera::cuda::sm80::bwd {

// V: the layout variant. 0 is the default; 1, 2 are "compact" layouts for devices whose opt-in
// shared memory per block is below the default's need (backward_variant in backward_entry.cu
// picks the first that fits; TESSERA_CUDA_BACKWARD=portable-compact / portable-compact2 force
// them for tests). Only head_dim 128 has any (docs/perf/backward_sm80.md, "Shared memory on
// Ampere and Ada").
template <int D, int V = 0>
struct Cfg;
// MR: m16 atoms of KV rows per warp (16 * MR rows); MQ: m16 atoms of query rows per warp in
// the dQ GEMM. A B fragment loaded once feeds MR (MQ) HMMAs, which is what cuts shared traffic.
// head_dim 64: Bc = 128 (8 warps x 16 KV rows), Br = 64, Q/dO double-buffered.
// dK+dV accumulators: 2 * 16 * D / 32 = D regs/thread; S^T and dP^T: 32 each.
template <>
struct Cfg<64, 0> {
  static constexpr int Bc = 128, Br = 64, WQ = 1, Stages = 2, MR = 1, MQ = 1;
};
// head_dim 128, FA2-style warp layout: 4 KV groups of 32 rows x 2 halves (WQ = 2). Each warp
// computes S^T/dP^T for 32 KV x 32 query columns and keeps dK/dV for 32 KV rows x 64 head_dim
// columns (the same 128 accumulators as 16 x 128); P^T/dS^T reach the pair's dV/dK GEMMs through
// smem (pair barrier, as at head_dim 256). dQ: 2 x 4 warps of 32 query rows x 32 columns.
// Per step ldmatrix bytes 736 -> 576 KB (see docs/perf/backward_sm80.md).
template <>
struct Cfg<128, 0> {
  static constexpr int Bc = 128, Br = 64, WQ = 2, Stages = 2, MR = 2, MQ = 2;
};
// head_dim 128, compact 1 (A100/A30: 163 KB opt-in; the default needs 177 KB): the same warp
// layout with single-buffered Q/dO/dS^T (128.5 KB). The schedule is head_dim 256's: a CTA
// barrier at the top of each step (step i+1's tiles, loaded during dQ(i), are published; and
// no warp writes dS^T(i+1) before every warp has finished reading dS^T(i) in dQ(i)).
template <>
struct Cfg<128, 1> {
  static constexpr int Bc = 128, Br = 64, WQ = 2, Stages = 1, MR = 2, MQ = 2;
};
// head_dim 128, compact 2 (sm_86/sm_89: 99 KB opt-in): head_dim 256's layout (two warps share
// 16 KV rows, each half of head_dim) on a 64-row KV tile, single-buffered (80.5 KB). FA2 makes
// the same choice for these parts (kBlockN 64 at head_dim 128).
template <>
struct Cfg<128, 2> {
  static constexpr int Bc = 64, Br = 64, WQ = 2, Stages = 1, MR = 1, MQ = 1;
};
// head_dim 256: dK+dV for 16 x 256 would need 256 regs, so two warps share 16 KV rows,
// each keeping half of head_dim; P^T/dS^T are exchanged through smem. Single-buffered Q/dO
// keeps smem at 144 KB (fits A100's 163 KB).
template <>
struct Cfg<256, 0> {
  static constexpr int Bc = 64, Br = 64, WQ = 2, Stages = 1, MR = 1, MQ = 1;
};

template <int D, int V = 0>
struct Layout {
  using C = Cfg<D, V>;
  static constexpr int Bc = C::Bc, Br = C::Br, WQ = C::WQ, Stages = C::Stages, MR = C::MR, MQ = C::MQ;
  static constexpr int kRowsW = 16 * MR;  // KV rows per warp
  static constexpr int kWarpsKV = Bc / kRowsW;
  static constexpr int kWarps = kWarpsKV * WQ;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kQCols = Br / WQ;  // S^T columns per warp
  static constexpr int kDCols = D / WQ;   // dK/dV columns per warp
  static constexpr int kDqWarpsM = Br / (16 * MQ);
  static constexpr int kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqCols = D / kDqWarpsN;  // dQ columns per warp
  // dq_accum column order: pair-interleaved within each 16-column group (column 16 G + 8 h + 2 k
  // + e at 16 G + 4 k + 2 h + e, so a thread's four values are one 16-byte RED) in head_dim 128
  // layout 0; in order elsewhere (the compact layout 1 spilled 4 B bf16 on sm_90 with it). The
  // post kernel learns it from BwdShape::dq_pairs.
  static constexpr bool kDqPairs = MR > 1 && Stages == 2 && kDqCols % 16 == 0;
  // Byte offsets of the shared regions.
  static constexpr int kTileKV = Bc * D * 2;
  static constexpr int kTileQ = Br * D * 2;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kTileKV;
  static constexpr int kTileDS = Bc * Br * 2;
  // One block per stage: [Q | dO | dS^T]. dS^T is double-buffered with Stages = 2 so the dQ
  // GEMM of step i can overlap the next step without a second barrier; keeping it in the
  // stage block makes every stage-dependent address one register plus an immediate.
  static constexpr int kStage = 2 * kTileQ + kTileDS;
  static constexpr int kOffQ = kOffV + kTileKV;                // + st * kStage
  static constexpr int kOffDO = kOffQ + kTileQ;                // + st * kStage
  static constexpr int kOffDS = kOffDO + kTileQ;               // + st * kStage, [Bc][Br]
  // CTAs per SM the register budget is sized for on sm_90 (see kMinBlocks below).
  static constexpr int kMinBlocksSm90 = D == 64 ? 2 : 1;
  // With WQ = 1 each thread reads back only its own P^T values, at the very offsets where it
  // then stores its dS^T: at head_dim 64 P^T lives in this step's dS^T buffer (no other warp
  // touches that buffer between B(i-1) and B(i)), saving 16 KB so two CTAs fit with margin.
  static constexpr bool kPTInDS = WQ == 1 && Stages == 2 && kMinBlocksSm90 > 1;
  static constexpr int kOffPT = kOffQ + Stages * kStage;       // [Bc][Br] (unused if kPTInDS)
  static constexpr int kOffLse = kOffPT + (kPTInDS ? 0 : Bc * Br * 2);  // Stages x Br floats
  static constexpr int kOffDel = kOffLse + Stages * Br * 4;
  static constexpr int kSmem = kOffDel + Stages * Br * 4;
  // CTAs per SM the register budget is sized for (the kernel picks per arch): on sm_90 head_dim
  // 64 runs two (kMinBlocksSm90; <= 128 registers per thread, 2 x (97 KB + 1 KB reserved) of the
  // 228 KB an H100/H200 SM has), so one CTA's barriers, elementwise steps and dQ REDs hide
  // behind the other's GEMMs. sm_80 keeps 1 (255 registers, no spills).
  static constexpr int kMinBlocks = 1;

  static_assert(kWarps == 8, "the dQ step assumes 8 warps");
  static_assert(kQCols % 16 == 0 && kDCols % 16 == 0 && kDqCols % 16 == 0, "fragment pairs");
  static_assert(D / 8 >= 8 && Br / 8 >= 8, "the swizzle needs rows of >= 8 chunks");
};

// Layout variants compiled per head dim (0 .. count - 1, ever smaller shared memory).
constexpr int variant_count(int D) { return D == 128 ? 3 : 1; }

}  // namespace tessera::cuda::sm80::bwd
