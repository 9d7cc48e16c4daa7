#pragma once

// FP8 codecs: e4m3fn weights and ue8m0 (e8m0) block-scale bytes. Header-only and bit-exact; the
// DI_HOST_DEVICE functions are shared by the CPU references and the CUDA kernels.
//
// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; 0x7F and 0xFF are NaN, so
// the largest finite magnitude is 0x7E = 1.75 * 2^8 = 448. Subnormals are multiples of 2^-9.
// e8m0: an unsigned biased exponent byte b meaning 2^(b - 127); 0xFF is NaN, there is no zero.

#include <bit>
#include <cmath>
#include <cstdint>

#include "common/bf16.h"
#include "common/check.h"
#include "common/host_device.h"

namespace di {

// What e4m3 encoders do with magnitudes that round above 448 (and with infinities).
enum class Fp8Overflow : uint8_t {
  kSaturate,  // +-448 (0x7E / 0xFE), like PTX cvt .satfinite
  kNaN,       // NaN (0x7F / 0xFF), keeping the sign
};

inline constexpr uint8_t kE4m3MaxFinite = 0x7E;  // 448
inline constexpr uint8_t kE4m3NaN = 0x7F;
inline constexpr float kE4m3MaxValue = 448.0f;
inline constexpr uint8_t kE8m0NaN = 0xFF;

DI_HOST_DEVICE constexpr bool e4m3_is_nan(uint8_t code) {
  return (code & 0x7Fu) == 0x7Fu;
}

// Exact: every e4m3 value is a float. NaN codes give a quiet NaN with the code's sign.
DI_HOST_DEVICE constexpr float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) return std::bit_cast<float>(sign | 0x7FC0'0000u);
  if (exp != 0) {
    // Rebias 7 -> 127 and move the 3 mantissa bits to the top of fp32's 23.
    return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
  }
  const float magnitude = static_cast<float>(mant) * 0x1p-9f;  // subnormal: mant * 2^-9
  return sign != 0 ? -magnitude : magnitude;
}

DI_HOST_DEVICE constexpr double e4m3_to_double(uint8_t code) {
  const uint64_t sign = static_cast<uint64_t>(code & 0x80u) << 56;
  const uint64_t exp = (code >> 3) & 0xFu;
  const uint64_t mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) return std::bit_cast<double>(sign | 0x7FF8'0000'0000'0000ull);
  if (exp != 0) return std::bit_cast<double>(sign | ((exp + 1016u) << 52) | (mant << 49));
  const double magnitude = static_cast<double>(mant) * 0x1p-9;
  return sign != 0 ? -magnitude : magnitude;
}

// Round to nearest, ties to the even mantissa, subnormals rounded correctly, on the exact double
// value. Magnitudes that round above 448 (and infinities) saturate to +-448 or become NaN per
// `overflow`; note 464 (the midpoint between 448 and the first unrepresentable step, 480) is a tie
// that goes to 448. NaN gives 0x7F with the input's sign (0xFF for a negative NaN); -0.0 gives
// 0x80.
DI_HOST_DEVICE constexpr uint8_t e4m3_from_double(double x,
                                                  Fp8Overflow overflow = Fp8Overflow::kSaturate) {
  const uint64_t u = std::bit_cast<uint64_t>(x);
  const auto sign = static_cast<uint8_t>((u >> 56) & 0x80u);
  const uint64_t magnitude = u & 0x7FFF'FFFF'FFFF'FFFFull;
  const auto overflowed =
      static_cast<uint8_t>(sign | (overflow == Fp8Overflow::kSaturate ? kE4m3MaxFinite : kE4m3NaN));
  if (magnitude > 0x7FF0'0000'0000'0000ull) return static_cast<uint8_t>(sign | kE4m3NaN);
  if (magnitude == 0x7FF0'0000'0000'0000ull) return overflowed;
  const int64_t code = detail::round_magnitude_rne(x, /*mant_bits=*/3, /*emin=*/-6);
  if (code > kE4m3MaxFinite) return overflowed;
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(code));
}

// Float -> double is exact, so this rounds the float value itself.
DI_HOST_DEVICE constexpr uint8_t e4m3_from_float(float x,
                                                 Fp8Overflow overflow = Fp8Overflow::kSaturate) {
  return e4m3_from_double(static_cast<double>(x), overflow);
}

// bf16 bits of e4m3(code) * scale, rounded to nearest even: the element step of block
// dequantization, shared by the CPU reference and the CUDA kernel. A NaN code or scale gives the
// quiet NaN with the code's sign, whatever the hardware does with NaN in the multiply (x86 keeps
// the operand's sign, NVIDIA GPUs return a canonical positive NaN).
DI_HOST_DEVICE constexpr uint16_t e4m3_scaled_to_bf16(uint8_t code, float scale) {
  if (e4m3_is_nan(code) || scale != scale) {
    return static_cast<uint16_t>(((code & 0x80u) << 8) | kBf16QuietNaN);
  }
  return bf16_from_float(e4m3_to_float(code) * scale);
}

DI_HOST_DEVICE constexpr bool e8m0_is_nan(uint8_t b) {
  return b == kE8m0NaN;
}

// 2^(b - 127). b = 0 gives 2^-127, an fp32 subnormal; b = 0xFF gives NaN.
DI_HOST_DEVICE constexpr float e8m0_to_float(uint8_t b) {
  if (b == kE8m0NaN) return std::bit_cast<float>(0x7FC0'0000u);
  if (b == 0) return std::bit_cast<float>(0x0040'0000u);  // 2^-127 = 2^22 * 2^-149
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 23);
}

DI_HOST_DEVICE constexpr double e8m0_to_double(uint8_t b) {
  if (b == kE8m0NaN) return std::bit_cast<double>(0x7FF8'0000'0000'0000ull);
  return std::bit_cast<double>((static_cast<uint64_t>(b) + (1023u - 127u)) << 52);
}

// The byte for 2^e; e must be in [-127, 127].
inline uint8_t e8m0_from_exponent(int e) {
  DI_CHECK(e >= -127 && e <= 127, "e8m0 exponent must be in [-127, 127], got {}", e);
  return static_cast<uint8_t>(e + 127);
}

// The byte of the smallest power of two >= t (the block scale that keeps |x| / scale <= 1 when
// t = amax / format_max), read off the fp32 bit pattern: e = exponent_field - 127 + (mantissa != 0)
// for normal t, the equivalent for subnormal t. Results below 2^-127 clamp to byte 0 (2^-127 is
// the smallest e8m0 value and still >= t). t must be finite and in (0, 2^127].
inline uint8_t e8m0_pow2ceil(float t) {
  DI_CHECK(std::isfinite(t) && t > 0.0f && t <= 0x1p127f,
           "e8m0_pow2ceil needs a finite t in (0, 2^127], got {}", t);
  const uint32_t u = std::bit_cast<uint32_t>(t);
  const int exp_field = static_cast<int>(u >> 23);
  const uint32_t mant = u & 0x7F'FFFFu;
  int e = 0;
  if (exp_field != 0) {
    e = exp_field - 127 + (mant != 0 ? 1 : 0);
  } else {
    // Subnormal: t = mant * 2^-149, mant in [1, 2^23).
    const int floor_log2 = std::bit_width(mant) - 1;
    e = floor_log2 - 149 + (std::has_single_bit(mant) ? 0 : 1);
  }
  if (e < -127) e = -127;
  return static_cast<uint8_t>(e + 127);
}

}  // namespace di
