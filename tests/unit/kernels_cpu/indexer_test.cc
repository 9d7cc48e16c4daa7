// Indexer reference ops (delta spec §5.2): scores with the fixed block summation order, the
// layer-20 candidate pool, the Reindex mask and the top-k selection (lower index wins ties,
// sorted by position, -1 padded).

#include "kernels/cpu/indexer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class IndexerTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(IndexerTest, Precisions);

template <typename T>
constexpr T kInf = std::numeric_limits<T>::infinity();

// Hand example: 2 heads x 32 dims, 3 keys, 2 visible. q_0 = 1 everywhere, q_1 = -1 everywhere;
// key t = (t + 1) * 0.5 everywhere: dot_0 = 16 (t + 1), dot_1 = -16 (t + 1) -> relu 0.
TYPED_TEST(IndexerTest, ScoreHandValuesReluAndVisibility) {
  using T = TypeParam;
  std::vector<T> q(64, T(1));
  for (int d = 32; d < 64; ++d)
    q[static_cast<size_t>(d)] = T(-1);
  std::vector<T> keys(96);
  for (int t = 0; t < 3; ++t) {
    for (int d = 0; d < 32; ++d)
      keys[static_cast<size_t>(t * 32 + d)] = T(0.5) * T(t + 1);
  }
  const std::vector<T> w = {T(0.25), T(3)};
  std::vector<T> out(4, T(7));
  indexer_score(q.data(), w.data(), keys.data(), 4, 2, 2, 32, out.data());
  EXPECT_EQ(out[0], T(4));  // 16 * 0.25 + relu(-16) * 3
  EXPECT_EQ(out[1], T(8));
  EXPECT_EQ(out[2], -kInf<T>);  // t >= visible
  EXPECT_EQ(out[3], -kInf<T>);
}

// The documented order: per head, blocks of 32 summed sequentially, blocks added in order,
// heads added in order with a rounded product. Checked against an explicit loop on values that
// are not FP4-simulated (so rounding is visible), at the real 32 x 128.
TYPED_TEST(IndexerTest, ScoreFollowsTheBlockOrder) {
  using T = TypeParam;
  constexpr int kHeads = 32, kDim = 128, kKeys = 17;
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<T> q(kHeads * kDim), keys(kKeys * kDim), w(kHeads);
  for (auto& v : q)
    v = static_cast<T>(nd(rng));
  for (auto& v : keys)
    v = static_cast<T>(nd(rng));
  for (auto& v : w)
    v = static_cast<T>(nd(rng));
  std::vector<T> out(kKeys);
  indexer_score(q.data(), w.data(), keys.data(), kKeys, kKeys, kHeads, kDim, out.data());
  for (int t = 0; t < kKeys; ++t) {
    T score = 0;
    for (int h = 0; h < kHeads; ++h) {
      T dot = 0;
      for (int b = 0; b < kDim / 32; ++b) {
        T block = 0;
        for (int d = b * 32; d < b * 32 + 32; ++d) {
          volatile T prod =
              q[static_cast<size_t>(h * kDim + d)] * keys[static_cast<size_t>(t * kDim + d)];
          block = block + prod;
        }
        dot = dot + block;
      }
      volatile T term = (dot < T(0) ? T(0) : dot) * w[static_cast<size_t>(h)];
      score = score + term;
    }
    EXPECT_EQ(out[static_cast<size_t>(t)], score) << "t=" << t;
  }
}

TYPED_TEST(IndexerTest, SelectTopkTiesSortingAndPadding) {
  using T = TypeParam;
  // Scores with ties at 5 (positions 1, 3, 6) and at 2 (positions 0, 4).
  const std::vector<T> s = {T(2), T(5), T(1), T(5), T(2), T(9), T(5), T(0)};
  // Top 3: 9 @5, then the two lowest-index 5s (1, 3); sorted by position.
  EXPECT_EQ(select_topk(s.data(), 8, 8, 3), (std::vector<int32_t>{1, 3, 5}));
  // Top 5: + 5 @6 + the lower-index 2 (position 0, not 4).
  EXPECT_EQ(select_topk(s.data(), 8, 8, 5), (std::vector<int32_t>{0, 1, 3, 5, 6}));
  // k > n: min(k, n) entries.
  EXPECT_EQ(select_topk(s.data(), 8, 8, 20), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(select_topk(s.data(), 0, 0, 4).empty());
}

TYPED_TEST(IndexerTest, SelectTopkDropsInvisibleAndMinusInfAfterSelection) {
  using T = TypeParam;
  const T inf = kInf<T>;
  const std::vector<T> s = {T(1), -inf, T(3), -inf, -inf, T(8)};
  // Selection first (k = 4 of 6: 8 @5, 3 @2, 1 @0, -inf @1), then drop -inf -> pad.
  EXPECT_EQ(select_topk(s.data(), 6, 6, 4), (std::vector<int32_t>{0, 2, 5, -1}));
  // Position 5 is past `visible`: it still takes a slot and is then dropped.
  EXPECT_EQ(select_topk(s.data(), 6, 5, 2), (std::vector<int32_t>{2, -1}));
  // All -inf: nothing selected.
  const std::vector<T> none(5, -inf);
  EXPECT_EQ(select_topk(none.data(), 5, 5, 3), (std::vector<int32_t>{-1, -1, -1}));
  // -0 and +0 are equal scores: the lower index wins.
  const std::vector<T> zeros = {T(-1), T(0), -T(0), T(0)};
  EXPECT_EQ(select_topk(zeros.data(), 4, 4, 1), (std::vector<int32_t>{1}));
  const std::vector<T> zeros2 = {T(-1), -T(0), T(0)};
  EXPECT_EQ(select_topk(zeros2.data(), 3, 3, 1), (std::vector<int32_t>{1}));
}

TYPED_TEST(IndexerTest, CandidatePoolBlockMaxPinningAndTies) {
  using T = TypeParam;
  const T inf = kInf<T>;
  // 5 blocks of 4 over 19 positions (the last block is partial); visible = 17 -> the newest
  // visible position 16 is in block 4, which is pinned although its score is -inf.
  std::vector<T> s(19, T(0));
  for (int t = 0; t < 4; ++t)
    s[static_cast<size_t>(t)] = T(1);  // block 0 max 1
  s[5] = T(3);                         // block 1 max 3
  s[9] = T(3);                         // block 2 max 3 (tie with block 1)
  s[13] = T(2);                        // block 3 max 2
  for (int t = 16; t < 19; ++t)
    s[static_cast<size_t>(t)] = -inf;
  std::vector<uint8_t> mask(19, 9);
  // Keep 2 blocks: the pinned block 4, then block 1 (wins the tie with block 2).
  candidate_pool(s.data(), 19, 17, 4, 2, mask.data());
  std::vector<uint8_t> want(19, 0);
  for (int t = 4; t < 8; ++t)
    want[static_cast<size_t>(t)] = 1;
  for (int t = 16; t < 19; ++t)
    want[static_cast<size_t>(t)] = 1;
  EXPECT_EQ(mask, want);
  // Keep 3 blocks: + block 2.
  candidate_pool(s.data(), 19, 17, 4, 3, mask.data());
  for (int t = 8; t < 12; ++t)
    want[static_cast<size_t>(t)] = 1;
  EXPECT_EQ(mask, want);
  // topk_blocks larger than the block count: all finite blocks and the pinned one.
  candidate_pool(s.data(), 19, 17, 4, 100, mask.data());
  EXPECT_EQ(mask, std::vector<uint8_t>(19, 1));
}

TYPED_TEST(IndexerTest, CandidatePoolSkipsMinusInfBlocksAndNothingPinnedWithoutVisible) {
  using T = TypeParam;
  const T inf = kInf<T>;
  std::vector<T> s(16, -inf);
  s[2] = T(-5);  // block 0 finite, blocks 1..3 -inf
  std::vector<uint8_t> mask(16, 9);
  candidate_pool(s.data(), 16, 0, 4, 4, mask.data());  // visible 0: nothing pinned
  std::vector<uint8_t> want(16, 0);
  for (int t = 0; t < 4; ++t)
    want[static_cast<size_t>(t)] = 1;
  EXPECT_EQ(mask, want);
  candidate_pool(s.data(), 16, 9, 4, 4, mask.data());  // position 8 -> block 2 pinned
  for (int t = 8; t < 12; ++t)
    want[static_cast<size_t>(t)] = 1;
  EXPECT_EQ(mask, want);
}

TYPED_TEST(IndexerTest, ApplyCandidateMask) {
  using T = TypeParam;
  const T inf = kInf<T>;
  std::vector<T> s = {T(1), T(2), T(3), T(4), T(5)};
  const std::vector<uint8_t> mask = {1, 0, 1};  // shorter than the row: the tail is outside
  apply_candidate_mask(s.data(), 5, mask.data(), 3);
  EXPECT_EQ(s, (std::vector<T>{T(1), -inf, T(3), -inf, -inf}));
}

// The bf16 steps: 2 heads x 32 dims, q = 1, key 0 = 1 + 2^-7 + 2^-9 everywhere (key 1 not
// visible). dot = 32.3125 (exact in float) -> bf16 32.25; x 0.3 = 9.675 -> bf16 9.6875;
// x 0.1 = 3.225 -> bf16 3.21875; sum 12.90625 -> bf16 12.875 (a tie, to even). Unrounded:
// 32.3125 x 0.4 = 12.925.
TEST(IndexerBf16Test, DotProductAndSumRoundedToBf16) {
  const std::vector<float> q(64, 1.0f);
  std::vector<float> keys(64, 5.0f);
  for (int d = 0; d < 32; ++d)
    keys[static_cast<size_t>(d)] = 1.0f + 0x1p-7f + 0x1p-9f;
  const std::vector<float> w = {0.3f, 0.1f};
  std::vector<float> out(2), plain(2);
  indexer_score(q.data(), w.data(), keys.data(), 2, 1, 2, 32, out.data(), /*bf16_steps=*/true);
  indexer_score(q.data(), w.data(), keys.data(), 2, 1, 2, 32, plain.data());
  EXPECT_EQ(out[0], 12.875f);
  EXPECT_EQ(out[1], -kInf<float>);
  EXPECT_NEAR(plain[0], 12.925, 1e-5);
}

}  // namespace
}  // namespace di::cpu
