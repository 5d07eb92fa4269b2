// The CUDA backward's entry points: supports_backward, attention_backward, and the small
// pre/post kernels around the main kernel, which is the sm80 FA2-class kernel
// (sm80/backward/kernel.cuh, instantiated per head dim and layout) or, on Hopper, the sm90 wgmma
// kernel (sm90/backward/): both take backward_args.h's arguments and walk cta_work.cuh's tiles,
// so the workspace, grids and deterministic counters here serve either.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/common/device_limits.h"
#include "cuda/common/check.h"
#include "cuda/backward/tail_plan.h"
#include "cuda/common/scratch_pool.h"
#include "cuda/common/stream_capture.h"
#include "cuda/common/types.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/sm80/backward/backward.h"
#include "cuda/sm80/backward/tiles.h"
#if defined(TESSERA_HAS_SM90_KERNELS)
#include "cuda/sm90/backward/backward_sm90.h"
#endif
#include "dispatch/path_override.h"
#include "tessera/error.h"

namespace tessera::cuda {
namespace sm80 {

namespace {

template <int D, int V>
constexpr BwdShape shape_of() {
  using L = bwd::Layout<D, V>;
  return {L::Bc, L::Br, L::kThreads, L::kSmem, L::kDqPairs};
}

// The layout TESSERA_CUDA_BACKWARD forces at least: "portable-compact" 1, "portable-compact2" 2
// (both also keep the sm80 kernel on Hopper, see sm90::backward_applicable), else 0.
int forced_variant() {
  switch (dispatch::backward_path_override()) {
    case dispatch::BackwardPath::portable_compact: return 1;
    case dispatch::BackwardPath::portable_compact2: return 2;
    default: return 0;
  }
}

}  // namespace

BwdShape backward_shape(int head_dim, int variant) {
  switch (head_dim * 4 + variant) {
    case 64 * 4 + 0: return shape_of<64, 0>();
    case 128 * 4 + 0: return shape_of<128, 0>();
    case 128 * 4 + 1: return shape_of<128, 1>();
    case 128 * 4 + 2: return shape_of<128, 2>();
    case 256 * 4 + 0: return shape_of<256, 0>();
    default: return {0, 0, 0, 0};
  }
}

int backward_variant(int head_dim, int optin_smem) {
  const int count = bwd::variant_count(head_dim);
  for (int v = std::min(forced_variant(), count - 1); v < count; ++v)
    if (backward_shape(head_dim, v).smem_bytes <= optin_smem) return v;
  return -1;
}

namespace {

// Addressing of the (row, head) pairs the pre/post kernels walk: a "global row" gr is
// b * seq + i for dense tensors, the packed row for ragged ones (zero batch stride).
struct RowMap {
  int seq = 0;  // dense rows per sequence; 0 for ragged
  __device__ __forceinline__ std::int64_t offset(const std::int64_t gr, int h, std::int64_t sb, std::int64_t sr,
                                                 std::int64_t sh) const {
    if (seq == 0) return gr * sr + h * sh;
    const std::int64_t b = gr / seq;
    return b * sb + (gr - b * seq) * sr + h * sh;
  }
};

// The (row x head) item and 16-byte slice of this thread in the pre/post kernels: D / 8
// threads per item, consecutive threads along the item's head_dim.
template <int D>
struct ThreadSlice {
  std::int64_t item;
  int sub;
  __device__ __forceinline__ static ThreadSlice mine() {
    constexpr int kTpr = D / 8;
    const std::int64_t gid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    return {gid / kTpr, static_cast<int>(gid % kTpr)};
  }
};

struct PreArgs {
  const void* o;
  const void* dout;
  std::int64_t o_batch, o_row, o_head, do_batch, do_row, do_head;
  const float* lse;
  std::int64_t lse_batch, lse_head;
  float* lse2;
  float* dsum;
  float* dq_accum;
  std::int64_t total_q;
  int heads_q;
  RowMap rows;
};

// One group of D/8 threads per (row, head): 16-byte loads of O and dO, a shuffle reduction.
template <typename T, int D>
__global__ void __launch_bounds__(256) backward_pre_kernel(const PreArgs a) {
  constexpr int kTpr = D / 8;
  const auto [item, sub] = ThreadSlice<D>::mine();
  const bool ok = item < a.total_q * a.heads_q;
  const int h = static_cast<int>(item % a.heads_q);
  const std::int64_t gr = item / a.heads_q;
  float dot = 0.0f;
  if (ok) {
    const uint4 ov = *reinterpret_cast<const uint4*>(static_cast<const T*>(a.o) +
                                                     a.rows.offset(gr, h, a.o_batch, a.o_row, a.o_head) + sub * 8);
    const uint4 dv = *reinterpret_cast<const uint4*>(static_cast<const T*>(a.dout) +
                                                     a.rows.offset(gr, h, a.do_batch, a.do_row, a.do_head) + sub * 8);
    const std::uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 of = Traits<T>::unpack2(ow[i]), df = Traits<T>::unpack2(dw[i]);
      dot = fmaf(of.x, df.x, dot);
      dot = fmaf(of.y, df.y, dot);
    }
  }
#pragma unroll
  for (int off = kTpr / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  if (!ok) return;
  const std::int64_t hr = static_cast<std::int64_t>(h) * a.total_q + gr;
  if (sub == 0) {
    a.dsum[hr] = dot;
    std::int64_t lo;
    if (a.rows.seq == 0) {
      lo = h * a.lse_head + gr;
    } else {
      const std::int64_t b = gr / a.rows.seq;
      lo = b * a.lse_batch + h * a.lse_head + (gr - b * a.rows.seq);
    }
    const float l = a.lse[lo];
    // Rows that saw no key: exp2(s - inf) = 0 gives P = 0 without a test in the main loop.
    a.lse2[hr] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
  }
  float4* acc = reinterpret_cast<float4*>(a.dq_accum + hr * D + sub * 8);
  acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
  acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
}

struct PostArgs {
  const float* src;  // [heads][total][D] (dq) or [splits][total][heads][D] (dk/dv parts)
  void* dst;
  std::int64_t d_batch, d_row, d_head;
  float scale;
  std::int64_t total;
  int heads;
  int splits;  // dk/dv: number of partials; 0 = the dq layout
  RowMap rows;
  // dq only: src's columns are pair-interleaved within each 16-column group, as the main kernel's
  // BwdShape::dq_pairs says (tiles.h Layout::kDqPairs): column 16 G + 8 h + 2 k + e sits at
  // 16 G + 4 k + 2 h + e. false: in order.
  bool dq_pairs = false;
};

// dst(row, head) = scale * src, or the fixed-order sum of the split partials.
template <typename T, int D>
__global__ void __launch_bounds__(256) backward_post_kernel(const PostArgs a) {
  const auto [item, sub] = ThreadSlice<D>::mine();
  if (item >= a.total * a.heads) return;
  float v[8];
  const int h = static_cast<int>(item % a.heads);
  const std::int64_t gr = item / a.heads;
  if (a.splits == 0) {
    const float* row = a.src + (static_cast<std::int64_t>(h) * a.total + gr) * D;
    if (a.dq_pairs) {
      // This thread's columns 8 sub .. + 7 (group sub / 2, half sub & 1): pairs at 4 k + 2 (sub & 1).
      const float* s = row + (sub >> 1) * 16 + 2 * (sub & 1);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = *reinterpret_cast<const float2*>(s + 4 * k);
        v[2 * k] = x.x; v[2 * k + 1] = x.y;
      }
    } else {
      const float4* s = reinterpret_cast<const float4*>(row + sub * 8);
      const float4 x = s[0], y = s[1];
      v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w; v[4] = y.x; v[5] = y.y; v[6] = y.z; v[7] = y.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    for (int sp = 0; sp < a.splits; ++sp) {
      const float4* s = reinterpret_cast<const float4*>(
          a.src + ((static_cast<std::int64_t>(sp) * a.total + gr) * a.heads + h) * D + sub * 8);
      const float4 x = s[0], y = s[1];
      v[0] += x.x; v[1] += x.y; v[2] += x.z; v[3] += x.w; v[4] += y.x; v[5] += y.y; v[6] += y.z; v[7] += y.w;
    }
  }
  uint4 out;
  out.x = Traits<T>::pack2(v[0] * a.scale, v[1] * a.scale);
  out.y = Traits<T>::pack2(v[2] * a.scale, v[3] * a.scale);
  out.z = Traits<T>::pack2(v[4] * a.scale, v[5] * a.scale);
  out.w = Traits<T>::pack2(v[6] * a.scale, v[7] * a.scale);
  *reinterpret_cast<uint4*>(static_cast<T*>(a.dst) + a.rows.offset(gr, h, a.d_batch, a.d_row, a.d_head) + sub * 8) = out;
}

template <typename T, int D>
void launch_pre(const PreArgs& a, cudaStream_t stream) {
  const std::int64_t threads = a.total_q * a.heads_q * (D / 8);
  if (threads == 0) return;
  backward_pre_kernel<T, D><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(a);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T, int D>
void launch_post(const PostArgs& a, cudaStream_t stream) {
  const std::int64_t threads = a.total * a.heads * (D / 8);
  if (threads == 0) return;
  backward_post_kernel<T, D><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(a);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// use_sm90: the sm90 (wgmma) main kernel replaces the sm80 one; it walks the same tiles and
// uses the same arguments and workspace, so the pre/post kernels serve both.
// The sm80 main kernel in layout `variant` (backward_variant; only head_dim 128 has more than one),
// in the tile-major CTA order where `tile_major` (the caller sets it only where
// has_tile_major_order).
template <typename T, int D>
void launch_sm80_main(const BwdArgs& args, int variant, bool tile_major, cudaStream_t stream) {
  if constexpr (has_tile_major_order(D, 0)) {
    if (variant == 0 && tile_major) return launch_backward_main_tile_major<T, D>(args, stream);
  }
  if constexpr (D == 128) {
    if (variant == 1) return launch_backward_main<T, D, 1>(args, stream);
    if (variant == 2) return launch_backward_main<T, D, 2>(args, stream);
  }
  launch_backward_main<T, D>(args, stream);
}

// The tail pieces (docs/perf/backward_sm80.md, "Tail pieces"). A dense non-causal backward is a
// grid of equal CTAs, one per (KV tile, kv head, sequence); where their count leaves the last
// wave partly empty (16k tokens at head_dim 128: 2048 CTAs on 132 SMs, 68 in the last wave), the
// main grid keeps all but the last `tail_tiles` KV tiles of every (sequence, kv head), and each
// of those runs as `pieces` CTAs over an equal share of the query rows. The pieces are the same
// kernel on a view of the arguments (the shares as batch entries, K/V at the tail rows with batch
// stride 0), launched as a programmatic dependent of the main grid: they take SMs as its CTAs
// finish. Their dQ goes to the same fp32 accumulator; their dK/dV are fp32 partials summed in
// fixed order by the post kernel. Exact: P comes from the saved full-row LSE and D, so any
// rectangle of (query, key) pairs contributes its own terms. The plan: tail_plan.h.
using backward::TailPlan;

// The pieces' view of the main arguments for sequence ob (see TailPlan).
BwdArgs tail_piece_args(const BwdArgs& a, const TailPlan& tp, int ob, int head_dim, std::int64_t elem_bytes,
                        float* dk_part, float* dv_part) {
  auto at = [elem_bytes](const void* ptr, std::int64_t elems) {
    return static_cast<const void*>(static_cast<const char*>(ptr) + elems * elem_bytes);
  };
  BwdArgs v = a;
  v.q = at(a.q, ob * a.q_batch);
  v.q_batch = tp.share * a.q_row;
  v.dout = at(a.dout, ob * a.do_batch);
  v.do_batch = tp.share * a.do_row;
  v.k = at(a.k, ob * a.k_batch + tp.tail0 * a.k_row);
  v.k_batch = 0;  // every piece sees the same tail rows
  v.v = at(a.v, ob * a.v_batch + tp.tail0 * a.v_row);
  v.v_batch = 0;
  v.dk = v.dv = nullptr;
  // Workspace rows: the pieces' rows piece * share + i are sequence ob's rows; total_q stays the
  // heads' stride of the accumulator, lse2 and D.
  const std::int64_t row0 = static_cast<std::int64_t>(ob) * a.seq_q;
  v.dq_accum = a.dq_accum + row0 * head_dim;
  v.lse2 = a.lse2 + row0;
  v.dsum = a.dsum + row0;
  v.locks = nullptr;
  v.cu_seqlens_q = v.cu_seqlens_k = nullptr;
  v.batch = tp.pieces;
  v.seq_q = static_cast<int>(tp.share);
  v.seq_k = static_cast<int>(tp.tail_rows);
  v.total_k = tp.pieces * tp.tail_rows;  // the partials' rows: [piece][tail row]
  v.n_splits = 1;
  v.heads_per_split = a.group;
  v.partial_out = true;
  v.dk_part = dk_part;
  v.dv_part = dv_part;
  return v;
}

template <typename T, int D>
void run_typed(const BackwardParams& p, const BwdArgs& args, const PreArgs& pre, const PostArgs& post_dq,
               const PostArgs& post_dk, const PostArgs& post_dv, bool use_sm90, int variant, bool tile_major,
               const TailPlan& tp, float* tail_dk, float* tail_dv, cudaStream_t stream) {
  const bool pieces = D == 128 && tp.pieces > 0;  // the plan makes them only there
  launch_pre<T, D>(pre, stream);
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (use_sm90) sm90::launch_backward_main(p, args, stream);
  else if (!pieces) launch_sm80_main<T, D>(args, variant, tile_major, stream);
#else
  (void)use_sm90;
  if (!pieces) launch_sm80_main<T, D>(args, variant, tile_major, stream);
#endif
  const std::int64_t part = tp.pieces * tp.tail_rows * args.heads_kv * D;  // floats per sequence
  if constexpr (D == 128) {
    if (pieces) {
      // The main grid on its leading KV tiles, then per sequence the pieces as a programmatic
      // dependent of the launch before them (each pieces grid waits at its end for that one to
      // complete, so the post kernels below see every grid's writes).
      launch_backward_main_d128_tiles<T>(args, tp.main_tiles, false, stream);
      for (int ob = 0; ob < args.batch; ++ob)
        launch_backward_main_d128_tiles<T>(
            tail_piece_args(args, tp, ob, D, sizeof(T), tail_dk + ob * part, tail_dv + ob * part),
            (static_cast<int>(tp.tail_rows) + 127) / 128, true, stream);
    }
  }
  launch_post<T, D>(post_dq, stream);
  if (args.n_splits > 1) {
    launch_post<T, D>(post_dk, stream);
    launch_post<T, D>(post_dv, stream);
  }
  // The tail's dK/dV: the pieces' partials [piece][tail row][kv head][D] summed in piece order
  // into rows tail0.. of each sequence.
  for (int ob = 0; ob < args.batch && pieces; ++ob) {
    for (int which = 0; which < 2; ++which) {
      const StridedPtr& dst = which == 0 ? p.dk : p.dv;
      PostArgs pa{(which == 0 ? tail_dk : tail_dv) + ob * part,
                  static_cast<char*>(dst.ptr) + (ob * dst.batch + tp.tail0 * dst.row) * static_cast<std::int64_t>(sizeof(T)),
                  0, dst.row, dst.head, 1.0f, tp.tail_rows, args.heads_kv, tp.pieces, RowMap{0}};
      launch_post<T, D>(pa, stream);
    }
  }
  (void)p;
}

template <typename T>
void run_dtype(const BackwardParams& p, const BwdArgs& args, const PreArgs& pre, const PostArgs& post_dq,
               const PostArgs& post_dk, const PostArgs& post_dv, bool use_sm90, int variant, bool tile_major,
               const TailPlan& tp, float* tail_dk, float* tail_dv, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return run_typed<T, 64>(p, args, pre, post_dq, post_dk, post_dv, use_sm90, variant, tile_major, tp, tail_dk,
                              tail_dv, stream);
    case 128:
      return run_typed<T, 128>(p, args, pre, post_dq, post_dk, post_dv, use_sm90, variant, tile_major, tp, tail_dk,
                               tail_dv, stream);
    case 256:
      return run_typed<T, 256>(p, args, pre, post_dq, post_dk, post_dv, use_sm90, variant, tile_major, tp, tail_dk,
                               tail_dv, stream);
    default: break;
  }
  throw Error(ErrorCode::unsupported, "q", "attention_backward: head_dim " + std::to_string(p.head_dim) + " not compiled");
}

// Restores the calling thread's current device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TESSERA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

}  // namespace
}  // namespace sm80

namespace {

constexpr const char* kBackwardSupport =
    "supported on CUDA: f16 or bf16, head_dim 64, 128 or 256, compute capability >= 8.0 (head_dim 256: with "
    "144 KB of shared memory per block), a saved lse, "
    "16-byte aligned pointers and 16-byte multiple batch/row/head strides";

bool bwd_fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what + " (" + kBackwardSupport + ")";
  return false;
}

int bwd_last_variant(int head_dim) { return sm80::bwd::variant_count(head_dim) - 1; }

// "177 KB", "128.5 KB": bytes / 1024 with one decimal where it is not whole.
std::string kb(int bytes) {
  const int tenths = static_cast<int>((static_cast<long long>(bytes) * 10 + 512) / 1024);
  return std::to_string(tenths / 10) + (tenths % 10 != 0 ? "." + std::to_string(tenths % 10) : "") + " KB";
}

bool bwd_strides_ok(const StridedPtr& t, const char* name, std::string* why) {
  const std::int64_t s[3] = {t.batch, t.row, t.head};
  const char* dims[3] = {"batch", "row", "head"};
  for (int i = 0; i < 3; ++i)
    if (s[i] % 8 != 0)
      return bwd_fail(why, std::string(name) + " " + dims[i] +
                               " stride: expected a multiple of 8 elements (16 bytes), got " + std::to_string(s[i]));
  if ((reinterpret_cast<std::uintptr_t>(t.ptr) & 15u) != 0)
    return bwd_fail(why, std::string(name) + ": expected a 16-byte aligned data pointer, got a misaligned one");
  return true;
}

}  // namespace

bool supports_backward(const BackwardParams& p, std::string* why) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return bwd_fail(why, std::string("dtype: expected f16 or bf16 on CUDA, got ") + dtype_name(p.dtype));
  const sm80::BwdShape shape = sm80::backward_shape(p.head_dim);
  if (shape.block_kv == 0)
    return bwd_fail(why, "head_dim: expected 64, 128 or 256 on CUDA, got " + std::to_string(p.head_dim));
  if (p.batch > 65535 || p.heads_q > 65535)
    return bwd_fail(why, "batch and heads_q: expected at most 65535 each on CUDA, got " + std::to_string(p.batch) +
                             " and " + std::to_string(p.heads_q));
  if (p.lse.ptr == nullptr) return bwd_fail(why, "lse: expected the forward's saved LSE, got none");
  const std::pair<const StridedPtr*, const char*> tensors[] = {
      {&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.o, "out"}, {&p.dout, "dout"}, {&p.dq, "dq"}, {&p.dk, "dk"}, {&p.dv, "dv"}};
  for (const auto& [t, name] : tensors)
    if (!bwd_strides_ok(*t, name, why)) return false;
  DeviceLimits dev;
  std::string unreadable;
  if (!read_device_limits(p.device.index, &dev, &unreadable)) return bwd_fail(why, unreadable);
  const int major = dev.major, optin = dev.smem_optin;
  if (major < 8) return bwd_fail(why, "device: expected compute capability >= 8.0, got " + std::to_string(major) + ".x");
  // The sm80 kernel's layout: the default, or a compact one where the default does not fit
  // (head_dim 128 below 177 KB; the sm90 kernel, where it applies, needs no more than the default).
  if (sm80::backward_variant(p.head_dim, optin) < 0) {
    const int last = bwd_last_variant(p.head_dim);
    const int need = sm80::backward_shape(p.head_dim, last).smem_bytes;
    return bwd_fail(why, "head_dim " + std::to_string(p.head_dim) + ": the backward needs " + std::to_string(need) +
                             " bytes (" + kb(need) + ") of shared memory per block" +
                             (last > 0 ? " in its most compact layout" : "") + ", the device (cuda:" +
                             std::to_string(p.device.index) + ") allows " + std::to_string(optin) + " bytes (" +
                             kb(optin) + ")");
  }
  if (why != nullptr) why->clear();
  return true;
}

void attention_backward(const BackwardParams& p) {
  using namespace sm80;
  DeviceGuard guard(p.device.index);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int D = p.head_dim;
  const bool ragged = p.ragged();
  if (p.batch == 0 || (p.total_q == 0 && p.total_k == 0)) return;

  int sms = 1;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device.index));
  // On compute capability 9.0 the sm90 main kernel takes the cases it supports (unless
  // TESSERA_CUDA_BACKWARD=portable); the grid, split, workspace and pre/post kernels below are
  // the same for both, sized from the tiles of the main kernel that runs (the sm90 kernel's
  // differ at head_dim 64: query tiles of 128 rows, which only the deterministic counters see).
  // The sm80 kernel's layout: the default where it fits the device's opt-in shared memory, else
  // a compact one (backward_variant; supports_backward has refused devices where none fits).
  int optin = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p.device.index));
  const int variant = std::max(backward_variant(D, optin), 0);
#if defined(TESSERA_HAS_SM90_KERNELS)
  const bool use_sm90 = sm90::backward_applicable(p);
  const BwdShape shape = use_sm90 ? sm90::backward_shape(p.head_dim) : backward_shape(p.head_dim, variant);
#else
  const bool use_sm90 = false;
  const BwdShape shape = backward_shape(p.head_dim, variant);
#endif
  if (!use_sm90 && backward_variant(D, optin) < 0) {  // callers normally ask supports_backward first
    std::string why;
    (void)supports_backward(p, &why);
    throw Error(ErrorCode::unsupported, "q", "attention_backward: " + why);
  }

  // Split a GQA group over CTAs only while the grid is smaller than the device.
  const int group = p.group();
  const std::int64_t kv_tiles = (p.seq_k + shape.block_kv - 1) / shape.block_kv;
  const std::int64_t base_ctas = kv_tiles * p.heads_kv * p.batch;
  int splits = 1;
  for (int s = 1; s <= group; ++s) {
    if (group % s != 0) continue;
    splits = s;
    if (base_ctas * s >= sms) break;
  }

  // The sm80 kernel's CTA order (launch_backward_main_tile_major, cta_work.cuh). Under a plain
  // causal mask KV tile j of a (sequence, kv head) pair walks ~2 (kv_tiles - j) query tiles (Bc =
  // 2 Br at d128), and the default grid dispatches pair after pair, so the last pairs' heavy tiles
  // start late and set the tail (docs/perf/backward_sm80.md, "wave tail and CTA order"). Kv-head
  // fastest dispatches a sequence's heavy tiles of every head first; then the query-side data in
  // flight is a whole sequence's (Q, dO, dq_accum, lse2, D of every head), so only where that is
  // at most twice the L2 (1k and 4k at 16 heads d128 on an H200, not 16k). Dense inputs only
  // (ragged pairs differ in length), no window (CTAs about equal); only the instances that exist
  // (has_tile_major_order: head_dim 128, layout 0).
  bool tile_major = false;
  if (!use_sm90 && has_tile_major_order(D, variant) && !ragged && p.mask.causal && p.mask.window_left < 0 &&
      p.mask.window_right < 0 && kv_tiles <= 65535) {
    int l2 = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, p.device.index));
    const std::int64_t seq_bytes = static_cast<std::int64_t>(p.seq_q) * p.heads_q * (8 * D + 8);
    tile_major = seq_bytes <= 2 * static_cast<std::int64_t>(l2);
  }

  // Workspace: dQ accumulator, lse2, D, locks, dK/dV partials (fp32 / int32).
  const std::size_t n_acc = static_cast<std::size_t>(p.heads_q) * p.total_q * D;
  const std::size_t n_row = static_cast<std::size_t>(p.heads_q) * p.total_q;
  const std::int64_t lock_stride = p.total_q / shape.block_q + p.batch + 1;
  const std::size_t n_lock = p.deterministic ? static_cast<std::size_t>(p.heads_q) * lock_stride : 0;
  const std::size_t n_part = splits > 1 ? static_cast<std::size_t>(splits) * p.total_k * p.heads_kv * D : 0;
  const std::size_t off_lse2 = align_up(n_acc * 4);
  const std::size_t off_dsum = off_lse2 + align_up(n_row * 4);
  const std::size_t off_lock = off_dsum + align_up(n_row * 4);
  const std::size_t off_dk = off_lock + align_up(n_lock * 4);
  const std::size_t off_dv = off_dk + align_up(n_part * 4);

  // The tail pieces (TailPlan): dense, non-causal, unwindowed, not deterministic, one CTA per kv
  // head (no group split), the sm80 kernel's default head_dim 128 layout in its default order,
  // on compute capability 9.x (the programmatic launch). Automatic where a CTA walks >= 128 query
  // tiles and the last wave holds at least a quarter of the SMs: 4 pieces of the last
  // ceil(last wave / (kv heads x sequences)) KV tiles; TESSERA_CUDA_BACKWARD_TAIL_PIECES=0 turns
  // them off, =k forces k pieces of the last quarter of the KV tiles wherever the structural
  // conditions hold and k divides seq_q (silently the plain path otherwise: a measurement and
  // test knob; its workspace grows with k, batch x k x tail rows x kv heads x 1 KB).
  backward::TailInputs ti;
  ti.forced = dispatch::backward_tail_pieces_override();
  ti.eligible = !use_sm90 && D == 128 && variant == 0 && !tile_major && !ragged && !p.mask.causal &&
                p.mask.window_left < 0 && p.mask.window_right < 0 && !p.deterministic && splits == 1 && p.batch <= 8;
  if (ti.forced != 0 && ti.eligible) {
    int major = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device.index));
    const bool sm90_code = p.dtype == DType::bf16 ? backward_main_d128_has_sm90_code<__nv_bfloat16>()
                                                   : backward_main_d128_has_sm90_code<__half>();
    ti.device_ok = major == 9 && sm90_code;
  }
  ti.seq_q = p.seq_q;
  ti.seq_k = p.seq_k;
  ti.block_q = shape.block_q;
  ti.block_kv = shape.block_kv;
  ti.heads_kv = p.heads_kv;
  ti.batch = p.batch;
  ti.sms = sms;
  const TailPlan tp = backward::plan_tail_pieces(ti);
  const std::size_t n_tail =
      static_cast<std::size_t>(p.batch) * tp.pieces * tp.tail_rows * static_cast<std::size_t>(p.heads_kv) * D;
  const std::size_t off_tdk = off_dv + align_up(n_part * 4);
  const std::size_t off_tdv = off_tdk + align_up(n_tail * 4);
  const std::size_t bytes = std::max<std::size_t>(off_tdv + align_up(n_tail * 4), 256);

  // From the per-device pool that keeps its memory across synchronisations (scratch_pool.h): the
  // default pool unmaps freed memory at every synchronisation, so a caller that synchronises
  // between calls (a training step reading its loss, a timing loop) had the next call map ~150 MB
  // afresh (d128, 16 heads x 16k tokens) before its first launch. The pool keeps up to
  // kScratchPoolKeepBytes; when it cannot grow it gives back what is unused and tries once more.
  void* ws = nullptr;
  const cudaMemPool_t pool = scratch_pool(p.device.index);
  auto allocate = [&] {
    return pool != nullptr ? cudaMallocFromPoolAsync(&ws, bytes, pool, stream) : cudaMallocAsync(&ws, bytes, stream);
  };
  cudaError_t alloc = allocate();
  if (alloc == cudaErrorMemoryAllocation && pool != nullptr && !stream_may_be_capturing(stream)) {
    (void)cudaGetLastError();
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));  // blocks freed on this stream become unused
    TESSERA_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    alloc = allocate();
  }
  if (alloc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw Error(ErrorCode::out_of_memory, "", "attention_backward: could not allocate " + std::to_string(bytes) +
                                                  " bytes of fp32 workspace on the device");
  }
  TESSERA_CUDA_CHECK(alloc);
  auto* base = static_cast<unsigned char*>(ws);
  try {
    BwdArgs a;
    a.q = p.q.ptr; a.k = p.k.ptr; a.v = p.v.ptr; a.dout = p.dout.ptr; a.dk = p.dk.ptr; a.dv = p.dv.ptr;
    a.q_batch = p.q.batch; a.q_row = p.q.row; a.q_head = p.q.head;
    a.k_batch = p.k.batch; a.k_row = p.k.row; a.k_head = p.k.head;
    a.v_batch = p.v.batch; a.v_row = p.v.row; a.v_head = p.v.head;
    a.do_batch = p.dout.batch; a.do_row = p.dout.row; a.do_head = p.dout.head;
    a.dk_batch = p.dk.batch; a.dk_row = p.dk.row; a.dk_head = p.dk.head;
    a.dv_batch = p.dv.batch; a.dv_row = p.dv.row; a.dv_head = p.dv.head;
    a.dq_accum = reinterpret_cast<float*>(base);
    a.lse2 = reinterpret_cast<float*>(base + off_lse2);
    a.dsum = reinterpret_cast<float*>(base + off_dsum);
    a.locks = p.deterministic ? reinterpret_cast<int*>(base + off_lock) : nullptr;
    a.dk_part = splits > 1 ? reinterpret_cast<float*>(base + off_dk) : nullptr;
    a.dv_part = splits > 1 ? reinterpret_cast<float*>(base + off_dv) : nullptr;
    a.cu_seqlens_q = p.cu_seqlens_q;
    a.cu_seqlens_k = p.cu_seqlens_k;
    a.batch = p.batch; a.heads_q = p.heads_q; a.heads_kv = p.heads_kv; a.group = group;
    a.seq_q = p.seq_q; a.seq_k = p.seq_k; a.total_q = p.total_q; a.total_k = p.total_k;
    a.n_splits = splits; a.heads_per_split = group / splits;
    a.lock_stride = lock_stride;
    a.scale = p.mask.scale;
    a.scale_log2 = p.mask.scale * 1.4426950408889634f;
    a.softcap = p.mask.softcap;
    a.causal = p.mask.causal;
    a.window_left = p.mask.window_left;
    a.window_right = p.mask.window_right;

    if (n_lock > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(a.locks, 0, n_lock * 4, stream));
    // Ragged rows outside every sequence get no partial; keep them finite (zero).
    if (n_part > 0 && ragged) TESSERA_CUDA_CHECK(cudaMemsetAsync(base + off_dk, 0, off_dv - off_dk + n_part * 4, stream));

    const RowMap qmap{ragged ? 0 : p.seq_q};
    const RowMap kmap{ragged ? 0 : p.seq_k};
    PreArgs pre{p.o.ptr, p.dout.ptr, p.o.batch, p.o.row, p.o.head, p.dout.batch, p.dout.row, p.dout.head,
                p.lse.ptr, p.lse.batch, p.lse.head, reinterpret_cast<float*>(base + off_lse2),
                reinterpret_cast<float*>(base + off_dsum), a.dq_accum, p.total_q, p.heads_q, qmap};
    PostArgs post_dq{a.dq_accum, p.dq.ptr, p.dq.batch, p.dq.row, p.dq.head, p.mask.scale, p.total_q, p.heads_q, 0, qmap,
                     shape.dq_pairs};
    PostArgs post_dk{a.dk_part, p.dk.ptr, p.dk.batch, p.dk.row, p.dk.head, 1.0f, p.total_k, p.heads_kv, splits, kmap};
    PostArgs post_dv{a.dv_part, p.dv.ptr, p.dv.batch, p.dv.row, p.dv.head, 1.0f, p.total_k, p.heads_kv, splits, kmap};

    float* tail_dk = reinterpret_cast<float*>(base + off_tdk);
    float* tail_dv = reinterpret_cast<float*>(base + off_tdv);
    if (p.dtype == DType::bf16)
      run_dtype<__nv_bfloat16>(p, a, pre, post_dq, post_dk, post_dv, use_sm90, variant, tile_major, tp, tail_dk,
                               tail_dv, stream);
    else
      run_dtype<__half>(p, a, pre, post_dq, post_dk, post_dv, use_sm90, variant, tile_major, tp, tail_dk, tail_dv,
                        stream);
  } catch (...) {
    (void)cudaFreeAsync(ws, stream);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaFreeAsync(ws, stream));
}

}  // namespace tessera::cuda
