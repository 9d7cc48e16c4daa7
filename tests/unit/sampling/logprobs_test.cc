#include "sampling/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "sampling/sampler.h"

namespace di {
namespace {

using deepinfer::SamplingParams;

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = -INFINITY, sum = 0;
  for (const float v : logits)
    max = std::max(max, static_cast<double>(v));
  for (const float v : logits)
    sum += std::exp(v - max);
  std::vector<double> out;
  for (const float v : logits)
    out.push_back(v - max - std::log(sum));
  return out;
}

TEST(Logprobs, FullListIsNormalisedAndRanked) {
  const std::vector<float> logits = {0.3f, -1.0f, 2.5f, 2.5f, 0.0f, -7.0f};
  const RowLogprobs lp = compute_row_logprobs(logits, 4, 6);
  ASSERT_EQ(lp.top.size(), 6u);
  double total = 0;
  for (const TokenLogprob& t : lp.top)
    total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-12);
  const std::vector<int64_t> order = {2, 3, 0, 4, 1, 5};  // ties -> lower id first
  const std::vector<double> ref = log_softmax(logits);
  for (size_t r = 0; r < order.size(); ++r) {
    EXPECT_EQ(lp.top[r].token_id, order[r]);
    EXPECT_EQ(lp.top[r].rank, static_cast<int64_t>(r) + 1);
    EXPECT_NEAR(lp.top[r].logprob, ref[static_cast<size_t>(order[r])], 1e-12);
  }
  EXPECT_EQ(lp.token.token_id, 4);
  EXPECT_EQ(lp.token.rank, 4);
  EXPECT_EQ(lp.token.logprob, lp.top[3].logprob);
  EXPECT_EQ(compute_row_logprobs(logits, 3, 2).token.rank, 2);  // tie with 2, which ranks first
}

TEST(Logprobs, TopNAndRankOutsideTheList) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 37) % 1000) / 100;
  const RowLogprobs lp = compute_row_logprobs(logits, 0, 5);  // token 0 has the lowest logit
  ASSERT_EQ(lp.top.size(), 5u);
  EXPECT_EQ(lp.top[0].token_id, 27);  // 27 * 37 = 999 mod 1000
  EXPECT_EQ(lp.token.rank, 1000);
  EXPECT_TRUE(compute_row_logprobs(logits, 0, 0).top.empty());
  EXPECT_THROW(compute_row_logprobs(logits, 1000, 0), Error);
  logits[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(compute_row_logprobs(logits, 0, 0), Error);
}

TEST(Logprobs, SamplerReportsRawLogprobsOfTheSampledToken) {
  // Penalties, temperature and top_k change the sampled token's distribution but not its
  // reported logprob, which is the log-softmax of the raw logits (vLLM v1 raw_logprobs).
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, -1.0f};
  const std::vector<int64_t> output = {1};
  SamplingParams p;
  p.temperature = 0.5;
  p.top_k = 3;
  p.presence_penalty = 2.0;
  p.logprobs = 2;
  SamplerRow row;
  row.logits = logits;
  row.output_ids = output;
  const std::vector<double> ref = log_softmax(logits);
  for (int64_t pos = 0; pos < 50; ++pos) {
    row.position = pos;
    row.seed = 9;
    const SampleResult r = sample_row(p, row);
    ASSERT_TRUE(r.logprobs.has_value());
    EXPECT_EQ(r.logprobs->token.token_id, r.token_id);
    EXPECT_NEAR(r.logprobs->token.logprob, ref[static_cast<size_t>(r.token_id)], 1e-12);
    ASSERT_EQ(r.logprobs->top.size(), 2u);
    EXPECT_EQ(r.logprobs->top[0].token_id, 1);
    EXPECT_EQ(r.logprobs->top[1].token_id, 2);
  }
  p.logprobs.reset();
  EXPECT_FALSE(sample_row(p, row).logprobs.has_value());
}

}  // namespace
}  // namespace di
