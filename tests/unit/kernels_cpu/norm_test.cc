// RMSNorm on hand-computable rows.

#include "kernels/cpu/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class NormTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(NormTest, Precisions);

// [3, 4]: mean(x^2) = (9 + 16) / 2 = 12.5; with eps = 3.5 that is 16, rsqrt = 1/4 exactly, so
// y = [0.75, 1] and, with weight [2, -1], [1.5, -1].
TYPED_TEST(NormTest, ThreeFourIsExact) {
  using T = TypeParam;
  const std::vector<T> row = {T(3), T(4)};
  EXPECT_EQ(rms_rsqrt(row.data(), 2, 3.5), T(0.25));
  std::vector<T> x = row;
  rms_norm<T>(x.data(), 1, 2, nullptr, 3.5);
  EXPECT_EQ(x[0], T(0.75));
  EXPECT_EQ(x[1], T(1));
  x = row;
  const std::vector<T> w = {T(2), T(-1)};
  rms_norm(x.data(), 1, 2, w.data(), 3.5);
  EXPECT_EQ(x[0], T(1.5));
  EXPECT_EQ(x[1], T(-1));
}

// Rows are independent. Row 0 = [3, 4] with eps 1e-20: y = [3, 4] / sqrt(12.5) =
// [0.848528137423857, 1.131370849898476]. Row 1 = [0, 0]: rsqrt(0 + 1e-20) = 1e10 (finite), and
// 0 * 1e10 = 0 -- no NaN.
TYPED_TEST(NormTest, TinyEpsOnZeroRowGivesZeroNotNaN) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
  std::vector<T> x = {T(3), T(4), T(0), T(0)};
  EXPECT_NEAR(static_cast<double>(rms_rsqrt(x.data() + 2, 2, 1e-20)) / 1e10, 1.0, tol);
  rms_norm<T>(x.data(), 2, 2, nullptr, 1e-20);
  EXPECT_NEAR(static_cast<double>(x[0]), 0.848528137423857, tol);
  EXPECT_NEAR(static_cast<double>(x[1]), 1.131370849898476, tol);
  EXPECT_EQ(x[2], T(0));
  EXPECT_EQ(x[3], T(0));
  EXPECT_FALSE(std::isnan(x[2]) || std::isnan(x[3]));
}

// dim 4, x = [1, -1, 1, -1], eps 0: mean 1, rsqrt 1: unchanged; weight scales per column.
TYPED_TEST(NormTest, UnitRmsRowIsUnchanged) {
  using T = TypeParam;
  std::vector<T> x = {T(1), T(-1), T(1), T(-1)};
  const std::vector<T> w = {T(0.5), T(2), T(-3), T(0)};
  rms_norm(x.data(), 1, 4, w.data(), 0.0);
  EXPECT_EQ(x, (std::vector<T>{T(0.5), T(-2), T(-3), T(0)}));
}

}  // namespace
}  // namespace di::cpu
