// The sm90 batch-prefill kernel (docs/perf/batch_prefill_sm90.md, step 1): the prefill-shaped
// units of a BatchAttention plan (plan version 2: items [0, num_prefill_items), units of up to
// 128 GQA-packed query vectors) on WGMMA, with K/V read through the CSR page table.
//
// A CTA (persistent, one per SM; a static walk over the prefill units that alternates direction
// each round, snake_unit) has a producer warpgroup and two consumer warpgroups (64 packed vectors
// each):
//   producer   all 128 threads gather with cp.async: the unit's Q (packed vector n = query row
//              q_begin + n / G, head kv_head G + n % G; zero past the unit) and, per 128-key
//              tile, the K and V rows through the page table (zero outside the item's keys),
//              into 128-byte-swizzled panels (the layout TMA writes and wgmma descriptors
//              read), through a ring of kStages K and V stages; each copy (Q, a K tile, a V
//              tile) ends with the thread's completion-tracked arrival on its full barrier
//              (cp.async.mbarrier.arrive.noinc, 128 arrivals): the producer waits only for free
//              stages, never for its own copies, and issues a unit's first K tile before its Q.
//   consumers  the forward's schedule (sm90/common/kv_tile_schedule.cuh): S = Q K^T and
//              O += P V on wgmma, pingpong turns, the softmax of tile i under P_{i-1} V_{i-1};
//              each thread fences the landed copies into the async proxy (the WGMMAs' reads)
//              after its full-barrier waits, in take_turn;
//              masks per packed vector (its request's bottom-right causal / window mask
//              intersected with the item's keys); the epilogue writes O and the LSE (direct
//              items) or the fp32 partial O and LSE of the chunk (split items) from registers.
// Key tiles are aligned to absolute multiples of 128 keys of the request (the item's first and
// last tiles may be partial: keys outside [kv_begin, kv_end) are zero rows and masked).
// The default for prefill-shaped units on compute capability 9.0 at head_dim 64 and 128 since the
// tenth session, when memcheck and racecheck of it ran clean on the H200
// (docs/perf/batch_prefill_sm90.md); TESSERA_CUDA_BATCH=portable keeps the mma.sync kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/batch/batch_args.h"
#include "cuda/batch/kernel_traits.cuh"
#include "cuda/batch/trace.h"
#include "cuda/common/softcap_score.cuh"
#include "cuda/common/softmax_fragment.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/special_registers.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/named_barrier.cuh"
#include "cuda/primitives/sm90/setmaxnreg.cuh"
#include "cuda/primitives/sm90/smem_desc.h"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "cuda/sm90/common/kv_tile_schedule.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "plan/batch_plan.h"

namespace tessera::cuda::sm90::batch_prefill {

// Shared memory (from a 1024-byte aligned base): Q [128 x D] | K ring [kStages x BN x D] |
// V ring | barriers (q_full, q_empty, k_full[S], k_empty[S], v_full[S], v_empty[S]).
//
// Two resource policies of the same code:
//   fat  (kSlim false): the CTA has the SM to itself (TESSERA_CUDA_BATCH=sm90).
//   slim (kSlim true, head_dim 128 only; TESSERA_CUDA_BATCH=sm90-coresident, GPU-tested in
//        the tenth session): leaves room on the SM for one CTA of the decode-only mma.sync
//        instance (batch::kDecodeOnly: 128 threads, 147 registers allocated as 152, 106,624 B),
//        launched as this kernel's programmatic dependent (docs/perf/batch_prefill_sm90.md,
//        section 5 and "Ninth session: co-resident prototype"): 64-key tiles, 2 stages,
//        registers capped at 120 at entry (__maxnreg__), setmaxnreg 40 / 160.
template <int kHeadDim_, bool kSlim_ = false>
struct Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kSlim = kSlim_;
  static_assert(!kSlim || kHeadDim == 128, "the slim policy exists at head_dim 128 only");
  static constexpr int kBlockM = 128;  // packed query vectors per unit: plan::packed_q_rows
  static constexpr int kBlockN = kSlim ? 64 : 128;  // keys per tile
  // Stages in flight: fat 3 at d128 (Q 32 KB + 3 x 64 KB), 4 at d64 (16 KB + 4 x 32 KB); slim
  // 2 at d128 (Q 32 KB + 2 x 32 KB: a third stage would need 131,072 B of the 124,800 left).
  static constexpr int kStages = kSlim ? 2 : (kHeadDim_ == 64 ? 4 : 3);
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kConsumerWarps = 8;
  // fat: 128 x 40 + 256 x 232 = 64,512 registers: the gathering producer needs more than the
  // forward's single TMA thread. slim: 128 x 40 + 256 x 160 = 46,080 = 384 x 120 (the entry
  // cap), leaving 65,536 - 46,080 = 19,456 = 128 x 152 for one decode-only CTA.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = kSlim ? 160 : 232;
  static constexpr int kEntryRegs = kSlim ? 120 : 168;  // slim: __maxnreg__; fat: launch bounds (384, 1)
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * kEntryRegs, "setmaxnreg stays in the CTA's pool");
  static_assert(kBlockM == plan::packed_q_rows(kHeadDim), "a unit is one Q tile");
  static constexpr int kPanels = kHeadDim / 64;  // 128-byte panels of 64 16-bit columns
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks per row
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKVPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKVTileBytes = kPanels * kKVPanelBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVTileBytes;
  static constexpr int kBarrierOffset = kVOffset + kStages * kKVTileBytes;
  static constexpr int kBarriers = 2 + 4 * kStages;
  static constexpr int kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
  static_assert(kBlockN == 64 || kBlockN == 128, "the K/V gather: 16 key rows per pass, 4 or 8 passes");
  // Co-residency (slim): this CTA + one decode-only CTA, each with the 1 KB the SM reserves per
  // CTA, within sm_90's 233,472 bytes (228 KB) of shared memory per SM; registers: this CTA's
  // 384 x kEntryRegs + the decode-only CTA's 128 x kDecodeCtaRegs <= 65,536.
  static constexpr int kSmPerSmBytes = 233472;
  static constexpr int kDecodeCtaSmemBytes = batch::instance_smem_bytes<kHeadDim, batch::kDecodeOnly>();
  static constexpr int kDecodeCtaRegs = 152;  // ptxas 147 (sm_90, CUDA 13.0), allocated in steps of 8
  static_assert(!kSlim || kSmemBytes + 1024 + kDecodeCtaSmemBytes + 1024 <= kSmPerSmBytes,
                "slim: a decode-only CTA fits beside this one in shared memory");
  static_assert(!kSlim || kThreads * kEntryRegs + 128 * kDecodeCtaRegs <= 65536,
                "slim: a decode-only CTA fits beside this one in the register file");
};

// Byte offset of 16-byte chunk `ch` of row `r` in a tile of R rows of 128-byte-swizzled panels.
template <int R>
__device__ __forceinline__ std::uint32_t sw128_offset(int r, int ch) {
  return static_cast<std::uint32_t>((ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// What every thread knows of a unit (the same walk in every warpgroup).
struct Unit {
  plan::WorkItem it;
  int row0;     // first packed vector of the unit within the item
  int n_rows;   // packed vectors of the unit (1..128)
  int t0;       // first key tile (absolute, in tiles of kBlockN keys)
  int n_tiles;  // key tiles covering [kv_begin, kv_end) (0 when empty)
};

template <int BN>
__device__ __forceinline__ Unit unit_of(const batch::BatchArgs& a, int u) {
  Unit un;
  const int item = a.row_blocks == 1 ? u : u / a.row_blocks;
  const int rb = u - item * a.row_blocks;
  un.it = a.items[item];
  un.row0 = rb * 128;
  un.n_rows = min(128, (un.it.q_end - un.it.q_begin) * a.group - un.row0);
  un.t0 = un.it.kv_begin / BN;
  un.n_tiles = un.it.kv_end > un.it.kv_begin ? (un.it.kv_end + BN - 1) / BN - un.t0 : 0;
  return un;
}

// The unit a CTA takes in round r of the static walk (the same in every warpgroup): rounds
// alternate direction (CTA b takes r G + b in even rounds, r G + G - 1 - b in odd ones), so that
// the CTAs with the longest units of one round get shorter ones in the next. Prefill units of a
// chunk grow along it (bottom-right causal: 29..32 128-key tiles in the bench case); the
// straight walk gave one CTA 8 units of 32 tiles (256 tile times, mean 236.6), the snake 248
// (tenth session). A unit past num_units ends the walk: later rounds only go higher.
__device__ __forceinline__ int snake_unit(int r) {
  const int g = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  return r * g + ((r & 1) ? g - 1 - b : b);
}

// The kernel's body, for either policy (the two __global__ entries below differ only in their
// register bound).
template <typename T, typename Tr>
__device__ __forceinline__ void prefill_body(const batch::BatchArgs& a) {
  constexpr int kHeadDim = Tr::kHeadDim;
  constexpr int D = kHeadDim, BN = Tr::kBlockN, S = Tr::kStages;
  constexpr bool kBf16 = cuda::Traits<T>::is_bf16;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw_addr = sm80::smem_u32(smem_raw);
  const std::uint32_t base = (raw_addr + 1023u) & ~1023u;
  const std::uint32_t sQ = base + Tr::kQOffset;
  auto sK = [&](int stage) { return base + Tr::kKOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes); };
  auto sV = [&](int stage) { return base + Tr::kVOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes); };
  const std::uint32_t bars = base + Tr::kBarrierOffset;
  const std::uint32_t q_full = bars, q_empty = bars + 8u;
  auto k_full = [&](int stage) { return bars + 8u * (2 + stage); };
  auto k_empty = [&](int stage) { return bars + 8u * (2 + S + stage); };
  auto v_full = [&](int stage) { return bars + 8u * (2 + 2 * S + stage); };
  auto v_empty = [&](int stage) { return bars + 8u * (2 + 3 * S + stage); };

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 128);  // every producer thread's copies landed (cp.async arrivals)
    mbarrier_init(q_empty, 2);   // one arrival per consumer warpgroup
    for (int s = 0; s < S; ++s) {
      mbarrier_init(k_full(s), 128);
      mbarrier_init(v_full(s), 128);
      mbarrier_init(k_empty(s), Tr::kConsumerWarps);
      mbarrier_init(v_empty(s), Tr::kConsumerWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  // Prefill units of the plan (read from the header in device memory: graph replays after a
  // new plan() see the new count).
  const int num_units = a.header->num_prefill_items * a.row_blocks;
  const int G = a.group;
  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;

  if (warpgroup == 0) {
    // ---- producer: every thread gathers its share of each copy ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    const T* qp = static_cast<const T*>(a.q);
    const T* kp = static_cast<const T*>(a.k);
    const T* vp = static_cast<const T*>(a.v);
    int it = 0;  // K/V tiles loaded so far (ring position)
    int q_round = 0;
    // Q: thread t copies chunk t % kChunks of rows t / kChunks + i * (128 / kChunks) (16 threads
    // per 256-byte row at d128: each warp instruction reads whole 128-byte lines).
    constexpr int kRowStep = 128 / Tr::kChunks;
    const int ch = t % Tr::kChunks, r_first = t / Tr::kChunks;
    // K / V (tenth session): warp w copies the rows r with r % 16 in [4 w, 4 w + 4); lane l takes
    // row 4 w + l / 8 + 16 i (i = 0..BN / 16 - 1: 8 passes fat, 4 slim) and 16-byte chunk l % 8
    // of each 128-byte panel, so that one LDGSTS of the warp reads 4 rows x 128 contiguous bytes,
    // 4 whole lines (the pair layout before read 16 rows x 32 bytes, 16 one-sector requests).
    // Each lane looks up one row per tile (its own: 4 w + l % 4 + 16 (l / 4), the row lane
    // 4 i + l / 8 copies at pass i) and hands its source offsets to the 8 lanes that copy it by
    // shuffle. At BN 64 only lanes l < 16 own a row of the tile (l / 4 < 4: rows < 64), and they
    // are exactly the lanes the 4 passes read from (4 i + l / 8 <= 15); lanes 16-31 would own rows
    // of the next tile and skip the lookup (no page-table load for a row nobody copies).
    const int lane_p = t % 32, warp_p = t / 32;
    const int kv_ch = lane_p % 8;
    const int kv_row0 = 4 * warp_p + lane_p / 8;                          // pass i: kv_row0 + 16 i
    const int own_row = 4 * warp_p + lane_p % 4 + 16 * (lane_p / 4);  // the row this lane looks up
    const std::uint32_t kv_dst0 = static_cast<std::uint32_t>(kv_row0 * 128 + ((kv_ch ^ (kv_row0 & 7)) << 4));
    static_assert(BN == 128 || BN == 64, "8 or 4 passes of 16 rows; every own row < BN is read by a pass");
    const bool own_in_tile = BN == 128 || lane_p < BN / 4;  // fat: always (no code)
    const int page_size = a.page_size, page_shift = a.page_shift;
    for (int rnd = 0;; ++rnd, ++q_round) {
      const int u = snake_unit(rnd);
      if (u >= num_units) break;
      const Unit un = unit_of<BN>(a, u);
      const int b = un.it.request;
      const std::int64_t q0 = a.qo_indptr[b];
      const int* pages = a.kv_indices + a.kv_indptr[b];
      const std::int64_t k_head_off = static_cast<std::int64_t>(un.it.kv_head) * a.k_head;
      const std::int64_t v_head_off = static_cast<std::int64_t>(un.it.kv_head) * a.v_head;
      // Q, once the consumers are done with the previous unit's; q_full completes when every
      // producer thread's copies have landed.
      auto load_q = [&] {
        mbarrier_wait_parity(q_empty, (q_round & 1) ^ 1);
#pragma unroll 1
        for (int r = r_first; r < 128; r += kRowStep) {
          const bool valid = r < un.n_rows;
          const T* src = qp;
          if (valid) {
            const int n = un.row0 + r;
            const int qr = un.it.q_begin + n / G, h = un.it.kv_head * G + n % G;
            src = qp + (q0 + qr) * a.q_row + static_cast<std::int64_t>(h) * a.q_head + ch * 8;
          }
          sm80::cp_async_16_zfill(sQ + sw128_offset<128>(r, ch), src, valid);
        }
        sm80::cp_async_mbarrier_arrive_noinc(q_full);
      };
      if (un.n_tiles == 0) load_q();
      // K/V tiles. Every copy ends with the thread's completion-tracked arrival on the copy's
      // full barrier (the hardware arrives once the thread's earlier copies have landed), so the
      // producer never waits for its own copies, only for free stages: K(i) needs Q K^T of tile
      // i - S done, V(i) needs P V of tile i - S. The consumers fence the landed bytes into the
      // async proxy before their WGMMAs read them (take_turn). A unit's first K tile is issued
      // before its Q, whose buffer frees only when the previous unit's last P V is done.
      for (int i = 0; i < un.n_tiles; ++i, ++it) {
        const int stage = ring_stage<S>(it);
        const std::uint32_t parity = ring_phase<S>(it) ^ 1;  // round 0 passes at once
        const int key0 = (un.t0 + i) * BN;
        // The lane's own row: the addresses of its K and V rows, bit 0 set for a key of the item
        // (rows are 16-byte aligned), else the tensors' bases (zero-filled, nothing read). One
        // page lookup per row and tile serves K and V.
        std::uint64_t k_own = reinterpret_cast<std::uint64_t>(kp), v_own = reinterpret_cast<std::uint64_t>(vp);
        {
          const int j = key0 + own_row;
          if (own_in_tile && j >= un.it.kv_begin && j < un.it.kv_end) {
            const int pg = page_shift >= 0 ? j >> page_shift : j / page_size;
            const std::int64_t page = __ldg(pages + pg), slot = j - pg * page_size;
            k_own = reinterpret_cast<std::uint64_t>(kp + (page * a.k_page + slot * a.k_token + k_head_off)) | 1u;
            v_own = reinterpret_cast<std::uint64_t>(vp + (page * a.v_page + slot * a.v_token + v_head_off)) | 1u;
          }
        }
        auto copy_tile = [&](std::uint32_t dst_tile, std::uint64_t own) {
#pragma unroll
          for (int pass = 0; pass < BN / 16; ++pass) {
            const std::uint64_t row = __shfl_sync(0xffffffffu, own, 4 * pass + lane_p / 8);
            const bool valid = (row & 1u) != 0;
            const unsigned char* src = reinterpret_cast<const unsigned char*>(row & ~std::uint64_t{1}) + kv_ch * 16;
#pragma unroll
            for (int panel = 0; panel < Tr::kPanels; ++panel)
              sm80::cp_async_16_zfill(dst_tile + kv_dst0 + pass * 2048u + panel * Tr::kKVPanelBytes, src + 128 * panel,
                                      valid);
          }
        };
        mbarrier_wait_parity(k_empty(stage), parity);
        copy_tile(sK(stage), k_own);
        sm80::cp_async_mbarrier_arrive_noinc(k_full(stage));
        if (i == 0) load_q();
        mbarrier_wait_parity(v_empty(stage), parity);
        copy_tile(sV(stage), v_own);
        sm80::cp_async_mbarrier_arrive_noinc(v_full(stage));
      }
    }
    sm80::cp_async_wait_all();  // leave no copy in flight behind an exiting thread
    return;
  }

  // ---- consumers: warpgroup c owns packed vectors [64 c, 64 c + 64) of every unit ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int c = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
  const int warp = t / 32, lane = t % 32;
  const int g = lane / 4, q = lane % 4;
  constexpr std::uint32_t kTurnBarrier0 = 4, kEpilogueBarrier0 = 1;
  // Every take_turn in run_kv_tiles follows the full-barrier waits for the operands of the
  // WGMMAs it precedes, with none of this warpgroup's WGMMAs in flight: the generic-to-async
  // proxy fence for the producer's cp.async bytes goes here, while the turn is awaited.
  auto take_turn = [&] {
    fence_proxy_async_shared_cta();
    named_barrier_sync(kTurnBarrier0 + c, 256);
  };
  auto pass_turn = [&] { named_barrier_arrive(kTurnBarrier0 + (c ^ 1), 256); };
  if (c == 1) pass_turn();

  int it = 0;
  int q_round = 0;
  for (int rnd = 0;; ++rnd, ++q_round) {
    const int u = snake_unit(rnd);
#if defined(TESSERA_BATCH_TRACE)
    if (!Tr::kSlim && a.trace != nullptr && threadIdx.x == 128 && blockIdx.x < batch::kTracePrefillCtas) {
      unsigned long long* t = a.trace + blockIdx.x * batch::kTracePrefillStride;
      if (u >= num_units) {
        t[batch::kTraceRounds] = sm80::sreg_globaltimer();
        t[batch::kTraceRounds + 1] = sm80::sreg_smid();
      } else if (rnd < batch::kTraceRounds) {
        t[rnd] = sm80::sreg_globaltimer();
      }
    }
#endif
    if (u >= num_units) break;
    const Unit un = unit_of<BN>(a, u);
    const int b = un.it.request;
    const int q_len = a.qo_indptr[b + 1] - a.qo_indptr[b];
    const int kv_len = a.kv_len[b];
    const math::MaskSpec spec = math::MaskSpec::make(q_len, kv_len, a.causal, a.window_left, a.window_right);
    // The thread's two rows (packed vectors r and r + 8 of the unit) and their visible keys.
    const int r_lo = 64 * c + 16 * warp + g;
    math::KeyRange keys[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r_lo + 8 * hh;
      keys[hh] = {un.it.kv_begin, un.it.kv_end};  // rows past the unit: zero Q, never stored
      if (r < un.n_rows) {
        const math::KeyRange k = math::visible_keys(spec, un.it.q_begin + (un.row0 + r) / G);
        keys[hh] = {max(k.begin, un.it.kv_begin), min(k.end, un.it.kv_end)};
      }
    }
    // Keys every row of the warpgroup sees (tiles inside need no per-element mask): the masks
    // are monotone in the query position, which grows with the packed vector.
    math::KeyRange full{un.it.kv_begin, un.it.kv_end};
    const int wg_first = 64 * c, wg_rows = min(64, un.n_rows - wg_first);
    if (wg_rows > 0) {
      const math::KeyRange first = math::visible_keys(spec, un.it.q_begin + (un.row0 + wg_first) / G);
      const math::KeyRange last = math::visible_keys(spec, un.it.q_begin + (un.row0 + wg_first + wg_rows - 1) / G);
      full = {max(last.begin, un.it.kv_begin), min(first.end, un.it.kv_end)};
    }

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float s[BN / 8][4];
    std::uint32_t p[BN / 16][4];
    math::OnlineSoftmaxRow rows[2];
    float alpha[2];
    bool rescale_o = true;  // whether this tile's alpha must be applied to O (lazy rescale)
    auto& s_flat = reinterpret_cast<float(&)[BN / 2]>(s);
    auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);

    auto issue_qk = [&](int stage) {
      const std::uint64_t dq = make_smem_desc_sw128_kmajor(sQ + 64u * 128u * c);
      const std::uint64_t dk = make_smem_desc_sw128_kmajor(sK(stage));
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D * 2 / 32; ++ks) {
        const std::uint32_t off = 32u * (ks % 4);
        const std::uint64_t da = smem_desc_advance(dq, (ks / 4) * Tr::kQPanelBytes + off);
        const std::uint64_t db = smem_desc_advance(dk, (ks / 4) * Tr::kKVPanelBytes + off);
        wgmma_ss<BN, kBf16>(s_flat, da, db, ks > 0);
      }
      wgmma_commit();
    };
    auto issue_pv = [&](int stage) {
      wgmma_fence();
      const std::uint64_t dv = make_smem_desc_sw128_mnmajor(sV(stage), Tr::kKVPanelBytes);
#pragma unroll
      for (int kt = 0; kt < BN / 16; ++kt) wgmma_rs<D, kBf16, true>(o_flat, p[kt], smem_desc_advance(dv, 2048u * kt), true);
      wgmma_commit();
    };
    auto weights = [&](int i) {
      const int n0 = (un.t0 + i) * BN;
      const bool masked = !(full.begin <= n0 && n0 + BN <= full.end);
      // Lazy rescale as in the forward (softmax_fragment.cuh): O is rescaled only when a row of
      // the warp rises past its kept max by 2^8 (P <= 256).
      rescale_o = scores_to_weights<BN, true>(s, rows, keys, masked, n0, q, a.scale_log2,
                                              SoftcapScore{a.scale_over_cap, a.softcap_log2}, alpha, 0.0f, 8.0f);
    };
    auto release = [&](std::uint32_t bar) {
      __syncwarp();
      if (lane == 0) mbarrier_arrive(bar);
    };

    mbarrier_wait_parity(q_full, q_round & 1);
    if (un.n_tiles > 0) {
      TileOps ops{take_turn,
                  pass_turn,
                  issue_qk,
                  issue_pv,
                  weights,
                  [&] { end_softmax_block(rows); },  // the forward's pin (bf16 / fp16: +2-4 % there)
                  [&] {
                    if (rescale_o) rescale_rows<D, false>(o, alpha);
                  },
                  [&] { pack_weights<T, BN>(s, p); },
                  [&](int stage) { release(k_empty(stage)); },
                  [&](int stage) { release(v_empty(stage)); },
                  k_full,
                  v_full};
      run_kv_tiles<S, false>(un.n_tiles, it, ops, s_flat, o_flat);
    }
    // Every warp of the warpgroup is past its last Q K^T: the producer may load the next Q.
    named_barrier_sync(kEpilogueBarrier0 + c, 128);
    if (t == 0) mbarrier_arrive(q_empty);

    // ---- epilogue: O (bf16/fp16 rows, or fp32 partials of a split item) and the LSE ----
    const bool direct = un.it.partial_row == plan::kDirect;
    const std::int64_t q0 = a.qo_indptr[b];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      rows[hh].l = sm80::quad_sum(rows[hh].l);
      const float sc = rows[hh].output_scale();
      const int r = r_lo + 8 * hh;
      if (r >= un.n_rows) continue;
      const int n = un.row0 + r;
      const int qr = n / G, h = un.it.kv_head * G + n % G;  // qr relative to q_begin
      if (direct) {
        T* out = static_cast<T*>(a.o) + (q0 + un.it.q_begin + qr) * a.o_row + static_cast<std::int64_t>(h) * a.o_head;
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
          *reinterpret_cast<std::uint32_t*>(out + 8 * d + 2 * q) =
              cuda::Traits<T>::pack2(o[d][2 * hh] * sc, o[d][2 * hh + 1] * sc);
        if (a.lse != nullptr && q == 0)
          a.lse[static_cast<std::int64_t>(h) * a.lse_head + q0 + un.it.q_begin + qr] = rows[hh].lse();
      } else {
        const std::int64_t prow = un.it.partial_row + qr;
        float* dst = a.partial_o + (prow * a.heads_q + h) * D;
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
          *reinterpret_cast<float2*>(dst + 8 * d + 2 * q) = make_float2(o[d][2 * hh] * sc, o[d][2 * hh + 1] * sc);
        if (q == 0) a.partial_lse[prow * a.heads_q + h] = rows[hh].lse();
      }
    }
  }
  if (c == 0) take_turn();  // the last warpgroup's last arrival: leave the barrier balanced
}

// The fat policy: alone on its SM (the default SM split and TESSERA_CUDA_BATCH=sm90).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(Traits<kHeadDim>::kThreads, 1) prefill_kernel(const __grid_constant__ batch::BatchArgs a) {
  // The SM split (the default) launches the decode-only kernel as this grid's programmatic
  // dependent, to run on the SMs this grid leaves free: let it launch at once. A dependent that
  // reads what this grid writes (the merge, where no decode launch follows) executes
  // griddepcontrol.wait first, so the early trigger is safe for it too.
  griddepcontrol_launch_dependents();
  prefill_body<T, Traits<kHeadDim>>(a);
}

// The slim policy (TESSERA_CUDA_BATCH=sm90-coresident, head_dim 128): registers capped at
// Traits::kEntryRegs at entry (__maxnreg__, which excludes __launch_bounds__; launched with
// kThreads), so that 384 x 120 + the decode-only CTA's 128 x 152 fit the register file. Every
// CTA lets its programmatic dependent (the decode-only kernel) launch at once: that grid's CTAs
// then take the room each SM has left beside this one (griddepcontrol.launch_dependents signals
// only; the dependent reads nothing this kernel writes, and waits for this grid's completion
// before it exits, so that the merge after it sees both grids' partials).
template <typename T, int kHeadDim>
__global__ void __maxnreg__((Traits<kHeadDim, true>::kEntryRegs))
    prefill_kernel_slim(const __grid_constant__ batch::BatchArgs a) {
  griddepcontrol_launch_dependents();
  prefill_body<T, Traits<kHeadDim, true>>(a);
}

}  // namespace tessera::cuda::sm90::batch_prefill
