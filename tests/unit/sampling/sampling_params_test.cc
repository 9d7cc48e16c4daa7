#include "deepinfer/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace deepinfer {
namespace {

constexpr int64_t kVocab = 129280;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename Fn>
std::string error_with(Fn&& set, int64_t vocab = kVocab) {
  SamplingParams p;
  set(p);
  return p.validate(vocab);
}

TEST(SamplingParamsValidate, DefaultsAreValid) {
  EXPECT_EQ(SamplingParams{}.validate(kVocab), "");
  EXPECT_FALSE(SamplingParams{}.greedy());
}

TEST(SamplingParamsValidate, BoundaryValuesAreValid) {
  EXPECT_EQ(error_with([](SamplingParams& p) {
              p.temperature = 0;
              p.top_p = 1;
              p.top_k = -1;
              p.min_p = 1;
              p.presence_penalty = -2;
              p.frequency_penalty = 2;
              p.repetition_penalty = 1e-3;
              p.max_tokens = 1;
              p.min_tokens = 1;
              p.logprobs = 20;
              p.prompt_logprobs = 0;
              p.stop_token_ids = {0, kVocab - 1};
              p.stop = {"x"};
            }),
            "");
  EXPECT_EQ(error_with([](SamplingParams& p) { p.top_k = 0; }), "");
  EXPECT_EQ(error_with([](SamplingParams& p) { p.top_k = 1; }), "");
}

TEST(SamplingParamsValidate, GreedyBelowSamplingEpsilon) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_TRUE(p.greedy());
  p.temperature = 0.9e-5;
  EXPECT_TRUE(p.greedy());
  p.temperature = 1e-5;
  EXPECT_FALSE(p.greedy());
}

TEST(SamplingParamsValidate, EveryBadFieldIsNamedWithItsValue) {
  struct Case {
    void (*set)(SamplingParams&);
    const char* message;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.5; },
       "temperature must be >= 0 and finite, got -0.5"},
      {[](SamplingParams& p) { p.temperature = kNaN; },
       "temperature must be >= 0 and finite, got nan"},
      {[](SamplingParams& p) { p.temperature = kInf; },
       "temperature must be >= 0 and finite, got inf"},
      {[](SamplingParams& p) { p.top_p = 0; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_p = kNaN; }, "top_p must be in (0, 1], got nan"},
      {[](SamplingParams& p) { p.top_k = -2; },
       "top_k must be -1 or 0 (disabled) or at least 1, got -2"},
      {[](SamplingParams& p) { p.min_p = -0.1; }, "min_p must be in [0, 1], got -0.1"},
      {[](SamplingParams& p) { p.min_p = 1.01; }, "min_p must be in [0, 1], got 1.01"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5; },
       "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.presence_penalty = kNaN; },
       "presence_penalty must be in [-2, 2], got nan"},
      {[](SamplingParams& p) { p.frequency_penalty = -3; },
       "frequency_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.repetition_penalty = 0; },
       "repetition_penalty must be > 0 and finite, got 0"},
      {[](SamplingParams& p) { p.repetition_penalty = kInf; },
       "repetition_penalty must be > 0 and finite, got inf"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be at least 1, got 0"},
      {[](SamplingParams& p) { p.min_tokens = -1; },
       "min_tokens must be in [0, max_tokens = 256], got -1"},
      {[](SamplingParams& p) { p.min_tokens = 257; },
       "min_tokens must be in [0, max_tokens = 256], got 257"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.logprobs = -1; }, "logprobs must be in [0, 20], got -1"},
      {[](SamplingParams& p) { p.prompt_logprobs = 21; },
       "prompt_logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) {
         p.stop_token_ids = {1, kVocab};
       },
       "stop_token_ids[1] must be in [0, vocab size 129280), got 129280"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; },
       "stop_token_ids[0] must be in [0, vocab size 129280), got -1"},
      {[](SamplingParams& p) {
         p.stop = {"ok", ""};
       },
       "stop[1] must be a non-empty string"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(error_with(c.set), c.message);
}

TEST(SamplingParamsValidate, LogprobsAreBoundedByTheVocabulary) {
  EXPECT_EQ(error_with([](SamplingParams& p) { p.logprobs = 10; }, 8),
            "logprobs must be in [0, 8], got 10");
  EXPECT_EQ(error_with([](SamplingParams& p) { p.prompt_logprobs = 9; }, 8),
            "prompt_logprobs must be in [0, 8], got 9");
  EXPECT_EQ(error_with([](SamplingParams& p) { p.logprobs = 8; }, 8), "");
  EXPECT_EQ(SamplingParams{}.validate(0), "vocab_size must be positive, got 0");
}

}  // namespace
}  // namespace deepinfer
