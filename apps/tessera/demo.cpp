// `tessera demo`: a small serving simulation.
//
// Requests of different prompt and output lengths arrive over time. Each step a scheduler
// builds one batch under a token budget: every running request in its decode phase
// contributes one token, and requests still in prefill contribute a chunk of their prompt
// (chunked prefill). The step then
//   1. grows each sequence in a PagePool (pages are taken as sequences grow and returned
//      when requests finish),
//   2. writes the step's new K/V into the pages with append_paged_kv,
//   3. runs one BatchAttention plan() + run() over the paged cache for the whole batch,
// and checks every output row (and its LSE) against the double-precision oracle computed on
// each request's K/V gathered densely. Any error above tolerance, or any NaN, fails the demo.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cpu/reference.h"
#include "math/dtype_convert.h"
#include "params/attention_params.h"

namespace tessera::app {
namespace {

struct DemoOptions {
  int requests = 12;
  std::uint64_t seed = 2026;
  int page_size = 16;
  int heads = 8;
  int kv_heads = 0;  // 0: heads / 4 when that divides (GQA), else heads
  int head_dim = 64;
  std::string dtype = "bf16";
  std::string layout = "NHD";
  std::string device = "auto";
  int max_steps = 0;  // 0: until every request has finished
  int chunk = 64;     // largest prefill chunk per request per step
  int budget = 160;   // tokens per step (decode tokens + prefill chunks)
  int min_prompt = 8;
  int max_prompt = 300;
  int min_output = 4;
  int max_output = 40;
  int pages = 0;  // 0: about half of what all requests would need at once
  int threads = 0;
  bool quiet = false;
};

// The demo's tolerance on |O - oracle|, relative to max(1, max|O_oracle|): two units in the
// last place at 1.0 of the storage dtype (O is rounded to it, which alone costs half a unit
// at the top of [1, 2), and P may be rounded too), and 2e-5 for fp32, where accumulation order
// dominates. The LSE is fp32 in every backend. The tests' rule (docs/TESTING.md) is
// tighter-grained; this one is a fixed bound that a serving step can be held to.
double output_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 2.0 * std::ldexp(1.0, -7);
    case DType::f16: return 2.0 * std::ldexp(1.0, -10);
    default: return 2e-5;
  }
}
constexpr double kLseTolerance = 1e-3;  // relative to max(1, |lse|)

struct Request {
  int id = 0;
  int arrival = 0;  // step at which it arrives
  int prompt = 0;
  int output = 0;
  int seq = -1;  // PagePool sequence while admitted
  int reserved_pages = 0;
  int prefilled = 0;
  int decoded = 0;
  bool finished = false;
  std::vector<unsigned char> k, v;  // dense history (len, heads_kv, head_dim) in storage dtype
  int first_step = -1, last_step = -1;
};

// Everything that lives on the execution device, sized once for the run.
struct DeviceState {
  Device device;
  DType dtype;
  KVLayout layout;
  int heads_q, heads_kv, head_dim, page_size, num_pages, max_requests, max_tokens;
  DeviceBuffer k_pages, v_pages, q, new_k, new_v, out, lse;
  DeviceBuffer indptr, indices, last_len, append_indptr, workspace;

  DeviceState(const Device& dev, DType dt, KVLayout lay, int hq, int hkv, int d, int ps, int pages, int max_req,
              int max_tok)
      : device(dev), dtype(dt), layout(lay), heads_q(hq), heads_kv(hkv), head_dim(d), page_size(ps),
        num_pages(pages), max_requests(max_req), max_tokens(max_tok) {
    const std::size_t es = dtype_size(dt);
    const std::size_t page_elems = static_cast<std::size_t>(ps) * hkv * d;
    k_pages = DeviceBuffer(dev, page_elems * pages * es);
    v_pages = DeviceBuffer(dev, page_elems * pages * es);
    // Pages start poisoned: a kernel that reads a slot nobody wrote produces NaN.
    k_pages.fill_bytes(0xff);
    v_pages.fill_bytes(0xff);
    q = DeviceBuffer(dev, static_cast<std::size_t>(max_tok) * hq * d * es);
    out = DeviceBuffer(dev, static_cast<std::size_t>(max_tok) * hq * d * es);
    lse = DeviceBuffer(dev, static_cast<std::size_t>(max_tok) * hq * sizeof(float));
    new_k = DeviceBuffer(dev, static_cast<std::size_t>(max_tok) * hkv * d * es);
    new_v = DeviceBuffer(dev, static_cast<std::size_t>(max_tok) * hkv * d * es);
    indptr = DeviceBuffer(dev, (max_req + 1) * sizeof(std::int32_t));
    indices = DeviceBuffer(dev, static_cast<std::size_t>(pages) * sizeof(std::int32_t));
    last_len = DeviceBuffer(dev, max_req * sizeof(std::int32_t));
    append_indptr = DeviceBuffer(dev, (max_req + 1) * sizeof(std::int32_t));
  }

  PagedKVCache cache() const {
    PagedKVCache c;
    c.layout = layout;
    if (layout == KVLayout::NHD) {
      c.k_pages = Tensor(k_pages.data(), dtype, {num_pages, page_size, heads_kv, head_dim}, device);
      c.v_pages = Tensor(v_pages.data(), dtype, {num_pages, page_size, heads_kv, head_dim}, device);
    } else {
      c.k_pages = Tensor(k_pages.data(), dtype, {num_pages, heads_kv, page_size, head_dim}, device);
      c.v_pages = Tensor(v_pages.data(), dtype, {num_pages, heads_kv, page_size, head_dim}, device);
    }
    return c;
  }

  // Writes the step's new K/V into the pages with append_paged_kv. Where the device has no
  // append kernel yet (ErrorCode::unsupported on CUDA), falls back once and for all to copying
  // each new token's rows from the host into its page slot, and remembers why in append_note.
  bool api_append = true;
  std::string append_note;
  void append(const PageTable& table, const Tensor& append_indptr, const Tensor& new_k_t, const Tensor& new_v_t,
              const HostPageTable& host_table, const std::vector<std::int32_t>& append,
              const unsigned char* new_k_host, const unsigned char* new_v_host, const ExecutionContext& ctx) {
    if (api_append) {
      try {
        append_paged_kv(cache(), table, append_indptr, new_k_t, new_v_t, ctx);
        return;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::unsupported || device.kind == DeviceKind::cpu) throw;
        api_append = false;
        append_note = e.what();
      }
    }
    const std::size_t es = dtype_size(dtype);
    const std::size_t row = static_cast<std::size_t>(heads_kv) * head_dim * es;  // one token, all kv heads
    for (int b = 0; b < host_table.batch(); ++b) {
      const std::int64_t kv_len = host_table.kv_len(b);
      const int n_new = append[b + 1] - append[b];
      for (int t = 0; t < n_new; ++t) {
        const std::int64_t pos = kv_len - n_new + t;
        const std::int64_t page = host_table.kv_indices[host_table.kv_indptr[b] + pos / page_size];
        const std::int64_t slot = pos % page_size;
        const unsigned char* src_k = new_k_host + static_cast<std::size_t>(append[b] + t) * row;
        const unsigned char* src_v = new_v_host + static_cast<std::size_t>(append[b] + t) * row;
        if (layout == KVLayout::NHD) {
          const std::size_t off = static_cast<std::size_t>(page * page_size + slot) * row;
          k_pages.upload(src_k, row, off);
          v_pages.upload(src_v, row, off);
        } else {
          const std::size_t head_bytes = static_cast<std::size_t>(head_dim) * es;
          for (int h = 0; h < heads_kv; ++h) {
            const std::size_t off = (static_cast<std::size_t>(page * heads_kv + h) * page_size + slot) * head_bytes;
            k_pages.upload(src_k + h * head_bytes, head_bytes, off);
            v_pages.upload(src_v + h * head_bytes, head_bytes, off);
          }
        }
      }
    }
  }

  // Uploads the page table (and the append offsets) of this step; returns device views.
  PageTable upload_table(const HostPageTable& t, const std::vector<std::int32_t>& append) {
    const auto bytes = [](const std::vector<std::int32_t>& v) { return v.size() * sizeof(std::int32_t); };
    indptr.upload(t.kv_indptr.data(), bytes(t.kv_indptr));
    indices.upload(t.kv_indices.data(), bytes(t.kv_indices));
    last_len.upload(t.kv_last_page_len.data(), bytes(t.kv_last_page_len));
    append_indptr.upload(append.data(), bytes(append));
    const std::int64_t b = t.batch();
    PageTable view;
    view.kv_indptr = Tensor(indptr.data(), DType::i32, {b + 1}, device);
    view.kv_indices = Tensor(indices.data(), DType::i32, {static_cast<std::int64_t>(t.kv_indices.size())}, device);
    view.kv_last_page_len = Tensor(last_len.data(), DType::i32, {b}, device);
    return view;
  }
};

// Tries the whole batch path once on a CUDA device with a single one-token request.
// Returns an empty string when it works, or why it does not.
std::string probe_cuda(const BatchConfig& base, int threads) {
  if (!built_with_cuda()) return "this build has no CUDA backend (configured without nvcc)";
  if (!cuda_available()) return "no CUDA device found";
  try {
    const Device dev = Device::cuda(0);
    BatchConfig cfg = base;
    cfg.max_requests = 1;
    cfg.max_q_tokens = 1;
    DeviceState st(dev, cfg.dtype, cfg.layout, cfg.heads_q, cfg.heads_kv, cfg.head_dim, cfg.page_size, 1, 1, 1);
    PagePool pool(1, cfg.page_size);
    const int seq = pool.create_sequence();
    pool.append_tokens(seq, 1);
    const int seqs[] = {seq};
    HostPageTable t = pool.page_table(seqs);
    const std::vector<std::int32_t> app = {0, 1};
    PageTable table = st.upload_table(t, app);
    std::vector<unsigned char> zeros(static_cast<std::size_t>(cfg.heads_q) * cfg.head_dim * dtype_size(cfg.dtype), 0);
    st.q.upload(zeros.data(), zeros.size());
    st.new_k.upload(zeros.data(), zeros.size() / (cfg.heads_q / cfg.heads_kv));
    st.new_v.upload(zeros.data(), zeros.size() / (cfg.heads_q / cfg.heads_kv));
    ExecutionContext ctx;
    ctx.num_threads = threads;
    st.append(table, Tensor(st.append_indptr.data(), DType::i32, {2}, dev),
              Tensor(st.new_k.data(), cfg.dtype, {1, cfg.heads_kv, cfg.head_dim}, dev),
              Tensor(st.new_v.data(), cfg.dtype, {1, cfg.heads_kv, cfg.head_dim}, dev), t, app, zeros.data(),
              zeros.data(), ctx);
    const DeviceFacts facts = query_device(dev);
    BatchAttention attn(cfg);
    DeviceBuffer ws(dev, BatchAttention::workspace_size(cfg, facts));
    const Workspace workspace{ws.data(), ws.bytes(), dev};
    const std::int32_t one[] = {1};
    attn.plan(one, one, facts, workspace, ctx);
    attn.run(Tensor(st.q.data(), cfg.dtype, {1, cfg.heads_q, cfg.head_dim}, dev), st.cache(), table,
             Tensor(st.out.data(), cfg.dtype, {1, cfg.heads_q, cfg.head_dim}, dev),
             Tensor(st.lse.data(), DType::f32, {cfg.heads_q, 1}, dev), workspace, ctx);
    synchronize(dev);
  } catch (const std::exception& e) {
    return std::string("the CUDA batch path is not available yet (") + e.what() + ")";
  }
  return {};
}

struct CheckResult {
  double max_err = 0;      // max |O - oracle| over the step
  double max_ref = 0;      // max |O_oracle|
  double max_lse_err = 0;  // max relative |LSE - oracle|
  std::int64_t nan_count = 0;
};

// Compares every output row of the batch with the oracle on the request's dense K/V.
CheckResult check_step(const std::vector<Request*>& batch, const std::vector<std::int32_t>& q_lens,
                       const std::vector<unsigned char>& q_host, const std::vector<unsigned char>& out_host,
                       const std::vector<float>& lse_host, DType dtype, int heads_q, int heads_kv, int head_dim,
                       std::int64_t total_q) {
  CheckResult r;
  const std::size_t es = dtype_size(dtype);
  std::int64_t qo = 0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const Request& req = *batch[b];
    const int q_len = q_lens[b];
    const int kv_len = static_cast<int>(req.k.size() / (static_cast<std::size_t>(heads_kv) * head_dim * es));
    AttentionParams p;
    p.dtype = dtype;
    p.device = Device::cpu();
    p.batch = 1;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.head_dim = head_dim;
    p.seq_q = q_len;
    p.seq_k = kv_len;
    p.total_q = q_len;
    p.total_k = kv_len;
    const std::int64_t q_row = static_cast<std::int64_t>(heads_q) * head_dim;
    const std::int64_t kv_row = static_cast<std::int64_t>(heads_kv) * head_dim;
    p.q = {const_cast<unsigned char*>(q_host.data()) + qo * q_row * es, q_len * q_row, q_row, head_dim};
    p.k = {const_cast<unsigned char*>(req.k.data()), kv_len * kv_row, kv_row, head_dim};
    p.v = {const_cast<unsigned char*>(req.v.data()), kv_len * kv_row, kv_row, head_dim};
    p.mask.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    p.mask.causal = true;
    const cpu::reference::ForwardResult ref = cpu::reference::forward(p);

    for (int i = 0; i < q_len; ++i) {
      for (int h = 0; h < heads_q; ++h) {
        for (int d = 0; d < head_dim; ++d) {
          const double want = ref.o[(static_cast<std::size_t>(i) * heads_q + h) * head_dim + d];
          const double got = math::load_as_float(out_host.data(), ((qo + i) * heads_q + h) * head_dim + d, dtype);
          if (std::isnan(got)) {
            ++r.nan_count;
            continue;
          }
          r.max_err = std::max(r.max_err, std::fabs(got - want));
          r.max_ref = std::max(r.max_ref, std::fabs(want));
        }
        const double want_lse = ref.lse[static_cast<std::size_t>(h) * q_len + i];
        const double got_lse = lse_host[static_cast<std::size_t>(h) * total_q + qo + i];
        if (std::isnan(got_lse)) {
          ++r.nan_count;
          continue;
        }
        if (std::isinf(want_lse) || std::isinf(got_lse)) {
          if (want_lse != got_lse) r.max_lse_err = std::numeric_limits<double>::infinity();
          continue;
        }
        r.max_lse_err = std::max(r.max_lse_err, std::fabs(got_lse - want_lse) / std::max(1.0, std::fabs(want_lse)));
      }
    }
    qo += q_len;
  }
  return r;
}

void append_rows(std::vector<unsigned char>& dst, const unsigned char* src, std::size_t bytes) {
  dst.insert(dst.end(), src, src + bytes);
}

}  // namespace

int run_demo(int argc, char** argv) {
  DemoOptions o;
  ArgParser args("tessera demo [options]",
                 "A serving simulation: requests of different lengths arrive over time, are prefilled in chunks and\n"
                 "then decoded token by token. Each step is one BatchAttention plan()/run() over a paged KV cache\n"
                 "(PagePool + append_paged_kv), and every output is checked against the fp64 oracle. Exits 1 if any\n"
                 "step exceeds the tolerance or produces NaN.");
  args.add_int("requests", &o.requests, "number of requests");
  args.add_uint64("seed", &o.seed, "random seed (request lengths, arrivals, Q/K/V values)");
  args.add_int("page-size", &o.page_size, "tokens per KV page");
  args.add_int("heads", &o.heads, "query heads");
  args.add_int("kv-heads", &o.kv_heads, "KV heads; 0 = heads/4 when that divides (GQA), else heads");
  args.add_int("head-dim", &o.head_dim, "head dimension");
  args.add_string("dtype", &o.dtype, "storage dtype of Q, the cache and O: bf16, fp16 or fp32 (fp32 accumulation)");
  args.add_string("layout", &o.layout, "page layout: NHD or HND");
  args.add_string("device", &o.device, "auto (CUDA when available, else CPU), cpu or cuda");
  args.add_int("max-steps", &o.max_steps, "stop after this many steps; 0 = run until every request finishes");
  args.add_int("chunk", &o.chunk, "largest prefill chunk per request per step");
  args.add_int("budget", &o.budget, "tokens per step (decode tokens + prefill chunks)");
  args.add_int("max-prompt", &o.max_prompt, "longest prompt (prompts are drawn from [8, max])");
  args.add_int("max-output", &o.max_output, "most decode tokens per request (drawn from [4, max])");
  args.add_int("pages", &o.pages, "pages in the pool; 0 = about half of what all requests need together");
  args.add_int("threads", &o.threads, "CPU threads; 0 = all cores");
  args.add_flag("quiet", &o.quiet, "no per-step lines (only the set-up and the summary; failing steps are still shown)");
  if (!args.parse(argc, argv, 2)) return 0;

  // ---- options
  const DType dtype = parse_dtype(o.dtype);
  if (o.requests < 1) throw UsageError("--requests: expected >= 1");
  if (o.page_size < 1) throw UsageError("--page-size: expected >= 1");
  if (o.heads < 1) throw UsageError("--heads: expected >= 1");
  if (o.kv_heads == 0) o.kv_heads = (o.heads % 4 == 0) ? o.heads / 4 : o.heads;
  if (o.kv_heads < 1 || o.heads % o.kv_heads != 0)
    throw UsageError("--kv-heads: expected a divisor of --heads (" + std::to_string(o.heads) + "), got " +
                     std::to_string(o.kv_heads));
  if (o.chunk < 1 || o.budget < 1) throw UsageError("--chunk and --budget: expected >= 1");
  o.max_prompt = std::max(o.max_prompt, o.min_prompt);
  o.max_output = std::max(o.max_output, o.min_output);
  KVLayout layout;
  if (o.layout == "NHD" || o.layout == "nhd") layout = KVLayout::NHD;
  else if (o.layout == "HND" || o.layout == "hnd") layout = KVLayout::HND;
  else throw UsageError("--layout: expected NHD or HND, got '" + o.layout + "'");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw UsageError("--device: expected auto, cpu or cuda, got '" + o.device + "'");

  // ---- the workload
  std::mt19937_64 rng(o.seed);
  std::vector<Request> reqs(o.requests);
  int arrival = 0;
  int total_pages_needed = 0, max_request_pages = 0;
  for (int i = 0; i < o.requests; ++i) {
    Request& r = reqs[i];
    r.id = i;
    r.arrival = arrival;
    arrival += std::uniform_int_distribution<int>(0, 3)(rng);
    r.prompt = std::uniform_int_distribution<int>(o.min_prompt, o.max_prompt)(rng);
    r.output = std::uniform_int_distribution<int>(o.min_output, o.max_output)(rng);
    r.reserved_pages = (r.prompt + r.output + o.page_size - 1) / o.page_size;
    total_pages_needed += r.reserved_pages;
    max_request_pages = std::max(max_request_pages, r.reserved_pages);
  }
  const int num_pages = o.pages > 0 ? o.pages : std::max(max_request_pages, (total_pages_needed + 1) / 2);
  if (num_pages < max_request_pages)
    throw UsageError("--pages: the longest request needs " + std::to_string(max_request_pages) + " pages");

  BatchConfig cfg;
  cfg.heads_q = o.heads;
  cfg.heads_kv = o.kv_heads;
  cfg.head_dim = o.head_dim;
  cfg.dtype = dtype;
  cfg.layout = layout;
  cfg.page_size = o.page_size;
  cfg.options.causal = true;
  cfg.options.return_lse = true;
  cfg.max_requests = o.requests;
  cfg.max_q_tokens = o.budget;

  // ---- the backend
  Device device = Device::cpu();
  std::string backend_note;
  if (o.device != "cpu") {
    const std::string why = probe_cuda(cfg, o.threads);
    if (why.empty()) {
      device = Device::cuda(0);
    } else if (o.device == "cuda") {
      std::cerr << "tessera demo: --device cuda: " << why << "\n";
      return 1;
    } else {
      backend_note = "falling back to the CPU: " + why;
    }
  } else {
    backend_note = "CPU requested with --device cpu";
  }
  std::string backend = device_name(device);
  if (device.kind == DeviceKind::cpu) {
    backend += " (" + std::to_string(query_device(device).num_sms) + " threads)";
  } else {
    const auto devs = cuda_devices();
    if (!devs.empty()) backend += " (" + devs[0].name + ")";
  }

  const double tol_rel = output_tolerance(dtype);
  std::cout << "tessera demo: " << o.requests << " requests, " << o.heads << " query heads / " << o.kv_heads
            << " KV heads, head_dim " << o.head_dim << ", " << dtype_name(dtype) << " storage, fp32 accumulation, "
            << kv_layout_name(layout) << " pages of " << o.page_size << " tokens (" << num_pages << " in the pool)\n"
            << "backend: " << backend << (backend_note.empty() ? "" : "; " + backend_note) << "\n"
            << "tolerance: |O - fp64 oracle| <= " << tol_rel << " * max(1, max|O|), relative |LSE - oracle| <= "
            << kLseTolerance << "; no NaN\n";
  if (!o.quiet)
    std::cout << " step  prefill chunks (tokens)  decode  batch  work items  pages used   max|err|    step time\n";

  ExecutionContext ctx;
  ctx.num_threads = o.threads;
  DeviceState st(device, dtype, layout, o.heads, o.kv_heads, o.head_dim, o.page_size, num_pages, o.requests, o.budget);
  const DeviceFacts facts = query_device(device);
  BatchAttention attn(cfg);
  st.workspace = DeviceBuffer(device, BatchAttention::workspace_size(cfg, facts));
  const Workspace workspace{st.workspace.data(), st.workspace.bytes(), device};
  PagePool pool(num_pages, o.page_size);

  const std::size_t es = dtype_size(dtype);
  const std::size_t q_row_bytes = static_cast<std::size_t>(o.heads) * o.head_dim * es;
  const std::size_t kv_row_bytes = static_cast<std::size_t>(o.kv_heads) * o.head_dim * es;
  std::mt19937_64 data_rng(o.seed ^ 0x9e3779b97f4a7c15ULL);

  std::deque<int> waiting;
  std::vector<int> running;  // admission order
  int next_arrival = 0, finished = 0, reserved = 0, steps = 0, step = 0, peak_pages = 0;
  std::int64_t prompt_tokens = 0, decode_tokens = 0;
  double attention_time = 0, max_err = 0, max_lse_err = 0, max_ref = 0;
  std::int64_t nan_total = 0;
  int failed_steps = 0;
  const double wall_start = now_seconds();

  while (finished < o.requests && (o.max_steps == 0 || steps < o.max_steps)) {
    // Arrivals, then admission: a request is admitted when all the pages it will ever need can
    // be reserved, so admitted requests never stall on a full pool.
    while (next_arrival < o.requests && reqs[next_arrival].arrival <= step) waiting.push_back(next_arrival++);
    while (!waiting.empty()) {
      Request& r = reqs[waiting.front()];
      if (reserved + r.reserved_pages > num_pages) break;
      r.seq = pool.create_sequence();
      reserved += r.reserved_pages;
      running.push_back(r.id);
      waiting.pop_front();
    }
    if (running.empty()) {  // idle until the next arrival
      step = reqs[next_arrival].arrival;
      continue;
    }

    // Schedule: decode tokens first, then prefill chunks, within the token budget.
    std::vector<Request*> batch;
    std::vector<std::int32_t> q_lens;
    int budget = o.budget, n_chunks = 0, chunk_tokens = 0, n_decode = 0;
    for (int id : running) {
      Request& r = reqs[id];
      if (r.prefilled == r.prompt && budget > 0) {
        batch.push_back(&r);
        q_lens.push_back(1);
        --budget;
        ++n_decode;
      }
    }
    for (int id : running) {
      Request& r = reqs[id];
      if (r.prefilled < r.prompt && budget > 0) {
        const int n = std::min({o.chunk, r.prompt - r.prefilled, budget});
        batch.push_back(&r);
        q_lens.push_back(n);
        budget -= n;
        ++n_chunks;
        chunk_tokens += n;
      }
    }
    const std::int64_t total_q = o.budget - budget;

    // New tokens: Q for the batch, K/V appended to each request's pages and dense history.
    std::vector<unsigned char> q_host(total_q * q_row_bytes), new_k(total_q * kv_row_bytes),
        new_v(total_q * kv_row_bytes);
    fill_normal(q_host.data(), total_q * o.heads * o.head_dim, dtype, data_rng);
    fill_normal(new_k.data(), total_q * o.kv_heads * o.head_dim, dtype, data_rng);
    fill_normal(new_v.data(), total_q * o.kv_heads * o.head_dim, dtype, data_rng);
    std::vector<int> seqs;
    std::vector<std::int32_t> append_indptr{0};
    for (std::size_t b = 0; b < batch.size(); ++b) {
      Request& r = *batch[b];
      const std::size_t row0 = append_indptr.back();
      append_rows(r.k, new_k.data() + row0 * kv_row_bytes, q_lens[b] * kv_row_bytes);
      append_rows(r.v, new_v.data() + row0 * kv_row_bytes, q_lens[b] * kv_row_bytes);
      pool.append_tokens(r.seq, q_lens[b]);
      seqs.push_back(r.seq);
      append_indptr.push_back(append_indptr.back() + q_lens[b]);
      if (r.first_step < 0) r.first_step = steps;
    }
    const HostPageTable host_table = pool.page_table(seqs);
    const std::vector<std::int32_t> kv_lens = host_table.kv_lens();
    const PageTable table = st.upload_table(host_table, append_indptr);
    st.q.upload(q_host.data(), q_host.size());
    st.new_k.upload(new_k.data(), new_k.size());
    st.new_v.upload(new_v.data(), new_v.size());
    st.out.fill_bytes(0xff);  // poison: rows the kernel does not write stay NaN
    st.lse.fill_bytes(0xff);
    synchronize(device);

    const Tensor q_t(st.q.data(), dtype, {total_q, o.heads, o.head_dim}, device);
    const Tensor out_t(st.out.data(), dtype, {total_q, o.heads, o.head_dim}, device);
    const Tensor lse_t(st.lse.data(), DType::f32, {o.heads, total_q}, device);
    const Tensor nk_t(st.new_k.data(), dtype, {total_q, o.kv_heads, o.head_dim}, device);
    const Tensor nv_t(st.new_v.data(), dtype, {total_q, o.kv_heads, o.head_dim}, device);
    const Tensor app_t(st.append_indptr.data(), DType::i32, {static_cast<std::int64_t>(append_indptr.size())}, device);

    // The timed part: write the step's K/V into pages, plan, run.
    const double t0 = now_seconds();
    st.append(table, app_t, nk_t, nv_t, host_table, append_indptr, new_k.data(), new_v.data(), ctx);
    attn.plan(q_lens, kv_lens, facts, workspace, ctx);
    attn.run(q_t, st.cache(), table, out_t, lse_t, workspace, ctx);
    synchronize(device);
    const double dt = now_seconds() - t0;
    attention_time += dt;

    std::vector<unsigned char> out_host(total_q * q_row_bytes);
    std::vector<float> lse_host(static_cast<std::size_t>(total_q) * o.heads);
    st.out.download(out_host.data(), out_host.size());
    st.lse.download(lse_host.data(), lse_host.size() * sizeof(float));
    const CheckResult c =
        check_step(batch, q_lens, q_host, out_host, lse_host, dtype, o.heads, o.kv_heads, o.head_dim, total_q);
    const double tol = tol_rel * std::max(1.0, c.max_ref);
    const bool ok = c.nan_count == 0 && c.max_err <= tol && c.max_lse_err <= kLseTolerance;
    if (!ok) ++failed_steps;
    max_err = std::max(max_err, c.max_err);
    max_ref = std::max(max_ref, c.max_ref);
    max_lse_err = std::max(max_lse_err, c.max_lse_err);
    nan_total += c.nan_count;

    const int pages_used = num_pages - pool.free_pages();
    peak_pages = std::max(peak_pages, pages_used);
    if (!o.quiet || !ok) {
      char line[256];
      std::snprintf(line, sizeof line, "%5d  %6d chunks (%5d)  %6d  %5zu  %10d  %4d/%-5d  %9.2e  %10s%s\n", steps,
                    n_chunks, chunk_tokens, n_decode, batch.size(), attn.planned_work_items(), pages_used,
                    num_pages, c.max_err, format_seconds(dt).c_str(), ok ? "" : "  FAIL");
      std::cout << line;
      if (!ok)
        std::cout << "       FAIL: max|err| " << c.max_err << " (tolerance " << tol << "), LSE rel err "
                  << c.max_lse_err << ", NaN count " << c.nan_count << "\n";
    }

    // Progress: prefill advances, decode tokens are produced, finished requests free pages.
    for (std::size_t b = 0; b < batch.size(); ++b) {
      Request& r = *batch[b];
      if (r.prefilled < r.prompt) {
        r.prefilled += q_lens[b];
        prompt_tokens += q_lens[b];
      } else {
        ++r.decoded;
        ++decode_tokens;
      }
      if (r.decoded == r.output) {
        r.finished = true;
        r.last_step = steps;
        pool.free_sequence(r.seq);
        reserved -= r.reserved_pages;
        r.seq = -1;
        ++finished;
        r.k.clear();
        r.k.shrink_to_fit();
        r.v.clear();
        r.v.shrink_to_fit();
      }
    }
    running.erase(std::remove_if(running.begin(), running.end(), [&](int id) { return reqs[id].finished; }),
                  running.end());
    ++steps;
    ++step;
  }
  const double wall = now_seconds() - wall_start;

  const bool pass = failed_steps == 0 && nan_total == 0;
  std::cout << "\nsummary\n";
  std::cout << "  requests:   " << finished << " of " << o.requests << " finished"
            << (finished < o.requests ? " (stopped by --max-steps)" : "") << "\n";
  std::cout << "  tokens:     " << prompt_tokens << " prefill (in chunks of <= " << o.chunk << ") + " << decode_tokens
            << " decode = " << prompt_tokens + decode_tokens << " in " << steps << " steps\n";
  std::cout << "  pages:      peak " << peak_pages << " of " << num_pages << " (page size " << o.page_size
            << "), in use at the end " << num_pages - pool.free_pages() << "\n";
  std::cout << "  time:       " << format_seconds(attention_time) << " in append + plan + run, "
            << format_seconds(wall) << " wall including the fp64 oracle checks\n";
  std::cout << "  max error:  |O - oracle| " << max_err << " (tolerance " << tol_rel * std::max(1.0, max_ref)
            << "), relative |LSE - oracle| " << max_lse_err << ", NaN " << nan_total << "\n";
  std::cout << "  backend:    " << backend << ", " << dtype_name(dtype) << "/fp32 accumulation"
            << (backend_note.empty() ? "" : " (" + backend_note + ")") << "\n";
  if (!st.append_note.empty())
    std::cout << "  append:     host copies into page slots, because " << st.append_note << "\n";
  std::cout << "  result:     " << (pass ? "PASS" : "FAIL") << " (" << failed_steps << " of " << steps
            << " steps out of tolerance)\n";
  return pass ? 0 : 1;
}

}  // namespace tessera::app
