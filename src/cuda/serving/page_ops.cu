// Paged KV cache maintenance on CUDA, read through the CSR page table:
//  - append: every new token of the whole batch written into its page in one launch;
//  - copy_pages: whole pages duplicated (prefix sharing, copy-on-write).
// Both move raw elements (no conversion), so one kernel per element width serves all dtypes.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/cuda_backend.h"

namespace tessera::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Request owning packed new-token row t: the last b with append_indptr[b] <= t.
__device__ __forceinline__ int find_request(const std::int32_t* indptr, int batch, std::int64_t t) {
  int lo = 0, hi = batch;  // invariant: indptr[lo] <= t < indptr[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (indptr[mid] <= t) lo = mid; else hi = mid;
  }
  return lo;
}

template <typename Word>
__global__ void append_kernel(AppendParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + warp;  // token * heads + head
  if (row >= p.total_new * p.cache.heads_kv) return;
  const std::int64_t t = row / p.cache.heads_kv;
  const int h = static_cast<int>(row % p.cache.heads_kv);
  const int b = find_request(p.append_indptr, p.table.batch, t);
  const std::int32_t first_page = p.table.indptr[b];
  const std::int32_t n_pages = p.table.indptr[b + 1] - first_page;
  const std::int64_t kv_len = n_pages == 0 ? 0 : std::int64_t(n_pages - 1) * p.cache.page_size + p.table.last_page_len[b];
  const std::int64_t n_new = p.append_indptr[b + 1] - p.append_indptr[b];
  const std::int64_t pos = kv_len - n_new + (t - p.append_indptr[b]);
  const std::int32_t page = p.table.indices[first_page + pos / p.cache.page_size];
  const std::int64_t slot = pos % p.cache.page_size;
  const Word* src_k = static_cast<const Word*>(p.new_k.ptr) + t * p.new_k.row + h * p.new_k.head;
  const Word* src_v = static_cast<const Word*>(p.new_v.ptr) + t * p.new_v.row + h * p.new_v.head;
  Word* dst_k = static_cast<Word*>(p.cache.k) + page * p.cache.k_page + slot * p.cache.k_token + h * p.cache.k_head;
  Word* dst_v = static_cast<Word*>(p.cache.v) + page * p.cache.v_page + slot * p.cache.v_token + h * p.cache.v_head;
  for (int d = lane; d < p.cache.head_dim; d += 32) {
    dst_k[d] = src_k[d];
    dst_v[d] = src_v[d];
  }
}

// One block per (pair, token of the page); threads stride over heads x head_dim.
template <typename Word>
__global__ void copy_pages_kernel(CopyPagesParams p) {
  const std::int64_t pair = blockIdx.x / p.cache.page_size;
  const int slot = static_cast<int>(blockIdx.x % p.cache.page_size);
  const std::int64_t src = p.src[pair], dst = p.dst[pair];
  const int n = p.cache.heads_kv * p.cache.head_dim;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int h = i / p.cache.head_dim, d = i % p.cache.head_dim;
    const std::int64_t ko = slot * p.cache.k_token + h * p.cache.k_head + d;
    const std::int64_t vo = slot * p.cache.v_token + h * p.cache.v_head + d;
    static_cast<Word*>(p.cache.k)[dst * p.cache.k_page + ko] = static_cast<const Word*>(p.cache.k)[src * p.cache.k_page + ko];
    static_cast<Word*>(p.cache.v)[dst * p.cache.v_page + vo] = static_cast<const Word*>(p.cache.v)[src * p.cache.v_page + vo];
  }
}

template <template <typename> class Kernel, typename Params>
void launch_by_width(std::size_t width, dim3 grid, dim3 block, cudaStream_t stream, const Params& p) {
  switch (width) {
    case 1: Kernel<std::uint8_t>::launch(grid, block, stream, p); break;
    case 2: Kernel<std::uint16_t>::launch(grid, block, stream, p); break;
    default: Kernel<std::uint32_t>::launch(grid, block, stream, p); break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename Word>
struct AppendLaunch {
  static void launch(dim3 g, dim3 b, cudaStream_t s, const AppendParams& p) { append_kernel<Word><<<g, b, 0, s>>>(p); }
};
template <typename Word>
struct CopyLaunch {
  static void launch(dim3 g, dim3 b, cudaStream_t s, const CopyPagesParams& p) { copy_pages_kernel<Word><<<g, b, 0, s>>>(p); }
};

}  // namespace

void append_paged_kv(const AppendParams& p) {
  const std::int64_t rows = p.total_new * p.cache.heads_kv;
  if (rows == 0) return;
  const std::int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_by_width<AppendLaunch>(dtype_size(p.cache.dtype), dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpsPerBlock),
                                static_cast<cudaStream_t>(p.stream), p);
}

void copy_pages(const CopyPagesParams& p) {
  const std::int64_t blocks = p.count * p.cache.page_size;
  if (blocks == 0) return;
  launch_by_width<CopyLaunch>(dtype_size(p.cache.dtype), dim3(static_cast<unsigned>(blocks)), dim3(256),
                              static_cast<cudaStream_t>(p.stream), p);
}

}  // namespace tessera::cuda
