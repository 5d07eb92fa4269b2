// BatchAttention: validate, plan into the caller's workspace, run the plan.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/validate.h"
#include "cpu/parallel.h"
#include "dispatch/batch_dispatch.h"
#include "params/batch_params.h"
#include "plan/batch_plan.h"
#include "tessera/batch.h"
#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/batch/batch_attention.h"
#include "cuda/common/pinned_ring.h"
#endif

namespace tessera {
namespace {

using validate::fail;
using validate::str;

// Unique across the process, so a workspace overwritten by another BatchAttention's plan()
// is told apart from this one's.
std::atomic<std::uint64_t> next_generation{1};

// The softmax scale run() applies: the configured one, or 1 / sqrt(head_dim).
float resolved_scale(const BatchConfig& c) {
  return c.options.scale ? *c.options.scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}

// A moved-from BatchAttention has no state: its members say so instead of reading through null.
template <class StatePtr>
auto& live(const StatePtr& state) {
  if (!state) fail(ErrorCode::invalid_argument, "this", "a BatchAttention that has not been moved from", "a moved-from one");
  return *state;
}

void check_config(const BatchConfig& c) {
  if (c.heads_q < 1) fail(ErrorCode::invalid_argument, "config.heads_q", ">= 1", str(c.heads_q));
  if (c.heads_kv < 1 || c.heads_q % c.heads_kv != 0)
    fail(ErrorCode::invalid_argument, "config.heads_kv",
         "a divisor of heads_q = " + str(c.heads_q) + " (GQA/MQA)", str(c.heads_kv));
  validate::head_dim_supported(c.head_dim, "config.head_dim");
  if (c.dtype != DType::f16 && c.dtype != DType::bf16 && c.dtype != DType::f32)
    fail(ErrorCode::invalid_argument, "config.dtype", "one of {fp16, bf16, fp32}", dtype_name(c.dtype));
  if (c.layout != KVLayout::NHD && c.layout != KVLayout::HND)
    fail(ErrorCode::invalid_argument, "config.layout", "NHD or HND", str(static_cast<int>(c.layout)));
  if (c.page_size < 1) fail(ErrorCode::invalid_argument, "config.page_size", ">= 1", str(c.page_size));
  validate::value_in_range(c.max_requests, "config.max_requests", 1, 1 << 20);
  validate::value_in_range(c.max_q_tokens, "config.max_q_tokens", 1, 1 << 24);
  // Far above any model's head count; it keeps the workspace's byte sizes well inside 64 bits.
  validate::value_in_range(c.heads_q, "config.heads_q", 1, 1 << 16);
  {
    // The plan indexes its work items in int32: the most query tiles a batch can have, times
    // the KV heads, must fit (batch_plan.h, max_tiles).
    const std::int64_t t = plan::q_tile_rows(c.heads_q, c.heads_kv, c.head_dim);
    const std::int64_t max_tiles = (c.max_q_tokens + static_cast<std::int64_t>(c.max_requests) * (t - 1)) / t;
    if (max_tiles * c.heads_kv > std::numeric_limits<std::int32_t>::max())
      fail(ErrorCode::invalid_argument, "config.max_q_tokens",
           "a capacity of at most 2^31 - 1 work items (query tiles of " + str(t) + " rows for max_q_tokens and " +
               "max_requests = " + str(c.max_requests) + ", times heads_kv = " + str(c.heads_kv) + ")",
           str(c.max_q_tokens) + " (" + str(max_tiles) + " tiles x " + str(c.heads_kv) + ")");
  }
  switch (c.split.mode) {
    case SplitPolicy::Mode::automatic:
    case SplitPolicy::Mode::disabled: break;
    case SplitPolicy::Mode::fixed:
      if (c.split.kv_chunk_tokens < 1)
        fail(ErrorCode::invalid_argument, "config.split.kv_chunk_tokens", ">= 1 with Mode::fixed",
             str(c.split.kv_chunk_tokens));
      break;
    default:
      fail(ErrorCode::invalid_argument, "config.split.mode", "automatic, disabled or fixed",
           str(static_cast<int>(c.split.mode)));
  }
  const AttentionOptions& o = c.options;
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0.0f))
    fail(ErrorCode::invalid_argument, "config.options.scale", "a finite value > 0", std::to_string(*o.scale));
  if (o.window_left < -1)
    fail(ErrorCode::invalid_argument, "config.options.window_left", ">= -1 (-1 = unbounded)", str(o.window_left));
  if (o.window_right < -1)
    fail(ErrorCode::invalid_argument, "config.options.window_right", ">= -1 (-1 = unbounded)", str(o.window_right));
  if (!(std::isfinite(o.softcap) && o.softcap >= 0.0f))
    fail(ErrorCode::invalid_argument, "config.options.softcap", "a finite value >= 0 (0 = off)",
         std::to_string(o.softcap));
  validate::softcap_foldable(resolved_scale(c), o.softcap, "config.options.softcap");  // head_dim checked above
}

void check_facts(const DeviceFacts& f) {
  if (f.num_sms < 1) fail(ErrorCode::invalid_argument, "facts.num_sms", ">= 1", str(f.num_sms));
}

// (total_q, heads_q, head_dim) in the configured dtype on the workspace's device.
void check_tokens(const Tensor& t, const char* name, const BatchConfig& c, const Device& device,
                  std::int64_t total_q) {
  validate::rank(t, name, 3, "(total_q, heads_q, head_dim)");
  validate::dtype_is(t, name, c.dtype);
  if (!(t.device == device))
    fail(ErrorCode::invalid_argument, name, "device " + device_name(device) + " (as the workspace)",
         "device " + device_name(t.device));
  validate::dim_equals(t, name, 1, c.heads_q, "config.heads_q");
  validate::dim_equals(t, name, 2, c.head_dim, "config.head_dim");
  validate::unit_stride(t, name, 2, "head_dim");
  validate::non_negative_strides(t, name);
  if (t.shape[0] != total_q)
    fail(ErrorCode::plan_mismatch, name, "size " + str(total_q) + " at dim 0 (sum of the planned q_lens)",
         "shape " + t.shape_string());
}

}  // namespace

DeviceFacts query_device(const Device& device) {
  validate::FunctionScope scope("query_device");
  if (device.kind == DeviceKind::cpu) return DeviceFacts{device, cpu::resolve_threads(0)};
#if defined(TESSERA_WITH_CUDA)
  return DeviceFacts{device, cuda::multiprocessor_count(device.index)};
#else
  fail(ErrorCode::unsupported, "device", "cpu (this build of tessera has no CUDA backend)", device_name(device));
#endif
}

namespace {
// FNV-1a over what a CPU run() reads of the plan: the header, the batch's entries of qo_indptr
// and kv_len, the items and the used merge arrays (not the capacity-sized tails: the cost
// follows the batch, ~1 ns a byte), 8 bytes a step.
std::uint64_t plan_digest(const void* base, const plan::WorkspaceLayout& l, const plan::PlanSummary& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = static_cast<const unsigned char*>(base);
  auto add = [&](std::uint64_t at, std::uint64_t n) {
    const std::uint64_t end = at + n;
    for (; at + 8 <= end; at += 8) {
      std::uint64_t w;
      std::memcpy(&w, bytes + at, 8);
      h = (h ^ w) * 0x100000001b3ull;
    }
    for (; at < end; ++at) h = (h ^ bytes[at]) * 0x100000001b3ull;
  };
  constexpr std::uint64_t i32 = sizeof(std::int32_t);
  const auto batch = static_cast<std::uint64_t>(s.batch), merge = static_cast<std::uint64_t>(s.num_merge_rows);
  add(l.header, sizeof(plan::PlanHeader));
  add(l.qo_indptr, i32 * (batch + 1));
  add(l.kv_len, i32 * batch);
  add(l.items, sizeof(plan::WorkItem) * static_cast<std::uint64_t>(s.num_items));
  if (merge > 0) {
    add(l.merge_indptr, i32 * (merge + 1));
    add(l.merge_row, i32 * merge);
    add(l.merge_partial, i32 * static_cast<std::uint64_t>(s.num_partial_rows));
  }
  return h;
}
}  // namespace

struct BatchAttention::State {
  BatchConfig config;
  // The current plan: where it lives and the host copy of what run() checks against.
  bool planned = false;
  std::uint64_t generation = 0;
  Workspace workspace;
  plan::WorkspaceLayout layout;
  plan::PlanSummary summary;
  std::vector<std::int32_t> kv_lens, splits;  // kv_lens: run() checks the page table against them
  // A host workspace's plan arrays, hashed when plan() wrote them: the CPU executor trusts every
  // index in them, so run() refuses a workspace changed since instead of reading out of bounds.
  std::uint64_t host_plan_digest = 0;
  plan::PlanScratch scratch;
  // Host image of the plan arrays for device workspaces (16-byte aligned), copied on plan():
  // pinned buffers taken in turn (the copy only enqueues), or the pageable `image` when pinned
  // memory cannot be had.
  std::vector<plan::PlanHeader> image;
#if defined(TESSERA_WITH_CUDA)
  cuda::PinnedRing staging;
#endif
};

BatchAttention::BatchAttention(const BatchConfig& config) : state_(std::make_unique<State>()) {
  validate::FunctionScope scope("BatchAttention");
  check_config(config);
  state_->config = config;
}
BatchAttention::~BatchAttention() = default;
BatchAttention::BatchAttention(BatchAttention&&) noexcept = default;
BatchAttention& BatchAttention::operator=(BatchAttention&&) noexcept = default;

const BatchConfig& BatchAttention::config() const {
  validate::FunctionScope scope("BatchAttention::config");
  return live(state_).config;
}

std::size_t BatchAttention::workspace_size(const BatchConfig& config, const DeviceFacts& facts) {
  validate::FunctionScope scope("BatchAttention::workspace_size");
  check_config(config);
  check_facts(facts);
  const plan::PlanConfig cfg = plan::make_plan_config(config, facts);
  return static_cast<std::size_t>(plan::layout_for_partial_rows(cfg, plan::default_partial_rows(cfg)).total_bytes);
}

void BatchAttention::plan(std::span<const std::int32_t> q_lens, std::span<const std::int32_t> kv_lens,
                          const DeviceFacts& facts, const Workspace& workspace, const ExecutionContext& ctx) {
  (void)ctx;  // the CPU plan is written synchronously; CUDA copies it on ctx.stream
  validate::FunctionScope scope("BatchAttention::plan");
  State& s = live(state_);
  const BatchConfig& c = s.config;
  check_facts(facts);
  const auto batch = static_cast<std::int64_t>(q_lens.size());
  if (batch > c.max_requests)
    fail(ErrorCode::invalid_argument, "q_lens", "at most config.max_requests = " + str(c.max_requests) + " requests",
         str(batch));
  if (static_cast<std::int64_t>(kv_lens.size()) != batch)
    fail(ErrorCode::invalid_argument, "kv_lens", "size " + str(batch) + " (as q_lens)",
         "size " + str(static_cast<std::int64_t>(kv_lens.size())));
  // One branch-free pass (it vectorises); the first negative length is looked for only on failure.
  std::int64_t total_q = 0;
  std::int32_t min_len = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    total_q += q_lens[b];
    min_len = std::min(min_len, std::min(q_lens[b], kv_lens[b]));
  }
  if (min_len < 0)
    for (std::int64_t b = 0; b < batch; ++b) {
      if (q_lens[b] < 0) fail(ErrorCode::invalid_argument, "q_lens[" + str(b) + "]", ">= 0", str(q_lens[b]));
      if (kv_lens[b] < 0) fail(ErrorCode::invalid_argument, "kv_lens[" + str(b) + "]", ">= 0", str(kv_lens[b]));
    }
  if (total_q > c.max_q_tokens)
    fail(ErrorCode::invalid_argument, "q_lens",
         "a sum of at most config.max_q_tokens = " + str(c.max_q_tokens) + " query tokens", "sum " + str(total_q));
  if (!(workspace.device == facts.device))
    fail(ErrorCode::invalid_argument, "workspace.device", "device " + device_name(facts.device) + " (as facts.device)",
         "device " + device_name(workspace.device));
  if (workspace.data == nullptr)
    fail(ErrorCode::invalid_argument, "workspace.data", "a buffer of BatchAttention::workspace_size bytes", "nullptr");
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % plan::kAlign != 0)
    fail(ErrorCode::invalid_argument, "workspace.data", "a 16-byte aligned address",
         "an address that is " + str(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(workspace.data) % plan::kAlign)) +
             " mod 16");
#if !defined(TESSERA_WITH_CUDA)
  if (workspace.device.kind != DeviceKind::cpu)
    fail(ErrorCode::unsupported, "workspace.device", "cpu (this build of tessera has no CUDA backend)",
         device_name(workspace.device));
#endif
  const plan::PlanConfig cfg = plan::make_plan_config(c, facts);
  const plan::WorkspaceLayout layout = plan::workspace_layout(cfg, workspace.bytes);

  const std::uint64_t generation = next_generation.fetch_add(1);
  // build_plan checks the split capacity before it writes; the state changes only after.
  plan::PlanSummary summary;
  std::uint64_t digest = 0;
  if (workspace.device.kind == DeviceKind::cpu) {
    summary = plan::build_plan(cfg, layout, q_lens, kv_lens, generation, workspace.data, s.scratch, &s.splits);
    digest = plan_digest(workspace.data, layout, summary);
  } else {
#if defined(TESSERA_WITH_CUDA)
    // Plan into a host image, then copy the used parts on ctx.stream. From a pinned image the
    // copy only enqueues (the ring reuses a buffer once its copy has run); from pageable memory
    // (the fallback) cudaMemcpyAsync stages the bytes before it returns and may wait for the
    // stream, which measured up to ~10 us of plan() on the H200 host.
    const std::size_t words = (layout.plan_bytes + sizeof(plan::PlanHeader) - 1) / sizeof(plan::PlanHeader);
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    int previous = 0;
    cudaError_t err = cudaGetDevice(&previous);
    if (err == cudaSuccess) err = cudaSetDevice(workspace.device.index);
    // Puts the caller's current device back on every way out (build_plan may throw).
    struct RestoreDevice {
      int device;
      bool active;
      ~RestoreDevice() {
        if (active) (void)cudaSetDevice(device);
      }
    } restore{previous, err == cudaSuccess};
    void* pinned = nullptr;
    if (err == cudaSuccess) {
      cudaError_t pinned_err = cudaSuccess;
      pinned = s.staging.acquire(words * sizeof(plan::PlanHeader), &pinned_err);
      if (pinned == nullptr) (void)cudaGetLastError();  // not fatal: the pageable image serves
    }
    if (pinned == nullptr && s.image.size() < words) s.image.resize(words);
    void* host = pinned != nullptr ? pinned : static_cast<void*>(s.image.data());
    summary = plan::build_plan(cfg, layout, q_lens, kv_lens, generation, host, s.scratch, &s.splits);
    const auto* src = static_cast<const unsigned char*>(host);
    auto* dst = static_cast<unsigned char*>(workspace.data);
    const plan::PlanRanges ranges = plan::used_ranges(layout, summary);
    // From here the device workspace may hold part of this plan: a failed copy leaves the
    // object unplanned (run() refuses) rather than planned with the last plan's summary.
    if (err == cudaSuccess) s.planned = false;
    for (int i = 0; i < ranges.count && err == cudaSuccess; ++i) {
      const plan::ByteRange& r = ranges.range[i];
      err = cudaMemcpyAsync(dst + r.begin, src + r.begin, r.end - r.begin, cudaMemcpyHostToDevice, stream);
    }
    if (pinned != nullptr) {
      const cudaError_t released = s.staging.release(stream);  // also after a failed copy
      if (err == cudaSuccess) err = released;
    }
    if (err != cudaSuccess)
      throw Error(ErrorCode::backend_failure, "workspace",
                  std::string("BatchAttention::plan: workspace: copying the plan to ") +
                      device_name(workspace.device) + " failed: " + cudaGetErrorString(err));
#endif
  }
  s.planned = true;
  s.generation = generation;
  s.workspace = workspace;
  s.layout = layout;
  s.summary = summary;
  s.kv_lens.assign(kv_lens.begin(), kv_lens.end());
  s.host_plan_digest = digest;
}

void BatchAttention::run(const Tensor& q, const PagedKVCache& cache, const PageTable& table, const Tensor& out,
                         const Tensor& lse, const Workspace& workspace, const ExecutionContext& ctx) const {
  validate::FunctionScope scope("BatchAttention::run");
  const State& s = live(state_);
  validate::execution_context(ctx);
  const BatchConfig& c = s.config;
  if (!s.planned) fail(ErrorCode::plan_mismatch, "workspace", "a workspace filled by plan()", "no plan yet");
  if (workspace.data != s.workspace.data || workspace.bytes != s.workspace.bytes ||
      !(workspace.device == s.workspace.device))
    fail(ErrorCode::plan_mismatch, "workspace", "the workspace of the last plan()", "another buffer");
  const Device device = workspace.device;
  if (device.kind == DeviceKind::cpu) {
    const auto* header = plan::plan_view(workspace.data, s.layout).header;
    if (header->magic != plan::kPlanMagic || header->generation != s.generation)
      fail(ErrorCode::plan_mismatch, "workspace",
           "the plan of this BatchAttention (generation " + std::to_string(s.generation) + ")",
           header->magic != plan::kPlanMagic ? std::string("no plan")
                                             : "generation " + std::to_string(header->generation) +
                                                   " (another plan() wrote this workspace)");
    if (plan_digest(workspace.data, s.layout, s.summary) != s.host_plan_digest)
      fail(ErrorCode::plan_mismatch, "workspace", "the plan arrays as plan() wrote them",
           "a workspace whose plan arrays were changed since plan()");
  }

  check_tokens(q, "q", c, device, s.summary.total_q);
  check_tokens(out, "out", c, device, s.summary.total_q);
  if (c.options.return_lse) {
    validate::rank(lse, "lse", 2, "(heads_q, total_q)");
    validate::dtype_is(lse, "lse", DType::f32);
    if (!(lse.device == device))
      fail(ErrorCode::invalid_argument, "lse", "device " + device_name(device) + " (as the workspace)",
           "device " + device_name(lse.device));
    validate::dim_equals(lse, "lse", 0, c.heads_q, "config.heads_q");
    validate::unit_stride(lse, "lse", 1, "total_q");
    validate::non_negative_strides(lse, "lse");
    if (lse.shape[1] != s.summary.total_q)
      fail(ErrorCode::plan_mismatch, "lse",
           "size " + str(s.summary.total_q) + " at dim 1 (sum of the planned q_lens)", "shape " + lse.shape_string());
  }

  const PagedCacheParams cp = api::build_paged_cache_params(cache);
  if (!(cache.k_pages.device == device))
    fail(ErrorCode::invalid_argument, "cache.k_pages", "device " + device_name(device) + " (as the workspace)",
         "device " + device_name(cache.k_pages.device));
  if (cp.dtype != c.dtype)
    fail(ErrorCode::invalid_argument, "cache.k_pages", std::string("dtype ") + dtype_name(c.dtype) + " (config.dtype)",
         std::string("dtype ") + dtype_name(cp.dtype));
  if (cp.layout != c.layout)
    fail(ErrorCode::invalid_argument, "cache.layout", std::string(kv_layout_name(c.layout)) + " (config.layout)",
         kv_layout_name(cp.layout));
  if (cp.page_size != c.page_size)
    fail(ErrorCode::invalid_argument, "cache.k_pages", "page_size " + str(c.page_size) + " (config.page_size)",
         "shape " + cache.k_pages.shape_string());
  if (cp.heads_kv != c.heads_kv)
    fail(ErrorCode::invalid_argument, "cache.k_pages", "heads_kv " + str(c.heads_kv) + " (config.heads_kv)",
         "shape " + cache.k_pages.shape_string());
  if (cp.head_dim != c.head_dim)
    fail(ErrorCode::invalid_argument, "cache.k_pages", "head_dim " + str(c.head_dim) + " (config.head_dim)",
         "shape " + cache.k_pages.shape_string());

  // out and lse are written while the cache is read (and must not be broadcast views).
  validate::no_internal_overlap(out, "out");
  validate::disjoint(out, "out", cache.k_pages, "cache.k_pages");
  validate::disjoint(out, "out", cache.v_pages, "cache.v_pages");
  if (c.options.return_lse) {
    validate::no_internal_overlap(lse, "lse");
    validate::disjoint(lse, "lse", cache.k_pages, "cache.k_pages");
    validate::disjoint(lse, "lse", cache.v_pages, "cache.v_pages");
    validate::disjoint(lse, "lse", out, "out");
  }
  const PageTableParams tp = api::build_page_table_params(table, cp, device);
  if (tp.batch != s.summary.batch)
    fail(ErrorCode::plan_mismatch, "table.kv_last_page_len",
         "size " + str(s.summary.batch) + " (the planned batch)", "size " + str(tp.batch));
  if (tp.host_visible)
    for (int b = 0; b < tp.batch; ++b) {
      const std::int64_t len = api::table_kv_len(tp, cp.page_size, b);
      if (len != s.kv_lens[static_cast<std::size_t>(b)])
        fail(ErrorCode::plan_mismatch, "table",
             "kv_len " + str(s.kv_lens[static_cast<std::size_t>(b)]) + " for request " + str(b) + " (as planned)",
             "kv_len " + str(len));
    }

  BatchRunParams p;
  p.device = device;
  p.dtype = c.dtype;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.total_q = s.summary.total_q;
  p.merge_rows = s.summary.num_merge_rows;
  p.merge_fan_in = plan::mean_merge_fan_in(s.summary);
  p.prefill_items = s.summary.num_prefill_items;
  p.decode_items = s.summary.num_items - s.summary.num_prefill_items;
  p.prefill_row_keys = s.summary.prefill_row_keys;
  p.decode_keys = s.summary.decode_keys;
  p.q = {q.data, 0, q.stride[0], q.stride[1]};
  p.o = {out.data, 0, out.stride[0], out.stride[1]};
  if (c.options.return_lse) p.lse = {lse.ptr<float>(), 0, lse.stride[0]};
  p.cache = cp;
  p.table = tp;
  p.workspace = workspace.data;
  p.workspace_bytes = workspace.bytes;
  p.layout = s.layout;
  p.mask.scale = resolved_scale(c);
  p.mask.softcap = c.options.softcap;
  p.mask.causal = c.options.causal;
  p.mask.window_left = c.options.window_left;
  p.mask.window_right = c.options.window_right;
  p.stream = ctx.stream;
  p.num_threads = ctx.num_threads;
  dispatch::batch_attention_run(p);
}

int BatchAttention::planned_batch() const {
  validate::FunctionScope scope("BatchAttention::planned_batch");
  const State& s = live(state_);
  return s.planned ? s.summary.batch : 0;
}
std::int64_t BatchAttention::planned_q_tokens() const {
  validate::FunctionScope scope("BatchAttention::planned_q_tokens");
  const State& s = live(state_);
  return s.planned ? s.summary.total_q : 0;
}
int BatchAttention::planned_work_items() const {
  validate::FunctionScope scope("BatchAttention::planned_work_items");
  const State& s = live(state_);
  return s.planned ? s.summary.num_items : 0;
}
int BatchAttention::planned_splits(int request) const {
  validate::FunctionScope scope("BatchAttention::planned_splits");
  if (request < 0 || request >= planned_batch())
    fail(ErrorCode::invalid_argument, "request", "a request of the current plan in [0, " + str(planned_batch()) + ")",
         str(request));
  return live(state_).splits[static_cast<std::size_t>(request)];
}

}  // namespace tessera
