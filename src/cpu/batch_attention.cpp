// The CPU executor of a batch-attention plan (format in plan/batch_plan.h). It reads only the
// plan in the workspace, like a GPU kernel would:
//   pass 1: every work item attends its Q tile (all query heads of one kv head's GQA group)
//           to its KV chunk, read through the page table one KV tile at a time, and writes
//           out/lse directly or an fp32 partial state;
//   pass 2: every split query row merges its partials (math::LseMerger) into out/lse.
#include <algorithm>
#include <cmath>
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
  std::vector<float> q, acc, k, v, t;
  std::vector<math::OnlineSoftmaxRow> rows;
};

void run_item(const BatchRunParams& p, const plan::PlanView& plan, const plan::WorkItem& it, ItemScratch& s) {
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
  s.k.resize(static_cast<std::size_t>(plan::kKVTile) * D);
  s.v.resize(static_cast<std::size_t>(plan::kKVTile) * D);
  s.t.resize(plan::kKVTile);
  for (int n = 0; n < N; ++n) {
    const int head = it.kv_head * G + n % G;
    const std::int64_t base = p.q.offset(0, q0 + it.q_begin + n / G, head);
    for (int d = 0; d < D; ++d) s.q[static_cast<std::size_t>(n) * D + d] = math::load_as_float(p.q.ptr, base + d, p.dtype) * q_mul;
  }

  const std::int32_t* pages = p.table.indices + p.table.indptr[b];
  for (int j0 = it.kv_begin; j0 < it.kv_end; j0 += plan::kKVTile) {
    const int j1 = std::min(it.kv_end, j0 + plan::kKVTile);
    // Gather the tile through the page table: one page lookup per page the tile touches.
    for (int j = j0; j < j1;) {
      const std::int64_t page = pages[j / c.page_size];
      const int slot0 = j % c.page_size;
      const int run = std::min(j1 - j, c.page_size - slot0);
      for (int u = 0; u < run; ++u) {
        const std::int64_t kb = page * c.k_page + (slot0 + u) * c.k_token + it.kv_head * c.k_head;
        const std::int64_t vb = page * c.v_page + (slot0 + u) * c.v_token + it.kv_head * c.v_head;
        float* kr = &s.k[static_cast<std::size_t>(j - j0 + u) * D];
        float* vr = &s.v[static_cast<std::size_t>(j - j0 + u) * D];
        for (int d = 0; d < D; ++d) {
          kr[d] = math::load_as_float(c.k, kb + d, c.dtype);
          vr[d] = math::load_as_float(c.v, vb + d, c.dtype);
        }
      }
      j += run;
    }
    for (int n = 0; n < N; ++n) {
      const math::KeyRange keys = math::visible_keys(mask, it.q_begin + n / G);
      const int lo = std::max(j0, keys.begin), hi = std::min(j1, keys.end);
      if (lo >= hi) continue;  // nothing visible in this tile: the row's state is unchanged
      const float* qr = &s.q[static_cast<std::size_t>(n) * D];
      float tile_max = -INFINITY;
      for (int j = lo; j < hi; ++j) {
        const float* kr = &s.k[static_cast<std::size_t>(j - j0) * D];
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qr[d] * kr[d];
        const float t = softcap ? math::apply_softcap(dot, p.mask.softcap) * math::kLog2e : dot;
        s.t[static_cast<std::size_t>(j - j0)] = t;
        tile_max = std::max(tile_max, t);
      }
      math::OnlineSoftmaxRow& row = s.rows[static_cast<std::size_t>(n)];
      const float alpha = row.enter_tile(tile_max);
      float* acc = &s.acc[static_cast<std::size_t>(n) * D];
      if (alpha != 1.0f)
        for (int d = 0; d < D; ++d) acc[d] *= alpha;
      for (int j = lo; j < hi; ++j) {
        const float w = row.weight(s.t[static_cast<std::size_t>(j - j0)]);
        row.add(w);
        const float* vr = &s.v[static_cast<std::size_t>(j - j0) * D];
        for (int d = 0; d < D; ++d) acc[d] += w * vr[d];
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
      for (int d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] = acc[static_cast<std::size_t>(d)] * scale_old + weight_new * po[d];
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
    for (std::int64_t i = begin; i < end; ++i) run_item(p, plan, plan.items[i], s);
  });
  parallel_for(num_merge, p.num_threads, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> acc;
    for (std::int64_t m = begin; m < end; ++m) merge_row(p, plan, static_cast<int>(m), acc);
  });
}

}  // namespace tessera::cpu
