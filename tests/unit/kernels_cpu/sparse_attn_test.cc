// Sparse attention with a sink on hand-computable scores. One head, dim 2, q = [2, 0],
// scale 0.5; entries kv0 = [0, 1], kv1 = [1, 2], kv2 = [2, 3] -> s = [0, 1, 2], m = 2;
// p = [e^-2, e^-1, 1]; sink 0 adds exp(0 - 2) = e^-2 to the denominator only:
// den = 2 e^-2 + e^-1 + 1 = 1.6385500076446677;
// o = (e^-2 [0, 1] + e^-1 [1, 2] + [2, 3]) / den = [1.4451066065265524, 2.3625120670830171].

#include "kernels/cpu/sparse_attn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/error.h"

namespace di::cpu {
namespace {

template <typename T>
class SparseAttnTest : public ::testing::Test {
 protected:
  static double tol() { return std::is_same_v<T, float> ? 1e-6 : 1e-15; }
};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SparseAttnTest, Precisions);

// kv3 = [100, 100] is never listed (or only masked), so it must not contribute.
template <typename T>
std::vector<T> entries() {
  return {T(0), T(1), T(1), T(2), T(2), T(3), T(100), T(100)};
}

// Row 0 lists [0, 1, 2] plus a masked slot; row 1 the same entries in another order with the
// masks elsewhere (same result); row 2 is all masked -> zero output.
TYPED_TEST(SparseAttnTest, HandComputedSoftmaxWithSink) {
  using T = TypeParam;
  const auto kv = entries<T>();
  const std::vector<T> q = {T(2), T(0), T(2), T(0), T(2), T(0)};
  const std::vector<T> sink = {T(0)};
  const std::vector<int32_t> idx = {0, -1, 1, 2, -1, 2, 0, 1, -1, -1, -1, -1};
  std::vector<T> out(6, T(-7));
  sparse_attention(q.data(), 3, 1, 2, kv.data(), 4, sink.data(), idx.data(), 4, T(0.5), out.data());
  for (int row = 0; row < 2; ++row) {
    EXPECT_NEAR(static_cast<double>(out[2 * row]), 1.4451066065265524, 2 * this->tol()) << row;
    EXPECT_NEAR(static_cast<double>(out[2 * row + 1]), 2.3625120670830171, 3 * this->tol()) << row;
  }
  EXPECT_EQ(out[4], T(0));
  EXPECT_EQ(out[5], T(0));
}

// The sink only dilutes: sink = -inf gives the plain softmax, o = (e^-2 [0, 1] + e^-1 [1, 2] +
// [2, 3]) / (e^-2 + e^-1 + 1) = [1.5752103826044414, 2.5752103826044414]; two heads in one call,
// the second with the sink of the first case.
TYPED_TEST(SparseAttnTest, SinkPerHead) {
  using T = TypeParam;
  const auto kv = entries<T>();
  const std::vector<T> q = {T(2), T(0), T(2), T(0)};
  const std::vector<T> sink = {-std::numeric_limits<T>::infinity(), T(0)};
  const std::vector<int32_t> idx = {2, 1, 0};
  std::vector<T> out(4);
  sparse_attention(q.data(), 1, 2, 2, kv.data(), 4, sink.data(), idx.data(), 3, T(0.5), out.data());
  EXPECT_NEAR(static_cast<double>(out[0]), 1.5752103826044414, 2 * this->tol());
  EXPECT_NEAR(static_cast<double>(out[1]), 2.5752103826044414, 3 * this->tol());
  EXPECT_NEAR(static_cast<double>(out[2]), 1.4451066065265524, 2 * this->tol());
  EXPECT_NEAR(static_cast<double>(out[3]), 2.3625120670830171, 3 * this->tol());
}

TYPED_TEST(SparseAttnTest, IndexOutsideEntriesThrows) {
  using T = TypeParam;
  const auto kv = entries<T>();
  const std::vector<T> q = {T(1), T(0)};
  const std::vector<T> sink = {T(0)};
  const std::vector<int32_t> idx = {0, 4};
  std::vector<T> out(2);
  EXPECT_THROW(sparse_attention(q.data(), 1, 1, 2, kv.data(), 4, sink.data(), idx.data(), 2, T(1),
                                out.data()),
               Error);
}

// bf16_probs (the reference's bf16 run): each unnormalised p = exp(s - m) is rounded to bf16
// before it weights kv, the denominator sums the unrounded p. Hand case: p = [e^-2, e^-1, 1]
// rounds to bf16 [0.1357421875, 0.3671875, 1] (e^-2 = 0.13533528..., e^-1 = 0.36787944...;
// bf16 keeps 8 significant bits), den stays 2 e^-2 + e^-1 + 1 (sink 0):
// o = (0.1357421875 [0, 1] + 0.3671875 [1, 2] + [2, 3]) / den
//   = [1.444684317815061, 2.361915821576356].
TEST(SparseAttnBf16Test, ProbabilitiesRoundedBeforePvDenominatorNot) {
  const auto kv = entries<float>();
  const std::vector<float> q = {2, 0};
  const std::vector<float> sink = {0};
  const std::vector<int32_t> idx = {0, 1, 2};
  std::vector<float> out(2), plain(2);
  sparse_attention(q.data(), 1, 1, 2, kv.data(), 4, sink.data(), idx.data(), 3, 0.5f, out.data(),
                   /*bf16_probs=*/true);
  sparse_attention(q.data(), 1, 1, 2, kv.data(), 4, sink.data(), idx.data(), 3, 0.5f, plain.data());
  EXPECT_NEAR(out[0], 1.444684317815061, 2e-6);
  EXPECT_NEAR(out[1], 2.361915821576356, 3e-6);
  // The rounding is visible against the unrounded result (1.4451066, 2.3625121).
  EXPECT_GT(std::fabs(out[0] - plain[0]), 3e-4);
  EXPECT_GT(std::fabs(out[1] - plain[1]), 5e-4);
}

}  // namespace
}  // namespace di::cpu
