#pragma once

// bfloat16 codec (bit patterns as uint16_t), plus the shared round-to-nearest-even core that the
// narrower codecs (fp8.h, fp4.h) build on. Header-only, constexpr, usable in CUDA device code.

#include <bit>
#include <cstdint>

#include "common/host_device.h"

namespace di {
namespace detail {

// Rounds |x| (finite; the sign is ignored) to the nearest value of a binary float format with
// `mant_bits` stored mantissa bits, minimum normal exponent `emin` and IEEE-style subnormals below
// it, ties to the even mantissa. Returns the magnitude's code in that format's encoding,
// ((exponent - emin) << mant_bits) + ulps, which runs past the largest finite code when x
// overflows: the caller decides what overflow becomes (inf, saturation, NaN). Rounding happens
// once, on the exact double value, so no double rounding can occur. Valid for mant_bits in
// [1, 50] and emin >= -1000.
DI_HOST_DEVICE constexpr int64_t round_magnitude_rne(double x, int mant_bits, int emin) {
  const uint64_t bits = std::bit_cast<uint64_t>(x) & 0x7FFF'FFFF'FFFF'FFFFull;
  const int biased_exp = static_cast<int>(bits >> 52);
  // Double subnormals (< 2^-1022) are far below half the smallest step of every format here.
  if (biased_exp == 0) return 0;
  const int exp = biased_exp - 1023;
  const uint64_t significand =
      (bits & 0x000F'FFFF'FFFF'FFFFull) | (1ull << 52);  // x = sig*2^(exp-52)
  const int exp_eff = exp > emin ? exp : emin;
  // The target's step at this magnitude is 2^(exp_eff - mant_bits): count steps in x.
  const int shift = 52 - mant_bits + (exp_eff - exp);
  if (shift > 53) return 0;  // x < 2^(53 - shift) steps <= a quarter step: rounds to zero
  uint64_t steps = significand >> shift;
  const uint64_t rest = significand & ((1ull << shift) - 1);
  const uint64_t half = 1ull << (shift - 1);
  if (rest > half || (rest == half && (steps & 1u) != 0)) ++steps;
  // A carry out of the mantissa (steps == 2^(mant_bits+1)) lands on the next exponent's code.
  return (static_cast<int64_t>(exp_eff - emin) << mant_bits) + static_cast<int64_t>(steps);
}

}  // namespace detail

inline constexpr uint16_t kBf16PositiveInf = 0x7F80;
inline constexpr uint16_t kBf16QuietNaN = 0x7FC0;
inline constexpr uint16_t kBf16MaxFinite = 0x7F7F;  // (2 - 2^-7) * 2^127

// Exact: every bf16 value is a float.
DI_HOST_DEVICE constexpr float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Round to nearest, ties to even. Infinities stay infinite, finite values past the bf16 range round
// to infinity (IEEE), NaN becomes the quiet NaN 0x7FC0 with the input's sign.
DI_HOST_DEVICE constexpr uint16_t bf16_from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFF'FFFFu) > 0x7F80'0000u) {
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | kBf16QuietNaN);
  }
  // Adding 0x7FFF (+1 when the kept part is odd) carries into bit 16 exactly when the dropped half
  // is above the midpoint, or at it with an odd kept part.
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Rounds the double value itself (one rounding, not double -> float -> bf16), ties to even, with
// the same NaN/inf/overflow rules as bf16_from_float. bf16 subnormals are produced exactly.
DI_HOST_DEVICE constexpr uint16_t bf16_from_double(double d) {
  const uint64_t u = std::bit_cast<uint64_t>(d);
  const auto sign = static_cast<uint16_t>((u >> 48) & 0x8000u);
  const uint64_t magnitude = u & 0x7FFF'FFFF'FFFF'FFFFull;
  if (magnitude > 0x7FF0'0000'0000'0000ull) return static_cast<uint16_t>(sign | kBf16QuietNaN);
  if (magnitude == 0x7FF0'0000'0000'0000ull) return static_cast<uint16_t>(sign | kBf16PositiveInf);
  const int64_t code = detail::round_magnitude_rne(d, /*mant_bits=*/7, /*emin=*/-126);
  if (code > kBf16MaxFinite) return static_cast<uint16_t>(sign | kBf16PositiveInf);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(code));
}

}  // namespace di
