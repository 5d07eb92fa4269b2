// The batch-attention planner (format and rules in batch_plan.h).
#include "plan/batch_plan.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>

#include "api/validate.h"
#include "math/mask.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tessera::plan {
namespace {

std::uint64_t align_up(std::uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Chunk granularity: a KV tile, or the page when pages are whole multiples of the tile (so
// chunks never split a page); when the page divides the tile, tile multiples are page-aligned.
std::int64_t chunk_unit(int page_size) { return page_size % kKVTile == 0 ? page_size : kKVTile; }

// Totals of the split tiles for a chunk size (chunk <= 0: no split).
struct SplitCount {
  std::int64_t chunks = 0;     // chunks over all tiles (direct tiles count 1)
  std::int64_t slots = 0;      // chunks of split tiles
  std::int64_t partial_rows = 0;
};

// Over tiles[0, n) of num_tiles tiles (the others are known to stay whole). With
// longest_first (tiles sorted by KV length, longest first) it stops at the first tile that
// fits in one chunk: the chunk searches probe up to ~100 sizes and mostly split few tiles.
SplitCount count_splits(const PlanScratch::Tile* tiles, int n, int num_tiles, std::int64_t chunk,
                        bool longest_first = false) {
  SplitCount c;
  c.chunks = num_tiles;
  if (chunk <= 0) return c;
  for (int t = 0; t < n; ++t) {
    const auto& tile = tiles[t];
    const std::int64_t len = tile.kv_end - tile.kv_begin;
    if (len <= chunk) {  // one chunk: direct
      if (longest_first) break;
      continue;
    }
    const std::int64_t k = ceil_div(len, chunk);
    c.chunks += k - 1;
    c.slots += k;
    c.partial_rows += k * (tile.q_end - tile.q_begin);
  }
  return c;
}

bool fits(const SplitCount& c, const WorkspaceLayout& layout) { return c.partial_rows <= layout.max_partial_rows; }

// Writes the items of one (tile, chunk) for kv heads 0..heads_kv-1 from `out` on; returns the
// end. Items are most of the plan's bytes (a 256-request batch has thousands), so this loop is
// plan()'s largest cost: two 16-byte stores per item where only kv_head changes.
WorkItem* write_items(WorkItem* out, int heads_kv, std::int32_t request, std::int32_t q_begin, std::int32_t q_end,
                      std::int32_t kv_begin, std::int32_t kv_end, std::int32_t partial_row, std::int32_t chunk) {
#if defined(__SSE2__)
  static_assert(offsetof(WorkItem, kv_head) == 4 && offsetof(WorkItem, kv_begin) == 16);
  __m128i head = _mm_setr_epi32(request, 0, q_begin, q_end);
  const __m128i tail = _mm_setr_epi32(kv_begin, kv_end, partial_row, chunk);
  const __m128i next_head = _mm_setr_epi32(0, 1, 0, 0);
  auto* p = reinterpret_cast<__m128i*>(out);  // WorkItem is 16-byte aligned
#pragma GCC unroll 8
  for (int h = 0; h < heads_kv; ++h, p += 2) {
    _mm_store_si128(p, head);
    _mm_store_si128(p + 1, tail);
    head = _mm_add_epi32(head, next_head);
  }
  return out + heads_kv;
#else
  for (int h = 0; h < heads_kv; ++h) *out++ = WorkItem{request, h, q_begin, q_end, kv_begin, kv_end, partial_row, chunk};
  return out;
#endif
}

// Keys visible to rows [q0, q1) of a request, {0, 0} when none.
math::KeyRange tile_keys(const math::MaskSpec& mask, int q0, int q1) {
  const math::KeyRange keys = math::visible_keys_of_rows(mask, q0, q1);
  return keys.empty() ? math::KeyRange{0, 0} : keys;
}

// True when no tile can be split whatever the KV lengths: SplitPolicy::disabled, or automatic
// with at least one whole-tile item per resident slot (the first rule of the automatic split).
bool never_split(const PlanConfig& cfg, int t_rows, std::span<const std::int32_t> q_lens) {
  if (cfg.split.mode == SplitPolicy::Mode::disabled) return true;
  if (cfg.split.mode != SplitPolicy::Mode::automatic) return false;
  const std::int64_t slots = static_cast<std::int64_t>(kDecodeCtasPerSm) * cfg.num_sms;
  std::int64_t items = 0;
  for (const std::int32_t q : q_lens) {
    items += (q <= t_rows ? (q > 0 ? 1 : 0) : ceil_div(q, t_rows)) * cfg.heads_kv;  // this request's tiles
    if (items >= slots) return true;
  }
  return false;
}

// Header of a written plan, and its summary.
PlanSummary finish_plan(const PlanConfig& cfg, const PlanView& v, std::uint64_t generation, int batch,
                        std::int64_t total_q, int t_rows, int num_tiles, int n_items, int n_prefill, int n_merge,
                        int n_prow, std::int64_t split_slots, std::int64_t chunk) {
  PlanHeader h;
  h.generation = generation;
  h.batch = batch;
  h.total_q = static_cast<std::int32_t>(total_q);
  h.num_items = n_items;
  h.num_merge_rows = n_merge;
  h.num_partial_rows = n_prow;
  h.q_tile_rows = t_rows;
  h.heads_q = cfg.heads_q;
  h.heads_kv = cfg.heads_kv;
  h.head_dim = cfg.head_dim;
  h.split_slots = static_cast<std::int32_t>(split_slots);
  h.num_prefill_items = n_prefill;
  std::memcpy(v.header, &h, sizeof h);

  PlanSummary s;
  s.batch = batch;
  s.total_q = total_q;
  s.num_tiles = num_tiles;
  s.num_items = n_items;
  s.num_merge_rows = n_merge;
  s.num_partial_rows = n_prow;
  s.split_slots = static_cast<int>(split_slots);
  s.num_prefill_items = n_prefill;
  s.chunk_tokens = split_slots > 0 ? chunk : 0;
  // Items of one tile repeat for each KV head (write_items): count the first head's only.
  for (int i = 0; i < n_items; i += cfg.heads_kv) {
    const WorkItem& w = v.items[i];
    const std::int64_t keys = w.kv_end - w.kv_begin;
    if (i < n_prefill)
      s.prefill_row_keys += static_cast<std::int64_t>(w.q_end - w.q_begin) * keys;
    else
      s.decode_keys += keys;
  }
  s.prefill_row_keys *= cfg.heads_kv;
  s.decode_keys *= cfg.heads_kv;
  return s;
}

// Tile keys of the unsplit sweep. Without a window the range needs no general clamping: all
// keys (not causal), or keys up to the diagonal of the tile's last row (causal, bottom-right);
// the same ranges as tile_keys() (the planner tests compare the plans byte for byte).
struct AllKeys {
  math::KeyRange operator()(int, int kv_len, int, int) const { return {0, kv_len}; }
};
struct CausalKeys {
  math::KeyRange operator()(int q_len, int kv_len, int, int q1) const {
    return {0, static_cast<int>(std::max<std::int64_t>(0, static_cast<std::int64_t>(q1) + kv_len - q_len))};
  }
};
struct WindowKeys {
  const PlanConfig& cfg;
  math::KeyRange operator()(int q_len, int kv_len, int q0, int q1) const {
    return tile_keys(math::MaskSpec::make(q_len, kv_len, cfg.causal, cfg.window_left, cfg.window_right), q0, q1);
  }
};

template <class Keys>
PlanSummary sweep_unsplit(const PlanConfig& cfg, const WorkspaceLayout& layout, std::span<const std::int32_t> q_lens,
                          std::span<const std::int32_t> kv_lens, std::uint64_t generation, void* dst,
                          std::int32_t* splits, Keys keys_of) {
  const int batch = static_cast<int>(q_lens.size());
  const int t_rows = layout.q_tile_rows;
  const PlanView v = plan_view(dst, layout);
  const int group = cfg.heads_q / cfg.heads_kv;
  WorkItem* item = v.items;
  int num_tiles = 0;
  std::int32_t q_off = 0;
  v.qo_indptr[0] = 0;
  // Prefill-shaped tiles first (every tile but a short last one), then the decode-shaped last
  // tiles (see "Item order" in batch_plan.h).
  for (int b = 0; b < batch; ++b) {
    const int q_len = q_lens[b], kv_len = kv_lens[b];
    q_off += q_len;
    v.qo_indptr[b + 1] = q_off;
    v.kv_len[b] = kv_len;
    if (splits) splits[b] = q_len > 0 ? 1 : 0;
    for (int q0 = 0; q0 < q_len; q0 += t_rows, ++num_tiles) {
      const int q1 = std::min(q_len, q0 + t_rows);
      if (!prefill_shaped(q1 - q0, group)) continue;
      const math::KeyRange keys = keys_of(q_len, kv_len, q0, q1);
      item = write_items(item, cfg.heads_kv, b, q0, q1, keys.begin, keys.end, kDirect, 0);
    }
  }
  const int n_prefill = static_cast<int>(item - v.items);
  for (int b = 0; b < batch; ++b) {
    const int q_len = q_lens[b];
    if (q_len == 0) continue;
    const int q0 = (q_len - 1) / t_rows * t_rows;  // the last tile: the only one that can be short
    if (prefill_shaped(q_len - q0, group)) continue;
    const math::KeyRange keys = keys_of(q_len, kv_lens[b], q0, q_len);
    item = write_items(item, cfg.heads_kv, b, q0, q_len, keys.begin, keys.end, kDirect, 0);
  }
  v.merge_indptr[0] = 0;
  return finish_plan(cfg, v, generation, batch, q_off, t_rows, num_tiles, static_cast<int>(item - v.items), n_prefill,
                     0, 0, 0, 0);
}

// The plan when never_split(): no chunk search and no capacity check, so one sweep over the
// requests writes the items as it finds the tiles (the same plan the general path writes).
PlanSummary build_unsplit_plan(const PlanConfig& cfg, const WorkspaceLayout& layout,
                               std::span<const std::int32_t> q_lens, std::span<const std::int32_t> kv_lens,
                               std::uint64_t generation, void* dst, std::int32_t* splits) {
  if (cfg.window_left < 0 && cfg.causal)
    return sweep_unsplit(cfg, layout, q_lens, kv_lens, generation, dst, splits, CausalKeys{});
  if (cfg.window_left < 0 && cfg.window_right < 0)
    return sweep_unsplit(cfg, layout, q_lens, kv_lens, generation, dst, splits, AllKeys{});
  return sweep_unsplit(cfg, layout, q_lens, kv_lens, generation, dst, splits, WindowKeys{cfg});
}

}  // namespace

PlanConfig make_plan_config(const BatchConfig& config, const DeviceFacts& facts) {
  PlanConfig c;
  c.heads_q = config.heads_q;
  c.heads_kv = config.heads_kv;
  c.head_dim = config.head_dim;
  c.page_size = config.page_size;
  c.max_requests = config.max_requests;
  c.max_q_tokens = config.max_q_tokens;
  c.num_sms = std::max(1, facts.num_sms);
  c.split = config.split;
  c.causal = config.options.causal;
  c.window_left = config.options.window_left;
  c.window_right = config.options.window_right;
  return c;
}

int q_tile_rows(int heads_q, int heads_kv, int head_dim) {
  const int group = heads_q / std::max(1, heads_kv);
  return std::max(1, packed_q_rows(head_dim) / std::max(1, group));
}

int default_partial_rows(const PlanConfig& cfg) {
  // Automatic mode keeps its items near 2 * num_sms; room for 4 * num_sms items' partials of
  // half a tile each (a 64-vector row block at head_dim <= 128, a whole 64-vector tile at 256:
  // the size before tiles of 128 vectors, so the default workspace did not double with them)
  // leaves room for at least 2 * num_sms split items of whole tiles (the automatic search picks
  // its chunk within the room; decode rows take 1 row a slot). Rounded up: with floor(64 / g)
  // a group such as 5 (tiles of 25 rows, half tiles 12.5) had room for fewer.
  const std::int64_t slots =
      std::clamp<std::int64_t>(ceil_div(4LL * cfg.num_sms, std::max(1, cfg.heads_kv)), kMinSplitSlots, 1 << 20);
  const std::int64_t t = q_tile_rows(cfg.heads_q, cfg.heads_kv, cfg.head_dim);
  const std::int64_t rows_per_slot = ceil_div(t * 64, packed_q_rows(cfg.head_dim));
  return static_cast<int>(std::min<std::int64_t>(slots * rows_per_slot, 1 << 26));
}

WorkspaceLayout layout_for_partial_rows(const PlanConfig& cfg, std::int64_t rows) {
  WorkspaceLayout l;
  const std::int64_t t = q_tile_rows(cfg.heads_q, cfg.heads_kv, cfg.head_dim);
  const std::int64_t max_tiles = (cfg.max_q_tokens + static_cast<std::int64_t>(cfg.max_requests) * (t - 1)) / t;
  // Keep every index of the plan within int32.
  const std::int64_t row_cap = INT32_MAX / std::max(cfg.heads_kv, 1) - max_tiles;
  rows = std::clamp<std::int64_t>(rows, 0, std::max<std::int64_t>(row_cap, 0));
  l.max_requests = cfg.max_requests;
  l.max_q_tokens = cfg.max_q_tokens;
  l.max_tiles = static_cast<std::int32_t>(max_tiles);
  l.max_items = static_cast<std::int32_t>((max_tiles + rows) * cfg.heads_kv);
  l.max_partial_rows = static_cast<std::int32_t>(rows);
  l.q_tile_rows = static_cast<std::int32_t>(t);
  l.heads_q = cfg.heads_q;
  l.head_dim = cfg.head_dim;

  std::uint64_t at = 0;
  auto place = [&](std::uint64_t bytes) {
    const std::uint64_t off = at;
    at = align_up(at + bytes);
    return off;
  };
  const std::uint64_t i32 = sizeof(std::int32_t);
  l.header = place(sizeof(PlanHeader));
  l.qo_indptr = place(i32 * (static_cast<std::uint64_t>(cfg.max_requests) + 1));
  l.kv_len = place(i32 * static_cast<std::uint64_t>(cfg.max_requests));
  l.items = place(sizeof(WorkItem) * static_cast<std::uint64_t>(l.max_items));
  l.merge_indptr = place(i32 * (static_cast<std::uint64_t>(cfg.max_q_tokens) + 1));
  l.merge_row = place(i32 * static_cast<std::uint64_t>(cfg.max_q_tokens));
  l.merge_partial = place(i32 * static_cast<std::uint64_t>(l.max_partial_rows));
  l.plan_bytes = at;
  const std::uint64_t prow_heads = static_cast<std::uint64_t>(l.max_partial_rows) * static_cast<std::uint64_t>(cfg.heads_q);
  l.partial_lse = place(sizeof(float) * prow_heads);
  l.partial_o = place(sizeof(float) * prow_heads * static_cast<std::uint64_t>(cfg.head_dim));
  l.total_bytes = at;
  return l;
}

WorkspaceLayout workspace_layout(const PlanConfig& cfg, std::size_t bytes) {
  const int def = default_partial_rows(cfg);
  WorkspaceLayout l = layout_for_partial_rows(cfg, def);
  if (bytes < l.total_bytes)
    validate::fail(ErrorCode::workspace_too_small, "workspace",
                   "at least " + std::to_string(l.total_bytes) + " bytes (BatchAttention::workspace_size)",
                   std::to_string(bytes) + " bytes");
  // Spare bytes become extra partial rows (with their items); alignment padding may cost a few.
  const std::uint64_t per_row = sizeof(WorkItem) * static_cast<std::uint64_t>(cfg.heads_kv) + sizeof(std::int32_t) +
                                sizeof(float) * static_cast<std::uint64_t>(cfg.heads_q) *
                                    (1 + static_cast<std::uint64_t>(cfg.head_dim));
  // The estimate can be off by a row either way (each region is padded to its alignment), so
  // walk down until it fits, then up while the next row still fits: a workspace of exactly
  // layout_for_partial_rows(R).total_bytes (what plan() asks for) must give R rows.
  std::int64_t rows = def + static_cast<std::int64_t>((bytes - l.total_bytes) / per_row);
  while (rows > def && layout_for_partial_rows(cfg, rows).total_bytes > bytes) --rows;
  while (layout_for_partial_rows(cfg, rows + 1).total_bytes <= bytes &&
         layout_for_partial_rows(cfg, rows + 1).max_partial_rows == rows + 1)
    ++rows;
  return rows > def ? layout_for_partial_rows(cfg, rows) : l;
}

PlanView plan_view(void* base, const WorkspaceLayout& l) {
  auto* b = static_cast<unsigned char*>(base);
  return PlanView{reinterpret_cast<PlanHeader*>(b + l.header),
                  reinterpret_cast<std::int32_t*>(b + l.qo_indptr),
                  reinterpret_cast<std::int32_t*>(b + l.kv_len),
                  reinterpret_cast<WorkItem*>(b + l.items),
                  reinterpret_cast<std::int32_t*>(b + l.merge_indptr),
                  reinterpret_cast<std::int32_t*>(b + l.merge_row),
                  reinterpret_cast<std::int32_t*>(b + l.merge_partial),
                  reinterpret_cast<float*>(b + l.partial_lse),
                  reinterpret_cast<float*>(b + l.partial_o)};
}

PlanRanges used_ranges(const WorkspaceLayout& l, const PlanSummary& summary) {
  const std::uint64_t i32 = sizeof(std::int32_t);
  const auto n_items = static_cast<std::uint64_t>(summary.num_items);
  const auto n_merge = static_cast<std::uint64_t>(summary.num_merge_rows);
  const auto n_prow = static_cast<std::uint64_t>(summary.num_partial_rows);
  PlanRanges r;
  auto add = [&r](std::uint64_t begin, std::uint64_t end) {
    if (r.count > 0 && begin - r.range[r.count - 1].end < kCopyGapBytes) r.range[r.count - 1].end = end;
    else r.range[r.count++] = {begin, end};
  };
  add(l.header, l.items + sizeof(WorkItem) * n_items);
  if (n_merge > 0) {  // the merge kernel reads merge rows [0, num_merge_rows) only
    add(l.merge_indptr, l.merge_indptr + i32 * (n_merge + 1));
    add(l.merge_row, l.merge_row + i32 * n_merge);
    add(l.merge_partial, l.merge_partial + i32 * n_prow);
  }
  return r;
}

PlanSummary build_plan(const PlanConfig& cfg, const WorkspaceLayout& layout, std::span<const std::int32_t> q_lens,
                       std::span<const std::int32_t> kv_lens, std::uint64_t generation, void* dst,
                       PlanScratch& scratch, std::vector<std::int32_t>* splits_per_request) {
  const int batch = static_cast<int>(q_lens.size());
  const int t_rows = layout.q_tile_rows;
  if (never_split(cfg, t_rows, q_lens)) {
    std::int32_t* splits = nullptr;
    if (splits_per_request) {
      splits_per_request->resize(static_cast<std::size_t>(batch));
      splits = splits_per_request->data();
    }
    return build_unsplit_plan(cfg, layout, q_lens, kv_lens, generation, dst, splits);
  }

  // Pass 1: Q tiles and the keys each one can see (no per-token work).
  if (scratch.tiles.size() < static_cast<std::size_t>(layout.max_tiles))
    scratch.tiles.resize(static_cast<std::size_t>(layout.max_tiles));
  int num_tiles = 0;
  std::int64_t total_q = 0, max_len = 0;
  for (int b = 0; b < batch; ++b) {
    const int q_len = q_lens[b], kv_len = kv_lens[b];
    total_q += q_len;
    const math::MaskSpec mask = math::MaskSpec::make(q_len, kv_len, cfg.causal, cfg.window_left, cfg.window_right);
    for (int q0 = 0; q0 < q_len; q0 += t_rows) {
      const int q1 = std::min(q_len, q0 + t_rows);
      const math::KeyRange keys = tile_keys(mask, q0, q1);
      // Capacity of max_tiles follows from the validated q token and request limits.
      scratch.tiles[static_cast<std::size_t>(num_tiles++)] = {b, q0, q1, keys.begin, keys.end};
      max_len = std::max<std::int64_t>(max_len, keys.end - keys.begin);
    }
  }

  // Pass 2: the chunk size.
  std::int64_t chunk = 0;
  const std::int64_t base_items = static_cast<std::int64_t>(num_tiles) * cfg.heads_kv;
  switch (cfg.split.mode) {
    case SplitPolicy::Mode::disabled: chunk = 0; break;
    case SplitPolicy::Mode::fixed: chunk = cfg.split.kv_chunk_tokens; break;
    case SplitPolicy::Mode::automatic: {
      const std::int64_t slots = static_cast<std::int64_t>(kDecodeCtasPerSm) * cfg.num_sms;
      const std::int64_t unit = chunk_unit(cfg.page_size);
      if (base_items >= slots || max_len <= unit) break;
      // Items and partial rows only fall as the chunk grows (chunk = k * unit), so each bound
      // below is a binary search over k. Chunks are >= unit, so only tiles longer than a unit
      // can split: search over those, longest first (each count stops at the first tile that
      // stays whole; the sums do not depend on the order).
      auto& longs = scratch.long_tiles;
      longs.clear();
      for (int t = 0; t < num_tiles; ++t) {
        const auto& tile = scratch.tiles[static_cast<std::size_t>(t)];
        if (tile.kv_end - tile.kv_begin > unit) longs.push_back(tile);
      }
      std::sort(longs.begin(), longs.end(), [](const PlanScratch::Tile& a, const PlanScratch::Tile& b) {
        return a.kv_end - a.kv_begin > b.kv_end - b.kv_begin;
      });
      const int n_long = static_cast<int>(longs.size());
      auto count = [&](std::int64_t k) { return count_splits(longs.data(), n_long, num_tiles, k * unit, true); };
      auto items_of = [&](std::int64_t k) { return count(k).chunks * cfg.heads_kv; };
      const std::int64_t k_max = ceil_div(max_len, unit);
      std::int64_t lo = 1, hi = k_max;  // smallest feasible k; k_max is feasible (no split)
      while (lo < hi) {
        const std::int64_t mid = (lo + hi) / 2;
        if (fits(count(mid), layout)) hi = mid; else lo = mid + 1;
      }
      const std::int64_t k_feasible = lo;
      // Candidates: for w waves, the smallest k (the most chunks) with items <= w * slots, within [k_feasible, k_max] (room in the workspace); it falls
      // as w grows, so each search starts below the last. Cost: waves x (longest item +
      // overhead). The one-wave candidate may leave slots idle (items < slots): with equal
      // chunks every CTA of a partial second wave still runs two items, so 8 x 32k (64 (request,
      // head) pairs) is as long on 256 items of 8192 keys (one each, 8 slots idle) as on 512
      // of 4096 (two each, 16 slots idle in the second wave), minus one item's fixed cost
      // (docs/perf/decode.md, "Eleventh session").
      std::int64_t best_k = k_max, best_cost = -1, k_prev = k_max;
      for (int w = 1; w <= kMaxSplitWaves; ++w) {
        lo = k_feasible, hi = k_prev;
        while (lo < hi) {
          const std::int64_t mid = (lo + hi) / 2;
          if (items_of(mid) <= w * slots) hi = mid; else lo = mid + 1;
        }
        const std::int64_t k = lo;
        k_prev = k;
        const std::int64_t cost =
            ceil_div(items_of(k), slots) * (std::min(k * unit, max_len) + static_cast<std::int64_t>(kItemOverheadTokens));
        if (best_cost < 0 || cost < best_cost || (cost == best_cost && k > best_k)) best_k = k, best_cost = cost;
        if (k == k_feasible) break;  // no smaller chunk is allowed
      }
      chunk = best_k * unit;
      if (chunk >= max_len) chunk = 0;
      break;
    }
  }
  const SplitCount counts = count_splits(scratch.tiles.data(), num_tiles, num_tiles, chunk);
  if (!fits(counts, layout)) {
    const WorkspaceLayout needed = layout_for_partial_rows(cfg, counts.partial_rows);
    validate::fail(ErrorCode::workspace_too_small, "workspace",
                   "at least " + std::to_string(needed.total_bytes) + " bytes for " +
                       std::to_string(counts.partial_rows) + " partial rows of split query tiles (KV chunks of " +
                       std::to_string(chunk) + " tokens)",
                   std::to_string(layout.total_bytes) + " usable bytes (room for " +
                       std::to_string(layout.max_partial_rows) + " partial rows)");
  }

  // Pass 3: write the plan. Nothing above touched dst.
  PlanView v = plan_view(dst, layout);
  std::int32_t q_off = 0;
  v.qo_indptr[0] = 0;
  for (int b = 0; b < batch; ++b) {
    q_off += q_lens[b];
    v.qo_indptr[b + 1] = q_off;
    v.kv_len[b] = kv_lens[b];
  }
  std::int32_t* splits = nullptr;
  if (splits_per_request) {
    splits_per_request->assign(static_cast<std::size_t>(batch), 0);
    splits = splits_per_request->data();
  }

  WorkItem* item = v.items;
  int n_merge = 0, n_prow = 0;
  v.merge_indptr[0] = 0;
  std::int32_t merge_entries = 0;
  auto write_tile = [&](const PlanScratch::Tile& tile) {
    const std::int64_t len = tile.kv_end - tile.kv_begin;
    const int k = (chunk > 0 && len > chunk) ? static_cast<int>(ceil_div(len, chunk)) : 1;
    if (splits && splits[tile.request] < k) splits[tile.request] = k;
    if (k == 1) {
      item = write_items(item, cfg.heads_kv, tile.request, tile.q_begin, tile.q_end, tile.kv_begin, tile.kv_end,
                         kDirect, 0);
      return;
    }
    const int rows = tile.q_end - tile.q_begin;
    const int base = n_prow;
    for (int c = 0; c < k; ++c) {
      const auto kb = static_cast<std::int32_t>(tile.kv_begin + c * chunk);
      const auto ke = static_cast<std::int32_t>(std::min<std::int64_t>(tile.kv_end, tile.kv_begin + (c + 1) * chunk));
      item = write_items(item, cfg.heads_kv, tile.request, tile.q_begin, tile.q_end, kb, ke, base + c * rows, c);
    }
    n_prow += k * rows;
    const std::int32_t row0 = v.qo_indptr[tile.request] + tile.q_begin;
    for (int r = 0; r < rows; ++r) {
      v.merge_row[n_merge] = row0 + r;
      for (int c = 0; c < k; ++c) v.merge_partial[merge_entries++] = base + c * rows + r;
      v.merge_indptr[++n_merge] = merge_entries;
    }
  };
  // The prefill-shaped tiles, then the decode-shaped ones ("Item order" in batch_plan.h);
  // partial and merge rows are numbered in the order written.
  const int group = cfg.heads_q / cfg.heads_kv;
  for (int t = 0; t < num_tiles; ++t) {
    const PlanScratch::Tile& tile = scratch.tiles[static_cast<std::size_t>(t)];
    if (prefill_shaped(tile.q_end - tile.q_begin, group)) write_tile(tile);
  }
  const int n_prefill = static_cast<int>(item - v.items);
  for (int t = 0; t < num_tiles; ++t) {
    const PlanScratch::Tile& tile = scratch.tiles[static_cast<std::size_t>(t)];
    if (!prefill_shaped(tile.q_end - tile.q_begin, group)) write_tile(tile);
  }
  return finish_plan(cfg, v, generation, batch, total_q, t_rows, num_tiles, static_cast<int>(item - v.items), n_prefill,
                     n_merge, n_prow, counts.slots, chunk);
}

}  // namespace tessera::plan
