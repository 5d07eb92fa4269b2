// Host entry of the sm90 forward: when it applies, params -> tensor maps and kernel arguments,
// pick the (dtype, head dim) instance, launch on the caller's stream on the tensors' device.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/common/device_limits.h"
#include "cuda/common/check.h"
#include "cuda/common/device_scope.h"
#include "cuda/common/scratch_pool.h"
#include "cuda/common/softcap_score.cuh"
#include "cuda/primitives/sm90/tensor_map.h"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/forward_sm90.h"
#include "cuda/sm90/forward/fp8_v_transpose.h"
#include "cuda/sm90/forward/fp8_v_transpose_plan.h"
#include "math/ragged_tiles.h"
#include "cuda/sm90/forward/kernel_traits.cuh"
#include "cuda/sm90/forward/tile_choice.h"
#include "math/online_softmax.h"
#include "dispatch/path_override.h"
#include "tessera/error.h"

namespace tessera::cuda::sm90 {
namespace {

bool fail(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what;
  return false;
}

template <int D>
int smem_bytes_max() {
  // the unmasked layouts for short and long calls (block_n_for: a, b, c), at head_dim 64 the
  // tail-row one (its merge slots) and the masked instances' own (e, f, g, h)
  const int a = FwdTraits<D, block_n_for(D, true)>::kSmemBytes, b = FwdTraits<D, block_n_for(D, false)>::kSmemBytes;
  const int c = FwdTraits<D, block_n_for(D, false, false, true)>::kSmemBytes;
  const int d = D == 64 ? FwdTraits<D, block_n_for(D, false), 2, 0, false, false, D == 64>::kSmemBytes : 0;
  // The masked instances' own layouts (where their tile slots hold the tile's origin, a few
  // bytes more): short and long keys, and head_dim 64's two-warpgroup one.
  const int e = FwdTraits<D, block_n_for(D, true), 2, 0, false, true>::kSmemBytes;
  const int f = FwdTraits<D, block_n_for(D, true, false, true), 2, 0, false, true>::kSmemBytes;
  const int g = D == 64 ? FwdTraits<D, block_n_for(D, true), 2, 2, false, true>::kSmemBytes : 0;
  const int h = D == 128 ? FwdTraits<D, block_n_for(D, true), 2, 3, false, true>::kSmemBytes : 0;
  return std::max({a, b, c, d, e, f, g, h});
}

int smem_bytes(int head_dim) {
  switch (head_dim) {
    case 64: return smem_bytes_max<64>();
    case 128: return smem_bytes_max<128>();
    case 256: return smem_bytes_max<256>();
    default: return 0;
  }
}

// A tensor's tiled map: rank 4 (head_dim, seq, heads, batch) for dense tensors, rank 3
// (head_dim, packed rows, heads) for ragged ones; boxes of 128 bytes of columns x box_rows rows. A
// dimension of extent 1 (rows included) gets a harmless non-zero stride (its value is never
// used), so that strides such as 0 for a single row or sequence do not trip the encoder. A
// tensor without rows (seq_k = 0: no tile is ever loaded) may have no data pointer; the map then
// points at `fallback`, a valid address of the same call.
CUtensorMap tile_map(CUtensorMapDataType type, const StridedPtr& t, bool ragged, std::int64_t rows, int heads,
                     int batch, int head_dim, std::uint32_t box_rows, const void* fallback) {
  const std::uint64_t elem = static_cast<std::uint64_t>(tensor_map_element_bytes(type));
  const std::uint64_t safe_rows = static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 1));
  std::uint64_t row_bytes = static_cast<std::uint64_t>(t.row) * elem;
  std::uint64_t head_bytes = static_cast<std::uint64_t>(t.head) * elem;
  std::uint64_t batch_bytes = static_cast<std::uint64_t>(t.batch) * elem;
  if (safe_rows == 1) row_bytes = (static_cast<std::uint64_t>(head_dim) * elem + 15) / 16 * 16;
  if (heads == 1) head_bytes = row_bytes * safe_rows;
  if (batch == 1 || ragged) batch_bytes = head_bytes * static_cast<std::uint64_t>(heads);
  const std::uint64_t dims[4] = {static_cast<std::uint64_t>(head_dim), safe_rows, static_cast<std::uint64_t>(heads),
                                 static_cast<std::uint64_t>(batch)};
  const std::uint64_t strides[3] = {row_bytes, head_bytes, batch_bytes};
  const std::uint32_t box[4] = {static_cast<std::uint32_t>(128 / elem), box_rows, 1, 1};
  const void* base = t.ptr != nullptr ? t.ptr : fallback;
  return make_tensor_map_tiled(type, ragged ? 3 : 4, base, dims, strides, box);
}

// block_n: the call's K tile (tile_choice.h), which picks the unmasked instance of short or long
// calls (the same one at head_dim 256) and, with a.block_m (the tile's rows: its consumer
// warpgroups), the masked one at head_dims 64 and 128. tail_rows:
// TESSERA_CUDA_FORWARD_TAIL_ROWS (head_dim 64's tail-row launch where it applies; on by default).
template <typename T, int D>
void launch_for_mask(const FwdArgs& a, const AttentionParams& p, bool masked, int num_sms, int block_n, bool tail_rows) {
  if constexpr (D == 64) {
    // Dense unmasked on 128-key tiles (every length unless the key-tile knob forces 192), the last
    // query block of every sequence at most 64 rows (1024 = 5 x 192 + 64): the whole blocks on the
    // main instance, then the last blocks on the tail-row instance (kernel_traits.cuh), where all
    // three consumer warpgroups share their K/V tiles instead of two of them computing rows past
    // the sequence. A second launch, after the first; the two write disjoint rows.
    if (tail_rows && !masked && block_n == block_n_for(64, false) && a.cu_seqlens_q == nullptr && a.block_m == 192 &&
        a.m_blocks >= 1 && a.seq_q - (a.m_blocks - 1) * 192 <= 64) {
      FwdArgs whole = a;
      whole.m_blocks = a.m_blocks - 1;
      whole.num_tiles = whole.m_blocks * a.heads * a.batch;  // (0: a one-block sequence; no launch)
      FwdArgs tail = a;
      tail.num_tiles = a.heads * a.batch;
      // The tail launch as the whole one's programmatic dependent (kernel.cuh): its CTAs start on
      // the SMs the whole blocks' last round leaves, so that round is not split, and with more
      // tail tiles than SMs they walk from a counter (zeroed here, before the first launch, since
      // no stream operation may come between the two launches). A split forced by
      // TESSERA_CUDA_FORWARD_SPLIT_TAIL keeps the two launches one after the other (its merge
      // kernel would come between them).
      struct Counter {
        unsigned int* ptr = nullptr;
        cudaStream_t stream = nullptr;
        ~Counter() {
          if (ptr != nullptr && cudaFreeAsync(ptr, stream) != cudaSuccess) (void)cudaGetLastError();
        }
      } counter;
      counter.stream = static_cast<cudaStream_t>(p.stream);
      // Overlap where the tail tiles can fill the SMs the whole blocks' last round leaves (a tail
      // tile takes about a third of a whole one: at least half of those SMs covered, a guess the
      // A/B checks); with fewer, the whole blocks' split tail serves that round better.
      const int whole_grid = static_cast<int>(std::min<long long>(whole.num_tiles, num_sms));
      const int left = whole_grid > 0 ? whole.num_tiles % whole_grid : 0;
      const int idle = num_sms - (left > 0 ? left : whole_grid);  // SMs without a whole tile in the last round
      bool overlap = whole.num_tiles > 0 && dispatch::forward_split_tail_override().tiles <= 0 &&
                     2LL * tail.num_tiles >= idle;
      if (overlap && tail.num_tiles > num_sms) {
        int device = 0;
        TESSERA_CUDA_CHECK(cudaGetDevice(&device));
        const cudaMemPool_t pool = scratch_pool(device);
        const cudaError_t alloc = pool == nullptr ? cudaErrorNotSupported
                                                  : cudaMallocFromPoolAsync(reinterpret_cast<void**>(&counter.ptr),
                                                                            sizeof(unsigned int), pool, counter.stream);
        if (alloc == cudaErrorMemoryAllocation || alloc == cudaErrorNotSupported) {
          (void)cudaGetLastError();  // no counter: the two launches one after the other
          counter.ptr = nullptr;
          overlap = false;
        } else {
          TESSERA_CUDA_CHECK(alloc);
          TESSERA_CUDA_CHECK(cudaMemsetAsync(counter.ptr, 0, sizeof(unsigned int), counter.stream));
          tail.tile_counter = counter.ptr;
        }
      }
      whole.split_allowed = !overlap;
      tail.programmatic = overlap;
      launch_forward<T, 64, block_n_for(64, false), false>(whole, num_sms, p.stream);
      launch_forward<T, 64, block_n_for(64, false), false, 0, false, true>(tail, num_sms, p.stream);
      if (counter.ptr != nullptr) {
        unsigned int* done = counter.ptr;
        counter.ptr = nullptr;
        TESSERA_CUDA_CHECK(cudaFreeAsync(done, counter.stream));
      }
      return;
    }
  }
  if (masked) {
    if constexpr (D == 64) {
      if (a.block_m == 128) return launch_forward<T, 64, block_n_for(64, true), true, 2>(a, num_sms, p.stream);
    }
    if constexpr (D == 128) {  // long causal calls (kShortCausalMaxKeysD128)
      constexpr int kLongMasked = block_n_for(128, true, false, true);
      // (The three-warpgroup instance runs 128-key tiles only: 192 rows with 176 keys would take
      // the 128-row instance on a grid counted in 192-row blocks and leave rows unwritten.)
      if (a.block_m == 192 && block_n != block_n_for(128, true))
        throw Error(ErrorCode::unsupported, "q",
                    "sm90 forward: 192-row head_dim 128 tiles: expected 128-key K/V tiles, got " +
                        std::to_string(block_n) + " (tile_choice.h)");
      if (block_n == kLongMasked) return launch_forward<T, 128, kLongMasked, true>(a, num_sms, p.stream);
      // Short dense causal calls on three warpgroups (kThreeWarpgroupCausalMinKeysD128), and
      // every call under TESSERA_CUDA_D128_WARPGROUPS=3
      if (a.block_m == 192) return launch_forward<T, 128, block_n_for(128, true), true, 3>(a, num_sms, p.stream);
    }
    return launch_forward<T, D, block_n_for(D, true), true>(a, num_sms, p.stream);
  }
  constexpr int kShortTile = block_n_for(D, false), kLongTile = block_n_for(D, false, false, true);
  if (block_n == kLongTile) return launch_forward<T, D, kLongTile, false>(a, num_sms, p.stream);
  return launch_forward<T, D, kShortTile, false>(a, num_sms, p.stream);
}

// FP8: head_dim 128 and 256, K tiles of 128 keys; at 256, launches with V^T from the pass take
// the V^T-only instances (overlapped schedule, kernel_traits.cuh).
template <int D>
void launch_fp8_for_mask(const FwdArgs& a, const AttentionParams& p, bool masked, int num_sms) {
  if constexpr (D == 256) {
    if (a.vt_global) {
      if (masked) return launch_forward<__nv_fp8_e4m3, D, block_n_for(D, true, true), true, 0, true>(a, num_sms, p.stream);
      return launch_forward<__nv_fp8_e4m3, D, block_n_for(D, false, true), false, 0, true>(a, num_sms, p.stream);
    }
  }
  if (masked) return launch_forward<__nv_fp8_e4m3, D, block_n_for(D, true, true), true>(a, num_sms, p.stream);
  return launch_forward<__nv_fp8_e4m3, D, block_n_for(D, false, true), false>(a, num_sms, p.stream);
}

template <typename T>
void launch_for_head_dim(const FwdArgs& a, const AttentionParams& p, bool masked, int num_sms, int block_n,
                         bool tail_rows) {
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    if (p.head_dim == 128) return launch_fp8_for_mask<128>(a, p, masked, num_sms);
    if (p.head_dim == 256) return launch_fp8_for_mask<256>(a, p, masked, num_sms);
    throw Error(ErrorCode::unsupported, "q",
                "sm90 fp8 forward: head_dim: expected 128 or 256, got " + std::to_string(p.head_dim));
  }
  switch (p.head_dim) {
    case 64: return launch_for_mask<T, 64>(a, p, masked, num_sms, block_n, tail_rows);
    case 128: return launch_for_mask<T, 128>(a, p, masked, num_sms, block_n, tail_rows);
    case 256: return launch_for_mask<T, 256>(a, p, masked, num_sms, block_n, tail_rows);
    default: break;
  }
  throw Error(ErrorCode::unsupported, "q",
              "sm90 forward: head_dim: expected 64, 128 or 256, got " + std::to_string(p.head_dim));
}

}  // namespace

bool forward_applicable(const AttentionParams& p, std::string* why) {
  if (dispatch::forward_path_override() == dispatch::ForwardPath::portable)
    return fail(why, "TESSERA_CUDA_FORWARD=portable selects the sm80 path");
  if (p.dtype == DType::e4m3) {
    if (p.head_dim != 128 && p.head_dim != 256) return fail(why, "head_dim: 128 or 256 for fp8");
  } else {
    if (p.dtype != DType::f16 && p.dtype != DType::bf16) return fail(why, "dtype: f16, bf16 or fp8_e4m3 only");
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return fail(why, "head_dim: 64, 128 or 256 only");
  }
  DeviceLimits dev;
  std::string unreadable;
  if (!read_device_limits(p.device.index, &dev, &unreadable)) return fail(why, unreadable);
  const int major = dev.major, minor = dev.minor, optin = dev.smem_optin;
  // sm_90a code runs on compute capability 9.0 only.
  if (major != 9 || minor != 0) return fail(why, "device: compute capability 9.0 only");
  // FP8 d256: the V^T-only instance as well (kernel_traits.cuh), whichever a call takes.
  const int smem = p.dtype == DType::e4m3
                       ? (p.head_dim == 128 ? FwdTraits<128, 128, 1>::kSmemBytes
                                            : std::max(FwdTraits<256, 128, 1>::kSmemBytes,
                                                       FwdTraits<256, 128, 1, 0, true>::kSmemBytes))
                       : smem_bytes(p.head_dim);
  if (optin < smem) return fail(why, "device: not enough opt-in shared memory");
  if (why != nullptr) why->clear();
  return true;
}

bool run_forward(const AttentionParams& p) {
  if (p.batch == 0 || p.seq_q == 0 || p.heads_q == 0) return true;  // nothing to write
  const bool ragged = p.ragged();
  const bool fp8 = p.dtype == DType::e4m3;
  const CUtensorMapDataType type = fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : p.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const std::int64_t rows_q = ragged ? p.total_q : p.seq_q;
  const std::int64_t rows_k = ragged ? p.total_k : p.seq_k;
  const int seqs = ragged ? 1 : p.batch;
  const bool masked = p.mask.causal || p.mask.window_left >= 0 || p.mask.window_right >= 0;
  const std::int64_t mean_keys = ragged ? (p.batch > 0 ? p.total_k / p.batch : 0) : p.seq_k;
  // The instance (tile_choice.h): tile rows, K/V tile keys, masked or not. The knobs
  // (TESSERA_CUDA_D64_WARPGROUPS, TESSERA_CUDA_D128_WARPGROUPS, TESSERA_CUDA_FORWARD_KEY_TILE,
  // TESSERA_CUDA_FORWARD_TAIL_ROWS) are read, and checked, on every call.
  const bool windowed = p.mask.window_left >= 0 || p.mask.window_right >= 0;
  const int d64_warpgroups = dispatch::d64_warpgroups_override();
  const int d128_warpgroups = dispatch::d128_warpgroups_override();
  const int warpgroups = p.head_dim == 64 ? d64_warpgroups : p.head_dim == 128 ? d128_warpgroups : 0;
  const FwdTileChoice tiles_of_call = forward_tile_choice(p.head_dim, fp8, masked, mean_keys, warpgroups,
                                                          dispatch::forward_key_tile_override(), windowed, ragged);
  const bool masked_instance = tiles_of_call.masked_instance;
  const int block_m = tiles_of_call.block_m;
  const int block_n = tiles_of_call.block_n;
  const std::uint32_t box_n = static_cast<std::uint32_t>(block_n);
  const bool tail_rows = dispatch::forward_tail_rows_override();
  FwdArgs a;
  try {
    // Q boxes of one warpgroup's rows (kQBoxRows, kernel_traits.cuh), the tile's block_m rows in all.
    a.map_q = tile_map(type, p.q, ragged, rows_q, p.heads_q, seqs, p.head_dim, kQBoxRows, p.q.ptr);
    a.map_k = tile_map(type, p.k, ragged, rows_k, p.heads_kv, seqs, p.head_dim, box_n, p.q.ptr);
    a.map_v = tile_map(type, p.v, ragged, rows_k, p.heads_kv, seqs, p.head_dim, box_n, p.q.ptr);
    if (!ragged && !fp8) a.map_o = tile_map(type, p.o, ragged, rows_q, p.heads_q, seqs, p.head_dim, 64, p.q.ptr);
    else std::memset(&a.map_o, 0, sizeof(a.map_o));
  } catch (const Error&) {
    return false;  // strides the copy engine cannot describe: the portable path takes it
  }
  a.o = p.o.ptr;
  a.o_batch = ragged ? 0 : p.o.batch;
  a.o_row = p.o.row;
  a.o_head = p.o.head;
  a.lse = p.lse.ptr;
  a.lse_batch = ragged ? 0 : p.lse.batch;
  a.lse_head = p.lse.head;
  a.cu_seqlens_q = p.cu_seqlens_q;
  a.cu_seqlens_k = p.cu_seqlens_k;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.group = p.heads_q / p.heads_kv;
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

  a.q_descale = {p.q_descale.ptr, p.q_descale.batch, p.q_descale.head};
  a.k_descale = {p.k_descale.ptr, p.k_descale.batch, p.k_descale.head};
  a.v_descale = {p.v_descale.ptr, p.v_descale.batch, p.v_descale.head};
  // The kernel numbers tiles in int and steps a CTA's tile index by the grid size (up to the
  // tile count): tile spaces past 2^30 (ragged batches size theirs by a bound on the longest
  // sequence) go to the portable path, whose 3D grid has no such limit.
  // Ragged: blocks of the longest sequence x sequences, or virtual blocks over all sequences
  // (math/ragged_tiles.h), whichever is fewer; with device cu_seqlens seq_q is only the total
  // token count, and the virtual numbering avoids a batch-times-too-large grid.
  long long m_blocks = (static_cast<long long>(p.seq_q) + block_m - 1) / block_m;
  long long tiles = m_blocks * p.heads_q * p.batch;
  const long long virtual_blocks = ragged ? math::ragged_virtual_blocks(p.total_q, p.batch, block_m) : 0;
  a.ragged_virtual = ragged && virtual_blocks * p.heads_q < tiles;
  if (a.ragged_virtual) {
    m_blocks = virtual_blocks;
    tiles = virtual_blocks * p.heads_q;
  }
  // (tile + grid stays an int: both are <= 2^30; a split tail adds at most 7 x the SMs (the
  // rule) or 7 x 2^20 (forced) virtual tiles, launch_template.cuh, and next_tile sums in 64 bits)
  if (tiles > 0x3fffffffLL) return false;
  a.m_blocks = static_cast<int>(m_blocks);
  a.block_m = block_m;
  a.heads = p.heads_q;
  a.batch = p.batch;
  a.num_tiles = static_cast<int>(tiles);
  a.mean_keys = mean_keys;

  DeviceScope scope(p.device.index);
  int num_sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, p.device.index));
  if (fp8) {
    // V^T once per call into a workspace (fp8_v_transpose.h) where that pays (fp8_v_transpose_plan.h)
    // and can be: dense, memory in the scratch pool, a describable map; else the kernel's warps
    // transpose every tile.
    // The workspace goes back to the pool in stream order after the launch (a failed free is
    // reported there), or here if the launch throws (its error is the one to report).
    struct Workspace {
      void* ptr = nullptr;
      cudaStream_t stream = nullptr;
      ~Workspace() {
        if (ptr != nullptr && cudaFreeAsync(ptr, stream) != cudaSuccess) (void)cudaGetLastError();
      }
    } vt;
    vt.stream = static_cast<cudaStream_t>(p.stream);
    const dispatch::Fp8VTranspose where = dispatch::fp8_v_transpose_override();
    const bool pass = where == dispatch::Fp8VTranspose::global ||
                      (where == dispatch::Fp8VTranspose::automatic &&
                       fp8_v_transpose_pays(fp8_query_tiles_per_kv_tile(a.m_blocks, block_m, box_n, p.mask.causal,
                                                                        p.mask.window_left, p.mask.window_right),
                                            a.group, p.head_dim));
    if (pass && !ragged && p.seq_k > 0 &&
        fp8_v_transpose_supported(p.v.ptr, p.v.row, p.v.head, p.v.batch, p.seq_k, p.heads_kv, p.batch, p.head_dim)) {
      const std::int64_t pitch = fp8_vt_pitch(p.seq_k);
      const std::size_t bytes = static_cast<std::size_t>(p.batch) * p.heads_kv * p.head_dim * pitch;
      const cudaMemPool_t pool = scratch_pool(p.device.index);
      const cudaError_t alloc = pool == nullptr ? cudaErrorNotSupported
                                                : cudaMallocFromPoolAsync(&vt.ptr, bytes, pool, vt.stream);
      if (alloc == cudaErrorMemoryAllocation || alloc == cudaErrorNotSupported) {
        (void)cudaGetLastError();  // no memory or no pool: the kernel transposes
        vt.ptr = nullptr;
      } else {
        TESSERA_CUDA_CHECK(alloc);
        const std::uint64_t dims[4] = {static_cast<std::uint64_t>(pitch), static_cast<std::uint64_t>(p.head_dim),
                                       static_cast<std::uint64_t>(p.heads_kv), static_cast<std::uint64_t>(p.batch)};
        const std::uint64_t strides[3] = {static_cast<std::uint64_t>(pitch), static_cast<std::uint64_t>(pitch) * p.head_dim,
                                          static_cast<std::uint64_t>(pitch) * p.head_dim * p.heads_kv};
        const std::uint32_t box[4] = {128, static_cast<std::uint32_t>(p.head_dim), 1, 1};
        try {
          a.map_vt = make_tensor_map_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, vt.ptr, dims, strides, box);
          a.vt_global = true;
        } catch (const Error&) {
          a.vt_global = false;  // a workspace the copy engine cannot describe: the kernel transposes
        }
        if (a.vt_global)
          TESSERA_CUDA_CHECK(launch_fp8_v_transpose(p.v.ptr, p.v.row, p.v.head, p.v.batch, p.seq_k, p.heads_kv, p.batch,
                                                    p.head_dim, vt.ptr, vt.stream));
      }
    }
    launch_for_head_dim<__nv_fp8_e4m3>(a, p, masked, num_sms, block_n, tail_rows);
    if (vt.ptr != nullptr) {
      void* ws = vt.ptr;
      vt.ptr = nullptr;
      TESSERA_CUDA_CHECK(cudaFreeAsync(ws, vt.stream));
    }
  } else if (p.dtype == DType::bf16) launch_for_head_dim<__nv_bfloat16>(a, p, masked_instance, num_sms, block_n, tail_rows);
  else launch_for_head_dim<__half>(a, p, masked_instance, num_sms, block_n, tail_rows);
  return true;
}

}  // namespace tessera::cuda::sm90
