#include "common/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace di {
namespace {

bool is_nan_code(uint16_t c) {
  return (c & 0x7FFFu) > 0x7F80u;
}

float float_from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(Bf16Test, DecodeIsTheTopHalfOfFp32) {
  for (uint32_t c = 0; c <= 0xFFFF; ++c) {
    EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_float(static_cast<uint16_t>(c))), c << 16);
  }
}

TEST(Bf16Test, AllCodesRoundTrip) {
  int non_nan = 0;
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const auto c = static_cast<uint16_t>(i);
    const float f = bf16_to_float(c);
    if (is_nan_code(c)) {
      const auto expected = static_cast<uint16_t>((c & 0x8000u) | 0x7FC0u);
      EXPECT_EQ(bf16_from_float(f), expected) << std::hex << c;
      EXPECT_EQ(bf16_from_double(static_cast<double>(f)), expected) << std::hex << c;
      continue;
    }
    ++non_nan;
    EXPECT_EQ(bf16_from_float(f), c) << std::hex << c;
    EXPECT_EQ(bf16_from_double(static_cast<double>(f)), c) << std::hex << c;
  }
  EXPECT_EQ(non_nan, 65536 - 2 * 127);
}

// For every finite code c (both signs) the float exactly between c and the next code away from
// zero is a tie: it must go to the even one of the two; one fp32 ulp either side decides.
TEST(Bf16Test, MidpointsRoundToEven) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t m = 0; m <= 0x7F7F; ++m) {
      const uint32_t c = sign | m;
      const uint32_t mid_bits = (c << 16) | 0x8000u;
      const auto even = static_cast<uint16_t>((c & 1u) == 0 ? c : c + 1);
      ASSERT_EQ(bf16_from_float(float_from_bits(mid_bits)), even) << std::hex << c;
      ASSERT_EQ(bf16_from_float(float_from_bits(mid_bits - 1)), c) << std::hex << c;
      ASSERT_EQ(bf16_from_float(float_from_bits(mid_bits + 1)), c + 1) << std::hex << c;
      const double mid = static_cast<double>(float_from_bits(mid_bits));
      ASSERT_EQ(bf16_from_double(mid), even) << std::hex << c;
      ASSERT_EQ(bf16_from_double(std::nextafter(mid, 0.0)), c) << std::hex << c;
      ASSERT_EQ(bf16_from_double(std::nextafter(mid, 2.0 * mid)), c + 1) << std::hex << c;
    }
  }
  // The midpoint above the largest finite value ties to the even code, which is infinity.
  EXPECT_EQ(bf16_from_float(float_from_bits(0x7F7F8000u)), kBf16PositiveInf);
  EXPECT_EQ(bf16_from_float(float_from_bits(0x7F7F7FFFu)), kBf16MaxFinite);
}

TEST(Bf16Test, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_from_float(0.0f), 0x0000);
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(kInf), 0x7F80);
  EXPECT_EQ(bf16_from_float(-kInf), 0xFF80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(bf16_from_float(-std::numeric_limits<float>::quiet_NaN()), 0xFFC0);
  // A signalling NaN whose payload sits in the dropped half must not truncate to infinity.
  EXPECT_EQ(bf16_from_float(float_from_bits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(bf16_from_float(float_from_bits(0xFF800001u)), 0xFFC0);

  constexpr double kDInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(bf16_from_double(-0.0), 0x8000);
  EXPECT_EQ(bf16_from_double(kDInf), 0x7F80);
  EXPECT_EQ(bf16_from_double(-kDInf), 0xFF80);
  EXPECT_EQ(bf16_from_double(1e300), 0x7F80);
  EXPECT_EQ(bf16_from_double(-1e300), 0xFF80);
  EXPECT_EQ(bf16_from_double(std::numeric_limits<double>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(bf16_from_double(-std::numeric_limits<double>::quiet_NaN()), 0xFFC0);
  EXPECT_EQ(bf16_from_double(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(bf16_from_double(-std::numeric_limits<double>::denorm_min()), 0x8000);
  // bf16 subnormals: the smallest is 2^-133; half of it ties to zero, a bit more rounds up.
  EXPECT_EQ(bf16_from_double(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(bf16_from_double(std::ldexp(1.0, -134)), 0x0000);
  EXPECT_EQ(bf16_from_double(std::ldexp(1.0, -134) * (1 + 1e-9)), 0x0001);
  EXPECT_EQ(bf16_from_double(std::ldexp(3.0, -134)), 0x0002);
}

// A double just above a midpoint rounds up, although as a float it would be the midpoint
// itself (and tie down to the even code): bf16_from_double must not round through float.
TEST(Bf16Test, DoubleDecidesTiesOnTheDoubleValue) {
  int checked = 0;
  for (uint32_t c = 0x0080; c < 0x7F7F; c += 2) {  // even codes: the tie goes down to c
    const double mid = static_cast<double>(float_from_bits((c << 16) | 0x8000u));
    const double above = mid + std::ldexp(mid, -40);
    ASSERT_EQ(static_cast<float>(above), static_cast<float>(mid));
    ASSERT_EQ(bf16_from_float(static_cast<float>(above)), c) << std::hex << c;
    ASSERT_EQ(bf16_from_double(above), c + 1) << std::hex << c;
    ASSERT_EQ(bf16_from_double(-above), (c + 1) | 0x8000u) << std::hex << c;
    ++checked;
  }
  EXPECT_GT(checked, 16000);
}

// Random doubles against the nearest-value definition (ties to the even code), checked on the
// neighbouring codes with exact double differences.
TEST(Bf16Test, RandomDoublesRoundToNearest) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-135, 127);
  for (int i = 0; i < 200000; ++i) {
    const double d = std::ldexp(mantissa(rng), exponent(rng));
    const uint16_t c = bf16_from_double(d);
    if (c == kBf16PositiveInf) {
      EXPECT_GE(d, std::ldexp(2.0 - std::ldexp(1.0, -8), 127));
      continue;
    }
    const double v = static_cast<double>(bf16_to_float(c));
    const double err = std::abs(d - v);
    for (int delta : {-1, 1}) {
      const int n = static_cast<int>(c) + delta;
      if (n < 0 || n > kBf16MaxFinite) continue;
      const double other = static_cast<double>(bf16_to_float(static_cast<uint16_t>(n)));
      const double other_err = std::abs(d - other);
      ASSERT_TRUE(err < other_err || (err == other_err && (c & 1u) == 0))
          << d << " -> " << std::hex << c;
    }
    const auto f = static_cast<float>(d);
    if (static_cast<double>(f) == d) {
      ASSERT_EQ(bf16_from_float(f), c) << d;
    }
  }
}

TEST(Bf16Test, Constexpr) {
  static_assert(bf16_from_float(1.0f) == 0x3F80);
  static_assert(bf16_from_double(1.0) == 0x3F80);
  static_assert(bf16_to_float(0xC000) == -2.0f);
}

}  // namespace
}  // namespace di
