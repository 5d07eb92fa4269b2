// The batch-attention plan: a host-only, deterministic scheduler and the plain-data format it
// writes into the caller's workspace. A backend executes the plan without looking at the
// request lengths again.
//
// Work decomposition (FlashInfer-style):
//   - Request b's query rows are cut into Q tiles of `q_tile_rows` rows; one work item serves a
//     tile for ONE kv head and ALL query heads of that head's GQA group (rows x group query
//     vectors share every K/V load). q_tile_rows = max(1, packed_q_rows(head_dim) / group): 128 packed
//     vectors at head_dim <= 128 (the CUDA kernel runs them as two 64-vector row blocks in one
//     pass over K/V, docs/perf/mixed_batch.md), 64 at head_dim 256. A request's last tile
//     keeps its remainder of rows; what a tile is depends on the request and the config only.
//   - A tile's visible keys (mask.h: union over its rows, so causal tiles skip the masked
//     upper triangle) are cut into KV chunks of `chunk` tokens, aligned at the tile's first
//     visible key. One chunk: the item writes out/lse directly. Several: each item writes an
//     fp32 partial state (its O, normalised over its own chunk, and that chunk's LSE) and a
//     merge pass combines the partials of each split query row with math::LseMerger.
//   - A tile with no visible key still gets one item (kv range empty): it writes O = 0,
//     LSE = -inf.
//   - Item order: the prefill-shaped items (more than kDecodeMaxVectors packed query vectors)
//     first, then the decode-shaped ones, each kind in tile order (requests in order, a
//     request's tiles by first row, a tile's chunks, then kv heads); header.num_prefill_items
//     counts the first kind. A kernel for one shape walks its own contiguous range. Only a
//     request's last tile can be decode-shaped: a full tile has q_tile_rows x group > P / 2
//     vectors (P = packed_q_rows(head_dim) >= 64; one row of a group above P), more than 16.
//
// Workspace layout (all offsets 16-byte aligned, fixed for a (config, facts, workspace bytes)
// triple so a CUDA graph captured with these pointers stays valid across plan() calls):
//   PlanHeader | qo_indptr int32[max_requests + 1] | kv_len int32[max_requests]
//   | items WorkItem[max_items] | merge_indptr int32[max_q_tokens + 1]
//   | merge_row int32[max_q_tokens] | merge_partial int32[max_partial_rows]
//   | partial_lse f32[max_partial_rows * heads_q] | partial_o f32[max_partial_rows * heads_q * head_dim]
// Counts (batch, num_items, num_merge_rows) live in the header, so a fixed-grid kernel reads
// them at run time: a grid of layout.max_items items (or a persistent loop) stays correct.
//
// Partial row p holds one query token's partial state for every query head:
//   partial_o[(p * heads_q + h) * head_dim + d], partial_lse[p * heads_q + h].
// The items of one (tile, chunk) for different kv heads share partial rows and write
// disjoint heads. A split tile with R rows and K chunks owns rows base + c * R + r.
// Merge row m combines, for token merge_row[m] (a global q row), the partial rows
// merge_partial[merge_indptr[m] .. merge_indptr[m + 1]) in KV order (deterministic).
//
// Automatic split (SplitPolicy::automatic): with S = num_sms x kDecodeCtasPerSm resident slots,
// tiles stay whole when they already give >= S items (tiles x heads_kv), or when no tile is
// longer than one chunk unit (kKVTile, or the page when pages are multiples of it). Otherwise
// the chunk is a multiple of the unit chosen, over w = 1..kMaxSplitWaves, as the largest chunk
// giving <= w S items and no smaller than the workspace allows; among those it takes the least
// ceil(items / S) x (longest item + kItemOverheadTokens) (the per-CTA critical path of a
// static round-robin over S slots), the fewest items on ties. The one-wave candidate may give
// fewer than S items (some slots idle): 8 x 32k at S = 264 takes 256 items of 8192 keys, one
// per CTA, rather than 512 of 4096, two per CTA for 248 CTAs (the same keys per busy CTA, one
// item's fixed cost less; docs/perf/decode.md, "Eleventh session").
//
// Capacity: the fixed part is sized by (max_requests, max_q_tokens); the split region by a
// number P of partial rows (each split (tile, chunk) takes at least one, so P also bounds the
// items of split tiles):
//   max_items = (max_tiles + P) * heads_kv,
//   max_tiles = floor((max_q_tokens + max_requests * (q_tile_rows - 1)) / q_tile_rows).
// workspace_size() gives P = default_partial_rows() (enough for automatic mode, which picks
// its chunk size within it); a larger workspace yields more rows (fixed mode with small
// chunks on long sequences may need them; plan() says how many bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/batch.h"

namespace tessera::plan {

inline constexpr std::uint32_t kPlanMagic = 0x31504254u;  // "TBP1"
inline constexpr std::uint32_t kPlanVersion = 2;  // 2: prefill-shaped items first, num_prefill_items
// Target query vectors (rows x group) per work item: 128 at head_dim <= 128 (two 64-vector
// row blocks that share every K/V tile on CUDA), 64 at head_dim 256 (where one block already
// takes 128 fp32 accumulators per thread). Host and device (the CUDA kernel's unit size).
inline constexpr int kPackedQRowsMax = 128;
constexpr int packed_q_rows(int head_dim) { return head_dim <= 128 ? kPackedQRowsMax : 64; }
// Items of at most this many packed query vectors (rows x group) are decode-shaped: one m16
// block of query vectors, which the CUDA decode path serves with the KV tile split over warps.
inline constexpr int kDecodeMaxVectors = 16;
constexpr bool prefill_shaped(int rows, int group) {
  return static_cast<long long>(rows) * group > kDecodeMaxVectors;
}
// A full tile (q_tile_rows x group > packed_q_rows / 2 vectors) is never decode-shaped, so only
// a request's last tile can be: the planner's unsplit sweep relies on it ("Item order").
static_assert(packed_q_rows(256) / 2 >= kDecodeMaxVectors && packed_q_rows(128) / 2 >= kDecodeMaxVectors);
inline constexpr int kKVTile = 64;       // KV tokens per tile; automatic chunks are multiples
inline constexpr int kMinSplitSlots = 64;  // default room: (tile, chunk) pairs of 64-vector (half) tiles
// Resident CTAs per SM of the decode-shaped CUDA instance (cuda/batch/kernel_traits.cuh,
// Traits<128, 4>: 106,624 B of smem + 1 KB reserved, 2 fit in the 228 KB of an sm_90 SM; 128
// threads). The persistent grid is num_sms x this, CTA x running items x, x + grid, ...; the
// automatic split counts waves of num_sms x kDecodeCtasPerSm items (docs/perf/decode.md).
// head_dim 64 fits 3 and 256 fits 1; the head_dim 128 figure is used for all.
inline constexpr int kDecodeCtasPerSm = 2;
// Automatic split cost of an item beyond its keys, in KV tokens: the prologue (page lookups,
// pipeline fill) and the merge of its partial, about one KV tile's streaming time.
inline constexpr int kItemOverheadTokens = kKVTile;
inline constexpr int kMaxSplitWaves = 4;  // automatic split: waves of resident slots considered
inline constexpr std::size_t kAlign = 16;

struct alignas(16) PlanHeader {
  std::uint32_t magic = kPlanMagic;
  std::uint32_t version = kPlanVersion;
  std::uint64_t generation = 0;  // unique per plan() in the process; run() checks it
  std::int32_t batch = 0;
  std::int32_t total_q = 0;
  std::int32_t num_items = 0;
  std::int32_t num_merge_rows = 0;
  std::int32_t num_partial_rows = 0;
  std::int32_t q_tile_rows = 0;
  std::int32_t heads_q = 0;
  std::int32_t heads_kv = 0;
  std::int32_t head_dim = 0;
  std::int32_t split_slots = 0;  // (tile, chunk) pairs of split tiles
  std::int32_t num_prefill_items = 0;  // items [0, this) are prefill-shaped, the rest decode-shaped
  // Claim counter of the decode-shaped items, for a backend whose CTAs take those items by an
  // atomic increment (CUDA on compute capability 9.0: the default SM split, and sm90-coresident). plan() writes 0; such a run
  // leaves it 0 again (its last CTA resets it), so the next run, a graph replay, or a run after
  // a new plan() starts from 0 without a host write. Hence one run() in flight per workspace
  // (as split rows' partials already require); a run that fails mid-way, or two runs of one
  // workspace at once, can leave it dirty until the next plan().
  std::uint32_t decode_claim = 0;
};
static_assert(sizeof(PlanHeader) == 64);

inline constexpr std::int32_t kDirect = -1;  // WorkItem::partial_row: write out/lse directly

struct alignas(16) WorkItem {
  std::int32_t request;
  std::int32_t kv_head;
  std::int32_t q_begin;   // rows [q_begin, q_end) of the request (add qo_indptr[request])
  std::int32_t q_end;
  std::int32_t kv_begin;  // keys [kv_begin, kv_end) of the request
  std::int32_t kv_end;
  std::int32_t partial_row;  // kDirect, or the partial row of q_begin (rows follow on)
  std::int32_t chunk;        // chunk index within the tile (0 for direct items)
};
static_assert(sizeof(WorkItem) == 32);

// What the planner needs from BatchConfig and DeviceFacts.
struct PlanConfig {
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int page_size = 1;
  int max_requests = 0;
  int max_q_tokens = 0;
  int num_sms = 1;
  SplitPolicy split;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
};
PlanConfig make_plan_config(const BatchConfig& config, const DeviceFacts& facts);

// Byte offsets from the workspace start, and capacities.
struct WorkspaceLayout {
  std::uint64_t header = 0, qo_indptr = 0, kv_len = 0, items = 0, merge_indptr = 0, merge_row = 0,
                merge_partial = 0, partial_lse = 0, partial_o = 0;
  std::uint64_t plan_bytes = 0;   // end of the plan arrays (= partial_lse)
  std::uint64_t total_bytes = 0;  // end of partial_o
  std::int32_t max_requests = 0, max_q_tokens = 0, max_tiles = 0, max_items = 0, max_partial_rows = 0,
               q_tile_rows = 0, heads_q = 0, head_dim = 0;
};

int q_tile_rows(int heads_q, int heads_kv, int head_dim);
int default_partial_rows(const PlanConfig& cfg);
WorkspaceLayout layout_for_partial_rows(const PlanConfig& cfg, std::int64_t partial_rows);
// The layout a workspace of `bytes` gets: the most partial rows that fit (at least the
// default). Throws workspace_too_small (argument "workspace") when even the default does not fit.
WorkspaceLayout workspace_layout(const PlanConfig& cfg, std::size_t bytes);

// Views of the plan arrays inside a workspace (or a host image) with a given layout.
struct PlanView {
  PlanHeader* header;
  std::int32_t* qo_indptr;
  std::int32_t* kv_len;
  WorkItem* items;
  std::int32_t* merge_indptr;
  std::int32_t* merge_row;
  std::int32_t* merge_partial;
  float* partial_lse;
  float* partial_o;
};
PlanView plan_view(void* base, const WorkspaceLayout& layout);

// Per-tile facts kept between the counting and the writing pass (reused, no allocation once
// grown to the capacity).
struct PlanScratch {
  struct Tile { std::int32_t request, q_begin, q_end, kv_begin, kv_end; };
  std::vector<Tile> tiles;
  std::vector<Tile> long_tiles;  // tiles longer than one chunk unit: the only ones a search splits
};

struct PlanSummary {
  int batch = 0;
  std::int64_t total_q = 0;
  int num_tiles = 0;
  int num_items = 0;
  int num_merge_rows = 0;
  int num_partial_rows = 0;
  int split_slots = 0;
  int num_prefill_items = 0;      // items [0, this) are prefill-shaped (see "Item order")
  std::int64_t chunk_tokens = 0;  // chosen chunk size; 0 = no split
  // Work of the two kinds (summed over KV heads; launch-shape hints only, never what is computed):
  // prefill-shaped items' query rows x keys, decode-shaped items' keys.
  std::int64_t prefill_row_keys = 0;
  std::int64_t decode_keys = 0;
};

// Partials per split query row, rounded up (0 without split rows): what picks the CUDA merge
// kernel (cuda/batch/batch_args.h, merge_uses_fan_in_kernel).
inline int mean_merge_fan_in(const PlanSummary& s) {
  return s.num_merge_rows > 0
             ? static_cast<int>((static_cast<std::int64_t>(s.num_partial_rows) + s.num_merge_rows - 1) / s.num_merge_rows)
             : 0;
}

// Byte ranges (offsets from the workspace start, in order) that hold what run() reads of a
// plan: the header, request arrays and items, then the used parts of the merge arrays (none when
// no row is split); the unused tails of the capacity-sized arrays are left out. Ranges less than
// kCopyGapBytes apart are joined: one more host-to-device copy call costs more than copying
// that many unused bytes. For copying a host image of the plan to a device workspace.
inline constexpr std::uint64_t kCopyGapBytes = 16 * 1024;
struct ByteRange {
  std::uint64_t begin = 0, end = 0;
};
struct PlanRanges {
  ByteRange range[4];
  int count = 0;
};
PlanRanges used_ranges(const WorkspaceLayout& layout, const PlanSummary& summary);

// Builds the plan for requests (q_lens[b], kv_lens[b]) (already validated: same size,
// non-negative, within max_requests / max_q_tokens) into `dst` laid out as `layout`.
// Checks the partial-row capacity first and throws workspace_too_small (naming
// "workspace", with the bytes needed) before writing anything. splits_per_request, if given,
// receives each request's largest chunk count over its tiles (0 for q_len = 0).
PlanSummary build_plan(const PlanConfig& cfg, const WorkspaceLayout& layout, std::span<const std::int32_t> q_lens,
                       std::span<const std::int32_t> kv_lens, std::uint64_t generation, void* dst,
                       PlanScratch& scratch, std::vector<std::int32_t>* splits_per_request = nullptr);

}  // namespace tessera::plan
