// Which sm90 forward instance a call takes (tile rows, K/V tile keys, masked or not): the host
// rule of launch.cu, kept apart from the launch so that a CPU test checks it
// (tests/cpu/test_forward_tile_choice.cpp). The thresholds and tile widths are kernel_traits.cuh's.
#pragma once

#include "cuda/sm90/forward/kernel_traits.cuh"
#include "dispatch/path_override.h"

namespace tessera::cuda::sm90 {

struct FwdTileChoice {
  bool masked_instance = false;  // the kMasked instance: masked calls, and the unmasked ones sent there
  int block_m = 0;               // query rows per tile, 64 per consumer warpgroup
  int block_n = 0;               // keys per K/V tile (also the K and V maps' box rows)
};

// head_dim, fp8, masked: the call's (windowed: a sliding window, left or right, causal or not);
// mean_keys: keys per sequence (ragged: total_k / batch); warpgroups (the head dim's knob:
// TESSERA_CUDA_D64_WARPGROUPS at 64, TESSERA_CUDA_D128_WARPGROUPS at 128; 0 for the rule; other
// head dims and FP8 ignore it) and key_tile (TESSERA_CUDA_FORWARD_KEY_TILE): the knobs.
//  - masked head_dim 64 over short sequences: two consumer warpgroups (kTwoWarpgroupMaxKeysD64,
//    windowed: kTwoWarpgroupMaxKeysD64Window); the warpgroup knob forces two (unmasked calls then
//    run the masked instance) or three;
//  - unmasked fp16 / bf16 head_dim 128: 128-key tiles (two Q buffers) up to
//    kShortUnmaskedMaxKeysD128 keys, 176-key tiles (one Q buffer) above;
//  - causal fp16 / bf16 head_dim 128 without a window: 128-key tiles up to
//    kShortCausalMaxKeysD128 keys, 176-key tiles above; dense (not ragged) ones of more than
//    kThreeWarpgroupCausalMinKeysD128 keys up to that bound on three warpgroups (192-row tiles);
//    the warpgroup knob forces two (no call on three) or three (every 16-bit call on the masked
//    three-warpgroup instance, 128-key tiles: the key-tile knob then has no say);
//  - unmasked fp16 / bf16 head_dim 64 on three warpgroups: 128-key tiles at every length
//    (kShortUnmaskedMaxKeysD64 is the largest count: the 192-key tiles with P through shared
//    memory lost where measured), 192-key tiles only when the knob forces them;
//  the key-tile knob forces the short or the long choice of those three, and nothing else.
inline FwdTileChoice forward_tile_choice(int head_dim, bool fp8, bool masked, long long mean_keys, int warpgroups = 0,
                                         dispatch::ForwardKeyTile key_tile = dispatch::ForwardKeyTile::automatic,
                                         bool windowed = false, bool ragged = false) {
  const bool d64 = !fp8 && head_dim == 64, d128 = !fp8 && head_dim == 128;
  const bool two_wg_d64 =
      d64 && (warpgroups == 0
                  ? masked && mean_keys <= (windowed ? kTwoWarpgroupMaxKeysD64Window : kTwoWarpgroupMaxKeysD64)
                  : warpgroups == 2);
  // Short dense causal head_dim 128 (no window) on three warpgroups (kThreeWarpgroupCausalMinKeysD128;
  // ragged batches stay on two: each sequence's last 192-row tile is part empty).
  const bool forced_three_d128 = d128 && warpgroups == 3;
  const bool three_wg_d128 =
      forced_three_d128 || (d128 && warpgroups == 0 && masked && !windowed && !ragged &&
                            mean_keys > kThreeWarpgroupCausalMinKeysD128 && mean_keys <= kShortCausalMaxKeysD128);
  FwdTileChoice c;
  c.masked_instance = masked || two_wg_d64 || forced_three_d128;
  c.block_m = two_wg_d64 ? 128 : block_m_for(head_dim, fp8);
  // Whether the call has a long-key choice at all, and where the rule puts its switch.
  const bool has_choice = d128 ? !(masked && windowed) : d64 && !c.masked_instance;
  const long long short_max =
      d64 ? kShortUnmaskedMaxKeysD64 : masked ? kShortCausalMaxKeysD128 : kShortUnmaskedMaxKeysD128;
  const bool long_keys = has_choice && !forced_three_d128 && (key_tile == dispatch::ForwardKeyTile::automatic
                                            ? mean_keys > short_max
                                            : key_tile == dispatch::ForwardKeyTile::long_keys);
  c.block_n = block_n_for(head_dim, c.masked_instance, fp8, long_keys);
  if (three_wg_d128 && !long_keys) c.block_m = 192;  // (the key-tile knob's 176 keys: two)
  return c;
}

}  // namespace tessera::cuda::sm90
