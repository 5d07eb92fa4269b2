// CUDA benchmark suites of paged batches through BatchAttention (compiled only with
// TESSERA_WITH_CUDA): decode, one mixed batch of prefill chunks and decode tokens against two
// (eager, graph replays, sustained), SplitPolicy, plan() host time. Decode shapes follow
// bench/peers.py's; timing helpers in bench_cuda_timing.h.
#if defined(TESSERA_WITH_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_cuda_timing.h"
#include "bench_registry.h"
#include "common.h"
#include "energy_meter.h"

namespace tessera::app::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Paged batches through BatchAttention (run() timed; plan() once before).
// GQA 32/8, head dim 128, page size 16, bf16; K, V and q filled with random values.

constexpr int kHq = 32, kHkv = 8, kD = 128, kPs = 16;

// A paged cache, page table, q and out on the device for one batch of (q_len, kv_len).
struct PagedSetup {
  std::vector<std::int32_t> q_lens, kv_lens;
  std::int64_t batch = 0, total_q = 0, kv_total = 0, kv_max = 0, q_max = 0;
  int pages = 0;
  DeviceBuffer kc, vc, q, o, indptr, indices, last;
  PagedKVCache cache;
  PageTable table;
  Tensor tq, to;

  PagedSetup(const Device& dev, std::vector<std::int32_t> ql, std::vector<std::int32_t> kl, std::uint64_t seed)
      : q_lens(std::move(ql)), kv_lens(std::move(kl)) {
    const DType dt = DType::bf16;
    batch = static_cast<std::int64_t>(q_lens.size());
    for (std::size_t i = 0; i < q_lens.size(); ++i) {
      pages += (kv_lens[i] + kPs - 1) / kPs;
      total_q += q_lens[i];
      kv_total += kv_lens[i];
      kv_max = std::max<std::int64_t>(kv_max, kv_lens[i]);
      q_max = std::max<std::int64_t>(q_max, q_lens[i]);
    }
    PagePool pool(pages, kPs);
    std::vector<int> seqs;
    for (std::int32_t len : kv_lens) {
      seqs.push_back(pool.create_sequence());
      pool.append_tokens(seqs.back(), len);
    }
    HostPageTable t = pool.page_table(seqs);
    // Shuffle nothing: the pool hands out pages in order, which is what a fresh server does.
    const std::size_t page_bytes = static_cast<std::size_t>(kPs) * kHkv * kD * 2;
    const std::size_t q_bytes = static_cast<std::size_t>(total_q) * kHq * kD * 2;
    kc = DeviceBuffer(dev, page_bytes * pages);
    vc = DeviceBuffer(dev, page_bytes * pages);
    q = DeviceBuffer(dev, q_bytes);
    o = DeviceBuffer(dev, q_bytes);
    indptr = DeviceBuffer(dev, t.kv_indptr.size() * 4);
    indices = DeviceBuffer(dev, t.kv_indices.size() * 4);
    last = DeviceBuffer(dev, t.kv_last_page_len.size() * 4);
    fill_random(kc, dt, seed + 1);
    fill_random(vc, dt, seed + 2);
    fill_random(q, dt, seed + 3);
    indptr.upload(t.kv_indptr.data(), indptr.bytes());
    indices.upload(t.kv_indices.data(), indices.bytes());
    last.upload(t.kv_last_page_len.data(), last.bytes());
    check(cudaDeviceSynchronize(), "paged setup");
    cache.k_pages = Tensor(kc.data(), dt, {pages, kPs, kHkv, kD}, dev);
    cache.v_pages = Tensor(vc.data(), dt, {pages, kPs, kHkv, kD}, dev);
    table.kv_indptr = Tensor(indptr.data(), DType::i32, {batch + 1}, dev);
    table.kv_indices = Tensor(indices.data(), DType::i32, {static_cast<std::int64_t>(t.kv_indices.size())}, dev);
    table.kv_last_page_len = Tensor(last.data(), DType::i32, {batch}, dev);
    tq = Tensor(q.data(), dt, {total_q, kHq, kD}, dev);
    to = Tensor(o.data(), dt, {total_q, kHq, kD}, dev);
  }

  BatchConfig config(SplitPolicy::Mode split = SplitPolicy::Mode::automatic) const {
    return batch_config(static_cast<int>(batch), static_cast<int>(total_q), split);
  }
  static BatchConfig batch_config(int max_requests, int max_q_tokens, SplitPolicy::Mode split) {
    BatchConfig cfg;
    cfg.heads_q = kHq;
    cfg.heads_kv = kHkv;
    cfg.head_dim = kD;
    cfg.dtype = DType::bf16;
    cfg.page_size = kPs;
    cfg.options.causal = true;
    cfg.split.mode = split;
    cfg.max_requests = max_requests;
    cfg.max_q_tokens = max_q_tokens;
    return cfg;
  }
  std::string shape() const {
    return "n" + std::to_string(batch) + " q" + std::to_string(total_q) + " kv" + std::to_string(kv_total) +
           " h32/8 d128 p16";
  }
  // Visible (query, key) pairs under the bottom-right causal mask.
  double causal_pairs() const {
    double pairs = 0;
    for (std::size_t i = 0; i < q_lens.size(); ++i)
      for (int row = 0; row < q_lens[i]; ++row) pairs += std::min<double>(kv_lens[i], row + kv_lens[i] - q_lens[i] + 1);
    return pairs;
  }
  double kv_bytes() const { return 2.0 * kv_total * kHkv * kD * 2; }  // K + V read once
};

// A planned BatchAttention with its own workspace over one PagedSetup.
struct PlannedBatch {
  BatchAttention attn;
  DeviceBuffer ws;
  Workspace w;
  PlannedBatch(const PagedSetup& p, const Device& dev, SplitPolicy::Mode split = SplitPolicy::Mode::automatic)
      : attn(p.config(split)) {
    const DeviceFacts facts = query_device(dev);
    ws = DeviceBuffer(dev, BatchAttention::workspace_size(attn.config(), facts));
    w = Workspace{ws.data(), ws.bytes(), dev};
    attn.plan(p.q_lens, p.kv_lens, facts, w);
    check(cudaDeviceSynchronize(), "plan");
  }
  void run(const PagedSetup& p, cudaStream_t stream = nullptr) const {
    attn.run(p.tq, p.cache, p.table, p.to, Tensor(), w, ExecutionContext{stream, 0});
  }
};

void fill_keys(Row& r, const PagedSetup& p) {
  r.kind = p.q_max == 1 ? "decode" : "mixed";
  r.dtype = DType::bf16;
  r.head_dim = kD;
  r.seq = static_cast<int>(p.kv_max);
  r.batch = static_cast<int>(p.batch);
  r.heads = kHq;
  r.causal = p.q_max > 1;
}

// graph: time replays of a CUDA graph holding run() (rows of kind "<kind>_graph") instead of
// run() calls.
Row paged_case(const Context& ctx, const std::string& name, const std::vector<std::int32_t>& q_lens,
               const std::vector<std::int32_t>& kv_lens, bool graph = false) {
  Row r;
  r.name = name;
  try {
    PagedSetup p(ctx.device, q_lens, kv_lens, 20);
    r.shape = p.shape();
    fill_keys(r, p);
    if (graph) r.kind += "_graph";
    PlannedBatch b(p, ctx.device);
    const double ms = graph ? cuda_graph_median_ms([&](cudaStream_t s) { b.run(p, s); }, ctx.min_time)
                            : cuda_median_ms([&] { b.run(p); }, ctx.min_time);
    r.seconds = ms * 1e-3;
    if (p.q_max == 1) {
      r.bytes = p.kv_bytes();
      r.note = graph ? "graph replay of run(), bytes of K+V; " : "run() only, bytes of K+V; ";
    } else {
      r.flops = 4.0 * kHq * kD * p.causal_pairs();
      r.note = "run() only, exact causal pairs; ";
    }
    r.note += std::to_string(b.attn.planned_work_items()) + " work items";
  } catch (const std::exception& e) {
    return not_run(r, e);
  }
  return r;
}

void run_decode(const Context& ctx, const Emit& emit) {
  struct C { int batch, kv; };
  const std::vector<C> cases = ctx.quick ? std::vector<C>{{8, 32768}, {128, 8192}}
                                         : std::vector<C>{{1, 131072}, {8, 32768}, {64, 4096}, {128, 8192}, {256, 2048}};
  for (const C& c : cases)
    emit(paged_case(ctx, "decode bf16 GQA 4", std::vector<std::int32_t>(c.batch, 1),
                    std::vector<std::int32_t>(c.batch, c.kv)));
}

// The same cases as cuda.decode, each run() captured once in a CUDA graph and replayed (how
// serving engines run decode steps); bench/peers.py times the peers' calls the same way.
void run_decode_graph(const Context& ctx, const Emit& emit) {
  struct C { int batch, kv; };
  const std::vector<C> cases = ctx.quick ? std::vector<C>{{8, 32768}}
                                         : std::vector<C>{{1, 131072}, {8, 32768}, {64, 4096}, {128, 8192}, {256, 2048}};
  for (const C& c : cases)
    emit(paged_case(ctx, "decode bf16 GQA 4 (graph)", std::vector<std::int32_t>(c.batch, 1),
                    std::vector<std::int32_t>(c.batch, c.kv), true));
}

void run_mixed(const Context& ctx, const Emit& emit) {
  std::vector<std::int32_t> q_lens, kv_lens;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> len(1024, 16384);
  for (int i = 0; i < 8; ++i) {  // prefill chunks of 512 tokens
    q_lens.push_back(512);
    kv_lens.push_back(512 * (i + 1));
  }
  for (int i = 0; i < 128; ++i) {
    q_lens.push_back(1);
    kv_lens.push_back(len(rng));
  }
  emit(paged_case(ctx, "mixed bf16 8 chunks+128 dec", q_lens, kv_lens));
}

// Batch 1: automatic KV split vs one chunk per request, same cache, same plan() otherwise.
void run_split(const Context& ctx, const Emit& emit) {
  const std::vector<int> kvs = ctx.quick ? std::vector<int>{131072} : std::vector<int>{131072, 32768};
  for (int kv : kvs) {
    Row base;
    try {
      PagedSetup p(ctx.device, {1}, {kv}, 30);
      base.shape = p.shape();
      fill_keys(base, p);
      base.note = "";
      for (SplitPolicy::Mode mode : {SplitPolicy::Mode::automatic, SplitPolicy::Mode::disabled}) {
        const bool automatic = mode == SplitPolicy::Mode::automatic;
        Row r = base;
        r.name = automatic ? "decode b1 split=auto" : "decode b1 split=off";
        r.backend = automatic ? "tessera_split_auto" : "tessera_split_off";  // CSV: same key, two backends
        try {
          PlannedBatch b(p, ctx.device, mode);
          const double ms = cuda_median_ms([&] { b.run(p); }, ctx.min_time);
          r.seconds = ms * 1e-3;
          r.bytes = p.kv_bytes();
          r.note = "run() only, bytes of K+V; " + std::to_string(b.attn.planned_work_items()) + " work items, " +
                   std::to_string(b.attn.planned_splits(0)) + " KV chunks";
        } catch (const std::exception& e) {
          r = not_run(r, e);
        }
        emit(r);
      }
    } catch (const std::exception& e) {  // the cache itself did not fit
      base.name = "decode b1 kv" + std::to_string(kv);
      emit(not_run(base, e));
    }
  }
}

// The same work as one mixed BatchAttention batch (a) and as two batches, prefill chunks and
// decode tokens, each planned into its own workspace over its own cache (b). run() timed:
// (a) one run(), (b) both run()s back to back between the same events.
// graph: both sides timed as CUDA graph replays (cuda_graph_median_ms): the GPU-side time without
// the host's run() calls inside the span, which the eager rows include (an event, run(), an
// event, a sync per sample).
// The mixed benches' batch: 8 prefill chunks of 512 query rows and 128 decode tokens, all on
// 4096 keys; the prefill and decode halves and the whole, as (q_lens, kv_lens).
struct MixedBenchBatch {
  static constexpr int kChunks = 8, kChunkQ = 512, kDecodes = 128, kContext = 4096;
  std::vector<std::int32_t> pre_q = std::vector<std::int32_t>(kChunks, kChunkQ),
                            pre_kv = std::vector<std::int32_t>(kChunks, kContext),
                            dec_q = std::vector<std::int32_t>(kDecodes, 1),
                            dec_kv = std::vector<std::int32_t>(kDecodes, kContext), all_q, all_kv;
  MixedBenchBatch() : all_q(pre_q), all_kv(pre_kv) {
    all_q.insert(all_q.end(), dec_q.begin(), dec_q.end());
    all_kv.insert(all_kv.end(), dec_kv.begin(), dec_kv.end());
  }
  static Row row(const char* kind) {
    Row base;
    base.kind = kind;
    base.dtype = DType::bf16;
    base.head_dim = kD;
    base.seq = kContext;
    base.batch = kChunks + kDecodes;
    base.heads = kHq;
    base.causal = true;
    base.shape = "8x512q/4k + 128x1q/4k h32/8 d128 p16";
    return base;
  }
};

void mixed_vs_separate(const Context& ctx, const Emit& emit, bool graph) {
  const MixedBenchBatch m;
  const auto &all_q = m.all_q, &all_kv = m.all_kv, &pre_q = m.pre_q, &pre_kv = m.pre_kv, &dec_q = m.dec_q,
             &dec_kv = m.dec_kv;
  const Row base = MixedBenchBatch::row(graph ? "mixed_vs_separate_graph" : "mixed_vs_separate");
  double pairs = 0;
  double ms_mixed = 0;

  Row a = base;
  a.name = "mixed: one batch";
  a.backend = "tessera_mixed";  // rows of one comparison differ in the CSV backend column
  try {
    PagedSetup p(ctx.device, all_q, all_kv, 40);
    pairs = p.causal_pairs();
    PlannedBatch b(p, ctx.device);
    ms_mixed = graph ? cuda_graph_median_ms([&](cudaStream_t s) { b.run(p, s); }, ctx.min_time)
                     : cuda_median_ms([&] { b.run(p); }, ctx.min_time);
    a.seconds = ms_mixed * 1e-3;
    a.flops = 4.0 * kHq * kD * pairs;
    a.note = std::string(graph ? "(a) graph replay of run()" : "(a) run() only") + ", exact causal pairs; " +
             std::to_string(b.attn.planned_work_items()) + " work items";
  } catch (const std::exception& e) {
    a = not_run(a, e);
    ms_mixed = 0;
  }
  emit(a);

  Row r = base;
  r.name = "mixed: prefill + decode";
  r.backend = "tessera_separate";  // rows of one comparison differ in the CSV backend column
  try {
    PagedSetup pp(ctx.device, pre_q, pre_kv, 40);
    PagedSetup pd(ctx.device, dec_q, dec_kv, 50);
    if (pairs == 0) pairs = pp.causal_pairs() + pd.causal_pairs();
    PlannedBatch bp(pp, ctx.device), bd(pd, ctx.device);
    const double ms_both = graph ? cuda_graph_median_ms(
                                       [&](cudaStream_t s) {
                                         bp.run(pp, s);
                                         bd.run(pd, s);
                                       },
                                       ctx.min_time)
                                 : cuda_median_ms(
                                       [&] {
                                         bp.run(pp);
                                         bd.run(pd);
                                       },
                                       ctx.min_time);
    const double ms_pre = graph ? cuda_graph_median_ms([&](cudaStream_t s) { bp.run(pp, s); }, ctx.min_time * 0.5)
                                : cuda_median_ms([&] { bp.run(pp); }, ctx.min_time * 0.5);
    const double ms_dec = graph ? cuda_graph_median_ms([&](cudaStream_t s) { bd.run(pd, s); }, ctx.min_time * 0.5)
                                : cuda_median_ms([&] { bd.run(pd); }, ctx.min_time * 0.5);
    r.seconds = ms_both * 1e-3;
    r.flops = 4.0 * kHq * kD * pairs;
    char buf[200];
    std::snprintf(buf, sizeof buf, "(b) 2 run()s%s: prefill %.3f ms + decode %.3f ms alone; (b)/(a) = %s",
                  graph ? " in one graph" : "", ms_pre, ms_dec,
                  ms_mixed > 0 ? (std::to_string(ms_both / ms_mixed).substr(0, 5) + "x").c_str() : "-");
    r.note = buf;
  } catch (const std::exception& e) {
    r = not_run(r, e);
  }
  emit(r);
}

// cuda.mixed_vs_separate's two sides sustained (1.5 s each after 0.3 s, in the order a, b, a, b;
// each side's figures are the mean of its two rounds): the steady state of a serving loop on a
// power-capped GPU, with the energy of one call of each side, the SM clock it ran at and what
// held the clock down (NVML's clock event reasons; the power cap's share of the samples).
void mixed_sustained(const Context& ctx, const Emit& emit) {
  const MixedBenchBatch m;
  Row a = MixedBenchBatch::row("mixed_sustained"), r = a;
  a.name = "mixed sustained: one batch";
  a.backend = "tessera_mixed";
  r.name = "mixed sustained: prefill + decode";
  r.backend = "tessera_separate";
  try {
    const EnergyMeter meter(ctx.device.index);
    PagedSetup p(ctx.device, m.all_q, m.all_kv, 40);
    PagedSetup pp(ctx.device, m.pre_q, m.pre_kv, 40);
    PagedSetup pd(ctx.device, m.dec_q, m.dec_kv, 50);
    const double pairs = p.causal_pairs();
    PlannedBatch b(p, ctx.device), bp(pp, ctx.device), bd(pd, ctx.device);
    const auto one = [&] { b.run(p); };
    const auto two = [&] {
      bp.run(pp);
      bd.run(pd);
    };
    Sustained xa[2], xb[2];
    for (int round = 0; round < 2; ++round) {
      xa[round] = sustained(one, meter, 0.3, 1.5);
      xb[round] = sustained(two, meter, 0.3, 1.5);
    }
    const auto mean = [](const Sustained (&x)[2]) {
      Sustained m;
      m.ms = 0.5 * (x[0].ms + x[1].ms);
      if (x[0].joules >= 0 && x[1].joules >= 0) {
        m.joules = 0.5 * (x[0].joules + x[1].joules);
        m.watts = 0.5 * (x[0].watts + x[1].watts);
      }
      if (x[0].sm_mhz > 0 && x[1].sm_mhz > 0) m.sm_mhz = 0.5 * (x[0].sm_mhz + x[1].sm_mhz);
      if (x[0].power_capped >= 0 && x[1].power_capped >= 0) {
        m.power_capped = 0.5 * (x[0].power_capped + x[1].power_capped);
        m.reasons = x[0].reasons | x[1].reasons;
      }
      return m;
    };
    const Sustained sa = mean(xa), sb = mean(xb);
    const auto energy = [&](const Sustained& x) {
      char buf[160];
      std::string s = "no energy counter";
      if (x.joules >= 0) {
        std::snprintf(buf, sizeof buf, "%.3f J per call at %.0f W", x.joules, x.watts);
        s = buf;
      }
      if (x.sm_mhz > 0) {
        std::snprintf(buf, sizeof buf, ", SM %.0f MHz", x.sm_mhz);
        s += buf;
      }
      if (x.power_capped >= 0) {
        std::snprintf(buf, sizeof buf, ", power cap in %.0f %% of samples (reasons seen: %s)", 100.0 * x.power_capped,
                      clock_reason_names(x.reasons).c_str());
        s += buf;
      }
      return s;
    };
    a.seconds = sa.ms * 1e-3;
    a.flops = r.flops = 4.0 * kHq * kD * pairs;
    a.note = "(a) run() back to back, 1.5 s after 0.3 s, 2 rounds: " + energy(sa);
    r.seconds = sb.ms * 1e-3;
    char buf[80];
    std::snprintf(buf, sizeof buf, "; (b)/(a) = %.3fx time", sb.ms / sa.ms);
    r.note = "(b) 2 run()s back to back, likewise: " + energy(sb) + buf;
    if (sa.joules > 0 && sb.joules > 0) {
      std::snprintf(buf, sizeof buf, ", %.3fx energy", sb.joules / sa.joules);
      r.note += buf;
    }
  } catch (const std::exception& e) {
    a = not_run(a, e);
    r = not_run(r, e);
  }
  emit(a);
  emit(r);
}

// Host time of plan() on the CUDA workspace path: host planning plus enqueueing the plan's
// copy to the workspace (cudaMemcpyAsync on the default stream). The stream is drained after
// each call, outside the timed span, so copies never queue up.
void run_plan_time(const Context& ctx, const Emit& emit) {
  for (const PlanBenchCase& c : kPlanBenchCases) {
    const int n = 256;
    const PlanBenchBatch batch = plan_bench_batch(c.prefill);
    const std::vector<std::int32_t>& q_lens = batch.q_lens;
    const std::vector<std::int32_t>& kv_lens = batch.kv_lens;
    const std::int64_t total_q = batch.total_q;
    const int kv_max = batch.kv_max;
    Row r;
    r.name = c.name;
    r.shape = "n256 q" + std::to_string(total_q) + " h32/8 d128 p16";
    r.kind = "plan";
    r.dtype = DType::bf16;
    r.head_dim = kD;
    r.seq = kv_max;
    r.batch = n;
    r.heads = kHq;
    r.causal = true;
    try {
      const BatchConfig cfg = PagedSetup::batch_config(n, static_cast<int>(total_q), SplitPolicy::Mode::automatic);
      const DeviceFacts facts = query_device(ctx.device);
      DeviceBuffer ws(ctx.device, BatchAttention::workspace_size(cfg, facts));
      const Workspace w{ws.data(), ws.bytes(), ctx.device};
      BatchAttention attn(cfg);
      for (int i = 0; i < 20; ++i) attn.plan(q_lens, kv_lens, facts, w);  // warm-up
      check(cudaDeviceSynchronize(), "plan warm-up");
      std::vector<double> us;
      double total = 0;
      const double budget = std::min(ctx.min_time, 0.5);
      while (us.size() < 5000 && (us.size() < 200 || total < budget)) {
        const double t0 = now_seconds();
        attn.plan(q_lens, kv_lens, facts, w);
        const double t = now_seconds() - t0;
        check(cudaStreamSynchronize(nullptr), "plan copy");
        us.push_back(t * 1e6);
        total += t;
      }
      std::sort(us.begin(), us.end());
      const std::size_t m = us.size();
      const double med = m % 2 ? us[m / 2] : 0.5 * (us[m / 2 - 1] + us[m / 2]);
      r.seconds = med * 1e-6;
      char buf[200];
      std::snprintf(buf, sizeof buf, "plan() host time %.1f us median of %zu (CSV ms column = ms); %d work items", med,
                    m, attn.planned_work_items());
      r.note = buf;
    } catch (const std::exception& e) {
      r = not_run(r, e);
    }
    emit(r);
  }
}

}  // namespace

TESSERA_BENCH_SUITE(cuda_decode, {"cuda.decode", DeviceKind::cuda, "paged decode, GQA 32/8, d128: 1x128k .. 256x2k (bytes of K+V per second)", run_decode});
TESSERA_BENCH_SUITE(cuda_decode_graph, {"cuda.decode_graph", DeviceKind::cuda, "cuda.decode's cases as CUDA graph replays of run() (no host time in the span)", run_decode_graph});
TESSERA_BENCH_SUITE(cuda_mixed, {"cuda.mixed", DeviceKind::cuda, "one paged batch of 8 prefill chunks and 128 decode tokens", run_mixed});
TESSERA_BENCH_SUITE(cuda_split, {"cuda.split", DeviceKind::cuda, "decode batch 1 (128k, 32k): SplitPolicy automatic vs disabled (GB/s of K+V)", run_split});
TESSERA_BENCH_SUITE(cuda_mixed_vs_separate, {"cuda.mixed_vs_separate", DeviceKind::cuda,
                                             "8x512 prefill chunks + 128 decode at 4k: one mixed batch vs two batches (run() times)",
                                             [](const Context& c, const Emit& e) { mixed_vs_separate(c, e, false); }});
TESSERA_BENCH_SUITE(cuda_mixed_vs_separate_graph, {"cuda.mixed_vs_separate_graph", DeviceKind::cuda,
                                                   "cuda.mixed_vs_separate as CUDA graph replays (no host time in the span)",
                                                   [](const Context& c, const Emit& e) { mixed_vs_separate(c, e, true); }});
TESSERA_BENCH_SUITE(cuda_mixed_sustained, {"cuda.mixed_sustained", DeviceKind::cuda,
                                           "cuda.mixed_vs_separate sustained (1.5 s per side after 0.3 s): steady clocks under the power cap, J per call",
                                           mixed_sustained});
TESSERA_BENCH_SUITE(cuda_plan, {"cuda.plan", DeviceKind::cuda, "plan() host time for 256 requests, CUDA workspace (planning + copy enqueue)", run_plan_time});

}  // namespace tessera::app::bench

#endif  // TESSERA_WITH_CUDA
