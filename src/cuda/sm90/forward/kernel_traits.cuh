// Tile shapes and shared-memory layout of the sm90 forward (warp-specialised, TMA + wgmma).
//
// A CTA (persistent, one per SM; see launch_template.cuh for its walk) has 1
// producer warpgroup (one thread issues every TMA copy; the warpgroup gives its registers back
// with setmaxnreg) and 2 consumer warpgroups (3 at head_dim 64, at FP8 head_dim 128 and for dense
// causal head_dim 128 calls of 1025-4096 keys, or every 16-bit head_dim 128 call under the
// measurement knob TESSERA_CUDA_D128_WARPGROUPS=3), each owning 64 query rows of the 128-row (192-row)
// Q tile: S = Q K^T (wgmma, both operands in smem) and O += P V (P from
// registers, or from each warpgroup's buffer in smem in the wide head_dim 64 instance, kPInSmem;
// V MN-major in smem; for fp8, V^T K-major, transposed by three producer warps). K
// and V tiles stream through a ring of kStages stages, each with a "full" mbarrier (TMA bytes
// landed) and an "empty" one (every consumer warp done reading).
//
// Every operand tile is stored as TMA writes it with 128-byte swizzle: panels of 128 bytes of
// head-dim columns (64 16-bit or 128 fp8 elements), rows 128 bytes apart, each panel 1024-byte
// aligned.
//   head_dim  64: 192 x 128 tiles (3 consumer warpgroups), 4 stages: Q 2 x 24 KB + 4 x (16 + 16) KB = 176 KB;
//                 unmasked over long sequences 192 x 192 (kPInSmem), 2 stages and P of each warpgroup:
//                 Q 2 x 24 + 2 x (24 + 24) + 3 x 24 = 216 KB; the tail-row instance (192 x 128) + 36 KB of
//                 merge slots = 212 KB
//   head_dim 128: 128 x 176 tiles, 2 stages: Q 32 + 2 x (44 + 44) = 208 KB (masked too, for long
//                 causal calls); short unmasked and masked 128 x 128: Q 2 x 32 + 2 x (32 + 32) = 192 KB;
//                 dense causal of 1025-4096 keys 192 x 128 (3 consumer warpgroups): Q 2 x 48 +
//                 2 x (32 + 32) = 224 KB
//   head_dim 256: 128 x  80 tiles (128 x 64 when masked), 2 stages: Q 64 + 2 x (40 + 40) = 224 KB
//   fp8 d128: 192 x 128 tiles (3 consumer warpgroups), 3 stages of K, V and V^T: Q 2 x 24 + 3 x 48 = 192 KB
//   fp8 d256: 128 x 128 tiles, 2 stages of K, V and V^T: Q 32 + 2 x 96 = 224 KB;
//             V^T only (kVtOnly: V^T from the pass's workspace): Q 2 x 32 + 2 x 64 = 192 KB
// (Q 2 x: two Q buffers, where they fit; see kQBuffers.)
// Wider K tiles spread each tile's fixed costs (barriers, waits, row reductions, the O
// rescale) over more keys; masked problems keep 128 so fewer keys are computed and thrown away
// on the diagonal, except long causal head_dim 128 ones (kShortCausalMaxKeysD128).
// Registers per consumer thread: S (kBlockN / 2), P (kBlockN / 4; fp8 kBlockN / 8; none in flight
// with kPInSmem), O (head_dim / 2).
#pragma once

namespace tessera::cuda::sm90 {

// Consumer warpgroups (64 query rows each) per head dim: three at head_dim 64 (192-row Q
// tiles, as FlashAttention-3 does there: with two, ncu showed neither the tensor pipe nor the
// exp2 unit above ~50 % busy, their phases not overlapping enough) and for fp8 at head_dim 128
// (the same count: a 128-key tile is as much exp2 as tensor time there, and two warpgroups'
// pingpong left both at ~40 %), two elsewhere.
// Exception: masked head_dim 64 problems over short sequences take two (128-row tiles), see
// kTwoWarpgroupMaxKeysD64.
constexpr int consumer_warpgroups_for(int head_dim, bool fp8 = false) {
  return (head_dim == 64 && !fp8) || (head_dim == 128 && fp8) ? 3 : 2;
}
constexpr int block_m_for(int head_dim, bool fp8 = false) { return 64 * consumer_warpgroups_for(head_dim, fp8); }

// Rows of a Q box (the TMA map's, launch.cu): one consumer warpgroup's rows, so that with one Q
// buffer each warpgroup's rows load on their own barrier (producer.cuh).
constexpr int kQBoxRows = 64;

// Masked (causal, window) head_dim 64 problems whose sequences average at most this many keys
// run on two consumer warpgroups (128-row Q tiles) instead of three; windowed ones up to
// kTwoWarpgroupMaxKeysD64Window. While every warpgroup of a 192-row tile computed every K/V
// tile of it, three lost at short lengths: a short causal problem is mostly diagonal, and the
// first warpgroups computed and discarded the diagonal of the last (two 0.297 ms at 1k against
// three 0.326-0.335; bf16 causal, 16k tokens, H200), so the switch sat at 1024 keys. Since each
// warpgroup stops at its own rows' last K/V tile (kernel.cuh, kOwnDiagonal), three do the same
// tensor work as two and hide more latency. Measured against two (thirty-second session, 4
// queued rounds, bf16 causal, 16k tokens): 128 keys 1.072, 256 keys 1.049 (a tile or two per
// row block: nothing to hide), 512 keys 0.939, 1k 0.935, 2k 0.955 (three with turns before),
// ragged 16 sequences 0.901. A 128-key window over 1k read 1.018 on three, so windows keep the
// old switch, where three (with turns) had won at 4k (a 1024-key window: 0.949 again since).
constexpr long long kTwoWarpgroupMaxKeysD64 = 256;
constexpr long long kTwoWarpgroupMaxKeysD64Window = 1024;

// Unmasked head_dim 128 problems whose sequences average at most this many keys run on 128-key
// tiles with two Q buffers instead of 176-key tiles with one: 1024 keys are 8 whole 128-key
// tiles but 5.8 176-key ones, and with few K/V tiles per Q tile the exposed Q load and epilogue
// weigh more. Measured on the H200 (bf16, 16k tokens, A/B, sixth session) with the masked
// instance as the short one: 1k -7 % time; at 16k the 176-key instance stays faster. Now an
// unmasked 128-key instance of their own: no mask code, the static walk, and the split tail
// where its rule pays (split_tail_plan.h: never up to 1280 keys; from 1536 keys when at most
// about half a round is left, so such calls' bits can now depend on the launch's tile count, as
// every longer unmasked call's can). Measured against the masked instance (twenty-third
// session, 6 rounds): 1k 0.986, 2k 0.993 of its time; forced at 4k it equals the 176-key
// instance (0.998), so the switch stays at 2048.
constexpr long long kShortUnmaskedMaxKeysD128 = 2048;

// Causal head_dim 128 problems (no window) whose sequences average more than this many keys run
// on 176-key tiles as unmasked ones do (the long-key tile), not 128: the eleventh session counted
// 4.06 instructions per key at 128 against 3.58 at 176, and step 3 of the ladder
// (forward_sm90.md) gave the unmasked kernel +5 % for it. The diagonal costs more: in a square
// problem 128-row query tiles end where a 128-key tile ends, but a 176-key tile overshoots by ~80
// keys on average (128 m0 mod 176 in steps of 16), ~1 % of the keys computed at 16k, 4 % at 4k,
// 8 % at 2k. So the switch sits above 4k; shorter calls keep 128-key tiles (and, up to 2048 keys,
// the dynamic walk, launch_template.cuh); windows keep 128 (a narrow band wastes more of a wider
// tile). Measured (twenty-third session, bf16, against 128-key tiles, 6 rounds): 16k 0.959,
// 8k 0.974 of the time, below 1 in every round.
constexpr long long kShortCausalMaxKeysD128 = 4096;

// Dense causal 16-bit head_dim 128 problems (no window) whose sequences have more than this many
// keys and at most kShortCausalMaxKeysD128 run on three consumer warpgroups (192-row Q tiles,
// 128-key tiles, two Q buffers: 224 KB), each computing only its own rows' K/V tiles (kernel.cuh,
// kOwnDiagonal), with P V completed before the next Q K^T (kSerialGemms: O 64 + S 64 + P 32
// registers do not fit three warpgroups' 160 at once, O + S and O + P do). At head_dim 64 three
// warpgroups with own diagonals took 0.94 of two's time at 512-2k keys; at 128 they lose the
// intra-warpgroup overlap. Measured (thirty-third session, against two): 2k keys 0.986, 4k 0.973,
// but 1k 1.023 (its last 192-row tile a third full and the longest), so from 1025 keys; again
// 1.5k 0.987, 3k 0.971, 4k 0.968, but a ragged batch of 8 (2k keys a sequence on average)
// 1.027: dense calls only (tile_choice.h).
constexpr long long kThreeWarpgroupCausalMinKeysD128 = 1024;

// Unmasked 16-bit head_dim 64 problems whose sequences average more than this many keys run on
// 192-key tiles with P through shared memory (kWideKeyTileD64, FwdTraits::kPInSmem) instead of
// 128-key tiles with P from registers: each tile's fixed costs (the turn, two waits, the row
// max / sum reductions and their shuffles, the O rescale) spread over 1.5x the keys, and at
// head_dim 64 a tile's tensor and exp2 times are about equal, so those fixed costs are what the
// pipes wait on. Short sequences keep 128 keys: 1024 keys are 8 whole 128-key tiles but 5.3
// 192-key ones (the same reasoning as kShortUnmaskedMaxKeysD128). Measured (twenty-third
// session, H200, bf16, against 128-key tiles): 1.10x the time at 2k, 1.07x at 4k, 1.05x at 16k,
// in every round: the P store and the SS P V move the shared-memory pipe to the front. So the
// rule never takes them (the threshold is the largest key count); the instance stays reachable
// through TESSERA_CUDA_FORWARD_KEY_TILE=long for the next attempt.
constexpr long long kShortUnmaskedMaxKeysD64 = 0x7fffffffffffffffLL;
constexpr int kWideKeyTileD64 = 192;

// K tile width of the instances that exist, per head dim and mask (launch.cu picks one via
// tile_choice.h). long_keys: a call past its short-key threshold (unmasked head_dim 64 or 128:
// kShortUnmaskedMaxKeysD64 / D128; causal head_dim 128: kShortCausalMaxKeysD128), which takes the
// wider tile: head_dim 64 192 keys (P through shared memory), 128 176 keys (masked too); other
// masked calls and short ones 128 keys (head_dim 256: 80 unmasked, 64 masked, at any length). FP8 (1-byte elements) uses 128 keys: one 128-byte swizzled
// row of the transposed V tile.
constexpr int block_n_for(int head_dim, bool masked, bool fp8 = false, bool long_keys = false) {
  if (fp8) return 128;
  if (head_dim == 256) return masked ? 64 : 80;
  if (!long_keys) return 128;
  if (head_dim == 128) return 176;  // masked too: long causal calls (kShortCausalMaxKeysD128)
  return masked ? 128 : kWideKeyTileD64;
}

// kWarpgroups_: consumer warpgroups; 0 takes consumer_warpgroups_for (the other instances:
// head_dim 64 masked with two, kTwoWarpgroupMaxKeysD64; head_dim 128 masked with three,
// kThreeWarpgroupCausalMinKeysD128, and any 16-bit head_dim 128 call under
// TESSERA_CUDA_D128_WARPGROUPS=3).
// kVtOnly_ (FP8 only): the instance for calls whose V^T the pass of fp8_v_transpose.h made
// (FwdArgs::vt_global): no V stages and no transposing warps, so the producer warpgroup runs on
// 24 registers and, at head_dim 256, the consumers on 240, enough for O (128), S (64) and P (16)
// at once: the overlapped schedule instead of the serial one (see kSerialGemms).
// kMasked_: the instance's (only the masked head_dim 128 x 176 one differs, in its register split).
// kTailRows_: the tail-row instance (16-bit head_dim 64, unmasked dense): every tile is a
// sequence's last query block with at most 64 rows inside the sequence (1024 = 5 x 192 + 64),
// which all consumer warpgroups compute together, each over its share of the K/V tiles, merging
// the shares in shared memory (kernel.cuh). The main instance then runs only whole query blocks:
// with three warpgroups, such a block would otherwise have two of them compute 128 rows past
// the sequence (at 1k, 6 tiles of work for 5.33 tiles of rows).
template <int kHeadDim_, int kBlockN_, int kElemBytes_ = 2, int kWarpgroups_ = 0, bool kVtOnly_ = false,
          bool kMasked_ = false, bool kTailRows_ = false>
struct FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kElemBytes = kElemBytes_;  // 2: f16/bf16, 1: e4m3
  static constexpr bool kFp8 = kElemBytes == 1;
  static constexpr bool kVtOnly = kVtOnly_;
  static_assert(!kVtOnly || kFp8, "V^T-only instances are FP8's");
  static constexpr bool kTailRows = kTailRows_;
  // The instances whose launch may split its last round's tiles (FwdArgs: split_o, split_lse).
  static constexpr bool kSplit = !kMasked_ && !kTailRows_;
  static_assert(!kTailRows || (!kFp8 && kHeadDim == 64), "tail-row instances are 16-bit head_dim 64's");
  static_assert((kHeadDim * kElemBytes) % 128 == 0, "head_dim is a whole number of 128-byte panels");
  static constexpr int kConsumerWarpgroups = kWarpgroups_ > 0 ? kWarpgroups_ : consumer_warpgroups_for(kHeadDim, kFp8);
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN % 16 == 0, "whole k16 steps of the P V product");
  static_assert(!kFp8 || kBlockN == 128, "fp8: the transposed V tile is one 128-byte row per head-dim column");
  // FP8 d128 (192-row Q tiles) has the room for 3 (the V^T ring then also runs 3 tiles ahead).
  // The wide head_dim 64 instance (kPInSmem) has room for 2 (its P buffers take 72 KB).
  static constexpr int kStages = kHeadDim == 64 && kBlockN_ == 128 ? 4 : kFp8 && kHeadDim == 128 ? 3 : 2;
  // setmaxnreg: 128 x 24 + 256 x 240 = 64,512 of the 65,536 registers of an SM; three
  // consumer warpgroups (head_dim 64): 128 x 24 + 384 x 160 = 64,512. FP8: the producer
  // warpgroup also transposes V (3 warps): 128 x 32 + 384 x 160 = 65,536 at head_dim 128 (three
  // consumer warpgroups), 128 x 40 + 256 x 232 = 64,512 at 256 (its consumers hold 128
  // accumulators of O); without the transposing warps (kVtOnly) as for 16-bit types.
  static constexpr bool kTransposing = kFp8 && !kVtOnly;
  // The masked 16-bit head_dim 128 x 176 instance (long causal calls): its producer, which also
  // computes each tile's visible K/V range, spilled 16 B around the Q load on 24 registers
  // (ptxas 13.0); 32 + 232 for the consumers, whose O (64) + S (88) + P (44) fit (0 spill).
  static constexpr bool kRoomyProducer = kMasked_ && !kFp8 && kHeadDim == 128 && kBlockN_ == 176;
  // The soft cap's group (cap_fragment, softcap_score.cuh): all n-tiles at once for FP8 and the
  // masked head_dim 128 x 176 instance, whose capped rows then take 0.964-0.981 of the time they
  // take in groups of two (FP8 d128 16k and 1k, FP8 d256 16k, causal d128 16k; thirty-ninth and
  // fortieth sessions; the same bits, 0 spills); two elsewhere, where all at once cost the
  // unmasked 128-key instance 4 % at 1k and gave ~1 %, inside the spread, at 16k.
  static constexpr int kCapGroup = kFp8 || kRoomyProducer ? 0 : 2;
  // The tail-row instance's producer keeps one more value per tile (24 spilled it): 32, which
  // three consumer warpgroups of 160 leave (128 x 32 + 384 x 160 = 65,536).
  static constexpr int kProducerRegs =
      kTransposing ? (kHeadDim == 128 ? 32 : 40) : kRoomyProducer || kTailRows ? 32 : 24;
  static constexpr int kConsumerRegs =
      kTransposing ? (kHeadDim == 128 ? 160 : 232) : (kConsumerWarpgroups == 3 ? 160 : kRoomyProducer ? 232 : 240);
  static_assert(128 * kProducerRegs + 128 * kConsumerWarpgroups * kConsumerRegs <= 65536, "register file");
  static constexpr int kTransposeWarps = kTransposing ? 3 : 0;
  // FP8: O + S (64) + P (16) registers in flight at once exceed what ptxas can keep for
  // asynchronous wgmma (O 128 at head_dim 256 in 232 registers; O 64 at 128 in three
  // warpgroups' 160: it serialized every wgmma, C7512, and spilled 144 B), so the FP8 instances
  // complete P V before they issue the next Q K^T; except the V^T-only head_dim 256 one, whose
  // 240 registers hold them (ptxas: 0 spill, the P V wait after the softmax in SASS).
  // 16-bit head_dim 128 on three warpgroups (kThreeWarpgroupCausalMinKeysD128): O 64 + S 64 + P 32
  // do not fit their 160 registers at once.
  static constexpr bool kSerialGemms =
      (kFp8 && !(kVtOnly && kHeadDim == 256)) || (!kFp8 && kHeadDim == 128 && kConsumerWarpgroups == 3);
  // 16-bit head_dim 64 x 192 keys: O (32) + S (96) + P (48) registers do not fit three consumer
  // warpgroups' 160, O + S do. So each warpgroup stores P in its own buffer in shared memory
  // (64 rows of kBlockN keys, K-major, 128-byte swizzle, as Q is) and the P V wgmma reads its A
  // operand from there; only O and S are in flight, and the overlapped schedule stays.
  static constexpr bool kPInSmem = !kFp8 && kHeadDim == 64 && kBlockN == kWideKeyTileD64;
  static_assert(!kPInSmem || kConsumerWarpgroups == 3, "the wide head_dim 64 instance: three consumer warpgroups");

  static constexpr int kPanels = kHeadDim * kElemBytes / 128;  // 128-byte column panels
  static constexpr int kPanelCols = 128 / kElemBytes;          // elements per panel row
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKVPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKVTileBytes = kPanels * kKVPanelBytes;
  // FP8: V^T (head_dim rows of kBlockN keys), K-major for the P V product.
  static constexpr int kVtTileBytes = kFp8 ? kHeadDim * 128 : 0;
  static constexpr int kVStageBytes = kVtOnly ? 0 : kKVTileBytes;  // a V stage (none: V^T-only)
  // kPInSmem: P of each consumer warpgroup, 64 rows x kBlockN keys in 128-byte panels of 64 keys
  // (8 KB each), K-major, 128-byte swizzle.
  static constexpr int kPPanelBytes = 64 * 128;
  static constexpr int kPBytes = kPInSmem ? kBlockN / 64 * kPPanelBytes : 0;
  static_assert(!kPInSmem || kBlockN % 64 == 0, "P: whole 64-key panels");
  // Tail rows: the merge slots of warpgroups 1.. (kernel.cuh): per thread its head_dim / 2
  // accumulators, two row maxima and two (thread-partial) row sums, fp32: 18 KB per warpgroup.
  static constexpr int kMergeSlotBytes = 128 * (kHeadDim / 2 + 4) * 4;
  static constexpr int kMergeBytes = kTailRows ? (kConsumerWarpgroups - 1) * kMergeSlotBytes : 0;
  static_assert(!(kPInSmem && kTailRows), "the tail-row instance keeps P in registers");
  // Barriers (in this order, smem_layout.cuh): Q full and Q empty per Q buffer (and per consumer
  // warpgroup with one buffer: each warpgroup's 64 rows of Q are loaded and given back on their
  // own), then K full / K empty / V full / V empty (/ Vt full / Vt empty for fp8), kStages each,
  // then tile full and tile empty per slot of the tile ring.
  static constexpr int kTileSlots = 2;  // tiles the producer publishes ahead
  // A slot: the tile index, and in the masked 16-bit head_dim 128 instances on two consumer
  // warpgroups (short causal calls, ragged causal batches) its origin as well, one 16-byte
  // vector: their consumers then skip the origin's divisions at every tile's start (kernel.cuh).
  // Also the short unmasked head_dim 128 instance (128-key tiles: calls up to 2048 keys), whose
  // slot adds a split tile's part (its launch may split the last round's tiles): 32 bytes.
  // Masked head_dim 64 too: it measured 2-4 % slower at 512-1024 keys with the origin
  // (twenty-sixth session) because ptxas then gave up the consumers' uniform registers, which the
  // __syncwarp in smem_layout.cuh's read_tile keeps (forward_sm90.md, twenty-seventh session). In the
  // rest the origin's values kept from the slot spilled (nvcc 13.0).
  static constexpr bool kOriginInSlot =
      !kFp8 && kConsumerWarpgroups == 2 &&
      (kMasked_ ? kHeadDim <= 128 : kHeadDim <= 128 && !kTailRows_ && kBlockN_ == 128);
  static constexpr int kTileSlotBytes = !kOriginInSlot ? 4 : kMasked_ ? 16 : 32;
  static constexpr int kTileSlotAlign = kOriginInSlot ? 16 : 4;  // 16-byte vectors
  static constexpr int kStageBarriers = (kFp8 ? 6 : 4) * kStages + 2 * kTileSlots;
  // Past the Q buffers: the K/V (and V^T) ring, the P buffers (kPInSmem), the barriers (Q pairs: an upper bound for
  // either Q layout, 2 x 2 or 1 x W pairs), the tile slots, and 1024 bytes because the dynamic smem base is only 16-byte aligned (the
  // kernel rounds it up).
  static constexpr int kRingBytes =
      kStages * (kKVTileBytes + kVStageBytes + kVtTileBytes) + kConsumerWarpgroups * kPBytes + kMergeBytes +
      8 * (4 * kConsumerWarpgroups + kStageBarriers) + (kOriginInSlot ? 8 : 0) + kTileSlotBytes * kTileSlots + 1024;
  // Two Q buffers where they fit: a persistent CTA loads the next tile's Q while it computes
  // this one, and stages O in this one's buffer for the TMA store. With one, the next Q load
  // waits for the epilogue (the consumers stage O in the buffer Q was in).
  static constexpr int kQBuffers = 2 * kQBytes + kRingBytes <= 227 * 1024 ? 2 : 1;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBuffers * kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVTileBytes;
  static constexpr int kVtOffset = kVOffset + kStages * kVStageBytes;
  static constexpr int kPOffset = kVtOffset + kStages * kVtTileBytes;
  static constexpr int kMergeOffset = kPOffset + kConsumerWarpgroups * kPBytes;  // 16-byte aligned
  static constexpr int kBarrierOffset = kMergeOffset + kMergeBytes;
  // Q full / Q empty pairs per buffer: one per consumer warpgroup with one buffer (smem_layout.cuh).
  static constexpr int kQGroups = kQBuffers == 1 ? kConsumerWarpgroups : 1;
  static constexpr int kQBarriers = 2 * kQBuffers * kQGroups;
  // Q arrives in boxes of kQBoxRows rows per 128-byte panel, one box row-block per warpgroup.
  static_assert(kBlockM == kQBoxRows * kConsumerWarpgroups && kQBytes == kPanels * kConsumerWarpgroups * kQBoxRows * 128,
                "a warpgroup's Q rows are one box per panel");
  static constexpr int kBarriers = kQBarriers + kStageBarriers;
  static constexpr int kTileSlotOffset = (kBarrierOffset + 8 * kBarriers + kTileSlotAlign - 1) / kTileSlotAlign * kTileSlotAlign;
  static constexpr int kSmemBytes = kTileSlotOffset + kTileSlotBytes * kTileSlots + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM must fit");
  static_assert(kKOffset % 1024 == 0 && kKVTileBytes % 1024 == 0, "swizzled tiles are 1024-byte aligned");
  static_assert(kPOffset % 1024 == 0, "P buffers are 1024-byte aligned (swizzled)");
};

}  // namespace tessera::cuda::sm90
