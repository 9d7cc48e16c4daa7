#pragma once

// FP4 e2m1 codec and nibble packing. Header-only and bit-exact; DI_HOST_DEVICE functions are
// shared by the CPU references and the CUDA kernels.
//
// e2m1: 1 sign (bit 3), 2 exponent (bias 1), 1 mantissa bit. Codes 0..7 are
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 and codes 8..15 their negatives (8 is -0). No inf, no NaN.
// Packing: byte j of a row holds logical element 2j in the LOW nibble and 2j+1 in the HIGH nibble.

#include <bit>
#include <cstdint>

#include "common/bf16.h"
#include "common/host_device.h"

namespace di {

inline constexpr uint8_t kE2m1MaxCode = 0x7;  // 6.0
inline constexpr float kE2m1MaxValue = 6.0f;

// Reads the low 4 bits of `nibble`.
DI_HOST_DEVICE constexpr float e2m1_to_float(uint8_t nibble) {
  const uint32_t sign = static_cast<uint32_t>(nibble & 0x8u) << 28;
  const uint32_t exp = (nibble >> 1) & 0x3u;
  const uint32_t mant = nibble & 0x1u;
  if (exp == 0) return std::bit_cast<float>(sign | (mant != 0 ? 0x3F00'0000u : 0u));  // 0 or 0.5
  // Rebias 1 -> 127 and move the mantissa bit to the top of fp32's 23.
  return std::bit_cast<float>(sign | ((exp + 126u) << 23) | (mant << 22));
}

// bf16 bits of e2m1(nibble) * scale, rounded to nearest even (the element step of FP4
// dequantization, shared by the CPU reference and the CUDA kernel). A NaN scale gives the quiet
// NaN with the nibble's sign, independent of the hardware's NaN propagation.
DI_HOST_DEVICE constexpr uint16_t e2m1_scaled_to_bf16(uint8_t nibble, float scale) {
  if (scale != scale) return static_cast<uint16_t>(((nibble & 0x8u) << 12) | kBf16QuietNaN);
  return bf16_from_float(e2m1_to_float(nibble) * scale);
}

// Round to nearest with ties to the EVEN code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
// 2.5 -> 2, 3.5 -> 4, 5 -> 4), on the exact double value. |x| > 6 and infinities saturate to +-6,
// -0.0 gives code 8. NaN has no e2m1 code: passing one is a programmer error, and it gives the
// saturated code 0x7 with the NaN's sign (0xF for a negative NaN) rather than throwing, so the
// function stays usable in device code.
DI_HOST_DEVICE constexpr uint8_t e2m1_from_double(double x) {
  const uint64_t u = std::bit_cast<uint64_t>(x);
  const auto sign = static_cast<uint8_t>((u >> 60) & 0x8u);
  const uint64_t magnitude = u & 0x7FFF'FFFF'FFFF'FFFFull;
  if (magnitude >= 0x7FF0'0000'0000'0000ull) return static_cast<uint8_t>(sign | kE2m1MaxCode);
  const int64_t code = detail::round_magnitude_rne(x, /*mant_bits=*/1, /*emin=*/0);
  if (code > kE2m1MaxCode) return static_cast<uint8_t>(sign | kE2m1MaxCode);
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(code));
}

// Float -> double is exact, so this rounds the float value itself.
DI_HOST_DEVICE constexpr uint8_t e2m1_from_float(float x) {
  return e2m1_from_double(static_cast<double>(x));
}

DI_HOST_DEVICE constexpr uint8_t pack_e2m1(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xFu) | ((odd & 0xFu) << 4));
}
DI_HOST_DEVICE constexpr uint8_t e2m1_lo(uint8_t byte) {
  return static_cast<uint8_t>(byte & 0xFu);
}
DI_HOST_DEVICE constexpr uint8_t e2m1_hi(uint8_t byte) {
  return static_cast<uint8_t>(byte >> 4);
}

}  // namespace di
