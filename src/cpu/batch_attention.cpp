// The CPU executor of a batch-attention plan (format in plan/batch_plan.h). It reads only the
// plan in the workspace, like a GPU kernel would:
//   pass 1: every work item attends its Q tile (all query heads of one kv head's GQA group)
//           to its KV chunk, read through the page table one KV tile at a time, and writes
//           out/lse directly or an fp32 partial state;
//   pass 2: every split query row merges its partials (math::LseMerger) into out/lse.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu/parallel.h"
#include "dispatch/batch_dispatch.h"
#include "math/dtype_convert.h"
#include "math/lse_merge.h"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cpu {
namespace {

struct ItemScratch {
  std::vector<float> q, acc, kt, v, t;
  std::vector<int> lo, hi;
  std::vector<math::OnlineSoftmaxRow> rows;
};

// fp8 -> float tables (bitwise math::fp8_to_float), built once.
struct Fp8Tables {
  float e4m3[256], e5m2[256];
  Fp8Tables() {
    for (int b = 0; b < 256; ++b) {
      e4m3[b] = math::fp8_to_float(static_cast<std::uint8_t>(b), 4);
      e5m2[b] = math::fp8_to_float(static_cast<std::uint8_t>(b), 5);
    }
  }
};
const Fp8Tables& fp8_tables() {
  static const Fp8Tables tables;
  return tables;
}

// One K/V storage type, resolved once per work item: element -> float with the same results
// as math::load_as_float, without its per-element dtype switch.
template <DType KD>
struct KVLoad {
  using Storage = std::conditional_t<KD == DType::f32, float,
                  std::conditional_t<KD == DType::f16 || KD == DType::bf16, std::uint16_t,
                  std::conditional_t<KD == DType::i32, std::int32_t, std::uint8_t>>>;
  const float* lut = nullptr;
  KVLoad() {
    if constexpr (KD == DType::e4m3) lut = fp8_tables().e4m3;
    if constexpr (KD == DType::e5m2) lut = fp8_tables().e5m2;
  }
  float operator()(Storage x) const {
    if constexpr (KD == DType::f32) return x;
    else if constexpr (KD == DType::bf16) return math::bits_float(static_cast<std::uint32_t>(x) << 16);
    else if constexpr (KD == DType::f16) return math::fp16_to_float(x);
    else if constexpr (KD == DType::i32) return static_cast<float>(x);
    else return lut[x];
  }
};

template <DType KD>
void run_item(const BatchRunParams& p, const plan::PlanView& plan, const plan::WorkItem& it, ItemScratch& s) {
  using Load = KVLoad<KD>;
  using Storage = typename Load::Storage;
  const Load load;
  constexpr int T = plan::kKVTile;
  const int D = p.head_dim, G = p.heads_q / p.heads_kv;
  const int R = it.q_end - it.q_begin, N = R * G;  // packed rows: (row, head of the group)
  const int b = it.request;
  const std::int64_t q0 = plan.qo_indptr[b];
  const int q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
  const int kv_len = plan.kv_len[b];
  const auto& c = p.cache;
  const math::MaskSpec mask =
      math::MaskSpec::make(q_len, kv_len, p.mask.causal, p.mask.window_left, p.mask.window_right);
  const bool softcap = p.mask.softcap > 0.0f;
  // Without a soft cap the scale and log2(e) fold into q; with one, tanh needs the plain score.
  const float q_mul = softcap ? p.mask.scale : p.mask.scale * math::kLog2e;

  s.q.resize(static_cast<std::size_t>(N) * D);
  s.acc.assign(static_cast<std::size_t>(N) * D, 0.0f);
  s.rows.assign(static_cast<std::size_t>(N), math::OnlineSoftmaxRow{});
  for (int n = 0; n < N; ++n) {
    const int head = it.kv_head * G + n % G;
    const std::int64_t base = p.q.offset(0, q0 + it.q_begin + n / G, head);
    for (int d = 0; d < D; ++d) s.q[static_cast<std::size_t>(n) * D + d] = math::load_as_float(p.q.ptr, base + d, p.dtype) * q_mul;
  }

  // K/V are read through the page table and converted to fp32 once per work item, in
  // sub-blocks of S tokens small enough to stay in L1 while every query row and head of the
  // group uses them. Per key the score is the same d-ordered sum as a scalar dot product and
  // each output element accumulates keys in order, so results do not depend on S, the page
  // size or the layout.
  constexpr int S = 32;
  const Storage* kbase = static_cast<const Storage*>(c.k);
  const Storage* vbase = static_cast<const Storage*>(c.v);
  const std::int32_t* pages = p.table.indices + p.table.indptr[b];
  const auto token_k = [&](int j) {
    return kbase + (pages[j / c.page_size] * c.k_page + (j % c.page_size) * c.k_token + it.kv_head * c.k_head);
  };
  const auto token_v = [&](int j) {
    return vbase + (pages[j / c.page_size] * c.v_page + (j % c.page_size) * c.v_token + it.kv_head * c.v_head);
  };
  s.kt.resize(static_cast<std::size_t>(S) * D);  // K sub-block transposed: kt[d * S + token]
  s.v.resize(static_cast<std::size_t>(S) * D);   // V sub-block: v[token * D + d]
  s.t.resize(static_cast<std::size_t>(N) * T);   // per row: scores, then weights, of the tile
  s.lo.resize(static_cast<std::size_t>(N));
  s.hi.resize(static_cast<std::size_t>(N));
  float* const kt = s.kt.data();
  float* const vt = s.v.data();
  for (int j0 = it.kv_begin; j0 < it.kv_end; j0 += T) {
    const int j1 = std::min(it.kv_end, j0 + T), len = j1 - j0;
    int any_lo = len, any_hi = 0;  // keys of the tile some row sees
    for (int n = 0; n < N; ++n) {
      const math::KeyRange keys = math::visible_keys(mask, it.q_begin + n / G);
      const int lo = std::max(j0, keys.begin) - j0, hi = std::min(j1, keys.end) - j0;
      s.lo[static_cast<std::size_t>(n)] = lo;
      s.hi[static_cast<std::size_t>(n)] = hi;
      if (lo >= hi) continue;
      any_lo = std::min(any_lo, lo);
      any_hi = std::max(any_hi, hi);
      float* sc = &s.t[static_cast<std::size_t>(n) * T];
      for (int j = lo; j < hi; ++j) sc[j] = 0.0f;
    }
    if (any_lo >= any_hi) continue;  // no row sees this tile: every row's state is unchanged
    const int sb_first = any_lo - any_lo % S;
    // Scores: Q . K^T, one K sub-block at a time.
    for (int b0 = sb_first; b0 < any_hi; b0 += S) {
      const int b1 = std::min(any_hi, b0 + S);
      for (int u = b0; u < b1; ++u) {
        const Storage* ks = token_k(j0 + u);
        for (int d = 0; d < D; ++d) kt[static_cast<std::size_t>(d) * S + (u - b0)] = load(ks[d]);
      }
      for (int n = 0; n < N; ++n) {
        const int lo = std::max(s.lo[static_cast<std::size_t>(n)], b0), hi = std::min(s.hi[static_cast<std::size_t>(n)], b1);
        if (lo >= hi) continue;
        const float* qr = &s.q[static_cast<std::size_t>(n) * D];
        float* sc = &s.t[static_cast<std::size_t>(n) * T] + b0;
        for (int d = 0; d < D; ++d) {
          const float qd = qr[d];
          const float* kd = kt + static_cast<std::size_t>(d) * S;
          for (int j = lo - b0; j < hi - b0; ++j) sc[j] += qd * kd[j];
        }
      }
    }
    // Online softmax per row: tile max, rescale, weights summed in key order.
    for (int n = 0; n < N; ++n) {
      const int lo = s.lo[static_cast<std::size_t>(n)], hi = s.hi[static_cast<std::size_t>(n)];
      if (lo >= hi) continue;  // nothing visible in this tile: the row's state is unchanged
      float* sc = &s.t[static_cast<std::size_t>(n) * T];
      if (softcap)
        for (int j = lo; j < hi; ++j) sc[j] = math::apply_softcap(sc[j], p.mask.softcap) * math::kLog2e;
      float tile_max = -INFINITY;
      for (int j = lo; j < hi; ++j) tile_max = std::max(tile_max, sc[j]);
      math::OnlineSoftmaxRow& row = s.rows[static_cast<std::size_t>(n)];
      const float alpha = row.enter_tile(tile_max);
      float* acc = &s.acc[static_cast<std::size_t>(n) * D];
      if (alpha != 1.0f)
        for (int d = 0; d < D; ++d) acc[d] *= alpha;
      for (int j = lo; j < hi; ++j) {
        const float w = row.weight(sc[j]);
        row.add(w);
        sc[j] = w;
      }
    }
    // P . V, one V sub-block at a time (keys in order for every output element).
    for (int b0 = sb_first; b0 < any_hi; b0 += S) {
      const int b1 = std::min(any_hi, b0 + S);
      for (int u = b0; u < b1; ++u) {
        const Storage* vs = token_v(j0 + u);
        float* vr = vt + static_cast<std::size_t>(u - b0) * D;
        for (int d = 0; d < D; ++d) vr[d] = load(vs[d]);
      }
      for (int n = 0; n < N; ++n) {
        const int lo = std::max(s.lo[static_cast<std::size_t>(n)], b0), hi = std::min(s.hi[static_cast<std::size_t>(n)], b1);
        if (lo >= hi) continue;
        const float* w = &s.t[static_cast<std::size_t>(n) * T];
        float* acc = &s.acc[static_cast<std::size_t>(n) * D];
        for (int j = lo; j < hi; ++j) {
          const float wj = w[j];
          const float* vr = vt + static_cast<std::size_t>(j - b0) * D;
          for (int d = 0; d < D; ++d) acc[d] += wj * vr[d];
        }
      }
    }
  }

  for (int n = 0; n < N; ++n) {
    const int r = it.q_begin + n / G, head = it.kv_head * G + n % G;
    const math::OnlineSoftmaxRow& row = s.rows[static_cast<std::size_t>(n)];
    const float scale = row.output_scale();
    const float* acc = &s.acc[static_cast<std::size_t>(n) * D];
    if (it.partial_row == plan::kDirect) {
      const std::int64_t base = p.o.offset(0, q0 + r, head);
      for (int d = 0; d < D; ++d) math::store_from_float(p.o.ptr, base + d, p.dtype, acc[d] * scale);
      if (p.lse.ptr) p.lse.ptr[p.lse.offset(0, q0 + r, head)] = row.lse();
    } else {
      const std::int64_t prow = it.partial_row + (r - it.q_begin);
      float* po = plan.partial_o + (prow * p.heads_q + head) * D;
      for (int d = 0; d < D; ++d) po[d] = acc[d] * scale;
      plan.partial_lse[prow * p.heads_q + head] = row.lse();
    }
  }
}

void run_item_any(const BatchRunParams& p, const plan::PlanView& plan, const plan::WorkItem& it, ItemScratch& s) {
  switch (p.cache.dtype) {
    case DType::f32: return run_item<DType::f32>(p, plan, it, s);
    case DType::f16: return run_item<DType::f16>(p, plan, it, s);
    case DType::bf16: return run_item<DType::bf16>(p, plan, it, s);
    case DType::e4m3: return run_item<DType::e4m3>(p, plan, it, s);
    case DType::e5m2: return run_item<DType::e5m2>(p, plan, it, s);
    case DType::i32: return run_item<DType::i32>(p, plan, it, s);
  }
}

void merge_row(const BatchRunParams& p, const plan::PlanView& plan, int m, std::vector<float>& acc) {
  const int D = p.head_dim;
  const std::int64_t token = plan.merge_row[m];
  acc.resize(static_cast<std::size_t>(D));
  for (int head = 0; head < p.heads_q; ++head) {
    math::LseMerger merger;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int32_t e = plan.merge_indptr[m]; e < plan.merge_indptr[m + 1]; ++e) {
      const std::int64_t prow = plan.merge_partial[e];
      float scale_old, weight_new;
      merger.add(plan.partial_lse[prow * p.heads_q + head], &scale_old, &weight_new);
      if (weight_new == 0.0f) continue;  // empty partial: its O is 0 and changes nothing
      const float* po = plan.partial_o + (prow * p.heads_q + head) * D;
      for (int d = 0; d < D; ++d)
        acc[static_cast<std::size_t>(d)] = math::lse_merge_acc(acc[static_cast<std::size_t>(d)], scale_old, weight_new, po[d]);
    }
    const float scale = merger.output_scale();
    const std::int64_t base = p.o.offset(0, token, head);
    for (int d = 0; d < D; ++d) math::store_from_float(p.o.ptr, base + d, p.dtype, acc[static_cast<std::size_t>(d)] * scale);
    if (p.lse.ptr) p.lse.ptr[p.lse.offset(0, token, head)] = merger.lse();
  }
}

}  // namespace

void batch_attention_run(const BatchRunParams& p) {
  const plan::PlanView plan = plan::plan_view(p.workspace, p.layout);
  const int num_items = plan.header->num_items;
  const int num_merge = plan.header->num_merge_rows;
  parallel_for(num_items, p.num_threads, [&](std::int64_t begin, std::int64_t end) {
    ItemScratch s;
    for (std::int64_t i = begin; i < end; ++i) run_item_any(p, plan, plan.items[i], s);
  });
  parallel_for(num_merge, p.num_threads, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> acc;
    for (std::int64_t m = begin; m < end; ++m) merge_row(p, plan, static_cast<int>(m), acc);
  });
}

}  // namespace tessera::cpu
