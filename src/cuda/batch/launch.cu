// Host entry of the CUDA batch-attention executor: params -> kernel arguments, pick the
// (dtype, head dim) instances, launch the decode-shaped and prefill-shaped attention kernels
// and the merge kernel on the caller's stream. No synchronisation, no allocation; grids come
// from the workspace layout's capacities and the device, so graphs stay valid across plans.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/device_limits.h"
#include "cuda/batch/batch_args.h"
#include "cuda/batch/split_model.h"
#include "cuda/batch/trace.h"
#include "cuda/batch/batch_attention.h"
#include "cuda/batch/kernel_traits.cuh"
#include "cuda/common/check.h"
#include "cuda/common/device_scope.h"
#include "cuda/common/softcap_score.cuh"
#include "cuda/common/stream_capture.h"
#include "dispatch/path_override.h"
#if defined(TESSERA_HAS_SM90_KERNELS)
#include "cuda/sm90/batch/batch_prefill_sm90.h"
#endif
#include "math/online_softmax.h"
#include "tessera/error.h"

namespace tessera::cuda {
static int compute_major(int device);  // below: compute capability major, cached

namespace {

constexpr const char* kSupport =
    "supported on CUDA: f16 or bf16, head_dim 64, 128 or 256, compute capability >= 8.0, 16-byte aligned "
    "q/out/cache pointers, q/out/cache strides that are multiples of 8 elements";

bool fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what + " (" + kSupport + ")";
  return false;
}

bool aligned_16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

bool strides_ok(const char* name, const void* ptr, std::initializer_list<std::int64_t> strides, std::string* why) {
  if (!aligned_16(ptr)) return fail(why, std::string(name) + ": expected a 16-byte aligned data pointer, got a misaligned one");
  for (const std::int64_t s : strides)
    if (s % 8 != 0)
      return fail(why, std::string(name) + ": expected strides that are multiples of 8 elements (16 bytes), got " +
                           std::to_string(s));
  return true;
}

// The largest instance of a head dim (fused: both layouts; 256: the larger of the two).
template <int D>
int max_smem_bytes() {
  const int a = batch::instance_smem_bytes<D, batch::kDecodeOnly>();
  const int b = batch::instance_smem_bytes<D, D == 256 ? batch::kPrefillOnly : batch::kFused>();
  return a > b ? a : b;
}

int smem_bytes_for(int head_dim) {
  switch (head_dim) {
    case 64: return max_smem_bytes<64>();
    case 128: return max_smem_bytes<128>();
    case 256: return max_smem_bytes<256>();
    default: return 0;
  }
}

// leave_out_idle: this run is eager (not captured) and may leave out a kernel whose kind of
// item its plan has none of (p.prefill_items or p.decode_items 0).
// pdl: the decode-only instance, always a run's first kernel where it is launched alone
// (launch_decode_only), goes out as the programmatic dependent of the stream's kernel before it
// (TESSERA_CUDA_BATCH_PDL) and waits for that grid first (BatchArgs::wait_first).
template <typename T, int D>
void launch_instances(const batch::BatchArgs& a, const BatchRunParams& p, int num_sms, [[maybe_unused]] dispatch::BatchPath path,
                      [[maybe_unused]] int decode_sms_knob, bool decode_claims, bool leave_out_idle, bool pdl) {
  const bool no_prefill_items = leave_out_idle && p.prefill_items == 0;
  const bool no_decode_items = leave_out_idle && p.decode_items == 0;
  const long long max_units = static_cast<long long>(p.layout.max_items) * a.row_blocks;
  // An item has at most min(q_tile_rows, max_q_tokens) query rows under this layout, whatever
  // plan() wrote: when that many rows x group fit the decode shape, every item is decode-shaped
  // and the decode-only instance runs them; otherwise one fused launch runs both shapes, so
  // decode items (memory-bound) and prefill items (math-bound) share the SMs instead of
  // running one launch after the other. Depends on the layout only, like the grids, so
  // captured graphs stay valid across plans.
  const long long max_item_vectors =
      static_cast<long long>(std::min(p.layout.q_tile_rows, p.layout.max_q_tokens)) * a.group;
  // The decode-only instance on the whole device, the run's first kernel: the static walk (CTA
  // x runs items x, x + grid, ...), or with TESSERA_CUDA_BATCH_DECODE_CLAIMS=1 (a measurement
  // knob) CTAs taking items by claims as the SM split's decode side does (attention_kernel.cuh,
  // claim_decode_units). The programmatic dependent of the stream's kernel before it unless
  // TESSERA_CUDA_BATCH_PDL=0: its CTAs wait for that grid at their start (wait_first), so the
  // launch, not the work, overlaps the end of the last run; its closing griddepcontrol.wait
  // then returns at once. Decode rows keep their bits.
  auto launch_decode_only = [&](const batch::BatchArgs& args) {
    batch::BatchArgs d = args;
    d.wait_first = pdl;
    if (decode_claims) d.decode_claim = const_cast<std::uint32_t*>(&args.header->decode_claim);
    batch::launch_attention<T, D, batch::kDecodeOnly>(d, max_units, num_sms, p.stream,
                                                      batch::LaunchOptions{/*ctas_per_sm=*/0, /*programmatic=*/pdl});
  };
#if defined(TESSERA_HAS_SM90_KERNELS)
  // On compute capability 9.0 (TESSERA_CUDA_BATCH=portable: off) the prefill-shaped units run
  // on the sm90 WGMMA kernel and the decode-shaped ones on the decode-only instance (which skips
  // the others). By default the two share the SMs (sm90-split, below: the mixed bench 0.80-0.81 ms at
  // k = 46 against 0.98 for separate calls at the boost clock, 0.917 against 0.997 sustained under
  // the H200's power cap: docs/perf/mixed_batch.md "SM split", "Thirteenth session");
  // TESSERA_CUDA_BATCH=sm90 keeps the sequential order: the decode launch follows the prefill
  // kernel in stream order, and the merge depends on it.
  //
  // Opt-in (TESSERA_CUDA_BATCH=sm90-coresident, head_dim 128):
  // the slim instance of the prefill kernel (room left on every SM for one decode-only CTA),
  // whose CTAs trigger their dependents at their start, then the decode-only instance as its
  // programmatic dependent with two CTAs per SM taking decode items by claims, whose first CTAs
  // take that room while the prefill CTAs run and the rest the slots prefill CTAs leave
  // (docs/perf/batch_prefill_sm90.md, "Ninth session: co-resident prototype" and "Tenth
  // session"). The chain's correctness: the decode kernel reads only plan arrays, Q and the
  // cache (written before the prefill kernel in stream order; a dependent starts only after its
  // primary has started) and writes only decode items' rows; each of its threads executes
  // griddepcontrol.wait before exiting, so the decode grid completes only after the prefill
  // grid has completed and its writes are visible; the merge (programmatic dependent of the
  // decode kernel, waiting for that grid's completion) therefore sees both grids' partials.
  // Where the decode instance is not sm_90 code it is launched plainly (sequential, correct).
  //
  // Under sm90-coresident a plan without prefill-shaped items (host summary, p.prefill_items)
  // runs its decode units on the decode-only launch that opens a run, the grid of the default path (as
  // many CTAs as fit: 2 per SM at head_dim 128), not on the co-resident grid sized to share
  // SMs with prefill CTAs that are not there; while capturing, the slim prefill kernel follows
  // it (it finds no unit and exits) so that the graph still runs the prefill units of a later
  // plan with some (an eager run leaves it out). Decode rows keep their bits: both launches run the same decode-only
  // instance, and a unit's result depends only on its work item (plan), not on which CTA runs
  // it or when. Prefill rows stay on the slim kernel whatever the batch holds (its 64-key tiles
  // round differently from the fat kernel's 128-key tiles, and a request's output must not
  // depend on the batch: SplitPolicy disabled / fixed, RequestResultsDoNotDependOnTheBatch).
  //
  // Default (or TESSERA_CUDA_BATCH=sm90-split): the fat prefill kernel on num_sms - k CTAs (one per
  // SM; its CTAs trigger their dependents at their start) and the decode-only kernel as its
  // programmatic dependent, two CTAs per SM by claims as above: its first 2k CTAs take the k SMs
  // the prefill grid leaves free (a fat prefill CTA takes an SM's whole register file, so none
  // joins one), the rest start as prefill CTAs exit. k from the plan's work (split_model.h) or
  // TESSERA_CUDA_BATCH_DECODE_SMS. Same dependency chain as sm90-coresident; prefill rows run on
  // the fat kernel as under sm90, so they keep its bits (a unit is computed by one CTA whatever
  // the grid), and decode rows keep theirs (claims). k is a launch shape: a graph captured with
  // one plan keeps its k when replayed after another plan() (speed only, never the results).
  const bool coresident = path == dispatch::BatchPath::sm90_coresident && sm90::batch_prefill_slim_applicable(D);
  const bool split = path == dispatch::BatchPath::sm90_split || path == dispatch::BatchPath::automatic;
  if (path != dispatch::BatchPath::portable && max_item_vectors > batch::kDecodeMaxRows &&
      sm90::batch_prefill_applicable(D) && compute_major(p.device.index) == 9) {
    const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
    if ((coresident || split) && p.prefill_items == 0 && a.group <= batch::kDecodeMaxRows) {
      launch_decode_only(a);
      // Kept while capturing: a replay after a plan() with prefill items runs them here.
      if (!no_prefill_items) sm90::launch_batch_prefill(a, bf16, D, max_units, num_sms, p.stream, /*slim=*/coresident);
      return;
    }
    int decode_sms = 0;  // none held back for a decode launch that is left out
    if (split && a.group <= batch::kDecodeMaxRows && !no_decode_items) {
      const double flops = 4.0 * a.group * D * static_cast<double>(std::max<std::int64_t>(p.prefill_row_keys, 0));
      const double bytes = 2.0 * D * sizeof(T) * static_cast<double>(std::max<std::int64_t>(p.decode_keys, 0));  // K + V
      decode_sms = decode_sms_knob >= 0 ? std::min(decode_sms_knob, num_sms - 1)
                                        : batch::split_decode_sms(flops, bytes, num_sms,
                                                                  static_cast<long long>(p.prefill_items) * a.row_blocks);
    }
    // (TESSERA_CUDA_BATCH=sm90, the sequential order, reaches here with a decode-only plan too.)
    if (!no_prefill_items) sm90::launch_batch_prefill(a, bf16, D, max_units, num_sms - decode_sms, p.stream, coresident);
    if (a.group <= batch::kDecodeMaxRows && !no_decode_items) {
      batch::LaunchOptions options;
      batch::BatchArgs d = a;
      if (coresident || split) {
        // Two CTAs per SM taking decode items by claims (attention_kernel.cuh,
        // claim_decode_units): the first ones beside the prefill CTAs, the rest in the slots
        // prefill CTAs leave, all of them until the items run out. The counter lives in the
        // plan header (device memory; only its address is formed here).
        options = {/*ctas_per_sm=*/2, /*programmatic=*/true};
        d.decode_claim = const_cast<std::uint32_t*>(&a.header->decode_claim);
      }
      batch::launch_attention<T, D, batch::kDecodeOnly>(d, max_units, num_sms, p.stream, options);
    }
    return;
  }
#endif
  if (max_item_vectors <= batch::kDecodeMaxRows) {
    launch_decode_only(a);
  } else if constexpr (D == 256) {
    // One CTA per SM at this head dim: nothing to share, so the two shapes keep two launches.
    if (a.group <= batch::kDecodeMaxRows && !no_decode_items) launch_decode_only(a);
    if (!no_prefill_items) batch::launch_attention<T, D, batch::kPrefillOnly>(a, max_units, num_sms, p.stream);
  } else {
    batch::launch_attention<T, D, batch::kFused>(a, max_units, num_sms, p.stream);
  }
}

template <typename T>
void launch_for_head_dim(const batch::BatchArgs& a, const BatchRunParams& p, int num_sms, dispatch::BatchPath path,
                         int decode_sms_knob, bool decode_claims, bool leave_out_idle, bool pdl) {
  switch (p.head_dim) {
    case 64: return launch_instances<T, 64>(a, p, num_sms, path, decode_sms_knob, decode_claims, leave_out_idle, pdl);
    case 128: return launch_instances<T, 128>(a, p, num_sms, path, decode_sms_knob, decode_claims, leave_out_idle, pdl);
    case 256: return launch_instances<T, 256>(a, p, num_sms, path, decode_sms_knob, decode_claims, leave_out_idle, pdl);
    default: break;
  }
  throw Error(ErrorCode::unsupported, "q",
              "batch attention on CUDA: head_dim: expected 64, 128 or 256, got " + std::to_string(p.head_dim));
}

}  // namespace

int multiprocessor_count(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices) {
    const int n = cached[device].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < kMaxDevices) cached[device].store(n, std::memory_order_relaxed);
  return n;
}

// Compute capability major of `device` (cached after the first query).
static int compute_major(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices) {
    const int n = cached[device].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrComputeCapabilityMajor, device));
  if (device >= 0 && device < kMaxDevices) cached[device].store(n, std::memory_order_relaxed);
  return n;
}

bool batch_attention_supported(const BatchRunParams& p, std::string* why) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return fail(why, std::string("dtype: expected f16 or bf16 on CUDA, got ") + dtype_name(p.dtype));
  if (p.cache.dtype != p.dtype)
    return fail(why, std::string("cache dtype: expected the dtype of q (") + dtype_name(p.dtype) + "), got " +
                         dtype_name(p.cache.dtype));
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return fail(why, "head_dim: expected 64, 128 or 256 on CUDA, got " + std::to_string(p.head_dim));
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    return fail(why, "heads_q: expected a multiple of heads_kv, got " + std::to_string(p.heads_q) + " and " +
                         std::to_string(p.heads_kv));
  if (!strides_ok("q", p.q.ptr, {p.q.row, p.q.head}, why)) return false;
  if (!strides_ok("out", p.o.ptr, {p.o.row, p.o.head}, why)) return false;
  if (!strides_ok("cache.k_pages", p.cache.k, {p.cache.k_page, p.cache.k_token, p.cache.k_head}, why)) return false;
  if (!strides_ok("cache.v_pages", p.cache.v, {p.cache.v_page, p.cache.v_token, p.cache.v_head}, why)) return false;
  if (!aligned_16(p.workspace)) return fail(why, "workspace: expected a 16-byte aligned pointer, got a misaligned one");
  DeviceLimits dev;
  std::string unreadable;
  if (!read_device_limits(p.device.index, &dev, &unreadable)) return fail(why, unreadable);
  const int major = dev.major, optin = dev.smem_optin;
  if (major < 8) return fail(why, "device: expected compute capability >= 8.0, got " + std::to_string(major) + ".x");
  const int smem = smem_bytes_for(p.head_dim);
  if (optin < smem)
    return fail(why, "head_dim " + std::to_string(p.head_dim) + ": needs " + std::to_string(smem / 1024) +
                         " KB of shared memory per block, the device allows " + std::to_string(optin / 1024) + " KB");
  if (why != nullptr) why->clear();
  return true;
}

void batch_attention_run(const BatchRunParams& p) {
  if (p.heads_q <= 0 || p.heads_kv <= 0 || p.layout.max_items <= 0) return;
  const plan::PlanView v = plan::plan_view(p.workspace, p.layout);  // pointer arithmetic only
  batch::BatchArgs a;
  a.q = p.q.ptr;
  a.o = p.o.ptr;
  a.lse = p.lse.ptr;
  a.q_row = p.q.row, a.q_head = p.q.head;
  a.o_row = p.o.row, a.o_head = p.o.head;
  a.lse_head = p.lse.head;
  a.k = p.cache.k;
  a.v = p.cache.v;
  a.k_page = p.cache.k_page, a.k_token = p.cache.k_token, a.k_head = p.cache.k_head;
  a.v_page = p.cache.v_page, a.v_token = p.cache.v_token, a.v_head = p.cache.v_head;
  a.page_size = p.cache.page_size;
  a.page_shift = (a.page_size & (a.page_size - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(a.page_size)) : -1;
  a.kv_indptr = p.table.indptr;
  a.kv_indices = p.table.indices;
  a.header = v.header;
  a.qo_indptr = v.qo_indptr;
  a.kv_len = v.kv_len;
  a.items = v.items;
  a.merge_indptr = v.merge_indptr;
  a.merge_row = v.merge_row;
  a.merge_partial = v.merge_partial;
  a.partial_lse = v.partial_lse;
  a.partial_o = v.partial_o;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.group = p.heads_q / p.heads_kv;
  // Units of the prefill shape's vectors (plan::packed_q_rows: 128 at head_dim <= 128, 64 at
  // 256, as Traits<D, 1>::kRows); > 1 per item only when the group alone exceeds one unit.
  const long long vectors = static_cast<long long>(p.layout.q_tile_rows) * a.group;
  const int unit_rows = plan::packed_q_rows(p.head_dim);
  a.row_blocks = static_cast<int>((vectors + unit_rows - 1) / unit_rows);
  a.scale = p.mask.scale;
  a.scale_log2 = p.mask.scale * math::kLog2e;
  a.softcap = p.mask.softcap;
  if (p.mask.softcap > 0.0f) {
    const SoftcapScore capped = SoftcapScore::make(p.mask.scale, p.mask.softcap);
    a.scale_over_cap = capped.scale_over_cap;
    a.softcap_log2 = capped.cap_log2;
  }
  a.causal = p.mask.causal;
  a.window_left = p.mask.window_left;
  a.window_right = p.mask.window_right;

  if (static_cast<long long>(p.layout.max_items) * a.row_blocks >= (1LL << 30))
    throw Error(ErrorCode::unsupported, "workspace",
                "batch attention on CUDA: expected fewer than 2^30 work units (max_items x row blocks), got " +
                    std::to_string(static_cast<long long>(p.layout.max_items) * a.row_blocks));
  // Read on every run (a misspelt value fails here, whatever the shape), before any launch.
  // The sm90 prefill kernel unless TESSERA_CUDA_BATCH=portable (launch_instances still takes it
  // only on compute capability 9.0 at head_dim 64 and 128); sm90-coresident picks its slim policy.
  const dispatch::BatchPath path = dispatch::batch_path_override();
  const int decode_sms_knob = dispatch::batch_decode_sms_override();  // likewise: a bad value fails every run
  const bool decode_claims = dispatch::batch_decode_claims_override();
  const bool pdl = dispatch::batch_pdl_override();
  DeviceScope scope(p.device.index);
  const bool traced = batch::trace_begin(a, p.stream);  // false unless built with TESSERA_BATCH_TRACE
  const int num_sms = multiprocessor_count(p.device.index);
  // An eager run leaves out the launches its plan gives no work (a decode-only plan's prefill
  // kernel, a prefill-only plan's decode kernel, the merge of a plan without split rows): each
  // is a launch and a grid that finds nothing to do, a few microseconds beside a 40-100 us
  // decode step. A run being captured keeps every launch, so that its graph runs any later
  // plan() into the same workspace. What is computed does not change: a left-out kernel would
  // have written nothing (decode claims leave the counter at 0, and nothing else is reset).
  const bool idle_kernel = p.prefill_items == 0 || p.decode_items == 0 || p.merge_rows == 0;
  const bool leave_out_idle = idle_kernel && !stream_may_be_capturing(static_cast<cudaStream_t>(p.stream));
  if (p.dtype == DType::bf16)
    launch_for_head_dim<__nv_bfloat16>(a, p, num_sms, path, decode_sms_knob, decode_claims, leave_out_idle, pdl);
  else if (p.dtype == DType::f16)
    launch_for_head_dim<__half>(a, p, num_sms, path, decode_sms_knob, decode_claims, leave_out_idle, pdl);
  else
    throw Error(ErrorCode::unsupported, "q",
                std::string("batch attention on CUDA: dtype: expected f16 or bf16, got ") + dtype_name(p.dtype));
  if (!(leave_out_idle && p.merge_rows == 0))
    batch::launch_merge(a, p.dtype == DType::bf16, p.head_dim, p.layout.max_q_tokens, p.merge_rows, p.merge_fan_in,
                        num_sms, compute_major(p.device.index) >= 9, p.stream);
  if (traced) batch::trace_end(a, p.stream);
}

}  // namespace tessera::cuda
