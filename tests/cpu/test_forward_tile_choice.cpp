// The sm90 forward's instance choice (src/cuda/sm90/forward/tile_choice.h): which calls take which
// tile rows and K/V tile width, on both sides of every threshold, with and without the knobs.
#include <gtest/gtest.h>

#include "cuda/sm90/forward/tile_choice.h"

namespace tessera {
namespace {

using cuda::sm90::forward_tile_choice;
using cuda::sm90::FwdTileChoice;
constexpr dispatch::ForwardKeyTile kRule = dispatch::ForwardKeyTile::automatic, kShort = dispatch::ForwardKeyTile::short_keys,
                                   kLong = dispatch::ForwardKeyTile::long_keys;

struct Want {
  bool masked_instance;
  int block_m;
  int block_n;
};

void expect_choice(const FwdTileChoice& got, const Want& want, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.masked_instance, want.masked_instance);
  EXPECT_EQ(got.block_m, want.block_m);
  EXPECT_EQ(got.block_n, want.block_n);
}

TEST(Sm90ForwardTileChoice, HeadDim64) {
  // Unmasked: 128-key tiles at every length (the 192-key tiles with P through shared memory lost
  // at 2k, 4k and 16k; only the knob takes them); three warpgroups.
  expect_choice(forward_tile_choice(64, false, false, 1), {false, 192, 128}, "one key");
  expect_choice(forward_tile_choice(64, false, false, 2048), {false, 192, 128}, "2048 keys");
  expect_choice(forward_tile_choice(64, false, false, 2049), {false, 192, 128}, "2049 keys");
  expect_choice(forward_tile_choice(64, false, false, 16384), {false, 192, 128}, "16k keys");
  expect_choice(forward_tile_choice(64, false, false, 1LL << 40), {false, 192, 128}, "2^40 keys");
  // Masked: two warpgroups up to 256 keys, three above (each stops at its own rows' last K/V
  // tile); windows keep two up to 1024 keys; 128-key tiles always.
  expect_choice(forward_tile_choice(64, false, true, 0), {true, 128, 128}, "masked, no keys");
  expect_choice(forward_tile_choice(64, false, true, 256), {true, 128, 128}, "masked, 256 keys");
  expect_choice(forward_tile_choice(64, false, true, 257), {true, 192, 128}, "masked, 257 keys");
  expect_choice(forward_tile_choice(64, false, true, 1024), {true, 192, 128}, "masked, 1024 keys");
  expect_choice(forward_tile_choice(64, false, true, 1024, 0, kRule, true), {true, 128, 128}, "window, 1024 keys");
  expect_choice(forward_tile_choice(64, false, true, 1025, 0, kRule, true), {true, 192, 128}, "window, 1025 keys");
  expect_choice(forward_tile_choice(64, false, true, 1025), {true, 192, 128}, "masked, 1025 keys");
  expect_choice(forward_tile_choice(64, false, true, 2048), {true, 192, 128}, "masked, 2048 keys");
  expect_choice(forward_tile_choice(64, false, true, 16384), {true, 192, 128}, "masked, 16k keys");
}

TEST(Sm90ForwardTileChoice, Knobs) {
  // TESSERA_CUDA_FORWARD_KEY_TILE: either tile on unmasked head_dim 64 three-warpgroup calls and
  // head_dim 128 calls, at any length.
  expect_choice(forward_tile_choice(64, false, false, 1024, 0, kLong), {false, 192, 192}, "d64 long forced at 1k");
  expect_choice(forward_tile_choice(64, false, false, 16384, 0, kShort), {false, 192, 128}, "d64 short forced at 16k");
  expect_choice(forward_tile_choice(64, false, false, 0, 0, kLong), {false, 192, 192}, "d64 long forced, no keys");
  expect_choice(forward_tile_choice(64, false, false, 16384, 0, kRule), {false, 192, 128}, "d64 the rule");
  expect_choice(forward_tile_choice(128, false, false, 1024, 0, kLong), {false, 128, 176}, "d128 long forced at 1k");
  expect_choice(forward_tile_choice(128, false, false, 16384, 0, kShort), {false, 128, 128}, "d128 short forced at 16k");
  // ... and on causal head_dim 128 calls without a window; nowhere else: other masked calls, two
  // warpgroups (the masked instance), head_dim 256, FP8.
  expect_choice(forward_tile_choice(64, false, true, 16384, 0, kLong), {true, 192, 128}, "masked, long forced");
  expect_choice(forward_tile_choice(64, false, true, 200, 0, kLong), {true, 128, 128}, "masked short, long forced");
  expect_choice(forward_tile_choice(128, false, true, 1024, 0, kLong), {true, 128, 176}, "d128 causal, long forced at 1k");
  expect_choice(forward_tile_choice(128, false, true, 16384, 0, kShort), {true, 128, 128}, "d128 causal, short forced");
  expect_choice(forward_tile_choice(128, false, true, 16384, 0, kLong, true), {true, 128, 128}, "d128 window, long forced");
  expect_choice(forward_tile_choice(64, false, false, 16384, 2, kLong), {true, 128, 128}, "two warpgroups, long forced");
  expect_choice(forward_tile_choice(64, false, false, 16384, 2), {true, 128, 128}, "two warpgroups, the rule");
  expect_choice(forward_tile_choice(64, false, false, 16384, 3), {false, 192, 128}, "three warpgroups, the rule");
  expect_choice(forward_tile_choice(64, false, false, 16384, 3, kLong), {false, 192, 192}, "three warpgroups, long forced");
  expect_choice(forward_tile_choice(64, false, true, 1000, 3), {true, 192, 128}, "three forced, masked short");
  expect_choice(forward_tile_choice(256, false, false, 16384, 2, kShort), {false, 128, 80}, "d256, both forced");
  expect_choice(forward_tile_choice(128, true, false, 16384, 2, kShort), {false, 192, 128}, "fp8 d128, both forced");
  expect_choice(forward_tile_choice(256, true, true, 1024, 0, kLong), {true, 128, 128}, "fp8 d256 masked, long forced");
}

TEST(Sm90ForwardTileChoice, HeadDim128WarpgroupKnob) {
  // TESSERA_CUDA_D128_WARPGROUPS=3: every 16-bit head_dim 128 call on the masked three-warpgroup
  // instance (192-row tiles of 128 keys), unmasked, windowed, ragged and long ones too, whatever
  // the key-tile knob says (that instance has 128-key tiles only).
  for (const bool masked : {false, true})
    for (const long long keys : {0LL, 1LL, 1024LL, 2049LL, 4097LL, 16384LL, 1LL << 40})
      for (const auto key_tile : {kRule, kShort, kLong})
        for (const bool windowed : {false, true})
          for (const bool ragged : {false, true}) {
            if (windowed && !masked) continue;  // a window makes a call masked
            expect_choice(forward_tile_choice(128, false, masked, keys, 3, key_tile, windowed, ragged), {true, 192, 128},
                          "d128, three forced");
          }
  // =2: no call on three; otherwise the rule (unmasked calls keep their own instance).
  expect_choice(forward_tile_choice(128, false, true, 1025, 2), {true, 128, 128}, "d128 causal 1025 keys, two forced");
  expect_choice(forward_tile_choice(128, false, true, 4096, 2), {true, 128, 128}, "d128 causal 4096 keys, two forced");
  expect_choice(forward_tile_choice(128, false, true, 4097, 2), {true, 128, 176}, "d128 causal 4097 keys, two forced");
  expect_choice(forward_tile_choice(128, false, false, 1024, 2), {false, 128, 128}, "d128 1k, two forced");
  expect_choice(forward_tile_choice(128, false, false, 16384, 2), {false, 128, 176}, "d128 16k, two forced");
  expect_choice(forward_tile_choice(128, false, true, 2048, 2, kShort), {true, 128, 128}, "d128 causal 2k, two, short");
  // FP8 and the other head dims ignore the value handed in (launch.cu hands each head dim its own knob).
  expect_choice(forward_tile_choice(128, true, false, 1024, 2), {false, 192, 128}, "fp8 d128, two handed in");
  expect_choice(forward_tile_choice(128, true, true, 1024, 3), {true, 192, 128}, "fp8 d128 masked, three handed in");
  expect_choice(forward_tile_choice(256, false, false, 1024, 3), {false, 128, 80}, "d256, three handed in");
  expect_choice(forward_tile_choice(256, false, true, 1024, 3), {true, 128, 64}, "d256 masked, three handed in");
}

TEST(Sm90ForwardTileChoice, OtherHeadDims) {
  // Unmasked head_dim 128: its own 128-key instance up to 2048 keys, 176-key tiles above.
  expect_choice(forward_tile_choice(128, false, false, 1), {false, 128, 128}, "d128, one key");
  expect_choice(forward_tile_choice(128, false, false, 2048), {false, 128, 128}, "d128, 2048 keys");
  expect_choice(forward_tile_choice(128, false, false, 2049), {false, 128, 176}, "d128, 2049 keys");
  // Causal head_dim 128 (no window): 128-key tiles up to 4096 keys, 176-key tiles above; windows 128.
  // ... and dense ones from 1025 to 4096 keys on three warpgroups (192-row tiles), windows and ragged on two.
  expect_choice(forward_tile_choice(128, false, true, 1024), {true, 128, 128}, "d128 causal, 1024 keys");
  expect_choice(forward_tile_choice(128, false, true, 1025), {true, 192, 128}, "d128 causal, 1025 keys");
  expect_choice(forward_tile_choice(128, false, true, 2048, 0, kRule, false, true), {true, 128, 128},
                "d128 causal ragged, 2048 mean keys");
  expect_choice(forward_tile_choice(128, false, true, 2049), {true, 192, 128}, "d128 causal, 2049 keys");
  // Inside that range the key-tile knob's long tiles keep two (the three-warpgroup instance has
  // 128-key tiles only), its short ones three; a window keeps two.
  expect_choice(forward_tile_choice(128, false, true, 2048, 0, kLong), {true, 128, 176}, "d128 causal 2k, long forced");
  expect_choice(forward_tile_choice(128, false, true, 2048, 0, kShort), {true, 192, 128}, "d128 causal 2k, short forced");
  expect_choice(forward_tile_choice(128, false, true, 2048, 0, kRule, true), {true, 128, 128}, "d128 window, 2048 keys");
  expect_choice(forward_tile_choice(128, false, true, 4096), {true, 192, 128}, "d128 causal, 4096 keys");
  expect_choice(forward_tile_choice(128, false, true, 1024, 0, kRule, true), {true, 128, 128}, "d128 window, 1024 keys");
  expect_choice(forward_tile_choice(128, false, true, 4097), {true, 128, 176}, "d128 causal, 4097 keys");
  expect_choice(forward_tile_choice(128, false, true, 16384), {true, 128, 176}, "d128 causal, 16k keys");
  expect_choice(forward_tile_choice(128, false, true, 16384, 0, kRule, true), {true, 128, 128}, "d128 window, 16k keys");
  expect_choice(forward_tile_choice(256, false, true, 16384), {true, 128, 64}, "d256 causal, 16k keys");
  expect_choice(forward_tile_choice(256, false, false, 1024), {false, 128, 80}, "d256");
  expect_choice(forward_tile_choice(256, false, true, 1024), {true, 128, 64}, "d256 masked");
  // FP8: 128-key tiles; three warpgroups at head_dim 128, two at 256; no short-key switch.
  expect_choice(forward_tile_choice(128, true, false, 1024), {false, 192, 128}, "fp8 d128");
  expect_choice(forward_tile_choice(128, true, true, 1024), {true, 192, 128}, "fp8 d128 masked");
  expect_choice(forward_tile_choice(256, true, false, 16384), {false, 128, 128}, "fp8 d256");
}

}  // namespace
}  // namespace tessera
