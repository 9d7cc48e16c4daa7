#include "common/fp4.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace di {
namespace {

constexpr std::array<float, 16> kValues = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(E2m1Test, DecodeAllCodes) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(v, kValues[c]) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;  // code 8 is -0
    // Only the low nibble is read.
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c | 0xF0)), kValues[c]) << c;
  }
}

TEST(E2m1Test, EncodeDecodeRoundTripsEveryCode) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_from_float(kValues[c]), c) << c;
    EXPECT_EQ(e2m1_from_double(static_cast<double>(kValues[c])), c) << c;
  }
}

TEST(E2m1Test, ListedTiesGoToTheEvenCode) {
  struct Tie {
    double x;
    float expected;
  };
  for (const Tie& t : {Tie{0.25, 0.0f}, Tie{0.75, 1.0f}, Tie{1.25, 1.0f}, Tie{1.75, 2.0f},
                       Tie{2.5, 2.0f}, Tie{3.5, 4.0f}, Tie{5.0, 4.0f}}) {
    EXPECT_EQ(e2m1_to_float(e2m1_from_double(t.x)), t.expected) << t.x;
    EXPECT_EQ(e2m1_to_float(e2m1_from_float(static_cast<float>(t.x))), t.expected) << t.x;
    EXPECT_EQ(e2m1_to_float(e2m1_from_double(-t.x)), -t.expected) << t.x;
    EXPECT_EQ(e2m1_to_float(e2m1_from_float(static_cast<float>(-t.x))), -t.expected) << t.x;
  }
  EXPECT_EQ(e2m1_from_double(-0.25), 8);  // ties to -0
}

TEST(E2m1Test, EveryMidpointTiesToEvenAndNeighboursDecide) {
  for (int c = 0; c < 7; ++c) {
    for (int sign : {0, 8}) {
      const double lo = kValues[c | sign];
      const double hi = kValues[(c + 1) | sign];
      const double mid = (lo + hi) / 2;
      const int even = (c % 2 == 0 ? c : c + 1) | sign;
      EXPECT_EQ(e2m1_from_double(mid), even) << mid;
      EXPECT_EQ(e2m1_from_float(static_cast<float>(mid)), even) << mid;
      EXPECT_EQ(e2m1_from_double(std::nextafter(mid, lo)), c | sign) << mid;
      EXPECT_EQ(e2m1_from_double(std::nextafter(mid, hi)), (c + 1) | sign) << mid;
      EXPECT_EQ(e2m1_from_float(std::nextafter(static_cast<float>(mid), static_cast<float>(lo))),
                c | sign)
          << mid;
    }
  }
}

TEST(E2m1Test, SaturatesAndHandlesSpecials) {
  for (double x : {6.0, 6.5, 7.0, 7.5, 100.0, 1e300, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(e2m1_from_double(x), 0x7) << x;
    EXPECT_EQ(e2m1_from_double(-x), 0xF) << x;
    EXPECT_EQ(e2m1_from_float(static_cast<float>(x)), 0x7) << x;
    EXPECT_EQ(e2m1_from_float(static_cast<float>(-x)), 0xF) << x;
  }
  EXPECT_EQ(e2m1_from_float(0.0f), 0);
  EXPECT_EQ(e2m1_from_float(-0.0f), 8);
  EXPECT_EQ(e2m1_from_float(1e-30f), 0);
  EXPECT_EQ(e2m1_from_float(-1e-30f), 8);
  EXPECT_EQ(e2m1_from_double(std::numeric_limits<double>::denorm_min()), 0);
  // NaN has no code: documented as a programmer error that gives the saturated code, keeping
  // the sign.
  EXPECT_EQ(e2m1_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7);
  EXPECT_EQ(e2m1_from_float(-std::numeric_limits<float>::quiet_NaN()), 0xF);
  EXPECT_EQ(e2m1_from_double(std::numeric_limits<double>::quiet_NaN()), 0x7);
}

TEST(E2m1Test, DoubleDecidesTiesOnTheDoubleValue) {
  // 0.25 + 2^-40 is 0.25 as a float (a tie, to code 0) but above the tie as a double (code 1).
  const double above = 0.25 + std::ldexp(1.0, -40);
  ASSERT_EQ(static_cast<float>(above), 0.25f);
  EXPECT_EQ(e2m1_from_float(static_cast<float>(above)), 0);
  EXPECT_EQ(e2m1_from_double(above), 1);
  EXPECT_EQ(e2m1_from_double(5.0 + std::ldexp(1.0, -30)), 7);
  EXPECT_EQ(e2m1_from_float(static_cast<float>(5.0 + std::ldexp(1.0, -30))), 6);
}

TEST(E2m1Test, RandomValuesMatchBruteForce) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> dist(-8.0, 8.0);
  for (int i = 0; i < 100000; ++i) {
    const double x = dist(rng);
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const double err = std::abs(std::abs(x) - kValues[c]);
      const double best_err = std::abs(std::abs(x) - kValues[best]);
      if (err < best_err || (err == best_err && c % 2 == 0)) best = c;
    }
    if (std::signbit(x)) best |= 8;
    ASSERT_EQ(e2m1_from_double(x), best) << x;
  }
}

TEST(E2m1Test, PackAndUnpack) {
  for (int lo = 0; lo < 16; ++lo) {
    for (int hi = 0; hi < 16; ++hi) {
      const uint8_t byte = pack_e2m1(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      EXPECT_EQ(byte, lo | (hi << 4));
      EXPECT_EQ(e2m1_lo(byte), lo);
      EXPECT_EQ(e2m1_hi(byte), hi);
    }
  }
  EXPECT_EQ(pack_e2m1(0x1, 0xF), 0xF1);            // element 2j low, 2j+1 high
  EXPECT_EQ(pack_e2m1(0xF3, 0xA2), 0x23);          // stray high bits of the inputs are dropped
  EXPECT_EQ(e2m1_to_float(e2m1_hi(0x7F)), 6.0f);   // high nibble 7
  EXPECT_EQ(e2m1_to_float(e2m1_lo(0x7F)), -6.0f);  // low nibble F
}

TEST(E2m1Test, ScaledToBf16) {
  for (int c = 0; c < 16; ++c) {
    const auto n = static_cast<uint8_t>(c);
    EXPECT_EQ(e2m1_scaled_to_bf16(n, 0.5f), bf16_from_float(kValues[c] * 0.5f)) << c;
  }
  EXPECT_EQ(e2m1_scaled_to_bf16(7, std::ldexp(1.0f, -127)), 0x0140);  // 6 * 2^-127 = 1.5 * 2^-125
  EXPECT_EQ(e2m1_scaled_to_bf16(0x3, std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(e2m1_scaled_to_bf16(0xB, std::numeric_limits<float>::quiet_NaN()), 0xFFC0);
}

TEST(E2m1Test, Constexpr) {
  static_assert(e2m1_to_float(7) == 6.0f);
  static_assert(e2m1_from_float(2.5f) == 4);
  static_assert(e2m1_from_double(-1.0) == 10);
  static_assert(pack_e2m1(2, 3) == 0x32);
}

}  // namespace
}  // namespace di
