// Which sm90 forward instance a call takes (tile rows, K/V tile keys, masked or not): the host
// rule of launch.cu, kept apart from the launch so that a CPU test checks it
// (tests/cpu/test_forward_tile_choice.cpp). The thresholds and tile widths are kernel_traits.cuh's.
#pragma once

#include "cuda/sm90/forward/kernel_traits.cuh"

namespace tessera::cuda::sm90 {

struct FwdTileChoice {
  bool masked_instance = false;  // the kMasked instance: masked calls, and the unmasked ones sent there
  int block_m = 0;               // query rows per tile, 64 per consumer warpgroup
  int block_n = 0;               // keys per K/V tile (also the K and V maps' box rows)
};

// head_dim, fp8, masked: the call's; mean_keys: keys per sequence (ragged: total_k / batch);
// d64_warpgroups (TESSERA_CUDA_D64_WARPGROUPS) and d64_key_tile (TESSERA_CUDA_D64_KEY_TILE): the
// knobs, 0 for the rule.
//  - masked head_dim 64 over short sequences: two consumer warpgroups (kTwoWarpgroupMaxKeysD64);
//    the warpgroup knob forces two (unmasked calls then run the masked instance) or three;
//  - short unmasked head_dim 128: the masked instance (kShortUnmaskedMaxKeysD128);
//  - long unmasked fp16 / bf16 head_dim 64 on three warpgroups: 192-key tiles
//    (kShortUnmaskedMaxKeysD64); the key-tile knob forces 128 or 192 there and nowhere else.
constexpr FwdTileChoice forward_tile_choice(int head_dim, bool fp8, bool masked, long long mean_keys,
                                            int d64_warpgroups = 0, int d64_key_tile = 0) {
  const bool d64 = !fp8 && head_dim == 64;
  const bool two_wg_d64 =
      d64 && (d64_warpgroups == 0 ? masked && mean_keys <= kTwoWarpgroupMaxKeysD64 : d64_warpgroups == 2);
  FwdTileChoice c;
  c.masked_instance = masked || (!fp8 && head_dim == 128 && mean_keys <= kShortUnmaskedMaxKeysD128) || two_wg_d64;
  c.block_m = two_wg_d64 ? 128 : block_m_for(head_dim, fp8);
  const bool wide = d64 && !c.masked_instance &&
                    (d64_key_tile == 0 ? mean_keys > kShortUnmaskedMaxKeysD64 : d64_key_tile == kWideKeyTileD64);
  c.block_n = block_n_for(head_dim, c.masked_instance, fp8, wide);
  return c;
}

}  // namespace tessera::cuda::sm90
