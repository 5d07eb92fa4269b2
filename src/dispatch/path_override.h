// Developer overrides of the CUDA kernel path, read from the environment in one place:
//   TESSERA_CUDA_FORWARD  = portable                                  (the sm80 kernels on Hopper)
//   TESSERA_CUDA_BACKWARD = portable | portable-compact | portable-compact2
//                           (the sm80 main kernel; the compact ones also force its compact
//                           head_dim 128 layouts, see docs/TESTING.md)
//   TESSERA_CUDA_BATCH    = portable | sm90 | sm90-split | sm90-coresident  (BatchAttention's
//                           prefill units: on compute capability 9.0 at head_dim 64 and 128 they
//                           run on the sm90 WGMMA kernel; portable keeps the mma.sync kernels
//                           (docs/perf/batch_prefill_sm90.md). Default = sm90-split: that kernel on
//                           num_sms - k SMs and the decode-only kernel on the other k at the same
//                           time (docs/perf/mixed_batch.md, "SM split"), k from the host model or
//                           TESSERA_CUDA_BATCH_DECODE_SMS (a measurement knob). sm90: the two one
//                           after the other. sm90-coresident: at head_dim 128 a register- and
//                           smem-slim instance of that kernel, with the decode-only kernel
//                           launched as its programmatic dependent so that one decode CTA shares
//                           each SM with a prefill CTA; elsewhere the same as sm90)
//   Measurement and test knobs, each described at its parser below: TESSERA_CUDA_BATCH_DECODE_SMS,
//   TESSERA_CUDA_BATCH_DECODE_CLAIMS, TESSERA_CUDA_BATCH_PDL, TESSERA_CUDA_BACKWARD_TAIL_PIECES,
//   TESSERA_CUDA_FORWARD_SPLIT_TAIL, TESSERA_CUDA_FP8_V_TRANSPOSE, TESSERA_CUDA_D64_WARPGROUPS,
//   TESSERA_CUDA_D128_WARPGROUPS.
// Unset or empty: the default path. Any other value throws tessera::Error (invalid_argument)
// naming the variable, the accepted values and the value found, before anything is launched:
// a misspelt override must not silently run the default path.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/error.h"

// Header-only: the CUDA launchers (libtessera_cuda) read it, and the host library comes before
// them on the link line.
namespace tessera::dispatch {

enum class ForwardPath { automatic, portable };
enum class BackwardPath { automatic, portable, portable_compact, portable_compact2 };
enum class BatchPath { automatic, sm90, portable, sm90_coresident, sm90_split };

[[noreturn]] inline void bad_path_override(const char* variable, const char* accepted, const char* value) {
  throw Error(ErrorCode::invalid_argument, variable,
              std::string(variable) + ": expected unset or one of " + accepted + ", got '" + value + "'");
}

// The parsers (testable without touching the environment); `value` may be null.
inline ForwardPath parse_forward_path(const char* value) {
  if (value == nullptr || *value == '\0') return ForwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return ForwardPath::portable;
  bad_path_override("TESSERA_CUDA_FORWARD", "'portable'", value);
}

inline BackwardPath parse_backward_path(const char* value) {
  if (value == nullptr || *value == '\0') return BackwardPath::automatic;
  if (std::strcmp(value, "portable") == 0) return BackwardPath::portable;
  if (std::strcmp(value, "portable-compact") == 0) return BackwardPath::portable_compact;
  if (std::strcmp(value, "portable-compact2") == 0) return BackwardPath::portable_compact2;
  bad_path_override("TESSERA_CUDA_BACKWARD", "'portable', 'portable-compact', 'portable-compact2'", value);
}

inline BatchPath parse_batch_path(const char* value) {
  if (value == nullptr || *value == '\0') return BatchPath::automatic;
  if (std::strcmp(value, "sm90") == 0) return BatchPath::sm90;
  if (std::strcmp(value, "portable") == 0) return BatchPath::portable;
  if (std::strcmp(value, "sm90-coresident") == 0) return BatchPath::sm90_coresident;
  if (std::strcmp(value, "sm90-split") == 0) return BatchPath::sm90_split;
  bad_path_override("TESSERA_CUDA_BATCH", "'portable', 'sm90', 'sm90-coresident', 'sm90-split'", value);
}

// TESSERA_CUDA_BATCH_DECODE_SMS (a measurement knob of the default / sm90-split batch path): the
// SMs given to decode; unset or empty: -1 (the host model picks). Anything but a whole number
// in [0, 4096] throws, naming the variable.
inline int parse_batch_decode_sms(const char* value) {
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > 4096)
    throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_BATCH_DECODE_SMS",
                std::string("TESSERA_CUDA_BATCH_DECODE_SMS: expected a whole number of SMs in [0, 4096] or unset, got '") +
                    value + "'");
  return static_cast<int>(v);
}

// TESSERA_CUDA_BATCH_PDL (a measurement knob): unset, empty or "1": where a run opens with the
// decode-only instance launched alone (src/cuda/batch/launch.cu, launch_decode_only: decode-only
// plans on the default and co-resident paths, decode-only layouts, head_dim 256), it goes out as
// the programmatic dependent of the stream's kernel before it (it waits for that grid before
// touching memory: the launch, not the work, overlaps the previous grid's end); "0": a plain
// launch. Anything else throws, naming the variable.
inline bool parse_batch_pdl(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_BATCH_PDL",
              std::string("TESSERA_CUDA_BATCH_PDL: expected 0, 1 or unset, got '") + value + "'");
}

// TESSERA_CUDA_BATCH_DECODE_CLAIMS (a measurement knob): 1 runs batches of decode-shaped items
// only with CTAs that take items by claims (the SM split's decode side) instead of the static
// walk; unset, empty or 0: the static walk. Anything else throws, naming the variable.
inline bool parse_batch_decode_claims(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") == 0) return true;
  throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_BATCH_DECODE_CLAIMS",
              std::string("TESSERA_CUDA_BATCH_DECODE_CLAIMS: expected 0, 1 or unset, got '") + value + "'");
}

// TESSERA_CUDA_BACKWARD_TAIL_PIECES (a measurement and test knob of the portable backward's tail
// pieces, backward_entry.cu): unset or empty: -1 (the host rule decides); 0: never; 2..16: that
// many pieces wherever the kernel allows them, whatever the shape. Anything else throws, naming
// the variable.
inline int parse_backward_tail_pieces(const char* value) {
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || !(v == 0 || (v >= 2 && v <= 16)))
    throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_BACKWARD_TAIL_PIECES",
                std::string("TESSERA_CUDA_BACKWARD_TAIL_PIECES: expected 0 (never), a number of pieces in [2, 16] or "
                            "unset, got '") +
                    value + "'");
  return static_cast<int>(v);
}

// TESSERA_CUDA_FORWARD_SPLIT_TAIL (a measurement and test knob of the sm90 forward's split tail,
// src/cuda/sm90/forward/split_tail_plan.h): unset or empty: tiles -1 (the host rule decides); 0:
// never; "n": the last n tiles, n in [1, 2^20], of any dense unmasked launch in two parts;
// "n:k": in k parts, k in [2, 8] (masked and ragged launches never split, nor head_dim 64's
// tail-row launch, whose last blocks' tiles it never reaches; the whole blocks' launch of a
// head_dim 64 tail-row pair does not split by the rule where the tail launch overlaps its last
// round (launch.cu), while n >= 1 always splits it and keeps the two launches one after the
// other). Anything else throws.
struct ForwardSplitTail {
  int tiles = -1;
  int parts = 2;
};
inline ForwardSplitTail parse_forward_split_tail(const char* value) {
  if (value == nullptr || *value == '\0') return {};
  auto bad = [&]() {
    return Error(ErrorCode::invalid_argument, "TESSERA_CUDA_FORWARD_SPLIT_TAIL",
                 std::string("TESSERA_CUDA_FORWARD_SPLIT_TAIL: expected 0 (never), a number of tiles in [1, 1048576], "
                             "optionally ':' and a number of parts in [2, 8], or unset, got '") +
                     value + "'");
  };
  if (*value < '0' || *value > '9') throw bad();  // no sign, no space
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || v < 0 || v > (1L << 20) || (*end != '\0' && *end != ':')) throw bad();
  ForwardSplitTail r;
  r.tiles = static_cast<int>(v);
  if (*end == ':') {
    const char* p = end + 1;
    if (v == 0 || *p < '0' || *p > '9') throw bad();
    const long k = std::strtol(p, &end, 10);
    if (*end != '\0' || k < 2 || k > 8) throw bad();
    r.parts = static_cast<int>(k);
  }
  return r;
}

// TESSERA_CUDA_FP8_V_TRANSPOSE (a measurement and test knob of the FP8 forward,
// src/cuda/sm90/forward/fp8_v_transpose.h): where V^T, the second GEMM's K-major operand, is made.
// Unset or empty: the host rule (fp8_v_transpose_plan.h) picks; "global": once per call by a pass
// into a workspace that the kernel's producer loads by TMA, wherever the pass can run (dense
// calls with a 16-byte aligned V and a workspace); "kernel": by warps of the forward kernel for
// every K/V tile it loads (ragged calls always). Anything else throws.
enum class Fp8VTranspose { automatic, global, kernel };
inline Fp8VTranspose parse_fp8_v_transpose(const char* value) {
  if (value == nullptr || *value == '\0') return Fp8VTranspose::automatic;
  if (std::strcmp(value, "global") == 0) return Fp8VTranspose::global;
  if (std::strcmp(value, "kernel") == 0) return Fp8VTranspose::kernel;
  throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_FP8_V_TRANSPOSE",
              std::string("TESSERA_CUDA_FP8_V_TRANSPOSE: expected 'global', 'kernel' or unset, got '") + value + "'");
}

// The consumer-warpgroup knobs of the sm90 forward (measurement knobs, fp16 / bf16; the choice
// is src/cuda/sm90/forward/tile_choice.h's): unset or empty: 0 (the host rule); 2 or 3: that
// many for every call of the head dim. Anything else throws, naming `variable`.
//  - TESSERA_CUDA_D64_WARPGROUPS (head_dim 64; the rule: three, 192-row tiles, except two,
//    128-row tiles, for masked calls of at most kTwoWarpgroupMaxKeysD64 keys on average,
//    kTwoWarpgroupMaxKeysD64Window with a window): 2 sends unmasked calls to the masked instance,
//    whose tiles are then all unmasked but the tail;
//  - TESSERA_CUDA_D128_WARPGROUPS (head_dim 128; the rule: two, 128-row tiles, except three,
//    192-row tiles of 128 keys, for dense causal calls without a window of
//    kThreeWarpgroupCausalMinKeysD128 to kShortCausalMaxKeysD128 keys): 3 sends every call to
//    the masked three-warpgroup instance (128-key tiles whatever TESSERA_CUDA_FORWARD_KEY_TILE
//    says: it has no other), unmasked, windowed and ragged calls too.
inline int parse_warpgroups_knob(const char* variable, const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  if (std::strcmp(value, "2") == 0) return 2;
  if (std::strcmp(value, "3") == 0) return 3;
  throw Error(ErrorCode::invalid_argument, variable, std::string(variable) + ": expected 2, 3 or unset, got '" + value + "'");
}
inline int parse_d64_warpgroups(const char* value) { return parse_warpgroups_knob("TESSERA_CUDA_D64_WARPGROUPS", value); }
inline int parse_d128_warpgroups(const char* value) { return parse_warpgroups_knob("TESSERA_CUDA_D128_WARPGROUPS", value); }

// TESSERA_CUDA_FORWARD_KEY_TILE (a measurement and test knob of the sm90 forward, fp16 / bf16:
// unmasked calls at head_dim 64 on three consumer warpgroups, unmasked and causal (windowless)
// calls at head_dim 128; see src/cuda/sm90/forward/tile_choice.h): unset or empty: the host rule
// (head_dim 64: the short-key tile at every length; head_dim 128: the short-key tile up to 2048
// keys on average, 4096 for causal, its long-key tile above; head_dim 64's tail-row launch runs
// with the short one only); "short":
// the short-key tile (128 keys; unmasked head_dim 128: with two Q buffers) for every such call;
// "long": the long-key tile (head_dim 64: 192 keys with P through shared memory; 128: 176 keys).
// Other calls ignore it. Anything else throws.
enum class ForwardKeyTile { automatic, short_keys, long_keys };
inline ForwardKeyTile parse_forward_key_tile(const char* value) {
  if (value == nullptr || *value == '\0') return ForwardKeyTile::automatic;
  if (std::strcmp(value, "short") == 0) return ForwardKeyTile::short_keys;
  if (std::strcmp(value, "long") == 0) return ForwardKeyTile::long_keys;
  throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_FORWARD_KEY_TILE",
              std::string("TESSERA_CUDA_FORWARD_KEY_TILE: expected 'short', 'long' or unset, got '") + value + "'");
}

// TESSERA_CUDA_FORWARD_TAIL_ROWS (a measurement and test knob of the sm90 forward at head_dim 64,
// fp16 / bf16, dense unmasked calls on 128-key tiles (every length, unless
// TESSERA_CUDA_FORWARD_KEY_TILE=long) whose last 192-row query block holds at most 64 rows; see
// launch.cu): unset, empty or "1": those last blocks run on the tail-row instance (every consumer
// warpgroup on the same rows over its share of the K/V tiles); "0": on the main instance with the
// whole blocks. Anything else throws.
inline bool parse_forward_tail_rows(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_FORWARD_TAIL_ROWS",
              std::string("TESSERA_CUDA_FORWARD_TAIL_ROWS: expected 0, 1 or unset, got '") + value + "'");
}

inline ForwardPath forward_path_override() { return parse_forward_path(std::getenv("TESSERA_CUDA_FORWARD")); }
inline BackwardPath backward_path_override() { return parse_backward_path(std::getenv("TESSERA_CUDA_BACKWARD")); }
inline BatchPath batch_path_override() { return parse_batch_path(std::getenv("TESSERA_CUDA_BATCH")); }
inline int batch_decode_sms_override() { return parse_batch_decode_sms(std::getenv("TESSERA_CUDA_BATCH_DECODE_SMS")); }
inline Fp8VTranspose fp8_v_transpose_override() {
  return parse_fp8_v_transpose(std::getenv("TESSERA_CUDA_FP8_V_TRANSPOSE"));
}
inline ForwardSplitTail forward_split_tail_override() {
  return parse_forward_split_tail(std::getenv("TESSERA_CUDA_FORWARD_SPLIT_TAIL"));
}
inline int backward_tail_pieces_override() {
  return parse_backward_tail_pieces(std::getenv("TESSERA_CUDA_BACKWARD_TAIL_PIECES"));
}
inline int d64_warpgroups_override() { return parse_d64_warpgroups(std::getenv("TESSERA_CUDA_D64_WARPGROUPS")); }
inline int d128_warpgroups_override() { return parse_d128_warpgroups(std::getenv("TESSERA_CUDA_D128_WARPGROUPS")); }
inline ForwardKeyTile forward_key_tile_override() {
  return parse_forward_key_tile(std::getenv("TESSERA_CUDA_FORWARD_KEY_TILE"));
}
inline bool forward_tail_rows_override() { return parse_forward_tail_rows(std::getenv("TESSERA_CUDA_FORWARD_TAIL_ROWS")); }
inline bool batch_pdl_override() { return parse_batch_pdl(std::getenv("TESSERA_CUDA_BATCH_PDL")); }
inline bool batch_decode_claims_override() {
  return parse_batch_decode_claims(std::getenv("TESSERA_CUDA_BATCH_DECODE_CLAIMS"));
}

}  // namespace tessera::dispatch
