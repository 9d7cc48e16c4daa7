// Router (delta spec §5.4): scores = sqrt(softplus(logit / gate_temp)), selection by
// score + bias with the lower index winning ties, weights = unbiased scores normalised by
// (sum + 1e-20) when k > 1, times route_scale.
// Hand values: softplus(0) = ln 2 = 0.6931471805599453, sqrt -> 0.8325546111576977;
// softplus(1) -> sqrt 1.1459763032097229; softplus(2) -> sqrt 1.4583991261115636;
// softplus(3) = 3.0485873515737421 -> sqrt 1.7460204327480655.

#include "kernels/cpu/moe_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class MoeGateTest : public ::testing::Test {
 protected:
  static double tol() { return std::is_same_v<T, float> ? 1e-6 : 1e-15; }
};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MoeGateTest, Precisions);

constexpr double kSqrtSp0 = 0.8325546111576977;
constexpr double kSqrtSp2 = 1.4583991261115636;
constexpr double kSqrtSp3 = 1.7460204327480655;

// Above the threshold softplus is the identity (torch threshold 20); at and below it,
// log1p(exp(x)): softplus(20) = 20.000000002061154, softplus(0) = ln 2, softplus(-1) =
// 0.31326168751822284.
TYPED_TEST(MoeGateTest, SoftplusThreshold) {
  using T = TypeParam;
  EXPECT_EQ(softplus(T(21)), T(21));
  EXPECT_EQ(softplus(T(20.5)), T(20.5));
  EXPECT_EQ(softplus(T(1000)), T(1000));  // exp would overflow; the threshold returns x
  EXPECT_NEAR(static_cast<double>(softplus(T(20))), 20.000000002061154, 20 * this->tol());
  EXPECT_NEAR(static_cast<double>(softplus(T(0))), 0.6931471805599453, this->tol());
  EXPECT_NEAR(static_cast<double>(softplus(T(-1))), 0.31326168751822284, this->tol());
  if constexpr (std::is_same_v<T, double>) {
    EXPECT_GT(softplus(20.0), 20.0);  // still the log1p branch at exactly 20
  }
}

// All logits 0 -> equal scores sqrt(ln 2); bias [0, 1, 0, 1] makes experts 1 and 3 tie at the
// top -> ids [1, 3] (lower first). Weights s / (2 s + 1e-20) = 1/2 exactly (the 1e-20 is far
// below an ulp), times 1.5 -> 0.75 each.
TYPED_TEST(MoeGateTest, TieGoesToLowerIndex) {
  using T = TypeParam;
  const std::vector<T> logits(4, T(0));
  const std::vector<T> bias = {T(0), T(1), T(0), T(1)};
  int64_t ids[2];
  T w[2];
  route_token(logits.data(), 4, bias.data(), 2, 1.0, true, 1.5, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(w[0], T(0.75));
  EXPECT_EQ(w[1], T(0.75));
}

// Logits [3, 2, 1, 0]: scores decrease. Bias +10 on expert 3 selects it first, then expert 0:
// ids [3, 0]. The weights use the unbiased scores: normalised,
//   w = [0.8325546, 1.7460204] / (2.5785750 + 1e-20) * 1.5 = [0.48431086761971566,
//   1.0156891323802843]; without normalisation [0.8325546, 1.7460204] * 1.5.
// With zero bias the selection is [0, 1] instead.
TYPED_TEST(MoeGateTest, BiasSelectsButDoesNotWeight) {
  using T = TypeParam;
  const std::vector<T> logits = {T(3), T(2), T(1), T(0)};
  const std::vector<T> bias = {T(0), T(0), T(0), T(10)};
  int64_t ids[2];
  T w[2];
  route_token(logits.data(), 4, bias.data(), 2, 1.0, true, 1.5, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  EXPECT_NEAR(static_cast<double>(w[0]), 0.48431086761971566, this->tol());
  EXPECT_NEAR(static_cast<double>(w[1]), 1.0156891323802843, 2 * this->tol());
  EXPECT_NEAR(static_cast<double>(w[0] + w[1]), 1.5, 2 * this->tol());

  route_token(logits.data(), 4, bias.data(), 2, 1.0, false, 1.5, ids, w);
  EXPECT_NEAR(static_cast<double>(w[0]), kSqrtSp0 * 1.5, 2 * this->tol());
  EXPECT_NEAR(static_cast<double>(w[1]), kSqrtSp3 * 1.5, 4 * this->tol());

  const std::vector<T> no_bias(4, T(0));
  route_token(logits.data(), 4, no_bias.data(), 2, 1.0, true, 1.5, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(static_cast<double>(w[0]), kSqrtSp3 / (kSqrtSp3 + kSqrtSp2) * 1.5, 2 * this->tol());
}

// k = 1: no normalisation even with norm_topk_prob (it would give route_scale): the weight is
// score * route_scale. gate_temp divides the logit first: logit 4 / temp 2 -> sqrt(softplus(2)).
TYPED_TEST(MoeGateTest, TopOneSkipsNormalisationAndUsesGateTemp) {
  using T = TypeParam;
  const std::vector<T> logits = {T(0), T(4), T(-2)};
  const std::vector<T> bias(3, T(0));
  int64_t id = -1;
  T w = 0;
  route_token(logits.data(), 3, bias.data(), 1, 2.0, true, 1.5, &id, &w);
  EXPECT_EQ(id, 1);
  EXPECT_NEAR(static_cast<double>(w), kSqrtSp2 * 1.5, 4 * this->tol());
}

// Descending order; equal values keep ascending index order; k is clipped at n; -0 == +0 ties.
TYPED_TEST(MoeGateTest, TopkIndicesOrderAndTies) {
  using T = TypeParam;
  const std::vector<T> v = {T(1), T(3), T(3), T(2), T(3)};
  EXPECT_EQ(topk_indices(v.data(), 5, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(topk_indices(v.data(), 5, 3), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(topk_indices(v.data(), 5, 4), (std::vector<int64_t>{1, 2, 4, 3}));
  EXPECT_EQ(topk_indices(v.data(), 5, 9), (std::vector<int64_t>{1, 2, 4, 3, 0}));
  const std::vector<T> z = {T(-1), T(-0.0), T(0), T(-0.0)};
  EXPECT_EQ(topk_indices(z.data(), 4, 3), (std::vector<int64_t>{1, 2, 3}));
}

}  // namespace
}  // namespace di::cpu
