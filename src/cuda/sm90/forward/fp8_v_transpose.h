// The FP8 forward's V^T pass: V (e4m3, [batch][seq_k][kv head][head_dim] under any strides) ->
// V^T in a workspace, [batch][kv head][head_dim][pitch] bytes, keys in the order the kernel's
// P fragments use (fp8_operands.cuh, pack_weights_e4m3: within each 32 keys, logical 4q + i holds key
// 2q + (i & 1) + 8 (i >> 1), and 16 + that for the second 16), zero past seq_k. The forward's
// producer then loads each K/V tile's V^T by TMA straight into the layout the P V wgmma reads,
// instead of warps transposing every tile in shared memory: one pass per call instead of one
// per (tile, K/V tile) pair (measured, bench/RESULTS.md, seventeenth session: the in-kernel
// transpose costs 4-11 % of the FP8 forward's time under the H200's power cap).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda::sm90 {

// Keys per V^T row, rounded up to whole 128-key tiles (the TMA box; the pass zeroes the keys
// past seq_k, so a tile never reads past the row).
inline std::int64_t fp8_vt_pitch(std::int64_t seq_k) { return (seq_k + 127) / 128 * 128; }

// Whether the pass can take this V: 128 or 256 columns, heads and sequences within the grid's
// y / z limits, and the base and every stride in use (of a dimension with more than one entry) a
// multiple of 16 bytes (which V's own tensor map already requires: a check that costs nothing).
bool fp8_v_transpose_supported(const void* v, std::int64_t row, std::int64_t head, std::int64_t batch, int seq_k,
                               int heads_kv, int batch_size, int head_dim);

// Enqueues the pass on `stream`. Strides in bytes (= elements); vt holds
// batch x heads_kv x head_dim x fp8_vt_pitch(seq_k) bytes. head_dim 128 or 256.
cudaError_t launch_fp8_v_transpose(const void* v, std::int64_t row, std::int64_t head, std::int64_t batch, int seq_k,
                                   int heads_kv, int batch_size, int head_dim, void* vt, cudaStream_t stream);

}  // namespace tessera::cuda::sm90
