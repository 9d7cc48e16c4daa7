#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "sampling/philox.h"

namespace di {
namespace {

using deepinfer::SamplingParams;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

int64_t sample(const SamplingParams& p, const std::vector<float>& logits, uint64_t seed,
               int64_t position) {
  SamplerRow row;
  row.logits = logits;
  row.seed = seed;
  row.position = position;
  return sample_row(p, row).token_id;
}

std::vector<float> log_probs_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double q : probs)
    out.push_back(static_cast<float>(std::log(q)));
  return out;
}

std::vector<float> random_logits(size_t vocab, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(vocab);
  for (float& v : out)
    v = dist(gen);
  return out;
}

// The specification, written naively: full sort, normalised probabilities, every noise value.
int64_t reference_sample(const SamplingParams& p, const std::vector<float>& logits, uint64_t seed,
                         int64_t position) {
  const size_t n = logits.size();
  std::vector<float> z(n);
  for (size_t i = 0; i < n; ++i)
    z[i] = logits[i] / static_cast<float>(p.temperature);
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  std::vector<int32_t> kept;
  for (const int32_t i : order) {
    if (p.min_p == 0 || z[i] - zmax >= std::log(p.min_p)) kept.push_back(i);
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < kept.size()) kept.resize(p.top_k);
  double total = 0;
  for (const int32_t i : kept)
    total += std::exp(z[i] - zmax);
  if (p.top_p < 1) {
    double mass = 0;
    size_t count = 0;
    while (count < kept.size() && mass < p.top_p * total)
      mass += std::exp(z[kept[count++]] - zmax);
    kept.resize(count);
    total = mass;
  }
  int64_t best = -1;
  double best_score = -1;
  for (const int32_t i : kept) {
    const double prob = std::exp(z[i] - zmax) / total;
    const double e = -std::log(noise_uniform(seed, NoiseStream::kSample, position, i));
    const double score = prob / e;
    if (score > best_score || (score == best_score && i < best)) {
      best_score = score;
      best = i;
    }
  }
  return best;
}

TEST(Sampler, GreedyTiesGoToTheLowerId) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample(greedy_params(), logits, 1, 0), 1);
  EXPECT_EQ(argmax_lowest_id(logits), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{nan, 1.0f, 2.0f, nan}), 2);
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{kNegInf, kNegInf}), 0);
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{nan}), -1);
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{-0.0f, 0.0f}), 0);  // equal as floats
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{-3.0f, -1.0f, -2.0f, -1.0f}), 1);
  EXPECT_EQ(argmax_lowest_id(std::vector<float>{}), -1);
  std::vector<float> long_row(1001, -5.0f);
  long_row[777] = 1e-30f;
  long_row[999] = 1e-30f;
  EXPECT_EQ(argmax_lowest_id(long_row), 777);
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  SamplingParams p;
  p.temperature = 1e-6;
  const std::vector<float> logits = random_logits(1000, 3, 2.0f);
  EXPECT_EQ(sample(p, logits, 5, 9), argmax_lowest_id(logits));
}

TEST(Sampler, RejectsNaNAndFullySuppressedRows) {
  SamplingParams p;
  std::vector<float> logits = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(sample(p, logits, 1, 0), Error);
  EXPECT_THROW(sample(greedy_params(), logits, 1, 0), Error);
  const std::vector<float> dead = {kNegInf, kNegInf};
  EXPECT_THROW(sample(p, dead, 1, 0), Error);
}

TEST(Sampler, SameSeedAndPositionGiveTheSameTokenWhateverElseRuns) {
  // Three requests interleaved in different orders through one scratch: each request's tokens
  // depend only on its own (seed, position), never on the others or on call history.
  const std::vector<float> a = random_logits(5000, 1, 2.0f);
  const std::vector<float> b = random_logits(5000, 2, 1.0f);
  const std::vector<float> c = random_logits(5000, 3, 3.0f);
  SamplingParams pa, pb, pc;
  pb.top_p = 0.9;
  pc.top_k = 50;
  pc.temperature = 0.7;
  struct Req {
    const std::vector<float>* logits;
    const SamplingParams* params;
    uint64_t seed;
  };
  const Req reqs[] = {{&a, &pa, 11}, {&b, &pb, 22}, {&c, &pc, 33}};

  std::map<std::pair<int, int64_t>, int64_t> first;
  SamplerScratch scratch;
  const std::vector<std::vector<int>> orders = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {1, 1, 0}};
  for (size_t o = 0; o < orders.size(); ++o) {
    for (int64_t pos = 100; pos < 140; ++pos) {
      for (const int r : orders[o]) {
        SamplerRow row;
        row.logits = *reqs[r].logits;
        row.seed = reqs[r].seed;
        row.position = pos;
        const int64_t tok = sample_row(*reqs[r].params, row, scratch).token_id;
        const auto [it, inserted] = first.emplace(std::make_pair(r, pos), tok);
        EXPECT_EQ(it->second, tok) << "request " << r << " position " << pos << " order " << o;
        // A fresh scratch gives the same token.
        EXPECT_EQ(sample_row(*reqs[r].params, row).token_id, tok);
      }
    }
  }
}

TEST(Sampler, DifferentSeedsAndPositionsGiveDifferentSamples) {
  const std::vector<float> flat(256, 0.0f);  // uniform: 1/256 chance of agreeing by luck
  SamplingParams p;
  int same_seed_diff = 0, same_pos_diff = 0;
  for (int64_t pos = 0; pos < 1000; ++pos) {
    same_seed_diff += sample(p, flat, 1, pos) != sample(p, flat, 2, pos);
    same_pos_diff += sample(p, flat, 1, pos) != sample(p, flat, 1, pos + 1000);
  }
  EXPECT_GT(same_seed_diff, 970);
  EXPECT_GT(same_pos_diff, 970);
}

// Pearson chi-square of `counts` against `probs` (n draws).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double chi2 = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(n);
    const double d = static_cast<double>(counts[i]) - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

std::vector<int64_t> histogram(const SamplingParams& p, const std::vector<float>& logits,
                               uint64_t seed, int64_t n) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t pos = 0; pos < n; ++pos)
    ++counts[static_cast<size_t>(sample(p, logits, seed, pos))];
  return counts;
}

TEST(Sampler, EmpiricalFrequenciesMatchTheDistribution) {
  // 20,000 draws over positions. Deterministic given the seeds, so it cannot flake; the bound
  // (chi-square, 5 degrees of freedom, p ~ 1e-5) would catch a biased race or correlated noise.
  const std::vector<double> probs = {0.4, 0.25, 0.15, 0.1, 0.07, 0.03};
  const std::vector<float> logits = log_probs_of(probs);
  const int64_t n = 20000;
  for (const uint64_t seed : {1ull, 0xdeadbeefcafef00dull}) {
    const std::vector<int64_t> counts = histogram(SamplingParams{}, logits, seed, n);
    EXPECT_LT(chi_square(counts, probs, n), 28.0) << "seed " << seed;
  }
  // Temperature 0.5 squares the probabilities (then renormalises).
  SamplingParams hot;
  hot.temperature = 0.5;
  std::vector<double> squared;
  double total = 0;
  for (const double q : probs)
    total += q * q;
  for (const double q : probs)
    squared.push_back(q * q / total);
  EXPECT_LT(chi_square(histogram(hot, logits, 7, n), squared, n), 28.0);
}

TEST(Sampler, FiltersRenormaliseTheKeptTokens) {
  const std::vector<double> probs = {0.4, 0.25, 0.15, 0.1, 0.07, 0.03};
  const std::vector<float> logits = log_probs_of(probs);
  const int64_t n = 20000;
  SamplingParams top_k;
  top_k.top_k = 3;
  const std::vector<int64_t> ck = histogram(top_k, logits, 5, n);
  EXPECT_EQ(ck[3] + ck[4] + ck[5], 0);
  EXPECT_LT(chi_square({ck[0], ck[1], ck[2]}, {0.5, 0.3125, 0.1875}, n), 20.0);

  SamplingParams top_p;
  top_p.top_p = 0.7;  // 0.4 + 0.25 = 0.65 < 0.7 -> three tokens
  const std::vector<int64_t> cp = histogram(top_p, logits, 6, n);
  EXPECT_EQ(cp[3] + cp[4] + cp[5], 0);
  EXPECT_LT(chi_square({cp[0], cp[1], cp[2]}, {0.5, 0.3125, 0.1875}, n), 20.0);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingTheMass) {
  const std::vector<float> logits = log_probs_of({0.5, 0.3, 0.2});
  auto observed = [&](double top_p) {
    SamplingParams p;
    p.top_p = top_p;
    std::vector<bool> seen(3, false);
    for (int64_t pos = 0; pos < 2000; ++pos)
      seen[static_cast<size_t>(sample(p, logits, 3, pos))] = true;
    return seen;
  };
  EXPECT_EQ(observed(0.45), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(observed(0.79), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(observed(0.81), (std::vector<bool>{true, true, true}));
}

TEST(Sampler, TopKCutsTiesByLowerId) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, 1.0f, 0.5f};
  SamplingParams p;
  p.top_k = 2;
  std::vector<int64_t> counts(5, 0);
  for (int64_t pos = 0; pos < 2000; ++pos)
    ++counts[static_cast<size_t>(sample(p, logits, 4, pos))];
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_EQ(counts[0] + counts[3] + counts[4], 0);
}

TEST(Sampler, MinPDropsTokensBelowTheScaledMax) {
  const std::vector<float> logits = log_probs_of({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.min_p = 0.2;  // threshold 0.1: drops 0.05, keeps 0.15
  std::vector<int64_t> counts(4, 0);
  for (int64_t pos = 0; pos < 4000; ++pos)
    ++counts[static_cast<size_t>(sample(p, logits, 8, pos))];
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[2], 0);
  // min_p is applied before top_p (vLLM v1): mass renormalised over {0.5, 0.3, 0.15}, so
  // top_p = 0.84 (0.8 / 0.95 = 0.842) keeps exactly two tokens.
  p.top_p = 0.84;
  std::fill(counts.begin(), counts.end(), 0);
  for (int64_t pos = 0; pos < 4000; ++pos)
    ++counts[static_cast<size_t>(sample(p, logits, 8, pos))];
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2] + counts[3], 0);
}

TEST(Sampler, TopK1AndTinyTopPEqualGreedy) {
  SamplingParams k1;
  k1.top_k = 1;
  SamplingParams tiny_p;
  tiny_p.top_p = 1e-9;
  for (uint32_t r = 0; r < 20; ++r) {
    std::vector<float> logits = random_logits(2000, r, 3.0f);
    if (r % 5 == 0) logits[1500] = logits[static_cast<size_t>(argmax_lowest_id(logits))];  // tie
    const int64_t greedy = argmax_lowest_id(logits);
    for (int64_t pos = 0; pos < 5; ++pos) {
      EXPECT_EQ(sample(k1, logits, r, pos), greedy);
      EXPECT_EQ(sample(tiny_p, logits, r, pos), greedy);
    }
  }
}

TEST(Sampler, MatchesTheNaiveReferenceRace) {
  // The optimised sampler (log pruning, partial sorts, unnormalised weights) must pick the same
  // token as the plain `probs / Exponential(1) -> argmax` over fully sorted, normalised probs.
  std::vector<SamplingParams> configs(6);
  configs[1].temperature = 0.6;
  configs[2].top_p = 0.9;
  configs[3].top_k = 40;
  configs[3].top_p = 0.8;
  configs[4].min_p = 0.05;
  configs[4].temperature = 1.3;
  configs[5].top_k = 700;
  configs[5].top_p = 0.995;
  int mismatches = 0, checked = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    for (uint32_t r = 0; r < 6; ++r) {
      const std::vector<float> logits = random_logits(3000, 100 + r, r % 2 ? 1.0f : 4.0f);
      for (int64_t pos = 0; pos < 25; ++pos) {
        const uint64_t seed = 1000 * c + r;
        mismatches += sample(configs[c], logits, seed, pos) !=
                      reference_sample(configs[c], logits, seed, pos);
        ++checked;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked;
}

TEST(Sampler, RepetitionPenaltyFollowsVllm) {
  // Positive logits are divided, negative multiplied, for tokens in prompt ∪ output.
  SamplingParams p = greedy_params();
  p.repetition_penalty = 2.0;
  const std::vector<float> logits = {2.0f, 1.5f, -1.0f, -1.2f};
  std::vector<int64_t> prompt = {0};
  SamplerRow row;
  row.logits = logits;
  row.prompt_ids = prompt;
  EXPECT_EQ(sample_row(p, row).token_id, 1);  // 2.0 / 2 = 1.0 < 1.5
  std::vector<int64_t> output = {0};
  row.prompt_ids = {};
  row.output_ids = output;
  EXPECT_EQ(sample_row(p, row).token_id, 1);

  const std::vector<float> negative = {-1.0f, -1.5f};
  row.logits = negative;
  EXPECT_EQ(sample_row(p, row).token_id, 1);  // -1.0 * 2 = -2.0 < -1.5
}

TEST(Sampler, FrequencyAndPresencePenaltiesFollowVllm) {
  const std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  std::vector<int64_t> once = {0};
  std::vector<int64_t> twice = {0, 2, 0};
  SamplerRow row;
  row.logits = logits;
  SamplingParams freq = greedy_params();
  freq.frequency_penalty = 0.3;
  row.output_ids = once;
  EXPECT_EQ(sample_row(freq, row).token_id, 0);  // 3 - 0.3 = 2.7 > 2.5
  row.output_ids = twice;
  EXPECT_EQ(sample_row(freq, row).token_id, 1);  // 3 - 0.6 = 2.4 < 2.5

  SamplingParams presence = greedy_params();
  presence.presence_penalty = 0.6;
  row.output_ids = once;
  EXPECT_EQ(sample_row(presence, row).token_id, 1);  // 3 - 0.6 = 2.4
  presence.presence_penalty = -1.0;                  // a negative penalty encourages repeats
  std::vector<int64_t> third = {2};
  row.output_ids = third;
  EXPECT_EQ(sample_row(presence, row).token_id, 0);  // 0 + 1 = 1 < 3
  presence.presence_penalty = -2.0;
  const std::vector<float> close = {3.0f, 2.5f, 1.5f};
  row.logits = close;
  EXPECT_EQ(sample_row(presence, row).token_id, 2);  // 1.5 + 2 = 3.5
}

TEST(Penalties, ValuesAreVllmsFloat32Formulas) {
  SamplingParams p;
  p.repetition_penalty = 1.3;
  p.frequency_penalty = 0.7;
  p.presence_penalty = -0.4;
  std::vector<float> logits = {1.7f, -0.9f, 2.2f, 0.0f, 5.0f};
  const std::vector<float> raw = logits;
  const std::vector<int64_t> prompt = {0, 0, 1};
  const std::vector<int64_t> output = {2, 1, 2, 3, 2};
  PenaltyScratch scratch;
  apply_penalties(logits, p, prompt, output, scratch);
  const float r = 1.3f, inv = 1.0f / r, f = 0.7f, pr = -0.4f;
  auto expect = [&](float l, int count, bool seen) {
    if (seen) l *= l > 0.0f ? inv : r;
    if (count > 0) {
      l -= f * static_cast<float>(count);
      l -= pr;
    }
    return l;
  };
  EXPECT_EQ(logits[0], expect(raw[0], 0, true));  // prompt only (twice): penalised once
  EXPECT_EQ(logits[1], expect(raw[1], 1, true));  // prompt and output
  EXPECT_EQ(logits[2], expect(raw[2], 3, true));
  EXPECT_EQ(logits[3], expect(raw[3], 1, true));  // zero logit: multiplied (stays 0)
  EXPECT_EQ(logits[4], raw[4]);                   // untouched
  EXPECT_FALSE(has_penalties(SamplingParams{}));
  EXPECT_TRUE(has_penalties(p));
  const std::vector<int64_t> bad = {5};
  EXPECT_THROW(apply_penalties(logits, p, bad, {}, scratch), Error);
}

TEST(Sampler, MinTokensSuppressesEosAndStopIds) {
  SamplingParams p = greedy_params();
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 4.0f};
  const std::vector<int64_t> eos = {1};
  std::vector<int64_t> output;
  SamplerRow row;
  row.logits = logits;
  row.eos_ids = eos;
  row.output_ids = output;
  row.suppress_stop_tokens = min_tokens_pending(p, output.size());
  EXPECT_TRUE(row.suppress_stop_tokens);
  EXPECT_EQ(sample_row(p, row).token_id, 2);
  output = {2, 2};
  row.output_ids = output;
  row.suppress_stop_tokens = min_tokens_pending(p, output.size());
  EXPECT_FALSE(row.suppress_stop_tokens);
  EXPECT_EQ(sample_row(p, row).token_id, 1);

  // Sampling never draws a suppressed id.
  SamplingParams s;
  s.min_tokens = 5;
  s.stop_token_ids = {3};
  row.suppress_stop_tokens = true;
  for (int64_t pos = 0; pos < 500; ++pos) {
    row.position = pos;
    const int64_t tok = sample_row(s, row).token_id;
    EXPECT_TRUE(tok == 0 || tok == 2) << tok;
  }
}

}  // namespace
}  // namespace di
