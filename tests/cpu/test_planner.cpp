// The batch planner: every visible KV position of every request is covered exactly once per
// query row and kv head, every output row is written exactly once (directly or by a merge),
// split counts per policy, capacity and workspace errors, determinism, and plan time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "math/mask.h"
#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

// 16-byte aligned, zero-initialised bytes.
struct Buffer {
  explicit Buffer(std::size_t n) : bytes(n), storage((n + 15) / 16 + 1) {}
  void* data() { return storage.data(); }
  std::size_t bytes;
  std::vector<plan::PlanHeader> storage;  // PlanHeader is 16-byte aligned
};

Error catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tessera::Error thrown";
  return Error(ErrorCode::backend_failure, "", "");
}

BatchConfig config(int hq, int hkv, SplitPolicy split = {}, int page_size = 16, bool causal = false, int left = -1,
                   int right = -1) {
  BatchConfig c;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.head_dim = 8;  // <= 128: tiles of 128 packed vectors; small keeps big split regions cheap
  c.dtype = DType::bf16;
  c.page_size = page_size;
  c.options.causal = causal;
  c.options.window_left = left;
  c.options.window_right = right;
  c.split = split;
  c.max_requests = 300;
  c.max_q_tokens = 4096;
  return c;
}

SplitPolicy fixed(int tokens) { return {SplitPolicy::Mode::fixed, tokens}; }
SplitPolicy disabled() { return {SplitPolicy::Mode::disabled, 0}; }

struct Planned {
  plan::PlanConfig cfg;
  plan::WorkspaceLayout layout;
  std::unique_ptr<Buffer> ws;
  plan::PlanSummary summary;
  std::vector<std::int32_t> splits;
  plan::PlanView view() { return plan::plan_view(ws->data(), layout); }
};

// Plans into a default-size workspace, or (grow = true) into one as large as plan() asks for.
Planned make_plan(const BatchConfig& c, int num_sms, const std::vector<std::int32_t>& q,
                  const std::vector<std::int32_t>& kv, bool grow = false) {
  Planned p;
  p.cfg = plan::make_plan_config(c, DeviceFacts{Device::cpu(), num_sms});
  std::size_t bytes = plan::layout_for_partial_rows(p.cfg, plan::default_partial_rows(p.cfg)).total_bytes;
  for (;;) {
    p.layout = plan::workspace_layout(p.cfg, bytes);
    p.ws = std::make_unique<Buffer>(bytes);
    plan::PlanScratch scratch;
    try {
      p.summary = plan::build_plan(p.cfg, p.layout, q, kv, 7, p.ws->data(), scratch, &p.splits);
      return p;
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (!grow || e.code() != ErrorCode::workspace_too_small) throw;
      bytes = std::stoull(msg.substr(msg.find("at least ") + 9));
      grow = false;  // the size asked for must be enough
    }
  }
}

// The invariants of a plan for requests (q, kv).
void check_plan(Planned& p, const std::vector<std::int32_t>& q, const std::vector<std::int32_t>& kv) {
  const plan::PlanView v = p.view();
  const auto& h = *v.header;
  const int H = p.cfg.heads_kv, G = p.cfg.heads_q / p.cfg.heads_kv;
  ASSERT_EQ(h.magic, plan::kPlanMagic);
  ASSERT_EQ(h.batch, static_cast<int>(q.size()));
  ASSERT_LE(h.num_items, p.layout.max_items);
  ASSERT_LE(h.num_partial_rows, p.layout.max_partial_rows);
  ASSERT_LE(h.num_merge_rows, p.layout.max_q_tokens);
  std::int64_t total_q = 0;
  for (std::size_t b = 0; b < q.size(); ++b) {
    ASSERT_EQ(v.qo_indptr[b], total_q);
    ASSERT_EQ(v.kv_len[b], kv[b]);
    total_q += q[b];
  }
  ASSERT_EQ(v.qo_indptr[q.size()], total_q);
  ASSERT_EQ(h.total_q, total_q);

  // Per (global row, kv head): the KV intervals of the items covering it, and how it is written.
  struct Cover { std::vector<std::pair<int, int>> kv; int direct = 0; std::vector<int> prows; };
  std::vector<Cover> cover(static_cast<std::size_t>(total_q * H));
  std::vector<int> prow_writes(static_cast<std::size_t>(h.num_partial_rows) * H, 0);
  // The summary's work figures (launch-shape hints of the CUDA backend) recounted from the items.
  std::int64_t prefill_row_keys = 0, decode_keys = 0;
  for (int i = 0; i < h.num_items; ++i) {
    const plan::WorkItem& it = v.items[i];
    if (i < h.num_prefill_items)
      prefill_row_keys += static_cast<std::int64_t>(it.q_end - it.q_begin) * (it.kv_end - it.kv_begin);
    else
      decode_keys += it.kv_end - it.kv_begin;
  }
  EXPECT_EQ(p.summary.prefill_row_keys, prefill_row_keys);
  EXPECT_EQ(p.summary.decode_keys, decode_keys);
  for (int i = 0; i < h.num_items; ++i) {
    const plan::WorkItem& it = v.items[i];
    ASSERT_GE(it.request, 0);
    ASSERT_LT(it.request, h.batch);
    ASSERT_GE(it.kv_head, 0);
    ASSERT_LT(it.kv_head, H);
    ASSERT_LE(0, it.q_begin);
    ASSERT_LT(it.q_begin, it.q_end);
    ASSERT_LE(it.q_end, q[static_cast<std::size_t>(it.request)]);
    ASSERT_LE(it.q_end - it.q_begin, h.q_tile_rows);
    ASSERT_LE(0, it.kv_begin);
    ASSERT_LE(it.kv_begin, it.kv_end);
    ASSERT_LE(it.kv_end, kv[static_cast<std::size_t>(it.request)]);
    for (int r = it.q_begin; r < it.q_end; ++r) {
      Cover& c = cover[static_cast<std::size_t>((v.qo_indptr[it.request] + r) * H + it.kv_head)];
      c.kv.emplace_back(it.kv_begin, it.kv_end);
      if (it.partial_row == plan::kDirect) {
        ++c.direct;
      } else {
        const int prow = it.partial_row + r - it.q_begin;
        ASSERT_LT(prow, h.num_partial_rows);
        c.prows.push_back(prow);
        ++prow_writes[static_cast<std::size_t>(prow) * H + it.kv_head];
      }
    }
  }
  for (int w : prow_writes) ASSERT_EQ(w, 1) << "a partial (row, kv head) written by several items, or never";

  // Item order (batch_plan.h): the prefill-shaped items first, then the decode-shaped ones,
  // each kind in tile order: (request, first row, chunk, kv head) increasing.
  ASSERT_EQ(h.version, plan::kPlanVersion);
  ASSERT_EQ(h.num_prefill_items, p.summary.num_prefill_items);
  ASSERT_GE(h.num_prefill_items, 0);
  ASSERT_LE(h.num_prefill_items, h.num_items);
  for (int i = 0; i < h.num_items; ++i) {
    const plan::WorkItem& it = v.items[i];
    ASSERT_EQ(plan::prefill_shaped(it.q_end - it.q_begin, G), i < h.num_prefill_items)
        << "item " << i << " of " << it.q_end - it.q_begin << " rows x group " << G << " on the wrong side of "
        << h.num_prefill_items << " prefill-shaped items";
    if (i == 0 || i == h.num_prefill_items) continue;
    const plan::WorkItem& prev = v.items[i - 1];
    const auto key = [](const plan::WorkItem& w) { return std::tuple(w.request, w.q_begin, w.chunk, w.kv_head); };
    ASSERT_LT(key(prev), key(it)) << "items " << i - 1 << " and " << i << " out of tile order";
  }

  // Partial rows are numbered in item order, and each merge row lists its partials in KV
  // order (the merge's order, which determinism rests on): the chunk's first key per partial row.
  std::vector<int> prow_kv(static_cast<std::size_t>(h.num_partial_rows), -1);
  int last_prow = -1;
  for (int i = 0; i < h.num_items; ++i) {
    const plan::WorkItem& it = v.items[i];
    if (it.partial_row == plan::kDirect) continue;
    ASSERT_GE(it.partial_row, last_prow) << "item " << i << ": partial rows not numbered in item order";
    last_prow = it.partial_row;
    for (int r = it.q_begin; r < it.q_end; ++r) prow_kv[static_cast<std::size_t>(it.partial_row + r - it.q_begin)] = it.kv_begin;
  }
  for (int m = 0; m < h.num_merge_rows; ++m)
    for (int e = v.merge_indptr[m] + 1; e < v.merge_indptr[m + 1]; ++e)
      ASSERT_LT(prow_kv[static_cast<std::size_t>(v.merge_partial[e - 1])], prow_kv[static_cast<std::size_t>(v.merge_partial[e])])
          << "merge row " << m << ": partials not in KV order";

  std::vector<int> merged(static_cast<std::size_t>(total_q), -1);
  for (int m = 0; m < h.num_merge_rows; ++m) {
    const int row = v.merge_row[m];
    ASSERT_EQ(merged[static_cast<std::size_t>(row)], -1) << "row merged twice";
    merged[static_cast<std::size_t>(row)] = m;
  }
  ASSERT_EQ(v.merge_indptr[0], 0);
  for (std::size_t b = 0; b < q.size(); ++b) {
    const math::MaskSpec mask = math::MaskSpec::make(q[b], kv[b], p.cfg.causal, p.cfg.window_left, p.cfg.window_right);
    for (int r = 0; r < q[b]; ++r) {
      const std::int64_t row = v.qo_indptr[b] + r;
      const math::KeyRange vis = math::visible_keys(mask, r);
      for (int hk = 0; hk < H; ++hk) {
        Cover c = cover[static_cast<std::size_t>(row * H + hk)];
        ASSERT_FALSE(c.kv.empty()) << "row " << row << " head " << hk << " has no item";
        std::sort(c.kv.begin(), c.kv.end());
        // Disjoint, contiguous, and containing every visible key: each visible key once.
        for (std::size_t i = 1; i < c.kv.size(); ++i) ASSERT_EQ(c.kv[i].first, c.kv[i - 1].second);
        if (!vis.empty()) {
          ASSERT_LE(c.kv.front().first, vis.begin) << "request " << b << " row " << r;
          ASSERT_GE(c.kv.back().second, vis.end) << "request " << b << " row " << r;
        }
        const int m = merged[static_cast<std::size_t>(row)];
        if (c.direct) {
          ASSERT_EQ(c.direct, 1);
          ASSERT_TRUE(c.prows.empty());
          ASSERT_EQ(m, -1) << "a directly written row is merged too";
        } else {
          ASSERT_GE(m, 0) << "split row " << row << " never merged";
          std::vector<int> listed(v.merge_partial + v.merge_indptr[m], v.merge_partial + v.merge_indptr[m + 1]);
          std::vector<int> written = c.prows;
          std::sort(listed.begin(), listed.end());
          std::sort(written.begin(), written.end());
          ASSERT_EQ(listed, written);
          ASSERT_GE(written.size(), 2u);
        }
      }
    }
  }
  (void)G;
}

std::vector<std::int32_t> random_lens(std::mt19937_64& rng, int n, int lo, int hi) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  return v;
}

TEST(Planner, CoversEveryVisibleKeyOncePerRow) {
  auto rng = fresh_rng();
  const std::vector<SplitPolicy> policies{{}, disabled(), fixed(1), fixed(7), fixed(64), fixed(1000)};
  struct MaskCase { bool causal; int left, right; };
  const std::vector<MaskCase> masks{{false, -1, -1}, {true, -1, -1}, {false, 20, 3}, {true, 50, -1}, {false, -1, 0}};
  for (int trial = 0; trial < 12; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    auto q = random_lens(rng, n, 0, 40);
    auto kv = random_lens(rng, n, 0, 200);
    q[0] = 1, kv[0] = 0;  // empty KV
    if (n > 1) q[1] = 1, kv[1] = 1;
    for (const auto& pol : policies)
      for (const auto& mk : masks)
        for (auto [hq, hkv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{8, 1}})
          for (int sms : {1, 132}) {
            SCOPED_TRACE("trial " + std::to_string(trial) + " mode " + std::to_string(static_cast<int>(pol.mode)) +
                         " chunk " + std::to_string(pol.kv_chunk_tokens) + " causal " + std::to_string(mk.causal) +
                         " window " + std::to_string(mk.left) + "," + std::to_string(mk.right) + " hkv " +
                         std::to_string(hkv) + " sms " + std::to_string(sms));
            Planned p = make_plan(config(hq, hkv, pol, 16, mk.causal, mk.left, mk.right), sms, q, kv, true);
            check_plan(p, q, kv);
            if (HasFatalFailure()) return;
          }
  }
}

TEST(Planner, DisabledIsOneChunkPerTile) {
  const std::vector<std::int32_t> q{1, 100, 0, 3}, kv{5000, 100, 20, 3};
  Planned p = make_plan(config(8, 2, disabled()), 132, q, kv);
  const int tiles = 1 + (100 + 31) / 32 + 0 + 1;  // q_tile_rows = 128 / group 4 = 32
  EXPECT_EQ(p.layout.q_tile_rows, 32);
  EXPECT_EQ(p.summary.num_items, tiles * 2);
  EXPECT_EQ(p.summary.num_merge_rows, 0);
  EXPECT_EQ(p.summary.chunk_tokens, 0);
  EXPECT_EQ(p.splits, (std::vector<std::int32_t>{1, 1, 0, 1}));
}

// Plans that split nothing (SplitPolicy::disabled, or automatic with a tile per resident slot)
// take a one-pass path; a fixed chunk longer than every request takes the general path to the
// same plan. Both must agree byte for byte, and with the splits they report.
TEST(Planner, UnsplitPathWritesTheGeneralPathsPlan) {
  auto rng = fresh_rng();
  struct MaskCase { bool causal; int left, right; };
  // No mask, causal (with a right window, which causal overrides), and windows: each of the
  // unsplit sweep's key rules.
  const std::vector<MaskCase> masks{{false, -1, -1}, {true, -1, -1}, {true, -1, 5},
                                    {false, 20, 3},  {true, 50, -1}, {false, -1, 0}};
  for (int trial = 0; trial < 48; ++trial) {
    const MaskCase m = masks[static_cast<std::size_t>(trial) % masks.size()];
    const int hkv = trial % 3 == 0 ? 1 : 4;
    const int n = 1 + static_cast<int>(rng() % 120);
    std::vector<std::int32_t> q = random_lens(rng, n, 0, 3), kv = random_lens(rng, n, 0, 9000);
    for (int b = 0; b < n; b += 7) q[static_cast<std::size_t>(b)] = static_cast<int>(rng() % 300);  // prefill chunks
    const bool automatic = trial % 2 == 0;
    // Automatic on a 1-SM device: 2 slots, so any batch with 2 tiles' items stays whole.
    const SplitPolicy fast_policy = automatic ? SplitPolicy{} : disabled();
    Planned fast = make_plan(config(16, hkv, fast_policy, 16, m.causal, m.left, m.right), 1, q, kv);
    Planned general = make_plan(config(16, hkv, fixed(1 << 30), 16, m.causal, m.left, m.right), 1, q, kv);
    if (automatic && fast.summary.chunk_tokens != 0) continue;  // a single tile's item: split
    ASSERT_EQ(fast.layout.plan_bytes, general.layout.plan_bytes);
    EXPECT_EQ(std::memcmp(fast.ws->data(), general.ws->data(), fast.layout.plan_bytes), 0) << "trial " << trial;
    EXPECT_EQ(fast.splits, general.splits) << "trial " << trial;
    EXPECT_EQ(fast.summary.num_tiles, general.summary.num_tiles);
    EXPECT_EQ(fast.summary.num_items, general.summary.num_items);
    EXPECT_EQ(fast.summary.split_slots, 0);
    check_plan(fast, q, kv);
  }
}

// A device workspace gets only plan::used_ranges() of the host image: they must hold every
// array element a backend reads, and leave out the unused merge arrays.
TEST(Planner, UsedRangesHoldWhatRunReads) {
  struct Case { std::vector<std::int32_t> q, kv; SplitPolicy split; int max_q_tokens; std::size_t ranges; };
  const std::vector<Case> cases{
      {{1, 1, 40}, {300, 5000, 900}, disabled(), 4096, 1},     // no split: header to items only
      {{1, 1, 40}, {300, 5000, 900}, fixed(256), 64, 2},       // merge arrays close together: one range
      {{1, 1, 40}, {300, 5000, 900}, fixed(256), 40000, 4},    // capacity tails > kCopyGapBytes apart
  };
  for (const Case& c : cases) {
    BatchConfig cfg = config(8, 2, c.split);
    cfg.max_q_tokens = c.max_q_tokens;
    Planned p = make_plan(cfg, 4, c.q, c.kv, true);
    const plan::PlanRanges r = plan::used_ranges(p.layout, p.summary);
    ASSERT_EQ(static_cast<std::size_t>(r.count), c.ranges);
    Buffer copy(p.ws->bytes);
    for (int i = 0; i < r.count; ++i) {
      ASSERT_LT(r.range[i].begin, r.range[i].end);
      if (i > 0) {
        ASSERT_GE(r.range[i].begin - r.range[i - 1].end, plan::kCopyGapBytes);
      }
      ASSERT_LE(r.range[i].end, p.layout.plan_bytes);
      std::memcpy(static_cast<char*>(copy.data()) + r.range[i].begin,
                  static_cast<const char*>(p.ws->data()) + r.range[i].begin, r.range[i].end - r.range[i].begin);
    }
    const plan::PlanView a = p.view(), b = plan::plan_view(copy.data(), p.layout);
    const int batch = static_cast<int>(c.q.size()), items = p.summary.num_items, merges = p.summary.num_merge_rows;
    auto same = [](const void* x, const void* y, std::size_t n) { return std::memcmp(x, y, n) == 0; };
    EXPECT_TRUE(same(a.header, b.header, sizeof(plan::PlanHeader)));
    EXPECT_TRUE(same(a.qo_indptr, b.qo_indptr, 4 * (batch + 1)));
    EXPECT_TRUE(same(a.kv_len, b.kv_len, 4 * batch));
    EXPECT_TRUE(same(a.items, b.items, sizeof(plan::WorkItem) * items));
    if (merges > 0) {
      EXPECT_TRUE(same(a.merge_indptr, b.merge_indptr, 4 * (merges + 1)));
      EXPECT_TRUE(same(a.merge_row, b.merge_row, 4 * merges));
      EXPECT_TRUE(same(a.merge_partial, b.merge_partial, 4 * p.summary.num_partial_rows));
    } else {
      EXPECT_EQ(b.merge_indptr[0], 0);  // not copied (zero here); no backend reads it
    }
  }
}

TEST(Planner, FixedChunksSplitEachRequestIndependently) {
  const std::vector<std::int32_t> q{1, 1, 1, 20}, kv{1000, 100, 0, 250};
  for (int chunk : {1, 7, 100, 256, 5000}) {
    Planned p = make_plan(config(8, 8, fixed(chunk)), 4, q, kv, true);
    auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
    EXPECT_EQ(p.splits[0], ceil_div(1000, chunk)) << chunk;
    EXPECT_EQ(p.splits[1], ceil_div(100, chunk)) << chunk;
    EXPECT_EQ(p.splits[2], 1) << chunk;
    EXPECT_EQ(p.splits[3], ceil_div(250, chunk)) << chunk;
    // The same request alone is split the same way (independent of the batch).
    Planned alone = make_plan(config(8, 8, fixed(chunk)), 4, {1}, {1000}, true);
    EXPECT_EQ(alone.splits[0], p.splits[0]);
    const plan::WorkItem& a = alone.view().items[alone.summary.num_items - 1];
    EXPECT_EQ(a.kv_end - a.kv_begin, 1000 - (p.splits[0] - 1) * chunk);
  }
}

TEST(Planner, AutomaticFillsTheDeviceWithTileAlignedChunks) {
  for (int page_size : {1, 16, 64, 128}) {
    for (int hkv : {1, 8}) {
      Planned p = make_plan(config(8, hkv, {}, page_size), 132, {1}, {32768});
      SCOPED_TRACE("page " + std::to_string(page_size) + " hkv " + std::to_string(hkv));
      // The cheapest chunk of the cost model over every multiple of the unit (a tile or a page)
      // giving at most kMaxSplitWaves waves of items: waves x (longest item + overhead), waves
      // of 2 x num_sms resident slots. A partial first wave is allowed (fewer items than
      // slots), and then it is at least half full: halving its chunk would give more than a
      // wave at no lower cost.
      const int unit = std::max(page_size, plan::kKVTile);
      const int slots = plan::kDecodeCtasPerSm * 132;
      auto items_of = [&](std::int64_t chunk) { return (32768 + chunk - 1) / chunk * hkv; };
      auto cost_of = [&](std::int64_t chunk) {
        return (items_of(chunk) + slots - 1) / slots * (std::min<std::int64_t>(chunk, 32768) + plan::kItemOverheadTokens);
      };
      std::int64_t best = -1;
      for (std::int64_t k = 1; k * unit < 32768; ++k)
        if (items_of(k * unit) <= plan::kMaxSplitWaves * slots && (best < 0 || cost_of(k * unit) < best))
          best = cost_of(k * unit);
      EXPECT_EQ(cost_of(p.summary.chunk_tokens), best);
      EXPECT_GE(2 * p.summary.num_items, std::min(slots, (32768 + unit - 1) / unit * hkv));
      EXPECT_GT(p.splits[0], 1);
      ASSERT_GT(p.summary.chunk_tokens, 0);
      EXPECT_EQ(p.summary.chunk_tokens % plan::kKVTile, 0);
      EXPECT_EQ(p.summary.chunk_tokens % page_size, 0);
      // No more than needed: doubling the chunk would leave SMs idle.
      EXPECT_LT((32768 + 2 * p.summary.chunk_tokens - 1) / (2 * p.summary.chunk_tokens) * hkv, 2 * 132);
    }
  }
  // Enough work already (256 decode requests x 8 heads >= 2 * 132): no split.
  Planned busy = make_plan(config(32, 8), 132, std::vector<std::int32_t>(256, 1), std::vector<std::int32_t>(256, 4000));
  EXPECT_EQ(busy.summary.chunk_tokens, 0);
  EXPECT_EQ(busy.summary.num_merge_rows, 0);
  // Short KV is never split.
  Planned shortkv = make_plan(config(8, 1), 132, {1}, {64});
  EXPECT_EQ(shortkv.splits[0], 1);
  // Prefill and decode alike: a long prefill chunk on a big device splits too.
  Planned prefill = make_plan(config(8, 8), 132, {40}, {20000});
  EXPECT_GT(prefill.splits[0], 1);
}

// The plans of the cuda.decode bench (GQA 32/8, page 16, one query token per request) on
// 132 SMs (264 resident decode slots): 8 x 32k takes one partial wave of 256 items of 8192 keys
// (4 partials per row) rather than 512 of 4096 (two waves, 16 slots idle in the second);
// 1 x 128k one full wave of 264 items of 4032; the batches with an item per slot stay whole.
TEST(Planner, AutomaticDecodeBenchShapes) {
  struct Case {
    int batch, kv, items, chunk;
  };
  for (const Case& c : {Case{1, 131072, 264, 4032}, Case{8, 32768, 256, 8192}, Case{64, 4096, 512, 0},
                        Case{128, 8192, 1024, 0}, Case{256, 2048, 2048, 0}}) {
    BatchConfig cfg = config(32, 8, {}, 16, true);
    cfg.head_dim = 128;
    cfg.max_requests = c.batch;
    cfg.max_q_tokens = c.batch;
    Planned p = make_plan(cfg, 132, std::vector<std::int32_t>(static_cast<std::size_t>(c.batch), 1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(c.batch), c.kv));
    SCOPED_TRACE(std::to_string(c.batch) + " x " + std::to_string(c.kv));
    EXPECT_EQ(p.summary.num_items, c.items);
    EXPECT_EQ(p.summary.chunk_tokens, c.chunk);
    EXPECT_EQ(p.summary.num_merge_rows, c.chunk > 0 ? c.batch : 0);
  }
}

TEST(Planner, AutomaticNeverOutgrowsTheDefaultWorkspace) {
  auto rng = fresh_rng();
  for (int trial = 0; trial < 200; ++trial) {
    const int sms = 1 + static_cast<int>(rng() % 200);
    const int hkv = 1 << (rng() % 4);
    const int hq = hkv << (rng() % 4);
    BatchConfig c = config(hq, hkv, {}, 1 + static_cast<int>(rng() % 64), rng() % 2 == 0);
    c.max_requests = 1 + static_cast<int>(rng() % 64);
    c.max_q_tokens = c.max_requests + static_cast<int>(rng() % 300);
    // A batch at capacity: as many requests as allowed, q tokens spread to maximise tiles.
    std::vector<std::int32_t> q(static_cast<std::size_t>(c.max_requests), 1), kv(q.size());
    int left = c.max_q_tokens - c.max_requests;
    for (auto& x : q) {
      const int add = std::min(left, static_cast<int>(rng() % 40));
      x += add;
      left -= add;
    }
    for (auto& x : kv) x = static_cast<int>(rng() % 100000);
    const plan::PlanConfig cfg = plan::make_plan_config(c, DeviceFacts{Device::cpu(), sms});
    const std::size_t bytes = BatchAttention::workspace_size(c, DeviceFacts{Device::cpu(), sms});
    const plan::WorkspaceLayout layout = plan::workspace_layout(cfg, bytes);
    Buffer ws(bytes);
    plan::PlanScratch scratch;
    ASSERT_NO_THROW(plan::build_plan(cfg, layout, q, kv, 1, ws.data(), scratch)) << "trial " << trial;
  }
}

// The default workspace has room for at least 2 x num_sms split items of whole tiles (what the
// automatic split aims at: a wave of the persistent decode grid), whatever the GQA group; with
// room counted as floor(64 / g) rows per slot, groups such as 5, 24 or 40 had less (tiles of
// q_tile_rows = 128 / g rows). The automatic split of one long request then uses it.
TEST(Planner, DefaultWorkspaceHoldsAWaveOfSplitTiles) {
  for (auto [hq, hkv] : {std::pair{32, 8}, std::pair{40, 8}, std::pair{24, 1}, std::pair{40, 1}, std::pair{56, 8},
                         std::pair{8, 8}, std::pair{64, 1}, std::pair{24, 8}, std::pair{20, 4}}) {
    for (int d : {64, 128, 256}) {
      BatchConfig c = config(hq, hkv, {}, 16, true);
      c.head_dim = d;
      const int t = plan::q_tile_rows(hq, hkv, d);
      Planned p = make_plan(c, 132, {t}, {131072});
      SCOPED_TRACE("hq " + std::to_string(hq) + " hkv " + std::to_string(hkv) + " d " + std::to_string(d));
      EXPECT_GE(static_cast<std::int64_t>(p.layout.max_partial_rows / t) * hkv, 2 * 132);
      EXPECT_GT(p.summary.chunk_tokens, 0);
      EXPECT_GE(p.summary.num_items, 256);  // 131072 keys in chunks of 64-token multiples
    }
  }
}

// plan() names the bytes a fixed split needs ("at least N bytes for R partial rows"): a
// workspace of exactly layout_for_partial_rows(R).total_bytes must then hold R rows, whatever
// the regions' alignment padding does to the per-row estimate (it once gave R - 1).
TEST(Planner, WorkspaceOfTheNamedSizeHoldsTheNamedRows) {
  for (auto [hq, hkv, d] : {std::tuple{24, 8, 128}, std::tuple{32, 8, 128}, std::tuple{8, 8, 64},
                            std::tuple{8, 2, 256}, std::tuple{7, 1, 64}, std::tuple{256, 1, 128}}) {
    BatchConfig c = config(hq, hkv);
    c.head_dim = d;
    c.max_requests = 15;
    c.max_q_tokens = 700;
    const plan::PlanConfig cfg = plan::make_plan_config(c, DeviceFacts{Device::cpu(), 132});
    const int def = plan::default_partial_rows(cfg);
    for (std::int64_t rows = def; rows < def + 3000; rows += 1 + rows % 7) {
      const std::size_t bytes = plan::layout_for_partial_rows(cfg, rows).total_bytes;
      const plan::WorkspaceLayout got = plan::workspace_layout(cfg, bytes);
      ASSERT_EQ(got.max_partial_rows, rows) << "hq " << hq << " hkv " << hkv << " d " << d << " bytes " << bytes;
      ASSERT_LE(got.total_bytes, bytes);
      // One byte less no longer holds them (below the default size plan() refuses instead).
      if (rows > def) {
        EXPECT_LT(plan::workspace_layout(cfg, bytes - 1).max_partial_rows, rows);
      }
    }
  }
}

TEST(Planner, SplitRowsMergeTheirChunksInKvOrder) {
  Planned p = make_plan(config(4, 2, fixed(10)), 1, {2}, {25});
  plan::PlanView v = p.view();
  ASSERT_EQ(v.header->num_merge_rows, 2);
  ASSERT_EQ(v.header->num_items, 3 * 2);
  for (int m = 0; m < 2; ++m) {
    ASSERT_EQ(v.merge_indptr[m + 1] - v.merge_indptr[m], 3);
    for (int c = 0; c < 3; ++c) {
      const int prow = v.merge_partial[v.merge_indptr[m] + c];
      // The item of chunk c writes this partial row.
      bool found = false;
      for (int i = 0; i < v.header->num_items; ++i)
        if (v.items[i].chunk == c && v.items[i].partial_row + (v.merge_row[m] - v.items[i].q_begin) == prow) {
          found = true;
          EXPECT_EQ(v.items[i].kv_begin, 10 * c);
        }
      EXPECT_TRUE(found);
    }
  }
}

TEST(Planner, CausalTilesSkipTheMaskedTriangle) {
  // 64 query rows over 64 keys, causal, GQA 8 (q_tile_rows 16): tile t sees keys [0, 16 (t + 1)).
  Planned p = make_plan(config(8, 1, disabled(), 16, true), 1, {64}, {64});
  plan::PlanView v = p.view();
  ASSERT_EQ(v.header->num_items, 4);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(v.items[t].kv_begin, 0);
    EXPECT_EQ(v.items[t].kv_end, 16 * (t + 1));
  }
}

// A work item covers packed_q_rows(head_dim) query vectors (rows x group): 128 at head_dim
// <= 128 (two 64-vector row blocks that share each K/V tile on CUDA), 64 at 256.
TEST(Planner, TileRowsFollowHeadDimAndGroup) {
  EXPECT_EQ(plan::packed_q_rows(64), 128);
  EXPECT_EQ(plan::packed_q_rows(128), 128);
  EXPECT_EQ(plan::packed_q_rows(256), 64);
  struct Case { int hq, hkv, d, rows; };
  for (const Case c : {Case{32, 8, 128, 32}, Case{32, 8, 64, 32}, Case{32, 8, 256, 16}, Case{8, 8, 128, 128},
                       Case{8, 8, 256, 64}, Case{24, 8, 128, 42}, Case{24, 8, 256, 21}, Case{128, 1, 64, 1},
                       Case{256, 1, 128, 1}, Case{64, 1, 256, 1}}) {
    SCOPED_TRACE("hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " d " + std::to_string(c.d));
    EXPECT_EQ(plan::q_tile_rows(c.hq, c.hkv, c.d), c.rows);
    BatchConfig cfg = config(c.hq, c.hkv, disabled());
    cfg.head_dim = c.d;
    Planned p = make_plan(cfg, 132, {300}, {400});
    EXPECT_EQ(p.layout.q_tile_rows, c.rows);
    EXPECT_EQ(p.summary.num_tiles, (300 + c.rows - 1) / c.rows);
    check_plan(p, {300}, {400});
  }
  // The default workspace is sized as with 64-vector tiles (it did not grow with the tiles).
  for (int d : {64, 128, 256}) {
    BatchConfig cfg = config(32, 8);
    cfg.head_dim = d;
    const plan::PlanConfig pc = plan::make_plan_config(cfg, DeviceFacts{Device::cpu(), 132});
    EXPECT_EQ(plan::default_partial_rows(pc), 66 * 16) << d;  // ceil(4 x 132 / 8) slots x 64 / 4
  }
}

// The bench case of docs/perf/mixed_batch.md: 8 prefill chunks of 512 rows at the end of a
// 4096-token context and 128 decode tokens at 4096, causal, GQA 32/8, head_dim 128: items of
// 32 query rows (128 vectors), 16 per (chunk, kv head), each up to its last row's diagonal;
// decode tokens stay one item each; nothing is split (2048 items >= 264 slots).
TEST(Planner, BenchCaseTilesOf32RowsWithCausalTails) {
  BatchConfig c = config(32, 8, {}, 16, true);
  c.head_dim = 128;
  c.max_requests = 136;
  c.max_q_tokens = 8 * 512 + 128;
  std::vector<std::int32_t> q(136, 1), kv(136, 4096);
  for (int b = 0; b < 8; ++b) q[static_cast<std::size_t>(b)] = 512;
  Planned p = make_plan(c, 132, q, kv);
  check_plan(p, q, kv);
  EXPECT_EQ(p.summary.num_items, 8 * 16 * 8 + 128 * 8);
  EXPECT_EQ(p.summary.chunk_tokens, 0);
  const plan::PlanView v = p.view();
  for (int i = 0; i < 8 * 16 * 8; ++i) {
    const plan::WorkItem& it = v.items[i];
    const int u = (i / 8) % 16;  // items of one tile: kv heads 0..7 in a row
    EXPECT_EQ(it.request, i / (16 * 8));
    EXPECT_EQ(it.kv_head, i % 8);
    EXPECT_EQ(it.q_begin, 32 * u);
    EXPECT_EQ(it.q_end, 32 * u + 32);
    EXPECT_EQ(it.kv_begin, 0);
    EXPECT_EQ(it.kv_end, 4096 - 512 + 32 * u + 32);  // the tile's last row's diagonal
    EXPECT_EQ(it.partial_row, plan::kDirect);
  }
  for (int i = 8 * 16 * 8; i < p.summary.num_items; ++i) {
    EXPECT_EQ(v.items[i].q_end - v.items[i].q_begin, 1);
    EXPECT_EQ(v.items[i].kv_end, 4096);
  }
}

// Requests with fewer rows than two 64-vector blocks, odd counts and tails: the last tile of a
// request keeps the remainder (a tail of <= 16 vectors is decode-shaped on CUDA, as before).
TEST(Planner, ShortRequestsAndTails) {
  BatchConfig c = config(32, 8, disabled(), 16, true);
  c.head_dim = 128;
  const std::vector<std::int32_t> q{1, 4, 5, 16, 17, 31, 32, 33, 36, 37, 64, 65, 97}, kv(q.size(), 700);
  Planned p = make_plan(c, 132, q, kv);
  check_plan(p, q, kv);
  const plan::PlanView v = p.view();
  int i = 0;
  // Tiles of more than 4 rows (x group 4 > 16 vectors: prefill-shaped) first, then the tails of
  // at most 4 rows (requests 1 and 4, and the 1-row or 4-row tails of 33, 36, 65, 97).
  for (const bool prefill : {true, false}) {
    if (!prefill) {
      EXPECT_EQ(i, p.summary.num_prefill_items);
    }
    for (std::size_t b = 0; b < q.size(); ++b)
      for (int q0 = 0; q0 < q[b]; q0 += 32) {
        const int q1 = std::min(q[b], q0 + 32);
        if ((q1 - q0 > 4) != prefill) continue;
        for (int h = 0; h < 8; ++h, ++i) {
          ASSERT_LT(i, p.summary.num_items);
          EXPECT_EQ(v.items[i].request, static_cast<int>(b));
          EXPECT_EQ(v.items[i].q_begin, q0);
          EXPECT_EQ(v.items[i].q_end, q1);
          EXPECT_EQ(v.items[i].kv_end, 700 - q[b] + q1);
        }
      }
  }
  EXPECT_EQ(p.summary.num_prefill_items, 16 * 8);  // 22 tiles, 6 of them of <= 4 rows
  EXPECT_EQ(i, p.summary.num_items);
}

// With SplitPolicy::disabled or fixed a request's items (its tiles, KV ranges and chunks)
// depend on that request alone, not on the rest of the batch (batch.h): the same items alone
// and among others, up to the request index and the partial rows' base.
TEST(Planner, DisabledAndFixedItemsDoNotDependOnTheBatch) {
  auto rng = fresh_rng();
  struct MaskCase { bool causal; int left, right; };
  for (const SplitPolicy pol : {disabled(), fixed(64), fixed(100)})
    for (const MaskCase m : {MaskCase{true, -1, -1}, MaskCase{true, 40, -1}, MaskCase{false, 20, 3}})
      for (int d : {128, 256}) {
        BatchConfig c = config(8, 2, pol, 16, m.causal, m.left, m.right);  // group 4 (small partial rows)
        c.head_dim = d;
        c.max_requests = 32;  // small workspaces: the plans are what is compared
        c.max_q_tokens = 1024;
        const std::vector<std::int32_t> mine_q{1, 17, 33, 70, 129}, mine_kv{300, 17, 500, 90, 1000};
        for (std::size_t r = 0; r < mine_q.size(); ++r) {
          Planned alone = make_plan(c, 4, {mine_q[r]}, {mine_kv[r]}, true);
          std::vector<std::int32_t> q = random_lens(rng, 20, 0, 40), kv = random_lens(rng, 20, 0, 400);
          const int at = static_cast<int>(rng() % 20);
          q[static_cast<std::size_t>(at)] = mine_q[r];
          kv[static_cast<std::size_t>(at)] = mine_kv[r];
          Planned mixed = make_plan(c, 4, q, kv, true);
          check_plan(mixed, q, kv);
          std::vector<plan::WorkItem> a, b;
          for (int i = 0; i < alone.summary.num_items; ++i) a.push_back(alone.view().items[i]);
          for (int i = 0; i < mixed.summary.num_items; ++i)
            if (mixed.view().items[i].request == at) b.push_back(mixed.view().items[i]);
          ASSERT_EQ(a.size(), b.size());
          for (std::size_t i = 0; i < a.size(); ++i) {
            SCOPED_TRACE("policy " + std::to_string(static_cast<int>(pol.mode)) + " d " + std::to_string(d) +
                         " request " + std::to_string(r) + " item " + std::to_string(i));
            EXPECT_EQ(a[i].kv_head, b[i].kv_head);
            EXPECT_EQ(a[i].q_begin, b[i].q_begin);
            EXPECT_EQ(a[i].q_end, b[i].q_end);
            EXPECT_EQ(a[i].kv_begin, b[i].kv_begin);
            EXPECT_EQ(a[i].kv_end, b[i].kv_end);
            EXPECT_EQ(a[i].chunk, b[i].chunk);
            EXPECT_EQ(a[i].partial_row == plan::kDirect, b[i].partial_row == plan::kDirect);
          }
        }
      }
}

TEST(Planner, DeterministicPlans) {
  auto rng = fresh_rng();
  const auto q = random_lens(rng, 50, 0, 30), kv = random_lens(rng, 50, 0, 5000);
  Planned a = make_plan(config(16, 4, {}, 16, true), 132, q, kv);
  Planned b = make_plan(config(16, 4, {}, 16, true), 132, q, kv);
  ASSERT_EQ(a.layout.plan_bytes, b.layout.plan_bytes);
  const auto* pa = static_cast<const unsigned char*>(a.ws->data());
  const auto* pb = static_cast<const unsigned char*>(b.ws->data());
  EXPECT_EQ(std::memcmp(pa, pb, a.layout.plan_bytes), 0);
}

TEST(Planner, CapacityAndWorkspaceErrors) {
  BatchConfig c = config(8, 2);
  c.max_requests = 4;
  c.max_q_tokens = 10;
  const DeviceFacts facts{Device::cpu(), 4};
  const std::size_t bytes = BatchAttention::workspace_size(c, facts);
  Buffer ws(bytes + 64);
  Workspace w{ws.data(), bytes, Device::cpu()};
  BatchAttention ba(c);
  auto snapshot = [&] {
    return std::vector<unsigned char>(static_cast<unsigned char*>(ws.data()), static_cast<unsigned char*>(ws.data()) + bytes);
  };
  const auto before = snapshot();
  auto expect = [&](const std::function<void()>& f, ErrorCode code, const std::string& arg) {
    const Error e = catch_error(f);
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find("BatchAttention::plan: " + arg + ": expected"), std::string::npos) << e.what();
    EXPECT_EQ(snapshot(), before) << "workspace written on failure";
  };
  using V = std::vector<std::int32_t>;
  expect([&] { ba.plan(V{1, 1, 1, 1, 1}, V{1, 1, 1, 1, 1}, facts, w); }, ErrorCode::invalid_argument, "q_lens");
  expect([&] { ba.plan(V{5, 6}, V{9, 9}, facts, w); }, ErrorCode::invalid_argument, "q_lens");
  expect([&] { ba.plan(V{1, 1}, V{1}, facts, w); }, ErrorCode::invalid_argument, "kv_lens");
  expect([&] { ba.plan(V{1, -1}, V{1, 1}, facts, w); }, ErrorCode::invalid_argument, "q_lens[1]");
  expect([&] { ba.plan(V{1, 1}, V{1, -2}, facts, w); }, ErrorCode::invalid_argument, "kv_lens[1]");
  expect([&] { ba.plan(V{1}, V{1}, facts, Workspace{ws.data(), bytes - 1, Device::cpu()}); },
         ErrorCode::workspace_too_small, "workspace");
  expect([&] { ba.plan(V{1}, V{1}, facts, Workspace{nullptr, bytes, Device::cpu()}); }, ErrorCode::invalid_argument,
         "workspace.data");
  expect([&] { ba.plan(V{1}, V{1}, facts, Workspace{static_cast<char*>(ws.data()) + 4, bytes, Device::cpu()}); },
         ErrorCode::invalid_argument, "workspace.data");
  expect([&] { ba.plan(V{1}, V{1}, DeviceFacts{Device::cpu(), 0}, w); }, ErrorCode::invalid_argument, "facts.num_sms");
  expect([&] { ba.plan(V{1}, V{1}, facts, Workspace{ws.data(), bytes, Device::cuda(0)}); }, ErrorCode::invalid_argument,
         "workspace.device");
#if !defined(TESSERA_WITH_CUDA)
  expect([&] { ba.plan(V{1}, V{1}, DeviceFacts{Device::cuda(0), 132}, Workspace{ws.data(), bytes, Device::cuda(0)}); },
         ErrorCode::unsupported, "workspace.device");
#endif
  EXPECT_EQ(ba.planned_batch(), 0);

  // Fixed tiny chunks on a long sequence need more split slots than the default workspace has;
  // the message says how much, and a workspace that large works.
  BatchConfig f = c;
  f.split = fixed(1);
  BatchAttention fa(f);
  const std::size_t fbytes = BatchAttention::workspace_size(f, facts);
  Buffer small(fbytes);
  const Error e = catch_error([&] { fa.plan(V{1}, V{5000}, facts, Workspace{small.data(), fbytes, Device::cpu()}); });
  EXPECT_EQ(e.code(), ErrorCode::workspace_too_small) << e.what();
  EXPECT_EQ(e.argument(), "workspace");
  const std::string msg = e.what();
  const auto at = msg.find("at least ");
  ASSERT_NE(at, std::string::npos) << msg;
  const std::size_t need = std::stoull(msg.substr(at + 9));
  Buffer big(need);
  EXPECT_NO_THROW(fa.plan(V{1}, V{5000}, facts, Workspace{big.data(), need, Device::cpu()}));
  EXPECT_EQ(fa.planned_splits(0), 5000);
  EXPECT_THROW(fa.plan(V{1}, V{5000}, facts, Workspace{big.data(), need - 4096, Device::cpu()}), Error);
}

TEST(Planner, ApiAccessors) {
  BatchAttention ba(config(8, 2, fixed(100)));
  const DeviceFacts facts{Device::cpu(), 2};
  Buffer ws(BatchAttention::workspace_size(ba.config(), facts));
  ba.plan(std::vector<std::int32_t>{3, 1, 0}, std::vector<std::int32_t>{10, 250, 7}, facts,
          Workspace{ws.data(), ws.bytes, Device::cpu()});
  EXPECT_EQ(ba.planned_batch(), 3);
  EXPECT_EQ(ba.planned_q_tokens(), 4);
  EXPECT_EQ(ba.planned_splits(0), 1);
  EXPECT_EQ(ba.planned_splits(1), 3);
  EXPECT_EQ(ba.planned_splits(2), 0);
  EXPECT_EQ(ba.planned_work_items(), 2 * (1 + 3));
  EXPECT_EQ(catch_error([&] { (void)ba.planned_splits(3); }).argument(), "request");
  EXPECT_EQ(query_device(Device::cpu()).num_sms >= 1, true);
#if !defined(TESSERA_WITH_CUDA)
  EXPECT_EQ(catch_error([] { (void)query_device(Device::cuda(0)); }).code(), ErrorCode::unsupported);
#endif
}

TEST(Planner, PlanTime) {
  auto rng = fresh_rng();
  BatchConfig c = config(32, 8, {}, 16, true);
  c.max_requests = 256;
  c.max_q_tokens = 8192;
  // 256 requests: mostly decode, some prefill chunks, long and short contexts.
  std::vector<std::int32_t> q(256), kv(256);
  for (int b = 0; b < 256; ++b) {
    q[static_cast<std::size_t>(b)] = b % 16 == 0 ? 256 : 1;
    kv[static_cast<std::size_t>(b)] = q[static_cast<std::size_t>(b)] + static_cast<int>(rng() % 32000);
  }
  for (int sms : {2, 132}) {
    const DeviceFacts facts{Device::cpu(), sms};
    Buffer ws(BatchAttention::workspace_size(c, facts));
    BatchAttention ba(c);
    const Workspace w{ws.data(), ws.bytes, Device::cpu()};
    ba.plan(q, kv, facts, w);  // warm up (scratch grows once)
    const int reps = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ba.plan(q, kv, facts, w);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("plan() of 256 requests (num_sms %d): %.2f us, %d work items\n", sms, us, ba.planned_work_items());
    // A single long decode on a big device goes through the chunk search.
    std::vector<std::int32_t> q1(256, 1), kv1(256, 100);
    kv1[0] = 1 << 20;
    BatchConfig c1 = c;
    c1.heads_kv = 1;
    BatchAttention b1(c1);
    Buffer ws1(BatchAttention::workspace_size(c1, facts));
    const Workspace w1{ws1.data(), ws1.bytes, Device::cpu()};
    b1.plan(q1, kv1, facts, w1);
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) b1.plan(q1, kv1, facts, w1);
    const double us1 = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / reps;
    std::printf("plan() of 256 decode requests, MQA, one 1M-token (num_sms %d): %.2f us, %d items, %d splits\n", sms,
                us1, b1.planned_work_items(), b1.planned_splits(0));
    // The timed plan is the one the comment above names: on 132 SMs the 1M-token request is split
    // (on 2 SMs the 256 items already fill the device and nothing is).
    EXPECT_EQ(b1.planned_splits(0) > 1, sms == 132);
  }
}

}  // namespace
}  // namespace tessera::testing
