// Host conversions between float and tessera's storage formats (round to nearest even).
// Device code uses the CUDA intrinsics instead; these are the CPU backend's and tests' own.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/tensor.h"

namespace tessera::math {

inline std::uint32_t float_bits(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: scale into integer ulps of 2^-24
    const float a = bits_float(abs);
    const float scaled = a * 16777216.0f;  // exact
    const auto q = static_cast<std::uint32_t>(std::nearbyint(scaled));  // ties to even (default mode)
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  mant -= 0x38000000u;  // rebias exponent 127 -> 15
  return static_cast<std::uint16_t>(sign | (mant >> 13));
}
inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// OCP FP8. e4m3 ("fn"): no infinities, max 448, saturating conversion. e5m2: IEEE-like.
inline float fp8_to_float(std::uint8_t b, int exp_bits) {
  const int man_bits = 7 - exp_bits;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool neg = b & 0x80;
  const int e = (b >> man_bits) & ((1 << exp_bits) - 1);
  const int m = b & ((1 << man_bits) - 1);
  float v;
  if (exp_bits == 4 && e == 15 && m == 7) return NAN;
  if (exp_bits == 5 && e == 31) return m ? NAN : (neg ? -INFINITY : INFINITY);
  if (e == 0) v = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
  else v = std::ldexp(1.0f + static_cast<float>(m) / (1 << man_bits), e - bias);
  return neg ? -v : v;
}
inline std::uint8_t float_to_fp8(float f, int exp_bits) {
  const int man_bits = 7 - exp_bits;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return exp_bits == 4 ? 0x7f : 0x7f;
  const float max_finite = exp_bits == 4 ? 448.0f : 57344.0f;
  float a = std::fabs(f);
  if (a >= max_finite) {
    if (exp_bits == 5 && std::isinf(a)) return sign | 0x7c;
    return sign | (exp_bits == 4 ? 0x7e : 0x7b);  // saturate
  }
  // Brute force over the 127 non-negative finite codes keeps this obviously right.
  std::uint8_t best = 0;
  float best_err = INFINITY;
  const int top = exp_bits == 4 ? 0x7e : 0x7b;
  for (int code = 0; code <= top; ++code) {
    const float v = fp8_to_float(static_cast<std::uint8_t>(code), exp_bits);
    const float err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (code & 1) == 0 && (best & 1) == 1)) {
      best = static_cast<std::uint8_t>(code);
      best_err = err;
    }
  }
  (void)man_bits;
  return sign | best;
}

// Element load/store by dtype (f32, f16, bf16, e4m3, e5m2) for the CPU backend.
inline float load_as_float(const void* base, std::int64_t index, DType dtype) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: return fp16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::e4m3: return fp8_to_float(static_cast<const std::uint8_t*>(base)[index], 4);
    case DType::e5m2: return fp8_to_float(static_cast<const std::uint8_t*>(base)[index], 5);
    case DType::i32: return static_cast<float>(static_cast<const std::int32_t*>(base)[index]);
  }
  return NAN;
}
inline void store_from_float(void* base, std::int64_t index, DType dtype, float v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[index] = v; return;
    case DType::f16: static_cast<std::uint16_t*>(base)[index] = float_to_fp16(v); return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[index] = float_to_bf16(v); return;
    case DType::e4m3: static_cast<std::uint8_t*>(base)[index] = float_to_fp8(v, 4); return;
    case DType::e5m2: static_cast<std::uint8_t*>(base)[index] = float_to_fp8(v, 5); return;
    case DType::i32: static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(v); return;
  }
}
// Round a float to what `dtype` can hold (used to build same-precision baselines in tests).
inline float round_to(DType dtype, float v) {
  float out = 0;
  unsigned char buf[4];
  store_from_float(buf, 0, dtype, v);
  out = load_as_float(buf, 0, dtype);
  return out;
}

}  // namespace tessera::math
