// RoPE frequency tables (spec §4) and the rotation.
// Plain: freq_i = base^(-2i/64). For base 10000: i = 8, 16, 24 give exponents -1/4, -1/2, -3/4,
// so 1/10, 1/100, 1/1000.
// YaRN (base 160000, original 65536, factor 16, beta 32 / 1): corrected dims
// d(n) = 64 ln(65536 / (2 pi n)) / (2 ln 160000): d(32) = 15.453 -> low = 15,
// d(1) = 24.708 -> high = 25; ramp_i = clamp((i - 15) / 10, 0, 1) and
// freq_i <- freq_i / 16 * ramp_i + freq_i * (1 - ramp_i): i <= 15 unchanged, i >= 25 divided by 16,
// i = 20: ramp 1/2 -> freq * 17/32 with freq_20 = 160000^(-5/8) = 5.590169943749474e-4 ->
// 2.969777782616908e-4; i = 17: ramp 0.2 -> freq * 0.8125 with freq_17 = 160000^(-17/32) =
// 1.7191400548340802e-3 -> 1.3968012945526902e-3.

#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class RopeTest : public ::testing::Test {
 protected:
  static double tol() { return std::is_same_v<T, float> ? 1e-6 : 1e-15; }
};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RopeTest, Precisions);

RopeParams plain(double base, int64_t dim) {
  RopeParams p;
  p.rope_dim = dim;
  p.base = base;
  return p;
}

RopeParams yarn() {
  RopeParams p;
  p.rope_dim = 64;
  p.base = 160000.0;
  p.original_seq_len = 65536;
  p.factor = 16.0;
  p.beta_fast = 32.0;
  p.beta_slow = 1.0;
  return p;
}

TYPED_TEST(RopeTest, PlainFrequenciesBase10000) {
  using T = TypeParam;
  const auto f = rope_frequencies<T>(plain(10000.0, 64));
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(f[0], T(1));
  EXPECT_NEAR(static_cast<double>(f[8]), 0.1, 0.1 * this->tol());
  EXPECT_NEAR(static_cast<double>(f[16]), 0.01, 0.01 * this->tol());
  EXPECT_NEAR(static_cast<double>(f[24]), 0.001, 0.001 * this->tol());
  for (int i = 0; i < 32; ++i) {
    const double want = std::pow(10000.0, -i / 32.0);
    EXPECT_NEAR(static_cast<double>(f[static_cast<size_t>(i)]) / want, 1.0, 4 * this->tol()) << i;
    if (i > 0) {
      EXPECT_LT(f[static_cast<size_t>(i)], f[static_cast<size_t>(i - 1)]);
    }
  }
}

TYPED_TEST(RopeTest, YarnRampBetweenDims15And25) {
  using T = TypeParam;
  const auto base = rope_frequencies<T>(plain(160000.0, 64));
  const auto f = rope_frequencies<T>(yarn());
  ASSERT_EQ(f.size(), 32u);
  for (size_t i = 0; i <= 15; ++i)
    EXPECT_EQ(f[i], base[i]) << i;
  for (size_t i = 25; i < 32; ++i)
    EXPECT_EQ(f[i], base[i] / T(16)) << i;
  // Inside the ramp: strictly between the two.
  for (size_t i = 16; i <= 24; ++i) {
    EXPECT_LT(f[i], base[i]) << i;
    EXPECT_GT(f[i], base[i] / T(16)) << i;
  }
  EXPECT_NEAR(static_cast<double>(f[20]), 2.969777782616908e-4, 2.97e-4 * 4 * this->tol());
  EXPECT_NEAR(static_cast<double>(f[17]), 1.3968012945526902e-3, 1.4e-3 * 4 * this->tol());
}

// (1, 0) rotated at position p is (cos(p freq), sin(p freq)). Base 10000, dim 4: freqs [1, 1/100];
// at p = 3: (cos 3, sin 3) = (-0.9899924966004454, 0.1411200080598672) and
// (cos 0.03, sin 0.03) = (0.9995500337489875, 0.029995500202495664). Position 0 is the identity.
TYPED_TEST(RopeTest, RotationOfUnitVector) {
  using T = TypeParam;
  const RopeTable<T> table(plain(10000.0, 4));
  std::vector<T> x = {T(1), T(0), T(1), T(0)};
  table.apply(x.data(), 3);
  EXPECT_NEAR(static_cast<double>(x[0]), -0.9899924966004454, this->tol());
  EXPECT_NEAR(static_cast<double>(x[1]), 0.1411200080598672, this->tol());
  EXPECT_NEAR(static_cast<double>(x[2]), 0.9995500337489875, this->tol());
  EXPECT_NEAR(static_cast<double>(x[3]), 0.029995500202495664, this->tol());
  // Exactly the angle the table uses: one product pos * freq in T.
  const T angle = T(3) * table.freqs()[1];
  EXPECT_EQ(x[2], std::cos(angle));
  EXPECT_EQ(x[3], std::sin(angle));
  // (0, 1) goes to (-sin, cos); the inverse turns the other way.
  std::vector<T> y = {T(0), T(1), T(0), T(1)};
  table.apply(y.data(), 3, /*inverse=*/true);
  EXPECT_NEAR(static_cast<double>(y[0]), 0.1411200080598672, this->tol());
  EXPECT_NEAR(static_cast<double>(y[1]), -0.9899924966004454, this->tol());
  std::vector<T> z = {T(0.25), T(-2), T(3), T(0.5)};
  const std::vector<T> z0 = z;
  table.apply(z.data(), 0);
  EXPECT_EQ(z, z0);
}

// apply then inverse returns the input (double within 1e-15, float within 1e-6), YaRN table, a
// large position, |x| <= 1.
TYPED_TEST(RopeTest, InverseUndoesApply) {
  using T = TypeParam;
  const RopeTable<T> table(yarn());
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> x(64);
  for (auto& e : x)
    e = static_cast<T>(d(rng));
  for (int64_t pos : {1, 777, 65535, 131071}) {
    std::vector<T> y = x;
    table.apply(y.data(), pos);
    table.apply(y.data(), pos, /*inverse=*/true);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(static_cast<double>(y[i]), static_cast<double>(x[i]), this->tol())
          << "pos " << pos << " i " << i;
  }
}

}  // namespace
}  // namespace di::cpu
