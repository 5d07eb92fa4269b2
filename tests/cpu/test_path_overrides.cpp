// The CUDA path overrides (src/dispatch/path_override.h): the environment variables that pick a
// CUDA path or force a launch shape. Each parser maps the accepted values to their meaning, unset
// or empty to the default, and refuses anything else with an error that names the variable, the
// accepted values and the value given.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>  // std::make_pair

#include "dispatch/path_override.h"
#include "tessera/error.h"

namespace tessera {
namespace {

TEST(PathOverrides, AcceptedValuesMapAndOthersAreRefused) {
  using dispatch::BackwardPath;
  using dispatch::ForwardPath;
  EXPECT_EQ(dispatch::parse_forward_path(nullptr), ForwardPath::automatic);
  EXPECT_EQ(dispatch::parse_forward_path(""), ForwardPath::automatic);
  EXPECT_EQ(dispatch::parse_forward_path("portable"), ForwardPath::portable);
  EXPECT_EQ(dispatch::parse_backward_path(nullptr), BackwardPath::automatic);
  EXPECT_EQ(dispatch::parse_backward_path("portable"), BackwardPath::portable);
  EXPECT_EQ(dispatch::parse_backward_path("portable-compact"), BackwardPath::portable_compact);
  EXPECT_EQ(dispatch::parse_backward_path("portable-compact2"), BackwardPath::portable_compact2);
  for (const char* bad : {"portble", "portable-compct", "Portable", "portable ", "sm90"}) {
    try {
      dispatch::parse_backward_path(bad);
      ADD_FAILURE() << "accepted TESSERA_CUDA_BACKWARD=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.argument(), "TESSERA_CUDA_BACKWARD");
      const std::string msg = e.what();
      EXPECT_NE(msg.find("portable-compact2"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
  try {
    dispatch::parse_forward_path("portable-compact");
    ADD_FAILURE() << "accepted TESSERA_CUDA_FORWARD=portable-compact";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "TESSERA_CUDA_FORWARD");
    EXPECT_NE(std::string(e.what()).find("got 'portable-compact'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dispatch::parse_batch_path(nullptr), dispatch::BatchPath::automatic);
  EXPECT_EQ(dispatch::parse_batch_path(""), dispatch::BatchPath::automatic);
  EXPECT_EQ(dispatch::parse_batch_path("sm90"), dispatch::BatchPath::sm90);
  EXPECT_EQ(dispatch::parse_batch_path("portable"), dispatch::BatchPath::portable);
  EXPECT_EQ(dispatch::parse_batch_path("sm90-coresident"), dispatch::BatchPath::sm90_coresident);
  EXPECT_EQ(dispatch::parse_batch_path("sm90-split"), dispatch::BatchPath::sm90_split);
  // Misspellings of any value (case, underscore, a prefix or a leading/trailing space) are errors
  // that list every accepted value and quote the value found.
  for (const char* bad : {"SM90", "sm80", "portable-compact", " sm90", "sm90_coresident", "sm90-co",
                          "sm90-coresident ", "coresident", "sm90_split", "split"}) {
    try {
      dispatch::parse_batch_path(bad);
      ADD_FAILURE() << "accepted TESSERA_CUDA_BATCH=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "TESSERA_CUDA_BATCH");
      const std::string what = e.what();
      EXPECT_NE(what.find("expected unset or one of 'portable', 'sm90', 'sm90-coresident', 'sm90-split', got '" +
                          std::string(bad) + "'"),
                std::string::npos)
          << what;
    }
  }
  // The sm90-split measurement knob: a whole number of SMs, or unset / empty.
  EXPECT_EQ(dispatch::parse_batch_decode_sms(nullptr), -1);
  EXPECT_EQ(dispatch::parse_batch_decode_sms(""), -1);
  EXPECT_EQ(dispatch::parse_batch_decode_sms("0"), 0);
  EXPECT_EQ(dispatch::parse_batch_decode_sms("48"), 48);
  // A measurement knob's parser refuses each bad value with an error naming the variable and
  // quoting the value.
  auto expect_rejected = [](const char* var, auto parse, std::initializer_list<const char*> bads) {
    for (const char* bad : bads) {
      try {
        parse(bad);
        ADD_FAILURE() << "accepted " << var << "=" << bad;
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), var);
        EXPECT_NE(std::string(e.what()).find("got '" + std::string(bad) + "'"), std::string::npos) << e.what();
      }
    }
  };
  // The whole message of one refusal: the variable, what it accepts, the value found.
  auto expect_message = [](const char* var, auto parse, const char* bad, const std::string& message) {
    try {
      parse(bad);
      ADD_FAILURE() << "accepted " << var << "=" << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_rejected("TESSERA_CUDA_BATCH_DECODE_SMS", dispatch::parse_batch_decode_sms,
                  {"-1", "4097", "48 ", "4.5", "x", "12abc"});
  // The decode-claims measurement knob: 0, 1, or unset / empty.
  EXPECT_FALSE(dispatch::parse_batch_decode_claims(nullptr));
  EXPECT_FALSE(dispatch::parse_batch_decode_claims(""));
  EXPECT_FALSE(dispatch::parse_batch_decode_claims("0"));
  EXPECT_TRUE(dispatch::parse_batch_decode_claims("1"));
  expect_rejected("TESSERA_CUDA_BATCH_DECODE_CLAIMS", dispatch::parse_batch_decode_claims,
                  {"2", "yes", "true", "1 ", "-1"});
  // The backward's tail pieces: 0 (never), 2..16 pieces, or unset / empty (the host rule).
  EXPECT_EQ(dispatch::parse_backward_tail_pieces(nullptr), -1);
  EXPECT_EQ(dispatch::parse_backward_tail_pieces(""), -1);
  EXPECT_EQ(dispatch::parse_backward_tail_pieces("0"), 0);
  EXPECT_EQ(dispatch::parse_backward_tail_pieces("2"), 2);
  EXPECT_EQ(dispatch::parse_backward_tail_pieces("16"), 16);
  expect_rejected("TESSERA_CUDA_BACKWARD_TAIL_PIECES", dispatch::parse_backward_tail_pieces,
                  {"1", "17", "-1", "4 ", "x", "3.5", "2abc"});
  // The sm90 forward's split tail: 0 (never), n tiles in halves, n:k (n tiles in k parts, 2 <= k <= 8), or unset /
  // empty (the host rule).
  auto split = [](const char* v) {
    const dispatch::ForwardSplitTail r = dispatch::parse_forward_split_tail(v);
    return std::make_pair(r.tiles, r.parts);
  };
  EXPECT_EQ(split(nullptr), std::make_pair(-1, 2));
  EXPECT_EQ(split(""), std::make_pair(-1, 2));
  EXPECT_EQ(split("0"), std::make_pair(0, 2));
  EXPECT_EQ(split("1"), std::make_pair(1, 2));
  EXPECT_EQ(split("1048576"), std::make_pair(1048576, 2));
  EXPECT_EQ(split("50:5"), std::make_pair(50, 5));
  EXPECT_EQ(split("3:2"), std::make_pair(3, 2));
  EXPECT_EQ(split("7:8"), std::make_pair(7, 8));
  expect_rejected("TESSERA_CUDA_FORWARD_SPLIT_TAIL", dispatch::parse_forward_split_tail,
                  {"-1", "1048577", "4 ", "x", "3.5", "2abc", "5:1", "5:9", "5:", "5:x", "0:3", ":3", "5:3 ", "5:-3",
                   "5:3:2", " 5", "+5", "-0", " 5:3", "+5:3"});
  // Consumer warpgroups of the sm90 forward at head_dim 64 and 128: the host rule (unset), two,
  // three; each knob's own name in its message.
  using WarpgroupsParser = int (*)(const char*);
  const std::pair<const char*, WarpgroupsParser> warpgroup_knobs[] = {
      {"TESSERA_CUDA_D64_WARPGROUPS", dispatch::parse_d64_warpgroups},
      {"TESSERA_CUDA_D128_WARPGROUPS", dispatch::parse_d128_warpgroups}};
  for (const auto& [var, parse] : warpgroup_knobs) {
    EXPECT_EQ(parse(nullptr), 0) << var;
    EXPECT_EQ(parse(""), 0) << var;
    EXPECT_EQ(parse("2"), 2) << var;
    EXPECT_EQ(parse("3"), 3) << var;
    expect_rejected(var, parse, {"1", "4", "0", "2 ", " 3", "two", "+2", "23"});
    expect_message(var, parse, "4", std::string(var) + ": expected 2, 3 or unset, got '4'");
  }
  // K tile of the sm90 forward's unmasked head_dim 64 / 128 calls: the host rule (unset), short, long.
  EXPECT_EQ(dispatch::parse_forward_key_tile(nullptr), dispatch::ForwardKeyTile::automatic);
  EXPECT_EQ(dispatch::parse_forward_key_tile(""), dispatch::ForwardKeyTile::automatic);
  EXPECT_EQ(dispatch::parse_forward_key_tile("short"), dispatch::ForwardKeyTile::short_keys);
  EXPECT_EQ(dispatch::parse_forward_key_tile("long"), dispatch::ForwardKeyTile::long_keys);
  expect_rejected("TESSERA_CUDA_FORWARD_KEY_TILE", dispatch::parse_forward_key_tile,
                  {"128", "192", "Short", "LONG", "short ", " long", "wide", "auto", "0"});
  expect_message("TESSERA_CUDA_FORWARD_KEY_TILE", dispatch::parse_forward_key_tile, "192",
                 "TESSERA_CUDA_FORWARD_KEY_TILE: expected 'short', 'long' or unset, got '192'");
  // On/off knobs, on when unset or "1", off at "0": the sm90 forward's tail-row launch at head_dim
  // 64, and a decode-only run's first launch as a programmatic dependent; each knob's own name in
  // its message.
  using SwitchParser = bool (*)(const char*);
  const std::pair<const char*, SwitchParser> switch_knobs[] = {
      {"TESSERA_CUDA_FORWARD_TAIL_ROWS", dispatch::parse_forward_tail_rows},
      {"TESSERA_CUDA_BATCH_PDL", dispatch::parse_batch_pdl}};
  for (const auto& [var, parse] : switch_knobs) {
    EXPECT_TRUE(parse(nullptr)) << var;
    EXPECT_TRUE(parse("")) << var;
    EXPECT_TRUE(parse("1")) << var;
    EXPECT_FALSE(parse("0")) << var;
    expect_rejected(var, parse, {"2", "on", "off", "true", " 0", "1 ", "00", "-1"});
    expect_message(var, parse, "on", std::string(var) + ": expected 0, 1 or unset, got 'on'");
  }
  // Where the FP8 forward's V^T is made: the host rule (unset), a pass into a workspace, the kernel's warps.
  EXPECT_EQ(dispatch::parse_fp8_v_transpose(nullptr), dispatch::Fp8VTranspose::automatic);
  EXPECT_EQ(dispatch::parse_fp8_v_transpose(""), dispatch::Fp8VTranspose::automatic);
  EXPECT_EQ(dispatch::parse_fp8_v_transpose("global"), dispatch::Fp8VTranspose::global);
  EXPECT_EQ(dispatch::parse_fp8_v_transpose("kernel"), dispatch::Fp8VTranspose::kernel);
  for (const char* bad : {"Kernel", "kernel ", "0", "pass", "global,kernel"}) {
    try {
      dispatch::parse_fp8_v_transpose(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("TESSERA_CUDA_FP8_V_TRANSPOSE: expected 'global', 'kernel' or unset, got '" + std::string(bad) + "'"),
                std::string::npos)
          << what;
    }
  }
}

}  // namespace
}  // namespace tessera
