// The portable backward's tail pieces (docs/perf/backward_sm80.md, "Tail pieces"): which KV
// tiles of a dense non-causal problem leave the main grid and run as query-share pieces.
// Host-only and free of CUDA so that the CPU tests check the arithmetic; backward_entry.cu
// gathers the device facts and structural conditions and launches what this returns.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessera::cuda::backward {

struct TailPlan {
  int pieces = 0;           // 0: no tail pieces
  int main_tiles = 0;       // KV tiles per (sequence, kv head) the main grid keeps
  std::int64_t tail0 = 0;   // first KV row of the tail
  std::int64_t tail_rows = 0;
  std::int64_t share = 0;   // query rows per piece
};

struct TailInputs {
  int forced = -1;          // TESSERA_CUDA_BACKWARD_TAIL_PIECES: -1 automatic, 0 off, k >= 2 forced
  bool eligible = false;    // the structural conditions (dense, non-causal, d128 default layout, ...)
  bool device_ok = false;   // compute capability 9.x and the kernel carries sm_90 code
  std::int64_t seq_q = 0, seq_k = 0;
  std::int64_t block_q = 64, block_kv = 128;
  std::int64_t heads_kv = 0, batch = 0;
  std::int64_t sms = 1;
};

// Automatic: where a CTA walks >= 128 query tiles and the last wave of the plain grid holds at
// least a quarter of the SMs, 4 pieces of the last ceil(last wave / (kv heads x sequences)) KV
// tiles. Forced k: k pieces of the last quarter of the KV tiles. Either way only where the
// pieces divide seq_q and at least one KV tile stays in the main grid.
inline TailPlan plan_tail_pieces(const TailInputs& in) {
  TailPlan tp;
  if (in.forced == 0 || !in.eligible || !in.device_ok || in.seq_q <= 0 || in.block_kv <= 0 || in.block_q <= 0)
    return tp;
  const std::int64_t kv_tiles = (in.seq_k + in.block_kv - 1) / in.block_kv;
  if (kv_tiles < 2) return tp;
  const int pieces = in.forced > 0 ? in.forced : 4;
  const std::int64_t per_tile = in.heads_kv * in.batch;  // CTAs per KV tile index
  if (per_tile <= 0 || in.sms <= 0) return tp;
  const std::int64_t last_wave = (kv_tiles * per_tile) % in.sms;
  const std::int64_t q_tiles = (in.seq_q + in.block_q - 1) / in.block_q;
  const bool worth = in.forced > 0 || (q_tiles >= 128 && last_wave >= in.sms / 4);
  if (!worth || in.seq_q % pieces != 0) return tp;
  std::int64_t t = in.forced > 0 ? std::max<std::int64_t>(1, kv_tiles / 4) : (last_wave + per_tile - 1) / per_tile;
  t = std::min<std::int64_t>(t, kv_tiles - 1);
  tp.pieces = pieces;
  tp.main_tiles = static_cast<int>(kv_tiles - t);
  tp.tail0 = static_cast<std::int64_t>(tp.main_tiles) * in.block_kv;
  tp.tail_rows = in.seq_k - tp.tail0;
  tp.share = in.seq_q / pieces;
  return tp;
}

}  // namespace tessera::cuda::backward
