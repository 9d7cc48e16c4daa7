#include "common/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "common/error.h"

namespace di {
namespace {

constexpr double kDInf = std::numeric_limits<double>::infinity();
constexpr double kDNaN = std::numeric_limits<double>::quiet_NaN();

// Independent decode from the format definition.
double reference_e4m3(uint8_t c) {
  const int exp = (c >> 3) & 0xF;
  const int mant = c & 0x7;
  const double magnitude = exp == 0 ? std::ldexp(mant, -9) : std::ldexp(8 + mant, exp - 10);
  return (c & 0x80) != 0 ? -magnitude : magnitude;
}

bool is_nan_code(int c) {
  return (c & 0x7F) == 0x7F;
}

// Nearest finite e4m3 code by exhaustive search, ties to the even code; -1 when the magnitude is
// nearer to the virtual next step 480 than to 448 (a tie at 464 stays at 448, whose code is even).
int brute_force_e4m3(double x) {
  const double a = std::abs(x);
  int best = 0;
  for (int c = 1; c <= kE4m3MaxFinite; ++c) {
    const double err = std::abs(a - reference_e4m3(static_cast<uint8_t>(c)));
    const double best_err = std::abs(a - reference_e4m3(static_cast<uint8_t>(best)));
    if (err < best_err || (err == best_err && c % 2 == 0)) best = c;
  }
  if (best == kE4m3MaxFinite && a - 448.0 > 480.0 - a) return -1;
  return std::signbit(x) ? (best | 0x80) : best;
}

TEST(E4m3Test, DecodeAllCodes) {
  for (int i = 0; i < 256; ++i) {
    const auto c = static_cast<uint8_t>(i);
    const float f = e4m3_to_float(c);
    const double d = e4m3_to_double(c);
    EXPECT_EQ(e4m3_is_nan(c), is_nan_code(i)) << i;
    if (is_nan_code(i)) {
      EXPECT_TRUE(std::isnan(f)) << i;
      EXPECT_TRUE(std::isnan(d)) << i;
      EXPECT_EQ(std::signbit(f), i >= 0x80) << i;
      EXPECT_EQ(std::signbit(d), i >= 0x80) << i;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), reference_e4m3(c)) << i;
    EXPECT_EQ(d, reference_e4m3(c)) << i;
    EXPECT_EQ(std::signbit(f), i >= 0x80) << i;  // includes -0 (0x80)
    EXPECT_EQ(std::signbit(d), i >= 0x80) << i;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(E4m3Test, EncodeDecodeRoundTripsEveryCode) {
  for (int i = 0; i < 256; ++i) {
    const auto c = static_cast<uint8_t>(i);
    if (is_nan_code(i)) continue;
    for (Fp8Overflow o : {Fp8Overflow::kSaturate, Fp8Overflow::kNaN}) {
      EXPECT_EQ(e4m3_from_float(e4m3_to_float(c), o), c) << i;
      EXPECT_EQ(e4m3_from_double(e4m3_to_double(c), o), c) << i;
    }
  }
}

TEST(E4m3Test, SpecialValues) {
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_double(-0.0), 0x80);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(e4m3_from_double(kDNaN, Fp8Overflow::kNaN), 0x7F);
  EXPECT_EQ(e4m3_from_double(-kDNaN, Fp8Overflow::kSaturate), 0xFF);
  EXPECT_EQ(e4m3_from_double(kDInf), 0x7E);
  EXPECT_EQ(e4m3_from_double(-kDInf), 0xFE);
  EXPECT_EQ(e4m3_from_double(kDInf, Fp8Overflow::kNaN), 0x7F);
  EXPECT_EQ(e4m3_from_double(-kDInf, Fp8Overflow::kNaN), 0xFF);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::max(), Fp8Overflow::kNaN), 0x7F);
  EXPECT_EQ(e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(e4m3_from_float(-1e-30f), 0x80);
  EXPECT_EQ(e4m3_from_double(std::numeric_limits<double>::denorm_min()), 0x00);
  EXPECT_EQ(e4m3_from_double(-std::numeric_limits<double>::denorm_min()), 0x80);
}

// The value exactly between two adjacent codes goes to the even code (even mantissa), for all
// pairs including subnormals and the subnormal/normal boundary; one ulp either side decides.
TEST(E4m3Test, MidpointsRoundToEven) {
  for (int c = 0; c < kE4m3MaxFinite; ++c) {
    for (int sign : {0, 0x80}) {
      const double lo = reference_e4m3(static_cast<uint8_t>(c | sign));
      const double hi = reference_e4m3(static_cast<uint8_t>((c + 1) | sign));
      const double mid = (lo + hi) / 2;  // exact
      const int even = (c % 2 == 0 ? c : c + 1) | sign;
      for (Fp8Overflow o : {Fp8Overflow::kSaturate, Fp8Overflow::kNaN}) {
        ASSERT_EQ(e4m3_from_double(mid, o), even) << mid;
        ASSERT_EQ(e4m3_from_float(static_cast<float>(mid), o), even) << mid;
        ASSERT_EQ(e4m3_from_double(std::nextafter(mid, lo), o), c | sign) << mid;
        ASSERT_EQ(e4m3_from_double(std::nextafter(mid, hi), o), (c + 1) | sign) << mid;
        ASSERT_EQ(
            e4m3_from_float(std::nextafter(static_cast<float>(mid), static_cast<float>(lo)), o),
            c | sign)
            << mid;
        ASSERT_EQ(
            e4m3_from_float(std::nextafter(static_cast<float>(mid), static_cast<float>(hi)), o),
            (c + 1) | sign)
            << mid;
      }
    }
  }
}

// 448 is the largest finite value; the next step (480) would be code 0x7F, a NaN. 464 ties
// between 448 (even mantissa 110) and 480 (odd): it stays 448. Anything above overflows.
TEST(E4m3Test, SaturationBoundary) {
  for (double sign : {1.0, -1.0}) {
    const uint8_t s = sign < 0 ? 0x80 : 0x00;
    const double below = std::nextafter(464.0, 0.0);
    const double above = std::nextafter(464.0, 1000.0);
    for (Fp8Overflow o : {Fp8Overflow::kSaturate, Fp8Overflow::kNaN}) {
      EXPECT_EQ(e4m3_from_double(sign * 448.0, o), s | 0x7E);
      EXPECT_EQ(e4m3_from_double(sign * below, o), s | 0x7E);
      EXPECT_EQ(e4m3_from_double(sign * 464.0, o), s | 0x7E);
      EXPECT_EQ(e4m3_from_float(static_cast<float>(sign * 464.0), o), s | 0x7E);
    }
    for (double x : {above, 470.0, 480.0, 496.0, 512.0, 1e6, 1e300}) {
      EXPECT_EQ(e4m3_from_double(sign * x, Fp8Overflow::kSaturate), s | 0x7E) << x;
      EXPECT_EQ(e4m3_from_double(sign * x, Fp8Overflow::kNaN), s | 0x7F) << x;
      if (x < 1e30 && x != above) {  // as a float, `above` is 464 itself
        const auto f = static_cast<float>(sign * x);
        EXPECT_EQ(e4m3_from_float(f, Fp8Overflow::kSaturate), s | 0x7E) << x;
        EXPECT_EQ(e4m3_from_float(f, Fp8Overflow::kNaN), s | 0x7F) << x;
      }
    }
  }
  EXPECT_EQ(e4m3_from_float(std::nextafter(464.0f, 1000.0f), Fp8Overflow::kNaN), 0x7F);
}

TEST(E4m3Test, SubnormalRounding) {
  const double step = std::ldexp(1.0, -9);
  EXPECT_EQ(e4m3_from_double(step / 2), 0x00);  // tie to even code 0
  EXPECT_EQ(e4m3_from_double(std::nextafter(step / 2, 1.0)), 0x01);
  EXPECT_EQ(e4m3_from_double(step * 1.5), 0x02);  // tie between 1 and 2 -> 2
  EXPECT_EQ(e4m3_from_double(step * 2.5), 0x02);  // tie between 2 and 3 -> 2
  EXPECT_EQ(e4m3_from_double(step * 7.5), 0x08);  // tie between 7 and the min normal -> 8
  EXPECT_EQ(e4m3_from_double(step / 4), 0x00);
  EXPECT_EQ(e4m3_from_double(-step * 0.75), 0x81);
}

// A double just above a midpoint rounds up, although as a float it would be the midpoint itself.
TEST(E4m3Test, DoubleDecidesTiesOnTheDoubleValue) {
  for (int c = 0; c < kE4m3MaxFinite; c += 2) {  // even c: the tie goes down to c
    const double lo = reference_e4m3(static_cast<uint8_t>(c));
    const double hi = reference_e4m3(static_cast<uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;
    const double above = mid + std::ldexp(mid, -40);
    ASSERT_EQ(static_cast<float>(above), static_cast<float>(mid));
    EXPECT_EQ(e4m3_from_float(static_cast<float>(above)), c) << mid;
    EXPECT_EQ(e4m3_from_double(above), c + 1) << mid;
  }
}

TEST(E4m3Test, RandomValuesMatchBruteForce) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-12, 9);
  for (int i = 0; i < 100000; ++i) {
    double x = std::ldexp(mantissa(rng), exponent(rng));
    if (i % 2 != 0) x = -x;
    const int expected = brute_force_e4m3(x);
    const uint8_t sat = expected < 0 ? static_cast<uint8_t>(std::signbit(x) ? 0xFE : 0x7E)
                                     : static_cast<uint8_t>(expected);
    const uint8_t nan = expected < 0 ? static_cast<uint8_t>(std::signbit(x) ? 0xFF : 0x7F)
                                     : static_cast<uint8_t>(expected);
    ASSERT_EQ(e4m3_from_double(x, Fp8Overflow::kSaturate), sat) << x;
    ASSERT_EQ(e4m3_from_double(x, Fp8Overflow::kNaN), nan) << x;
  }
}

TEST(E8m0Test, DecodeAllCodes) {
  for (int b = 0; b < 256; ++b) {
    const auto c = static_cast<uint8_t>(b);
    if (b == 0xFF) {
      EXPECT_TRUE(e8m0_is_nan(c));
      EXPECT_TRUE(std::isnan(e8m0_to_float(c)));
      EXPECT_TRUE(std::isnan(e8m0_to_double(c)));
      continue;
    }
    EXPECT_FALSE(e8m0_is_nan(c));
    EXPECT_EQ(e8m0_to_float(c), std::ldexp(1.0f, b - 127)) << b;
    EXPECT_EQ(e8m0_to_double(c), std::ldexp(1.0, b - 127)) << b;
  }
  EXPECT_EQ(std::fpclassify(e8m0_to_float(0)), FP_SUBNORMAL);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.0f, 127));
}

TEST(E8m0Test, FromExponent) {
  EXPECT_EQ(e8m0_from_exponent(-127), 0);
  EXPECT_EQ(e8m0_from_exponent(0), 127);
  EXPECT_EQ(e8m0_from_exponent(127), 254);
  for (int e = -127; e <= 127; ++e) {
    EXPECT_EQ(e8m0_to_double(e8m0_from_exponent(e)), std::ldexp(1.0, e));
  }
  EXPECT_THROW(e8m0_from_exponent(128), Error);
  EXPECT_THROW(e8m0_from_exponent(-128), Error);
  try {
    e8m0_from_exponent(200);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[-127, 127], got 200"), std::string::npos) << e.what();
  }
}

TEST(E8m0Test, Pow2CeilOnPowersAndNeighbours) {
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    const int clamped = std::max(e, -127);
    EXPECT_EQ(e8m0_pow2ceil(p), clamped + 127) << e;  // exact power: itself
    if (e < 127) {
      // Just above a power of two needs the next one.
      EXPECT_EQ(e8m0_pow2ceil(std::nextafter(p, std::numeric_limits<float>::infinity())),
                std::max(e + 1, -127) + 127)
          << e;
    }
    if (e > -149) {
      // Just below a power of two still fits in it.
      EXPECT_EQ(e8m0_pow2ceil(std::nextafter(p, 0.0f)), clamped + 127) << e;
    }
  }
  EXPECT_EQ(e8m0_pow2ceil(1.0f), 127);
  EXPECT_EQ(e8m0_pow2ceil(1.5f), 128);
  EXPECT_EQ(e8m0_pow2ceil(0.75f), 127);
  EXPECT_EQ(e8m0_pow2ceil(448.0f), 127 + 9);
  EXPECT_EQ(e8m0_pow2ceil(std::ldexp(1.0f, 127)), 254);
}

TEST(E8m0Test, Pow2CeilSubnormals) {
  auto from_bits = [](uint32_t u) { return std::bit_cast<float>(u); };
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00400000u)), 0);  // 2^-127 exactly
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00400001u)), 1);  // just above 2^-127 -> 2^-126
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x007FFFFFu)), 1);  // largest subnormal -> 2^-126
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00200000u)), 0);  // 2^-128 -> clamps to 2^-127
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00000003u)), 0);  // 3 * 2^-149 -> clamps to 2^-127
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00000001u)), 0);
  EXPECT_EQ(e8m0_pow2ceil(from_bits(0x00800000u)), 1);  // smallest normal, 2^-126
  // Every subnormal: the chosen power is >= t and the next smaller e8m0 power is < t.
  for (uint32_t m = 1; m < 0x00800000u; m = m * 3 + 1) {
    const float t = from_bits(m);
    const uint8_t b = e8m0_pow2ceil(t);
    EXPECT_GE(e8m0_to_float(b), t) << m;
    if (b > 0) {
      EXPECT_LT(e8m0_to_float(static_cast<uint8_t>(b - 1)), t) << m;
    }
  }
}

TEST(E8m0Test, Pow2CeilRejectsBadInput) {
  EXPECT_THROW(e8m0_pow2ceil(0.0f), Error);
  EXPECT_THROW(e8m0_pow2ceil(-1.0f), Error);
  EXPECT_THROW(e8m0_pow2ceil(std::numeric_limits<float>::infinity()), Error);
  EXPECT_THROW(e8m0_pow2ceil(std::numeric_limits<float>::quiet_NaN()), Error);
  EXPECT_THROW(
      e8m0_pow2ceil(std::nextafter(std::ldexp(1.0f, 127), std::numeric_limits<float>::infinity())),
      Error);
  try {
    e8m0_pow2ceil(-2.0f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(0, 2^127], got -2"), std::string::npos) << e.what();
  }
}

TEST(E4m3Test, ScaledToBf16) {
  EXPECT_EQ(e4m3_scaled_to_bf16(0x38, 2.0f), 0x4000);                // 1 * 2
  EXPECT_EQ(e4m3_scaled_to_bf16(0xFE, e8m0_to_float(120)), 0xC060);  // -448 * 2^-7 = -3.5
  EXPECT_EQ(e4m3_scaled_to_bf16(0x01, e8m0_to_float(3)), 0x0001);    // 2^-133: bf16 subnormal
  EXPECT_EQ(e4m3_scaled_to_bf16(0x7F, 1.0f), 0x7FC0);
  EXPECT_EQ(e4m3_scaled_to_bf16(0xFF, 1.0f), 0xFFC0);  // the sign of a NaN code survives
  EXPECT_EQ(e4m3_scaled_to_bf16(0xB8, e8m0_to_float(0xFF)), 0xFFC0);
  EXPECT_EQ(e4m3_scaled_to_bf16(0x38, e8m0_to_float(0xFF)), 0x7FC0);
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (e4m3_is_nan(code)) continue;
    EXPECT_EQ(e4m3_scaled_to_bf16(code, 0.25f), bf16_from_double(e4m3_to_double(code) * 0.25));
  }
}

TEST(Fp8Test, Constexpr) {
  static_assert(e4m3_to_float(0x38) == 1.0f);
  static_assert(e4m3_from_float(448.0f) == 0x7E);
  static_assert(e4m3_from_double(-1.0) == 0xB8);
  static_assert(e8m0_to_float(128) == 2.0f);
  static_assert(e8m0_to_double(126) == 0.5);
}

}  // namespace
}  // namespace di
