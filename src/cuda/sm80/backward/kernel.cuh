// The sm80 backward main kernel (mma.sync m16n8k16, ldmatrix, cp.async).
//
// CTA = (KV tile j of Bc rows, kv head + group split, batch); 8 warps. Warp w owns KV rows
// 16 MR (w % kWarpsKV) .. +16 MR (MR m16 atoms: 2 at head_dim 128, else 1) and, when WQ = 2
// (head_dim 128, 256), half of the query columns of S^T and half of the head_dim columns of
// dK/dV. Per query tile (Br rows) and query head:
//   S^T  = K_j Q_i^T                (A = K from smem, B = Q from smem)
//   P^T  = exp2(S^T * scale*log2e - lse2)   masked -> 0
//   dV  += P^T dO_i                 (A = P^T from registers, or smem when WQ = 2)
//   dP^T = V_j dO_i^T
//   dS^T = P^T * (dP^T - D)  (* (1 - tanh^2) with softcap)   -> smem as bf16/fp16
//   dK  += dS^T Q_i
//   dQ_i += dS K_j                  (all 8 warps, 4 x 2 over (Br, head_dim); 2 x 4 of 32 x 32 at
//                                    head_dim 128) -> fp32 atomics
// Computing S^T rather than S keeps a warp's KV rows in the M dimension of every GEMM whose
// result it keeps (dK, dV), so P^T and dS^T feed those GEMMs straight from registers (WQ = 1),
// or from smem after a barrier of the two warps sharing the KV rows (WQ = 2).
// scripts/emulate_bwd_sm80.py replays the head_dim 128 index arithmetic on the host.
//
// Shared tiles are row-major, 16-byte chunks XOR-swizzled by (row & 7): every ldmatrix
// phase and every 4-byte fragment store touches 8 distinct chunks, hence no bank conflicts.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/recompute_p.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/mma.cuh"
#include "cuda/primitives/sm80/red.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "cuda/primitives/sm90/named_barrier.cuh"
#include "cuda/sm80/backward/backward.h"
#include "cuda/backward/cta_work.cuh"
#include "cuda/backward/dq_turn.cuh"
#include "cuda/sm80/backward/tiles.h"
#include "cuda/sm80/backward/warp_gemms.cuh"
#include "math/mask.h"

namespace tessera::cuda::sm80::bwd {

// CTAs per SM the registers are budgeted for, per target arch (see Layout::kMinBlocksSm90).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TESSERA_BWD_MIN_BLOCKS(D, V) (Layout<D, V>::kMinBlocksSm90)
#else
#define TESSERA_BWD_MIN_BLOCKS(D, V) (Layout<D, V>::kMinBlocks)
#endif

// V: the layout variant (tiles.h Cfg<D, V>). kTileMajor: the CTA order (cta_work.cuh; the grid's
// x and y swapped), instantiated only where the host uses it (backward.h,
// launch_backward_main_tile_major).
template <typename T, int D, int V, bool kTileMajor = false>
__global__ void __launch_bounds__(Layout<D, V>::kThreads, TESSERA_BWD_MIN_BLOCKS(D, V))
    backward_main_kernel(const BwdArgs p) {
  using L = Layout<D, V>;
  constexpr int Bc = L::Bc, Br = L::Br, WQ = L::WQ, Stages = L::Stages, MR = L::MR;
  constexpr int kThreads = L::kThreads, kQCols = L::kQCols, kDCols = L::kDCols;
  constexpr bool kBf16 = Traits<T>::is_bf16;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // sm_80 builds of head_dim 128 (255 registers, one CTA per SM) take two register-allocation
  // measures of their own (see `fo` and `front` below); sm_90 builds compile without them.
  constexpr bool kSm80D128 = MR > 1;
#else
  constexpr bool kSm80D128 = false;
#endif
  // head_dim 128's compact layout 1 (Stages = 1, what A100/A30 run) takes both on sm_90 too:
  // there ptxas spilled 8 B (f16) without them, 12 B (f16) with `fo` opaque alone, 8 B (bf16)
  // with the early P^T stores alone; and the forced Hopper test then runs the code A100 runs.
  // False for every default layout (their Stages = 2 or MR = 1).
  constexpr bool kRegMeasures = kSm80D128 || (MR > 1 && Stages == 1);

  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t s_base = smem_u32(smem);
  const std::uint32_t sK = s_base + L::kOffK, sV = s_base + L::kOffV;
  const std::uint32_t sPT = s_base + L::kOffPT;
  const float* sLse = reinterpret_cast<const float*>(smem + L::kOffLse);
  const float* sDel = reinterpret_cast<const float*>(smem + L::kOffDel);

  if ((s_base & 127u) != 0) __trap();  // the swizzle arithmetic needs 128-byte aligned tiles
  // The backward's tail pieces (backward_entry.cu) are launched as this grid's programmatic
  // dependents: once every CTA here has started, theirs may take the SMs this grid's CTAs
  // leave. A no-op for a launch without dependents (and before sm_90).
  sm90::griddepcontrol_launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int kvg = warp % L::kWarpsKV, qg = warp / L::kWarpsKV;

  const int j_tile = backward::cta_kv_tile<kTileMajor>();
  const int hkv = backward::cta_head_split<kTileMajor>() / p.n_splits,
            split = backward::cta_head_split<kTileMajor>() % p.n_splits;
  const int b = blockIdx.z;

  // The CTA's sequence bounds and query tiles (cta_work.cuh, shared with the sm90 kernel).
  backward::CtaWork<Br> w;
  if (!backward::cta_work<Bc, Br, kTileMajor>(p, w)) return;  // CTA-uniform: this tile lies past the sequence (ragged bound)
  const int q_len = w.q_len, k_len = w.k_len;
  const std::int64_t q_row0 = w.q_row0, k_row0 = w.k_row0, q_gr0 = w.q_gr0, k_gr0 = w.k_gr0;
  const int kv0 = w.kv0, kv1 = w.kv1;
  const math::MaskSpec mask = w.mask;
  const int it0 = w.it0, n_tiles = w.n_tiles, n_items = w.n_items, h0 = w.h0;
  auto tile_keys = [&](int it) { return w.tile_keys(it); };

  const T* qg_ptr = static_cast<const T*>(p.q);
  const T* kg_ptr = static_cast<const T*>(p.k);
  const T* vg_ptr = static_cast<const T*>(p.v);
  const T* dog_ptr = static_cast<const T*>(p.dout);

  // Work items run head-major: item = (h - h0) n_tiles + (it - it0). Their coordinates are
  // carried through the loop (cur_h, cur_it: the current item's) and stepped, where the
  // division by n_tiles cost nvcc's reciprocal chain (I2F, MUFU.RCP, F2I and ~25 more
  // instructions) at the top of every step. by = 0, 1 or 2 items ahead (a step's prefetch): at
  // most `by` wraps, since n_tiles >= 1.
  //
  // Where the skew (below) runs: head_dim 128's two-stage layouts in sm_90 builds, what the
  // H200 runs. Every other instance keeps the division: head_dim 64 (two CTAs an SM at 128
  // registers) spilled 72 B with the carried form (26 B without), the compact layout 1 spilled
  // 8 B; head_dim 256 and the sm_80 builds were not tried.
  constexpr bool kCarryCoords = MR > 1 && Stages == 2 && !kSm80D128;
  // The prefetch's stepped row pointers (load_tile) pay off and fit in the same instances.
  constexpr bool kStepRows = kCarryCoords;
  int cur_h = h0, cur_it = it0;
  auto coords_ahead = [&](int item, int by, int& h, int& it) {  // item + by's coordinates
    if constexpr (kCarryCoords) {
      h = cur_h;
      it = cur_it + by;
#pragma unroll
      for (int wrap = 0; wrap < 2; ++wrap)  // by <= 2
        if (wrap < by && it >= it0 + n_tiles) {
          it -= n_tiles;
          ++h;
        }
    } else {
      h = h0 + (item + by) / n_tiles;
      it = it0 + (item + by) % n_tiles;
    }
  };
  // Issues the loads of work item (query head h, query tile it) into stage `st`.
  auto load_item = [&](int h, int it, int st) {
    const int q0 = it * Br;
    const int valid = q_len - q0;
    const std::int64_t qoff = b * p.q_batch + (q_row0 + q0) * p.q_row + h * p.q_head;
    const std::int64_t dooff = b * p.do_batch + (q_row0 + q0) * p.do_row + h * p.do_head;
    load_tile<Br, D, kThreads, kStepRows>(s_base + L::kOffQ + st * L::kStage, qg_ptr, qoff, p.q_row, valid, tid);
    load_tile<Br, D, kThreads, kStepRows>(s_base + L::kOffDO + st * L::kStage, dog_ptr, dooff, p.do_row, valid, tid);
    if (tid < 2 * Br) {
      const int r = tid % Br;
      const bool ok = r < valid;
      const std::int64_t idx = static_cast<std::int64_t>(h) * p.total_q + q_gr0 + q0 + r;
      const float* src = tid < Br ? p.lse2 : p.dsum;
      const std::uint32_t dst = s_base + (tid < Br ? L::kOffLse : L::kOffDel) + (st * Br + r) * 4;
      cp_async_4_zfill(dst, ok ? src + idx : src, ok);
    }
  };

  // Accumulator index m * kDCols / 8 + n: m16 atom m (KV rows kv_row_w + 16 m ..), n8 tile n.
  float dv_acc[MR * kDCols / 8][4], dk_acc[MR * kDCols / 8][4];
#pragma unroll
  for (int n = 0; n < MR * kDCols / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv_acc[n][e] = dk_acc[n][e] = 0.0f;

  const int kv_row_w = L::kRowsW * kvg;    // this warp's first KV row in the tile
  const int q_col_w = qg * kQCols;         // this warp's first S^T column
  const int d_col_w = qg * kDCols;         // this warp's first dK/dV column
  // Fragment stores into the [Bc][Br] tiles: element (row kv_row_w + g, chunk q_col_w/8 + n,
  // byte 4 t4) sits at frag_off ^ (n << 4) (rows are 128 B, the chunk field is bits 4..6, and
  // q_col_w / 8 + n never carries), so one register serves every n.
  static_assert(Br * 2 == 128, "fragment offsets assume 128-byte rows of the [Bc][Br] tiles");
  const int frag_off = (kv_row_w + g) * (Br * 2) + 4 * t4 + (((q_col_w / 8) ^ g) << 4);
  const bool softcap_on = p.softcap > 0.0f;
  // Softcap constants come from the kernel parameters where they are used (general paths
  // only), rather than holding three registers through the loop.

  if (n_items > 0) {
    const std::int64_t koff = b * p.k_batch + (k_row0 + kv0) * p.k_row + hkv * p.k_head;
    const std::int64_t voff = b * p.v_batch + (k_row0 + kv0) * p.v_row + hkv * p.v_head;
    load_tile<Bc, D, kThreads>(sK, kg_ptr, koff, p.k_row, kv1 - kv0, tid);
    load_tile<Bc, D, kThreads>(sV, vg_ptr, voff, p.v_row, kv1 - kv0, tid);
    load_item(cur_h, cur_it, 0);
    cp_async_commit();
    if (Stages == 2 && n_items > 1) {
      int h_next, it_next;
      coords_ahead(0, 1, h_next, it_next);
      load_item(h_next, it_next, 1);
      cp_async_commit();
    }
  }

  // Skewed schedule at head_dim 128 (MR > 1, two stages; docs/perf/backward_sm80.md, "Ninth
  // session"): the two warps of a scheduler, w and w + 4, sit in lockstep (pair barriers, B(i)),
  // so the ~1.5 k cycles per step in which neither issues an HMMA (step i+2's address arithmetic,
  // the 16 dQ reductions and their drain, the loop top) left the tensor pipe idle. With the skew,
  // qg = 1 defers its dQ GEMM and reductions to after its next front(), so each scheduler runs
  // one warp's tail under the other's HMMAs. Not in the deterministic mode: its lock barriers
  // (bar.sync 0 inside dq_phase) must be one instruction for all warps, so it keeps the order.
  // sm_90 builds only: the sm_80 build spilled 8 B (bf16) with it, 16-24 B with the barrier-id
  // measure below; and no compute-capability-8.x device runs this layout (A100/A30 take the
  // compact layout 1, sm_86/89 layout 2: backward_variant), so sm_80 keeps the unskewed order.
  constexpr bool kSkew = kCarryCoords;  // its previous item's coordinates are the carried ones
  constexpr bool kDqPairs = L::kDqPairs;  // dq_accum column order (tiles.h)
  const bool defer_dq = kSkew && qg == 1 && p.locks == nullptr;

  for (int item = 0; item < n_items; ++item) {
    const int st = Stages == 2 ? (item & 1) : 0;
    int h, it;
    coords_ahead(item, 0, h, it);
    const int q0 = it * Br;
    if constexpr (Stages == 2) {
      // One barrier per step: step i+1's tiles are waited for and published by barrier B(i)
      // below (before the dQ GEMM); only step 0 needs one here.
      if (item == 0) {
        if (n_items > 1) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncthreads();
      }
    } else {
      cp_async_wait<0>();
      __syncthreads();
    }

    const std::uint32_t sQ = s_base + L::kOffQ + st * L::kStage;
    const std::uint32_t sDO = s_base + L::kOffDO + st * L::kStage;
    const float* lse_t = sLse + st * Br;
    const float* del_t = sDel + st * Br;
    const int ds_off = L::kOffDS + st * L::kStage;  // this step's dS^T buffer
    // At 128 registers (two CTAs per SM) ptxas hoisted the eight frag_off ^ (n << 4) out of
    // the loop and spilled them (8 LDL per use site per step); hiding frag_off's value per step
    // makes each a single LOP3 next to its store instead.
    const int pt_off = L::kPTInDS ? ds_off : L::kOffPT;  // P^T: own buffer, or this step's dS^T
    int fo = frag_off;
    // sm_80 head_dim 128 too: without it (and without the early P^T stores of the general copy
    // in `front`) ptxas spilled 8 / 12 B (bf16 / f16) of loop constants, reloaded after the
    // pair barrier.
    if constexpr (L::kMinBlocksSm90 > 1 || kRegMeasures) asm volatile("" : "+r"(fo));
    // Accumulator fragment i (atom m = i / (kQCols / 8), column block n) of a [Bc][Br] tile as
    // two 16-bit pairs at smem offset `buf`: atom m sits 16 m rows lower, same swizzle key.
    const auto store_frag = [&](int buf, int i, std::uint32_t lo, std::uint32_t hi) {
      const int m = i / (kQCols / 8), n = i % (kQCols / 8);
      const int off = (fo ^ (n << 4)) + m * 16 * (Br * 2);
      *reinterpret_cast<std::uint32_t*>(smem + buf + off) = lo;
      *reinterpret_cast<std::uint32_t*>(smem + buf + off + 8 * Br * 2) = hi;
    };
    // Element masking only where the tile is not wholly visible or hangs over k_len.
    const bool need_mask = kv1 < kv0 + Bc || !math::tile_fully_visible(mask, q0, min(q0 + Br, q_len), kv0, kv1);

    // ---- dQ_i += dS K_j for one work item (query head h_d, tile it_d, its dS^T at ds_off_d):
    // warps tile (Br, D) as 4 x 2 (2 x 4 of 32 x 32 at head_dim 128), then fp32 reductions into
    // dq_accum. `after_gemm` runs between the GEMM and the reductions (head_dim 128: the
    // prefetch); det_tag false leaves the deterministic path out (the skewed call site).
    auto dq_phase = [&](const int h_d, const int it_d, const int ds_off_d, auto&& after_gemm, auto det_tag) {
      constexpr bool kDet = decltype(det_tag)::value;
      const int q0_d = it_d * Br;
      constexpr int kN = L::kDqCols, MQ = L::MQ;
      const int wm = warp % L::kDqWarpsM, wn = warp / L::kDqWarpsM;
      float dq[MQ * kN / 8][4];  // index mq * kN / 8 + n: query rows 16 (MQ wm + mq) ..
#pragma unroll
      for (int n = 0; n < MQ * kN / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
      const int mi = lane >> 3;
      // A = dS (m = query, k = KV) read transposed from dS^T; t * 16 rows keep (row & 7).
      // Atom mq is chunk 2 (MQ wm + mq) + (mi & 1); 2 mq never overlaps 2 MQ wm + (mi & 1)
      // (MQ is 1 or 2), so it is one XOR with an immediate (chunk_at).
      static_assert(MQ == 1 || MQ == 2, "chunk bits of the dS^T A fragments");
      const std::uint32_t a_addr = s_base + ds_off_d + swz<Br>((lane & 7) + (mi >> 1) * 8, 2 * MQ * wm + (mi & 1));
      // Chunk = cb + 2 np + lane bit with cb = wn * kN / 8; cb & 7 is 0, or 4 with np < 2
      // (head_dim 64, 128), so its low bits join the key without carries.
      const int cb = wn * kN / 8;
      const std::uint32_t b_addr = sK + ((lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (cb & ~7) * 16 +
                                   ((((cb & 7) | (lane >> 4)) ^ (lane & 7)) << 4);
      static_assert((kN / 8) % 8 == 0 || ((kN / 8) % 4 == 0 && kN / 16 <= 2), "cb & 7 must not overlap 2 * np");
#pragma unroll
      for (int t = 0; t < Bc / 16; ++t) {
        std::uint32_t a[MQ][4];
#pragma unroll
        for (int mq = 0; mq < MQ; ++mq) ldmatrix_x4_trans(a[mq], chunk_at(a_addr + t * 16 * (Br * 2), 2 * mq));
#pragma unroll
        for (int np = 0; np < kN / 16; ++np) {
          std::uint32_t bb[4];
          ldmatrix_x4_trans(bb, chunk_at(b_addr + t * 16 * (D * 2), np * 2));
#pragma unroll
          for (int mq = 0; mq < MQ; ++mq) {
            mma_m16n8k16<kBf16>(dq[mq * (kN / 8) + 2 * np], a[mq], bb[0], bb[1]);
            mma_m16n8k16<kBf16>(dq[mq * (kN / 8) + 2 * np + 1], a[mq], bb[2], bb[3]);
          }
        }
      }

      after_gemm();

      int* lock = nullptr;
      if (kDet && p.locks != nullptr) {
        // Deterministic: add after exactly the KV tiles below this one that see tile `it`.
        lock = p.locks + static_cast<std::int64_t>(h_d) * p.lock_stride + q_gr0 / Br + b + it_d;
        backward::wait_for_dq_turn(lock, j_tile - tile_keys(it_d).begin / Bc, tid);
      }
      float* acc_base = p.dq_accum + (static_cast<std::int64_t>(h_d) * p.total_q + q_gr0 + q0_d) * D;
      // kDqPairs (head_dim 128 layout 0, every build; the post kernel learns it from BwdShape):
      // dq_accum's columns are pair-interleaved within each 16-column group: a thread's two n8 tiles 2 np, 2 np + 1 (columns 16 np + 2 t4 + {0, 1} and
      // 16 np + 8 + 2 t4 + {0, 1}) sit at 16 np + 4 t4 + {0, 1, 2, 3}, one 16-byte vector, so the
      // sm_90 common path issues 8 v4 reductions per warp instead of 16 v2 (same sectors, half
      // the requests); the post kernel reads the columns back in order.
#pragma unroll
      for (int mq = 0; mq < MQ; ++mq) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * (MQ * wm + mq) + g + 8 * hr;
        if (q0_d + r < q_len) {
          float* row = acc_base + static_cast<std::int64_t>(r) * D + wn * kN + (kDqPairs ? 4 : 2) * t4;
#pragma unroll
          for (int np = 0; np < kN / 16; ++np) {
            const int i0 = mq * (kN / 8) + 2 * np, i1 = i0 + 1;
            float* dst = row + np * 16;
            const int o1 = kDqPairs ? 2 : 8;  // tile i1's offset from tile i0's
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if ((WQ == 2 && MR == 1) || lock != nullptr) {  // head_dim 256: two paths spilled ~200 B
              atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[i0][2 * hr], dq[i0][2 * hr + 1]));
              atomicAdd(reinterpret_cast<float2*>(dst + o1), make_float2(dq[i1][2 * hr], dq[i1][2 * hr + 1]));
            } else {
              // Fire-and-forget reduction (RED): atomicAdd's ATOMG returns the old values and
              // the warp waits on that round trip at the next reuse of the registers.
              if constexpr (kDqPairs) {
                red_add_f32x4(dst, dq[i0][2 * hr], dq[i0][2 * hr + 1], dq[i1][2 * hr], dq[i1][2 * hr + 1]);
              } else {
                red_add_f32x2(dst, dq[i0][2 * hr], dq[i0][2 * hr + 1]);
                red_add_f32x2(dst + o1, dq[i1][2 * hr], dq[i1][2 * hr + 1]);
              }
            }
#else
            atomicAdd(dst, dq[i0][2 * hr]);
            atomicAdd(dst + 1, dq[i0][2 * hr + 1]);
            atomicAdd(dst + o1, dq[i1][2 * hr]);
            atomicAdd(dst + o1 + 1, dq[i1][2 * hr + 1]);
#endif
          }
        }
      }
      }
      if (lock != nullptr) {
        backward::pass_dq_turn(lock, tid);
      }
    };

    // ---- S^T and P^T (in place, fp32) ----
    float s_acc[MR * kQCols / 8][4];  // index m * kQCols / 8 + n
    gemm_xyT<kBf16, D, kQCols, MR>(s_acc, sK, kv_row_w, sQ, q_col_w, lane);
    // Two copies of the elementwise step, picked by a CTA-uniform branch: the common one (no
    // softcap, tile wholly visible) is straight-line code the scheduler can interleave; the
    // general one tests per element. Per visible element both compute the same expression.
    auto p_step = [&](auto general_tag) {
      constexpr bool kGeneral = decltype(general_tag)::value;
#pragma unroll
      for (int n = 0; n < kQCols / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = q_col_w + n * 8 + 2 * t4 + e;
          const float lse2 = lse_t[col];
#pragma unroll
          for (int m = 0; m < MR; ++m) {
            const int i = m * (kQCols / 8) + n;
            bool vis0 = true, vis1 = true;
            if (kGeneral && need_mask) {
              const math::KeyRange kr = math::visible_keys(mask, q0 + col);  // same for every m
              const int j0 = kv0 + kv_row_w + 16 * m + g, j1 = j0 + 8;
              vis0 = j0 >= kr.begin && j0 < kr.end;
              vis1 = j1 >= kr.begin && j1 < kr.end;
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const float x = s_acc[i][2 * hr + e];
              if constexpr (kGeneral) {
                const float v = score_log2(x, softcap_on, p.scale, p.scale_log2, p.softcap);
                s_acc[i][2 * hr + e] = recompute_p(v, lse2, hr == 0 ? vis0 : vis1);
              } else {
                s_acc[i][2 * hr + e] = recompute_p(x * p.scale_log2, lse2);
              }
            }
          }
        }
      }
    };
    if constexpr (MR > 1) {
      // head_dim 128 (FA2 layout): S^T -> P -> dP^T -> dS -> P^T, dS^T stores -> one pair barrier
      // -> dV, dK. The CTA-uniform branch covers the P step, the dP^T GEMM and the dS step, so in
      // each copy the P step's MUFU.EX2 share a basic block with the dP^T HMMAs (ptxas can
      // interleave them), and the fast copy has no softcap code. P stays packed in registers
      // (the 16-bit values the smem copy holds) for the dS step: no read-back, no P^T barrier.
      auto front = [&](auto general_tag) {
        constexpr bool kGeneral = decltype(general_tag)::value;
        p_step(general_tag);
        std::uint32_t pk[MR * kQCols / 8][2];  // P^T, 16-bit pairs: rows g (0) and g + 8 (1)
#pragma unroll
        for (int i = 0; i < MR * kQCols / 8; ++i) {
          pk[i][0] = Traits<T>::pack2(s_acc[i][0], s_acc[i][1]);
          pk[i][1] = Traits<T>::pack2(s_acc[i][2], s_acc[i][3]);
        }
        // P^T goes to smem after the dP^T GEMM (below), so no store sits between the P step and the
        // dP^T ldmatrix; except in the sm_80 general copy, which stores it here: the stores then
        // bound the P step before the GEMM (ptxas otherwise sank the predicated MUFU.EX2 into it,
        // keeping S^T and the masks live there), and the softcap term re-reads LSE from smem
        // (predicated, like the term) instead of keeping it in registers through the GEMM. With
        // `fo` opaque per step this leaves sm_80 head_dim 128 at 255 registers, no spill. The
        // compact layout 1 does the same on sm_90 too (kRegMeasures).
        constexpr bool kEarlyPT = kRegMeasures && kGeneral;
        const auto store_pt = [&] {
#pragma unroll
          for (int i = 0; i < MR * kQCols / 8; ++i) store_frag(pt_off, i, pk[i][0], pk[i][1]);
        };
        if constexpr (kEarlyPT) store_pt();
        float dp_acc[MR * kQCols / 8][4];
        // sm_80 builds keep the double-buffered form here; the plain loop spilled 24 / 20 B.
        gemm_xyT<kBf16, D, kQCols, MR>(dp_acc, sV, kv_row_w, sDO, q_col_w, lane);
#pragma unroll
        for (int i = 0; i < MR * kQCols / 8; ++i) {
          const int n = i % (kQCols / 8);
          const float2 pf[2] = {Traits<T>::unpack2(pk[i][0]), Traits<T>::unpack2(pk[i][1])};
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = q_col_w + n * 8 + 2 * t4 + e;
            const float del = del_t[col];
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const float pv = e == 0 ? pf[hr].x : pf[hr].y;
              float ds = pv * (dp_acc[i][2 * hr + e] - del);
              if (kGeneral && softcap_on && pv > 0.0f) {  // the fast copy runs only with softcap off
                ds *= softcap_dtanh(pv, lse_t[col], p.softcap);  // tanh recovered from P
              }
              dp_acc[i][2 * hr + e] = ds;
            }
          }
        }
        // P^T (unless stored above) and dS^T to smem ([Bc][Br]) after the dP^T GEMM. Atom m is 16 m
        // rows lower: same swizzle key.
#pragma unroll
        for (int i = 0; i < MR * kQCols / 8; ++i) {
          if constexpr (!kEarlyPT) store_frag(pt_off, i, pk[i][0], pk[i][1]);
          store_frag(ds_off, i, Traits<T>::pack2(dp_acc[i][0], dp_acc[i][1]), Traits<T>::pack2(dp_acc[i][2], dp_acc[i][3]));
        }
      };
      if (need_mask || softcap_on) front(std::true_type{}); else front(std::false_type{});
      // Skewed schedule (kSkew, see dq_phase): the warps of the second query-column half
      // (qg = 1) run the previous step's dQ GEMM and reductions here, after their own S^T / dP^T
      // work; the first half (qg = 0) ran them right after B(i-1). dS^T(i-1) is in the other
      // stage's block, which front(i) does not write; its next writer, front(i+1), follows B(i).
      if constexpr (kSkew) {
        if (defer_dq && item > 0) {
          // The previous item: one tile back, or the last tile of the previous head.
          const bool wraps = it == it0;
          dq_phase(wraps ? h - 1 : h, wraps ? it0 + n_tiles - 1 : it - 1, L::kOffDS + (st ^ 1) * L::kStage, [] {},
                   std::false_type{});
        }
      }
      // The pair's P^T and dS^T rows are complete after its barrier; dV and dK read their A
      // operands one k16 slice at a time.
      int bar_id = 1 + kvg;
      if constexpr (kSkew) {
        // With the skewed dQ above ptxas hoisted the barrier id out of the loop and spilled it
        // (4 B bf16, 12 B f16 with two more loop constants); rebuilt here per step from an opaque
        // copy of the thread index (2 integer instructions), the build has no spill.
        int t = tid;
        asm volatile("" : "+r"(t));
        bar_id = 1 + ((t >> 5) % L::kWarpsKV);
      }
      sm90::named_barrier_sync<64>(bar_id);
      gemm_sy<kBf16, D, Br, kDCols, MR>(dv_acc, sPT, kv_row_w, sDO, d_col_w, lane);
      gemm_sy<kBf16, D, Br, kDCols, MR>(dk_acc, s_base + ds_off, kv_row_w, sQ, d_col_w, lane);
    } else {
      // Every head_dim takes the straight-line copy when it can (head_dim 256: 255 registers and
      // no spill with both copies of this step; its dS step keeps one copy, see below).
      if (need_mask || softcap_on) p_step(std::true_type{}); else p_step(std::false_type{});

      // ---- dV += P^T dO ----
      // P^T also goes to smem (16-bit): the dS step reads it back there instead of keeping 16
      // more registers alive through the dP GEMM (and, with WQ = 2, the partner warp reads it).
      // Atom m sits 16 m rows lower: (row & 7) and so the swizzle key are unchanged.
  #pragma unroll
      for (int i = 0; i < MR * kQCols / 8; ++i)
        store_frag(pt_off, i, Traits<T>::pack2(s_acc[i][0], s_acc[i][1]), Traits<T>::pack2(s_acc[i][2], s_acc[i][3]));
      // The A operand (this warp's KV rows x the Br query columns) of dV / dK: from the warp's
      // own accumulators (WQ = 1), or from smem `buf` after the pair barrier (WQ = 2: the
      // partner warp wrote the other half of the columns).
      const auto a_operand = [&](std::uint32_t (&a)[Br / 16][4], const float (&acc)[MR * kQCols / 8][4],
                                 std::uint32_t buf) {
        if constexpr (WQ == 1) {
  #pragma unroll
          for (int t = 0; t < Br / 16; ++t) {
            a[t][0] = Traits<T>::pack2(acc[2 * t][0], acc[2 * t][1]);
            a[t][1] = Traits<T>::pack2(acc[2 * t][2], acc[2 * t][3]);
            a[t][2] = Traits<T>::pack2(acc[2 * t + 1][0], acc[2 * t + 1][1]);
            a[t][3] = Traits<T>::pack2(acc[2 * t + 1][2], acc[2 * t + 1][3]);
          }
        } else {
          sm90::named_barrier_sync<64>(1 + kvg);
          const int a_row = kv_row_w + (lane & 7) + ((lane >> 3) & 1) * 8;
  #pragma unroll
          for (int t = 0; t < Br / 16; ++t) ldmatrix_x4(a[t], buf + swz<Br>(a_row, 2 * t + (lane >> 4)));
        }
      };
      {
      std::uint32_t pa[Br / 16][4];
      a_operand(pa, s_acc, sPT);
      gemm_ay<kBf16, D, Br, kDCols>(dv_acc, pa, sDO, d_col_w, lane);
      }

      // ---- dP^T, then dS^T = P^T (dP^T - D) [* (1 - tanh^2)] ----
      float dp_acc[MR * kQCols / 8][4];
      gemm_xyT<kBf16, D, kQCols, MR>(dp_acc, sV, kv_row_w, sDO, q_col_w, lane);
      auto ds_step = [&](auto cap_tag) {
        constexpr bool kCap = decltype(cap_tag)::value;
  #pragma unroll
        for (int i = 0; i < MR * kQCols / 8; ++i) {
          const int m = i / (kQCols / 8), n = i % (kQCols / 8);
          // This thread's own P^T values (stored above by this thread: no barrier needed).
          const int off = (fo ^ (n << 4)) + m * 16 * (Br * 2);
          const float2 pf[2] = {Traits<T>::unpack2(*reinterpret_cast<const std::uint32_t*>(smem + pt_off + off)),
                                Traits<T>::unpack2(*reinterpret_cast<const std::uint32_t*>(smem + pt_off + off + 8 * Br * 2))};
  #pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = q_col_w + n * 8 + 2 * t4 + e;
            const float del = del_t[col];
  #pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const float pv = e == 0 ? pf[hr].x : pf[hr].y;
              float ds = pv * (dp_acc[i][2 * hr + e] - del);
              if (kCap && softcap_on && pv > 0.0f) {  // head_dim 256 takes this copy uncapped too
                ds *= softcap_dtanh(pv, lse_t[col], p.softcap);  // tanh recovered from P
              }
              dp_acc[i][2 * hr + e] = ds;
            }
          }
        }
      };
      // WQ = 2 (head_dim 256) keeps one copy: two spilled. Its softcap test is predicated
      // (FSETP + @P MUFU.LG2), not branched, in SASS.
      if constexpr (WQ == 2) {
        ds_step(std::true_type{});
      } else {
        if (softcap_on) ds_step(std::true_type{}); else ds_step(std::false_type{});
      }
      // dS^T to smem ([Bc][Br]) for the dQ step (and for the partner warp when WQ = 2).
  #pragma unroll
      for (int i = 0; i < MR * kQCols / 8; ++i)
        store_frag(ds_off, i, Traits<T>::pack2(dp_acc[i][0], dp_acc[i][1]), Traits<T>::pack2(dp_acc[i][2], dp_acc[i][3]));

      // ---- dK += dS^T Q ----
      {
        std::uint32_t da[Br / 16][4];
        a_operand(da, dp_acc, s_base + ds_off);
        gemm_ay<kBf16, D, Br, kDCols>(dk_acc, da, sQ, d_col_w, lane);
      }

    }

    if (Stages == 2 && item + 1 < n_items) cp_async_wait<0>();  // step i+1's tiles (own copies)
    // Barrier B(i): dS^T complete; every warp is done with this stage's Q/dO/LSE/D; with
    // Stages = 2 it also publishes step i+1's tiles. The dS^T buffer read below is next
    // written by step i+2, after B(i+1), which no warp passes before finishing this dQ.
    __syncthreads();
    auto prefetch = [&] {
      int hn, itn;
      if (Stages == 2 && item + 2 < n_items) {
        coords_ahead(item, 2, hn, itn);
        load_item(hn, itn, st);  // into the stage this step has finished with
        cp_async_commit();
      } else if (Stages == 1 && item + 1 < n_items) {
        coords_ahead(item, 1, hn, itn);
        load_item(hn, itn, 0);
        cp_async_commit();
      }
    };
    // head_dim 128 issues it after the dQ GEMM (which reads only dS^T and K, not the stage's
    // Q/dO/LSE/D): its ~250 address instructions then issue while the dQ HMMAs drain instead of
    // delaying the first dQ ldmatrix (the prefetch is its own basic block). Only with Stages = 2,
    // where it is step i+2's and has a whole step to land; single-buffered layouts (head_dim 256,
    // head_dim 128's compact ones) load step i+1's, waited for at the top of the next step, so
    // they issue it here, where the dQ GEMM hides its latency.
    constexpr bool kPrefetchAfterDq = MR > 1 && Stages == 2;
    if constexpr (!kPrefetchAfterDq) prefetch();

    // ---- dQ: every warp here, except (kSkew) the deferring half, whose dQ of this step runs
    // in the next step after its front(); on the last step everyone runs it here. ----
    if (defer_dq && item + 1 < n_items) {
      prefetch();  // its share of step i+2's tiles, at once: it is issued under the other half's dQ GEMM
    } else {
      dq_phase(h, it, ds_off, [&] { if constexpr (kPrefetchAfterDq) prefetch(); }, std::true_type{});
    }
    if (kCarryCoords && ++cur_it == it0 + n_tiles) {  // the next item's coordinates
      cur_it = it0;
      ++cur_h;
    }
  }

  // ---- epilogue: dK (times scale) and dV, rows < k_len ----
  const int jr = kv0 + kv_row_w + g;
  if (p.n_splits == 1 && !p.partial_out) {
    T* dk_out = static_cast<T*>(p.dk);
    T* dv_out = static_cast<T*>(p.dv);
#pragma unroll
    for (int mh = 0; mh < 2 * MR; ++mh) {  // (atom m, half hr) = (mh / 2, mh % 2)
      const int hr = mh % 2, a0 = (mh / 2) * (kDCols / 8);
      const int j = jr + 16 * (mh / 2) + 8 * hr;
      if (j < k_len) {
        const std::int64_t ko = b * p.dk_batch + (k_row0 + j) * p.dk_row + hkv * p.dk_head + d_col_w + 2 * t4;
        const std::int64_t vo = b * p.dv_batch + (k_row0 + j) * p.dv_row + hkv * p.dv_head + d_col_w + 2 * t4;
#pragma unroll
        for (int n = 0; n < kDCols / 8; ++n) {
          *reinterpret_cast<std::uint32_t*>(dk_out + ko + n * 8) =
              Traits<T>::pack2(dk_acc[a0 + n][2 * hr] * p.scale, dk_acc[a0 + n][2 * hr + 1] * p.scale);
          *reinterpret_cast<std::uint32_t*>(dv_out + vo + n * 8) =
              Traits<T>::pack2(dv_acc[a0 + n][2 * hr], dv_acc[a0 + n][2 * hr + 1]);
        }
      }
    }
  } else {
#pragma unroll
    for (int mh = 0; mh < 2 * MR; ++mh) {
      const int hr = mh % 2, a0 = (mh / 2) * (kDCols / 8);
      const int j = jr + 16 * (mh / 2) + 8 * hr;
      if (j < k_len) {
        const std::int64_t o =
            ((static_cast<std::int64_t>(split) * p.total_k + k_gr0 + j) * p.heads_kv + hkv) * D + d_col_w + 2 * t4;
#pragma unroll
        for (int n = 0; n < kDCols / 8; ++n) {
          *reinterpret_cast<float2*>(p.dk_part + o + n * 8) =
              make_float2(dk_acc[a0 + n][2 * hr] * p.scale, dk_acc[a0 + n][2 * hr + 1] * p.scale);
          *reinterpret_cast<float2*>(p.dv_part + o + n * 8) =
              make_float2(dv_acc[a0 + n][2 * hr], dv_acc[a0 + n][2 * hr + 1]);
        }
      }
    }
  }
  // A tail-pieces grid must not complete before the grid it depends on (the post kernels after
  // it read both grids' dQ reductions and dK/dV): every thread waits here, after its last
  // store, for that grid's completion and memory flush. So a piece that finishes while the main
  // grid still runs holds its SM until then (one CTA per SM): during the main grid's last wave
  // each free SM runs one piece, not several. Waiting in the last CTA only would avoid that, but
  // any test of the CTA index here costs the bf16 instance 12 B of spill at 255 registers
  // (ptxas 13.0, sm_90). At 16k the wave arithmetic is the same either way (docs/perf/
  // backward_sm80.md, "Tail pieces"). A plain launch has no prerequisite in flight: returns at once.
  sm90::griddepcontrol_wait();
}

}  // namespace tessera::cuda::sm80::bwd
