// Manifold hyper-connections (spec §2.2): mixes m = (fn . x) * rsqrt(mean(x^2) + norm_eps);
// pre_j = sigmoid(m_j s0 + b_j) + eps; post_j = 2 sigmoid(m_{hc+j} s1 + b_{hc+j});
// comb = Sinkhorn(softmax rows(m_{2hc+..} s2 + b) + eps): one column step, then (iters - 1)
// row/column pairs, each dividing by (sum + eps).

#include "kernels/cpu/mhc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class MhcTest : public ::testing::Test {
 protected:
  static double tol() { return std::is_same_v<T, float> ? 1e-6 : 1e-15; }
};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MhcTest, Precisions);

// hc = 2, dim = 2, x = [1, -1 | 2, 0]: mean(x^2) = 6/4 = 1.5, norm_eps 2.5 -> rsqrt(4) = 1/2.
// fn rows (8 x 4) and m = (fn . x) / 2:
//   pre0  [2, 0, 0, 0]  -> 1;   pre1  [0, 0, -1, 0] -> -1;
//   post0 [0, 0, 0, 0]  -> 0;   post1 [0, 0, 1, 0]  -> 1;
//   comb00 [1, 0, 0, 0] -> 1/2; comb01, comb10, comb11 zero -> 0.
// scale = [2, 1, 2], base = [-2, 0, 0, 1, 0, 0, 0, 0], hc_eps = 1/4:
//   pre  = [sigmoid(0), sigmoid(-2)] + 1/4 = [0.75, 0.11920292202211755 + 0.25];
//   post = 2 [sigmoid(0), sigmoid(2)] = [1, 1.7615941559557649];
//   comb logits [[1, 0], [0, 0]] -> softmax rows [[e/(1+e), 1/(1+e)], [1/2, 1/2]] + 1/4
//        = [[0.98105857863000488, 0.51894142136999512], [0.75, 0.75]];
//   column sums [1.7310585786300049, 1.2689414213699951], + 1/4 -> divisors
//   [1.9810585786300049, 1.5189414213699951]; with sinkhorn_iters = 1 that is the result:
//   [[0.49521936868139104, 0.34164676403514016], [0.37858547348895672, 0.49376492697364488]].
TYPED_TEST(MhcTest, HandComputedOneSinkhornIteration) {
  using T = TypeParam;
  const std::vector<T> x = {T(1), T(-1), T(2), T(0)};
  std::vector<T> fn(8 * 4, T(0));
  fn[0 * 4 + 0] = T(2);
  fn[1 * 4 + 2] = T(-1);
  fn[3 * 4 + 2] = T(1);
  fn[4 * 4 + 0] = T(1);
  const std::vector<T> scale = {T(2), T(1), T(2)};
  const std::vector<T> base = {T(-2), T(0), T(0), T(1), T(0), T(0), T(0), T(0)};
  T pre[2], post[2], comb[4];
  hc_mixes(x.data(), 2, 2, fn.data(), scale.data(), base.data(), 2.5, 1, 0.25, pre, post, comb);
  const double tol = this->tol();
  EXPECT_EQ(pre[0], T(0.75));
  EXPECT_NEAR(static_cast<double>(pre[1]), 0.36920292202211755, tol);
  EXPECT_EQ(post[0], T(1));
  EXPECT_NEAR(static_cast<double>(post[1]), 1.7615941559557649, 2 * tol);
  EXPECT_NEAR(static_cast<double>(comb[0]), 0.49521936868139104, tol);
  EXPECT_NEAR(static_cast<double>(comb[1]), 0.34164676403514016, tol);
  EXPECT_NEAR(static_cast<double>(comb[2]), 0.37858547348895672, tol);
  EXPECT_NEAR(static_cast<double>(comb[3]), 0.49376492697364488, tol);
}

// hc = 4, dim = 3, fn / x in [-1, 1], base in [-0.5, 0.5], comb scale 0.2 (comb logits within
// about +-1.5: Sinkhorn converges geometrically, and slower for sharper logits), hc_eps 1e-6,
// 20 iterations. Every column ends on a column step, so its sum is s / (s + 1e-6) with s ~ 1,
// i.e. 1 - 1e-6 (to ~1e-12); the rows end at 1 - 1e-6 as well (measured; within 2e-6 of 1). pre in
// (eps, 1 + eps), post in (0, 2).
TYPED_TEST(MhcTest, TwentyIterationsAreDoublyStochastic) {
  using T = TypeParam;
  constexpr int64_t kHc = 4, kDim = 3, kMix = (2 + kHc) * kHc;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> x(kHc * kDim), fn(kMix * kHc * kDim), base(kMix);
  for (auto* v : {&x, &fn})
    for (auto& e : *v)
      e = static_cast<T>(d(rng));
  for (auto& e : base)
    e = static_cast<T>(d(rng) / 2);
  const std::vector<T> scale = {T(0.5), T(0.75), T(0.2)};
  T pre[kHc], post[kHc], comb[kHc * kHc];
  hc_mixes(x.data(), kHc, kDim, fn.data(), scale.data(), base.data(), 1e-6, 20, 1e-6, pre, post,
           comb);
  const double col_tol = std::is_same_v<T, float> ? 1e-6 : 1e-11;
  for (int64_t k = 0; k < kHc; ++k) {
    double col = 0, row = 0;
    for (int64_t j = 0; j < kHc; ++j) {
      EXPECT_GT(comb[j * kHc + k], T(0));
      col += static_cast<double>(comb[j * kHc + k]);
      row += static_cast<double>(comb[k * kHc + j]);
    }
    EXPECT_NEAR(col, 1.0 - 1e-6, col_tol) << "column " << k;
    EXPECT_NEAR(row, 1.0, 2e-6) << "row " << k;
    EXPECT_GT(pre[k], T(1e-6));
    EXPECT_LT(pre[k], T(1) + T(1e-6));
    EXPECT_GT(post[k], T(0));
    EXPECT_LT(post[k], T(2));
  }
}

// y[d] = sum_j pre[j] x[j][d]: x = [[1, 2, 3], [4, 5, 6]], pre = [2, -1] -> [-2, -1, 0].
TYPED_TEST(MhcTest, CollapseOnIntegers) {
  using T = TypeParam;
  const std::vector<T> x = {T(1), T(2), T(3), T(4), T(5), T(6)};
  const std::vector<T> pre = {T(2), T(-1)};
  std::vector<T> y(3);
  hc_collapse(x.data(), 2, 3, pre.data(), y.data());
  EXPECT_EQ(y, (std::vector<T>{T(-2), T(-1), T(0)}));
}

// out[k] = post[k] y + sum_j comb[j][k] res[j] (the contraction is over the FIRST index):
// y = [1, 2], res = [[1, 2], [3, 4]], post = [2, 3], comb = [[1, 2], [3, 4]]:
//   out[0] = 2 [1, 2] + 1 [1, 2] + 3 [3, 4] = [12, 18];
//   out[1] = 3 [1, 2] + 2 [1, 2] + 4 [3, 4] = [17, 26].
// (Contracting over the second index would give [9, 14] and [20, 30].)
TYPED_TEST(MhcTest, ExpandOnIntegersContractsOverFirstIndex) {
  using T = TypeParam;
  const std::vector<T> y = {T(1), T(2)};
  const std::vector<T> res = {T(1), T(2), T(3), T(4)};
  const std::vector<T> post = {T(2), T(3)};
  const std::vector<T> comb = {T(1), T(2), T(3), T(4)};
  std::vector<T> out(4);
  hc_expand(y.data(), res.data(), 2, 2, post.data(), comb.data(), out.data());
  EXPECT_EQ(out, (std::vector<T>{T(12), T(18), T(17), T(26)}));
}

}  // namespace
}  // namespace di::cpu
