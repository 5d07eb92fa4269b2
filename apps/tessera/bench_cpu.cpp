// CPU benchmark suites and the CPU's ceilings (a large read-only sum, a mul+add loop).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_registry.h"
#include "common.h"
#include "cpu/parallel.h"
#include "math/mask.h"

namespace tessera::app::bench {
namespace {

std::string dense_shape(int b, int hq, int hkv, int sq, int sk, int d) {
  return "b" + std::to_string(b) + " h" + std::to_string(hq) + "/" + std::to_string(hkv) + " s" + std::to_string(sq) +
         "/" + std::to_string(sk) + " d" + std::to_string(d);
}

DeviceBuffer random_buffer(std::int64_t elems, DType dtype, std::mt19937_64& rng) {
  DeviceBuffer buf(Device::cpu(), static_cast<std::size_t>(elems) * dtype_size(dtype));
  fill_normal(buf.data(), elems, dtype, rng);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Ceilings

// Per-thread mul+add loop over 64 independent lanes (vectorised by the compiler at the ISA this
// binary was built for, which is the ISA the CPU kernels run at too).
float mul_add_loop(std::int64_t iters, float seed) {
  float acc[64];
  for (int k = 0; k < 64; ++k) acc[k] = seed + static_cast<float>(k) * 1e-3f;
  const float a = 0.999999f, b = 1e-7f;
  for (std::int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 64; ++k) acc[k] = acc[k] * a + b;
  float s = 0;
  for (int k = 0; k < 64; ++k) s += acc[k];
  return s;
}

Ceilings measure_cpu_ceilings(const Context& ctx) {
  Ceilings c;
  const int threads = cpu::resolve_threads(ctx.threads);

  // Memory: sum of a 256 MiB fp32 array (well past any cache), split over the threads.
  const std::int64_t n = (256LL << 20) / 4;
  std::vector<float> data(static_cast<std::size_t>(n));
  cpu::parallel_for(n, threads, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i & 1023) * 1e-3f;
  });
  std::vector<double> partial(static_cast<std::size_t>(threads) * 16);
  volatile double sink = 0;
  const double t_read = best_seconds(
      [&] {
        cpu::parallel_for(threads, threads, [&](std::int64_t tb, std::int64_t te) {
          for (std::int64_t t = tb; t < te; ++t) {
            const std::int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
            float acc[16] = {};
            std::int64_t i = lo;
            for (; i + 16 <= hi; i += 16)
              for (int k = 0; k < 16; ++k) acc[k] += data[static_cast<std::size_t>(i + k)];
            for (; i < hi; ++i) acc[0] += data[static_cast<std::size_t>(i)];
            double s = 0;
            for (float a : acc) s += a;
            partial[static_cast<std::size_t>(t) * 16] = s;
          }
        });
        double s = 0;
        for (int t = 0; t < threads; ++t) s += partial[static_cast<std::size_t>(t) * 16];
        sink = sink + s;
      },
      ctx.min_time, 3, 20);
  c.read_bytes = static_cast<double>(n) * 4 / t_read;
  c.read_what = "read-only sum of 256 MiB fp32, " + std::to_string(threads) + " threads";

  // Compute: independent mul+add chains on every thread.
  const std::int64_t iters = ctx.quick ? 1 << 19 : 1 << 21;
  std::vector<float> results(static_cast<std::size_t>(threads));
  const double t_fma = best_seconds(
      [&] {
        cpu::parallel_for(threads, threads, [&](std::int64_t tb, std::int64_t te) {
          for (std::int64_t t = tb; t < te; ++t)
            results[static_cast<std::size_t>(t)] = mul_add_loop(iters, static_cast<float>(t));
        });
      },
      ctx.min_time, 3, 20);
  for (float r : results) sink = sink + r;
  c.flops = static_cast<double>(threads) * iters * 64 * 2 / t_fma;
  c.flops_what = "fp32 mul+add at this binary's ISA, " + std::to_string(threads) + " threads";
  return c;
}

// ---------------------------------------------------------------------------------------------
// Dense forward / backward

struct DenseCase {
  int b, hq, hkv, s, d;
  bool causal;
  DType dtype;
};

std::string case_name(const char* what, const DenseCase& c) {
  return std::string(what) + " " + dtype_name(c.dtype) + (c.causal ? " causal" : "");
}

void set_key(Row& r, const char* kind, const DenseCase& c) {
  r.kind = kind;
  r.dtype = c.dtype;
  r.head_dim = c.d;
  r.seq = c.s;
  r.batch = c.b;
  r.heads = c.hq;
  r.causal = c.causal;
}

std::vector<DenseCase> forward_cases(bool quick) {
  if (quick) return {{1, 8, 8, 256, 64, false, DType::bf16}, {1, 8, 2, 512, 128, true, DType::bf16}};
  return {{1, 8, 8, 512, 64, false, DType::bf16},  {1, 8, 8, 1024, 64, true, DType::bf16},
          {1, 8, 8, 512, 128, false, DType::bf16}, {1, 8, 2, 1024, 128, true, DType::bf16},
          {1, 8, 8, 512, 64, false, DType::f16},   {1, 8, 8, 512, 64, false, DType::f32}};
}

void run_forward(const Context& ctx, const Emit& emit) {
  std::mt19937_64 rng(1);
  for (const DenseCase& c : forward_cases(ctx.quick)) {
    const std::int64_t qn = static_cast<std::int64_t>(c.b) * c.s * c.hq * c.d;
    const std::int64_t kn = static_cast<std::int64_t>(c.b) * c.s * c.hkv * c.d;
    DeviceBuffer q = random_buffer(qn, c.dtype, rng), k = random_buffer(kn, c.dtype, rng),
                 v = random_buffer(kn, c.dtype, rng), o(Device::cpu(), qn * dtype_size(c.dtype));
    const Tensor tq(q.data(), c.dtype, {c.b, c.s, c.hq, c.d}), tk(k.data(), c.dtype, {c.b, c.s, c.hkv, c.d}),
        tv(v.data(), c.dtype, {c.b, c.s, c.hkv, c.d}), to(o.data(), c.dtype, {c.b, c.s, c.hq, c.d});
    AttentionOptions opt;
    opt.causal = c.causal;
    ExecutionContext ec;
    ec.num_threads = ctx.threads;
    Row r;
    r.name = case_name("forward", c);
    r.shape = dense_shape(c.b, c.hq, c.hkv, c.s, c.s, c.d);
    r.seconds = median_seconds([&] { attention_forward(tq, tk, tv, to, Tensor(), opt, ec); }, ctx.min_time);
    r.flops = forward_flops(c.b, c.hq, c.s, c.s, c.d, c.causal);
    set_key(r, "forward", c);
    emit(r);
  }
}

std::vector<DenseCase> backward_cases(bool quick) {
  if (quick) return {{1, 8, 8, 256, 64, false, DType::bf16}};
  return {{1, 8, 8, 256, 64, false, DType::bf16},
          {1, 8, 8, 512, 64, true, DType::bf16},
          {1, 8, 2, 256, 128, false, DType::bf16}};
}

void run_backward(const Context& ctx, const Emit& emit) {
  std::mt19937_64 rng(2);
  for (const DenseCase& c : backward_cases(ctx.quick)) {
    const std::int64_t qn = static_cast<std::int64_t>(c.b) * c.s * c.hq * c.d;
    const std::int64_t kn = static_cast<std::int64_t>(c.b) * c.s * c.hkv * c.d;
    const std::size_t es = dtype_size(c.dtype);
    DeviceBuffer q = random_buffer(qn, c.dtype, rng), k = random_buffer(kn, c.dtype, rng),
                 v = random_buffer(kn, c.dtype, rng), dout = random_buffer(qn, c.dtype, rng),
                 o(Device::cpu(), qn * es), lse(Device::cpu(), static_cast<std::size_t>(c.b) * c.hq * c.s * 4),
                 dq(Device::cpu(), qn * es), dk(Device::cpu(), kn * es), dv(Device::cpu(), kn * es);
    const Tensor tq(q.data(), c.dtype, {c.b, c.s, c.hq, c.d}), tk(k.data(), c.dtype, {c.b, c.s, c.hkv, c.d}),
        tv(v.data(), c.dtype, {c.b, c.s, c.hkv, c.d}), to(o.data(), c.dtype, {c.b, c.s, c.hq, c.d}),
        tdo(dout.data(), c.dtype, {c.b, c.s, c.hq, c.d}), tl(lse.data(), DType::f32, {c.b, c.hq, c.s}),
        tdq(dq.data(), c.dtype, {c.b, c.s, c.hq, c.d}), tdk(dk.data(), c.dtype, {c.b, c.s, c.hkv, c.d}),
        tdv(dv.data(), c.dtype, {c.b, c.s, c.hkv, c.d});
    AttentionOptions opt;
    opt.causal = c.causal;
    opt.return_lse = true;
    ExecutionContext ec;
    ec.num_threads = ctx.threads;
    attention_forward(tq, tk, tv, to, tl, opt, ec);
    Row r;
    r.name = case_name("backward", c);
    r.shape = dense_shape(c.b, c.hq, c.hkv, c.s, c.s, c.d);
    r.seconds = median_seconds([&] { attention_backward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, opt, ec); },
                               ctx.min_time);
    r.flops = backward_flops(c.b, c.hq, c.s, c.s, c.d, c.causal);
    set_key(r, "backward", c);
    emit(r);
  }
}

// ---------------------------------------------------------------------------------------------
// Paged batches (decode, mixed) and plan()

struct PagedBatch {
  int hq, hkv, d, page_size;
  DType dtype;
  std::vector<std::int32_t> q_lens, kv_lens;
};

// (query, key) pairs a bottom-right causal mask lets through, summed over the batch.
double visible_pairs(const PagedBatch& pb) {
  double pairs = 0;
  for (std::size_t b = 0; b < pb.q_lens.size(); ++b) {
    const math::MaskSpec m = math::MaskSpec::make(pb.q_lens[b], pb.kv_lens[b], true, -1, -1);
    for (int i = 0; i < pb.q_lens[b]; ++i) pairs += math::visible_keys(m, i).size();
  }
  return pairs;
}

struct PagedSetup {
  PagePool pool;
  HostPageTable table;
  DeviceBuffer k, v, q, o, ws;
  BatchConfig cfg;
  std::int64_t total_q = 0;
  PagedSetup(const PagedBatch& pb, const Context& ctx, std::mt19937_64& rng)
      : pool(count_pages(pb), pb.page_size) {
    std::vector<int> seqs;
    for (std::size_t b = 0; b < pb.kv_lens.size(); ++b) {
      const int s = pool.create_sequence();
      pool.append_tokens(s, pb.kv_lens[b]);
      seqs.push_back(s);
      total_q += pb.q_lens[b];
    }
    table = pool.page_table(seqs);
    const std::int64_t page_elems = static_cast<std::int64_t>(pb.page_size) * pb.hkv * pb.d;
    k = random_buffer(page_elems * pool.num_pages(), pb.dtype, rng);
    v = random_buffer(page_elems * pool.num_pages(), pb.dtype, rng);
    q = random_buffer(total_q * pb.hq * pb.d, pb.dtype, rng);
    o = DeviceBuffer(Device::cpu(), static_cast<std::size_t>(total_q) * pb.hq * pb.d * dtype_size(pb.dtype));
    cfg.heads_q = pb.hq;
    cfg.heads_kv = pb.hkv;
    cfg.head_dim = pb.d;
    cfg.dtype = pb.dtype;
    cfg.page_size = pb.page_size;
    cfg.options.causal = true;
    cfg.max_requests = static_cast<int>(pb.q_lens.size());
    cfg.max_q_tokens = static_cast<int>(total_q);
    ws = DeviceBuffer(Device::cpu(), BatchAttention::workspace_size(cfg, query_device(Device::cpu())));
    (void)ctx;
  }
  static int count_pages(const PagedBatch& pb) {
    int n = 0;
    for (int len : pb.kv_lens) n += (len + pb.page_size - 1) / pb.page_size;
    return std::max(n, 1);
  }
  PagedKVCache cache(const PagedBatch& pb) const {
    PagedKVCache c;
    c.k_pages = Tensor(k.data(), pb.dtype, {pool.num_pages(), pb.page_size, pb.hkv, pb.d});
    c.v_pages = Tensor(v.data(), pb.dtype, {pool.num_pages(), pb.page_size, pb.hkv, pb.d});
    c.layout = KVLayout::NHD;
    return c;
  }
};

// Times plan() + run() of one batch.
Row time_batch(const std::string& name, const PagedBatch& pb, const Context& ctx, std::mt19937_64& rng) {
  PagedSetup s(pb, ctx, rng);
  BatchAttention attn(s.cfg);
  const DeviceFacts facts = query_device(Device::cpu());
  const Workspace ws{s.ws.data(), s.ws.bytes(), Device::cpu()};
  ExecutionContext ec;
  ec.num_threads = ctx.threads;
  const Tensor tq(s.q.data(), pb.dtype, {s.total_q, pb.hq, pb.d}), to(s.o.data(), pb.dtype, {s.total_q, pb.hq, pb.d});
  const PagedKVCache cache = s.cache(pb);
  const PageTable table = s.table.view();
  Row r;
  r.name = name;
  std::int64_t kv_total = 0, q_max = 0, kv_max = 0;
  for (std::size_t b = 0; b < pb.kv_lens.size(); ++b) {
    kv_total += pb.kv_lens[b];
    q_max = std::max<std::int64_t>(q_max, pb.q_lens[b]);
    kv_max = std::max<std::int64_t>(kv_max, pb.kv_lens[b]);
  }
  r.shape = "n" + std::to_string(pb.q_lens.size()) + " q" + std::to_string(s.total_q) + " kv" + std::to_string(kv_total) +
            " h" + std::to_string(pb.hq) + "/" + std::to_string(pb.hkv) + " d" + std::to_string(pb.d) + " p" +
            std::to_string(pb.page_size);
  r.seconds = median_seconds(
      [&] {
        attn.plan(pb.q_lens, pb.kv_lens, facts, ws, ec);
        attn.run(tq, cache, table, to, Tensor(), ws, ec);
      },
      ctx.min_time);
  const double es = static_cast<double>(dtype_size(pb.dtype));
  const double pairs = visible_pairs(pb);
  if (q_max == 1) {  // decode: memory-bound, count the bytes that must move
    r.bytes = 2.0 * kv_total * pb.hkv * pb.d * es + 2.0 * s.total_q * pb.hq * pb.d * es;
    r.note = "KV read once";
  } else {
    r.flops = 4.0 * pb.hq * pb.d * pairs;
    r.note = "exact causal pairs";
  }
  r.note += ", " + std::to_string(attn.planned_work_items()) + " work items";
  r.kind = q_max == 1 ? "decode" : "mixed";
  r.dtype = pb.dtype;
  r.head_dim = pb.d;
  r.seq = static_cast<int>(kv_max);
  r.batch = static_cast<int>(pb.q_lens.size());
  r.heads = pb.hq;
  r.causal = q_max > 1;
  return r;
}

void run_decode(const Context& ctx, const Emit& emit) {
  std::mt19937_64 rng(3);
  struct C { int batch, kv; };
  const std::vector<C> cases = ctx.quick ? std::vector<C>{{8, 1024}} : std::vector<C>{{64, 256}, {16, 1024}, {2, 8192}};
  for (const C& c : cases) {
    PagedBatch pb{32, 8, 128, 16, DType::bf16, std::vector<std::int32_t>(c.batch, 1),
                  std::vector<std::int32_t>(c.batch, c.kv)};
    emit(time_batch("decode bf16 GQA 4", pb, ctx, rng));
  }
}

void run_mixed(const Context& ctx, const Emit& emit) {
  std::mt19937_64 rng(4);
  PagedBatch pb{32, 8, 128, 16, DType::bf16, {}, {}};
  const int chunks = ctx.quick ? 2 : 4, decodes = ctx.quick ? 8 : 32;
  for (int i = 0; i < chunks; ++i) {  // prefill chunks of 64 tokens, 256 + 64 i tokens in
    pb.q_lens.push_back(64);
    pb.kv_lens.push_back(256 + 64 * i);
  }
  std::uniform_int_distribution<int> len(128, 1024);
  for (int i = 0; i < decodes; ++i) {
    pb.q_lens.push_back(1);
    pb.kv_lens.push_back(len(rng));
  }
  emit(time_batch("mixed bf16 " + std::to_string(chunks) + " chunks+" + std::to_string(decodes) + " dec", pb, ctx, rng));
}

// The two cases of the CUDA suite's cuda.plan (bench_cuda_paged.cpp, run_plan_time), same lengths,
// planned for an H200-sized device (132 SMs) into a host workspace: the planner's host time
// without the copy to the device.
void run_plan_h200_cases(const Context& ctx, const Emit& emit) {
  for (const PlanBenchCase& c : kPlanBenchCases) {
    const int n = 256;
    const PlanBenchBatch batch = plan_bench_batch(c.prefill);
    const std::vector<std::int32_t>& q_lens = batch.q_lens;
    const std::vector<std::int32_t>& kv_lens = batch.kv_lens;
    const std::int64_t total_q = batch.total_q;
    const int kv_max = batch.kv_max;
    BatchConfig cfg;
    cfg.heads_q = 32;
    cfg.heads_kv = 8;
    cfg.head_dim = 128;
    cfg.page_size = 16;
    cfg.options.causal = true;
    cfg.max_requests = n;
    cfg.max_q_tokens = static_cast<int>(total_q);
    const DeviceFacts facts{Device::cpu(), 132};
    DeviceBuffer ws(Device::cpu(), BatchAttention::workspace_size(cfg, facts));
    const Workspace w{ws.data(), ws.bytes(), Device::cpu()};
    BatchAttention attn(cfg);
    Row r;
    r.name = c.name;
    r.shape = "n256 q" + std::to_string(total_q) + " h32/8 d128 p16 facts 132";
    // Many short runs: a single plan() is a few us, so the median of up to 5000 is stable.
    r.seconds = median_seconds([&] { attn.plan(q_lens, kv_lens, facts, w); }, ctx.min_time, 200, 5000);
    r.note = "as cuda.plan, host workspace; " + std::to_string(attn.planned_work_items()) + " work items";
    r.kind = "plan";
    r.dtype = DType::bf16;
    r.head_dim = cfg.head_dim;
    r.batch = n;
    r.heads = cfg.heads_q;
    r.seq = kv_max;
    r.causal = true;
    emit(r);
  }
}

void run_plan(const Context& ctx, const Emit& emit) {
  run_plan_h200_cases(ctx, emit);
  std::mt19937_64 rng(5);
  const int n = 256;
  std::vector<std::int32_t> q_lens(n), kv_lens(n);
  std::uniform_int_distribution<int> kv(1, 8192), coin(0, 7), chunk(16, 512);
  std::int64_t total_q = 0;
  for (int i = 0; i < n; ++i) {
    kv_lens[i] = kv(rng);
    q_lens[i] = coin(rng) == 0 ? std::min(kv_lens[i], chunk(rng)) : 1;  // 1 in 8 is a prefill chunk
    total_q += q_lens[i];
  }
  BatchConfig cfg;
  cfg.heads_q = 32;
  cfg.heads_kv = 8;
  cfg.head_dim = 128;
  cfg.page_size = 16;
  cfg.options.causal = true;
  cfg.max_requests = n;
  cfg.max_q_tokens = static_cast<int>(total_q);
  const DeviceFacts facts = query_device(Device::cpu());
  for (const DeviceFacts& f : {facts, DeviceFacts{Device::cpu(), 132}}) {
    DeviceBuffer ws(Device::cpu(), BatchAttention::workspace_size(cfg, f));
    const Workspace w{ws.data(), ws.bytes(), Device::cpu()};
    BatchAttention attn(cfg);
    Row r;
    r.name = "plan() 256 requests";
    r.shape = "q" + std::to_string(total_q) + " kv<=8192 facts " + std::to_string(f.num_sms) + (f.num_sms == 132 ? " (H200-sized)" : " (this CPU)");
    r.seconds = median_seconds([&] { attn.plan(q_lens, kv_lens, f, w); }, ctx.min_time);
    r.note = format_seconds(r.seconds / n) + " per request, " + std::to_string(attn.planned_work_items()) +
             " work items, workspace " + std::to_string(ws.bytes() / 1024) + " KiB";
    r.kind = "plan";
    r.head_dim = cfg.head_dim;
    r.batch = n;
    r.heads = cfg.heads_q;
    r.seq = f.num_sms;  // the CSV's seq column carries the planned device's SM count here
    emit(r);
  }
}

}  // namespace

TESSERA_BENCH_CEILINGS(cpu, {DeviceKind::cpu, measure_cpu_ceilings});
TESSERA_BENCH_SUITE(cpu_forward, {"cpu.forward", DeviceKind::cpu, "dense forward, bf16/fp16/fp32, head dims 64/128, causal and not", run_forward});
TESSERA_BENCH_SUITE(cpu_backward, {"cpu.backward", DeviceKind::cpu, "dense backward (dq, dk, dv) from the saved LSE", run_backward});
TESSERA_BENCH_SUITE(cpu_decode, {"cpu.decode", DeviceKind::cpu, "batch decode over a paged KV cache (plan + run), GB/s of KV read", run_decode});
TESSERA_BENCH_SUITE(cpu_mixed, {"cpu.mixed", DeviceKind::cpu, "one batch mixing prefill chunks and decode tokens (plan + run)", run_mixed});
TESSERA_BENCH_SUITE(cpu_plan, {"cpu.plan", DeviceKind::cpu, "BatchAttention::plan() host time for 256 requests", run_plan});

}  // namespace tessera::app::bench
