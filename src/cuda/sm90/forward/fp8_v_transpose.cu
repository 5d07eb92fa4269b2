// The FP8 forward's V^T pass (fp8_v_transpose.h). One CTA per (128-key tile, kv head, sequence).
// Phase 1: a thread takes units of 16 keys x 4 columns: 16 coalesced 4-byte loads (a warp reads
// 32 consecutive words of one key row), a byte transpose in registers, and four 16-byte rows into
// the CTA's V^T tile in shared memory. Phase 2: the tile goes out as whole 128-byte rows (8 lanes
// per row), so every store instruction writes 4 full lines (the first version stored 16 bytes to
// each of 32 rows per instruction and ran at ~40 % of the copy ceiling).
// Shared tile: row n (column n of V), 16-byte chunk c at chunk c ^ ((n / 4) % 8): phase 1's
// quarter-warp (8 lanes, words w .. w + 7, rows 4 w + j) then hits 8 distinct chunks, and so does
// phase 2's (one row, 8 chunks). tests/python/test_fp8_vt_pass_model.py models both phases.
#include "cuda/sm90/forward/fp8_v_transpose.h"

#include <cstdint>

namespace tessera::cuda::sm90 {
namespace {

constexpr int kThreads = 256;

// One output word: byte j of the four input words a, b, c, d (keys 2m, 2m + 1, 2m + 8, 2m + 9,
// logical keys 4m .. 4m + 3), for columns j = 0 .. 3 of the four words.
__device__ __forceinline__ void transpose_quad(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d,
                                               std::uint32_t (&out)[4]) {
  const std::uint32_t ab01 = __byte_perm(a, b, 0x5140), cd01 = __byte_perm(c, d, 0x5140);  // a0 b0 a1 b1
  const std::uint32_t ab23 = __byte_perm(a, b, 0x7362), cd23 = __byte_perm(c, d, 0x7362);  // a2 b2 a3 b3
  out[0] = __byte_perm(ab01, cd01, 0x5410);
  out[1] = __byte_perm(ab01, cd01, 0x7632);
  out[2] = __byte_perm(ab23, cd23, 0x5410);
  out[3] = __byte_perm(ab23, cd23, 0x7632);
}

template <int D>
__global__ void __launch_bounds__(kThreads) fp8_v_transpose_kernel(const std::uint8_t* __restrict__ v, std::int64_t row,
                                                                    std::int64_t head, std::int64_t batch, int seq_k,
                                                                    std::int64_t pitch, int heads_kv,
                                                                    std::uint8_t* __restrict__ vt) {
  constexpr int kWords = D / 4;               // 4-column words per key row
  constexpr int kUnits = kWords * (128 / 16);  // (word, 16-key block) units per 128-key tile
  // Whole loops without guards, and w % 8 spanning 8 swizzle residues within a quarter-warp.
  static_assert(D == 128 || D == 256, "kUnits and D x 8 multiples of the block size");
  __shared__ __align__(16) std::uint8_t tile[D * 128];
  const int key0 = blockIdx.x * 128, h = blockIdx.y, b = blockIdx.z;
  const std::uint8_t* src = v + b * batch + h * head;
  std::uint8_t* dst = vt + (static_cast<std::int64_t>(b) * heads_kv + h) * D * pitch + key0;
#pragma unroll
  for (int u0 = 0; u0 < kUnits; u0 += kThreads) {
    const int u = u0 + threadIdx.x;
    const int w = u % kWords, kb = u / kWords;  // a warp: consecutive words of one 16-key block
    const int k16 = key0 + 16 * kb;
    std::uint32_t in[16];
#pragma unroll
    for (int k = 0; k < 16; ++k)
      in[k] = k16 + k < seq_k ? *reinterpret_cast<const std::uint32_t*>(src + (k16 + k) * row + 4 * w) : 0u;
    // Rows 4 w + j, words m = 0 .. 3 of chunk kb (logical keys 4 m .. 4 m + 3 of the 16 = keys
    // 2m, 2m+1, 2m+8, 2m+9).
    std::uint32_t rows[4][4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      std::uint32_t q[4];
      transpose_quad(in[2 * m], in[2 * m + 1], in[2 * m + 8], in[2 * m + 9], q);
#pragma unroll
      for (int j = 0; j < 4; ++j) rows[j][m] = q[j];
    }
    const int chunk = kb ^ (w % 8);  // rows 4 w .. 4 w + 3 share (row / 4) % 8 = w % 8
#pragma unroll
    for (int j = 0; j < 4; ++j)
      *reinterpret_cast<uint4*>(tile + (4 * w + j) * 128 + 16 * chunk) = make_uint4(rows[j][0], rows[j][1], rows[j][2], rows[j][3]);
  }
  __syncthreads();
#pragma unroll
  for (int i0 = 0; i0 < D * 8; i0 += kThreads) {
    const int i = i0 + threadIdx.x;
    const int n = i / 8, c = i % 8;  // row n, logical chunk c (keys 16 c .. 16 c + 15)
    const uint4 x = *reinterpret_cast<const uint4*>(tile + n * 128 + 16 * (c ^ ((n / 4) % 8)));
    *reinterpret_cast<uint4*>(dst + n * pitch + 16 * c) = x;
  }
}

bool aligned16(std::int64_t x) { return x % 16 == 0; }

}  // namespace

bool fp8_v_transpose_supported(const void* v, std::int64_t row, std::int64_t head, std::int64_t batch, int seq_k,
                               int heads_kv, int batch_size, int head_dim) {
  if (head_dim != 128 && head_dim != 256) return false;
  if (v == nullptr || reinterpret_cast<std::uintptr_t>(v) % 16 != 0) return false;
  if (seq_k > 1 && !aligned16(row)) return false;
  if (heads_kv > 1 && !aligned16(head)) return false;
  if (batch_size > 1 && !aligned16(batch)) return false;
  return heads_kv <= 65535 && batch_size <= 65535;  // grid y / z
}

cudaError_t launch_fp8_v_transpose(const void* v, std::int64_t row, std::int64_t head, std::int64_t batch, int seq_k,
                                   int heads_kv, int batch_size, int head_dim, void* vt, cudaStream_t stream) {
  const std::int64_t pitch = fp8_vt_pitch(seq_k);
  if (pitch == 0 || heads_kv == 0 || batch_size == 0) return cudaSuccess;  // no keys: nothing to load
  const dim3 grid(static_cast<unsigned>(pitch / 128), static_cast<unsigned>(heads_kv), static_cast<unsigned>(batch_size));
  const auto* in = static_cast<const std::uint8_t*>(v);
  auto* out = static_cast<std::uint8_t*>(vt);
  if (head_dim == 128)
    fp8_v_transpose_kernel<128><<<grid, kThreads, 0, stream>>>(in, row, head, batch, seq_k, pitch, heads_kv, out);
  else
    fp8_v_transpose_kernel<256><<<grid, kThreads, 0, stream>>>(in, row, head, batch, seq_k, pitch, heads_kv, out);
  return cudaGetLastError();
}

}  // namespace tessera::cuda::sm90
