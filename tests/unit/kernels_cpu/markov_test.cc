// cpu::markov_bias_argmax (the DSpark Markov step of one draft row): the bias is added in place,
// the lower index wins a tie, NaN never wins, and a row of NaNs gives 0.

#include "kernels/cpu/markov.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace di::cpu {
namespace {

TEST(MarkovBiasArgmax, AddsTheBiasAndTakesTheLowerIndexOfATie) {
  std::vector<float> logits = {1.0f, 3.0f, 2.5f, 2.0f, -1.0f};
  const std::vector<float> bias = {0.0f, -1.0f, 0.5f, 1.0f, 4.0f};
  // Sums 1, 2, 3, 3, 3: indices 2, 3 and 4 tie; 2 wins.
  EXPECT_EQ(markov_bias_argmax(logits.data(), bias.data(), 5), 2);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, 3.0f, 3.0f, 3.0f}));
}

TEST(MarkovBiasArgmax, NanNeverWins) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> logits = {nan, -5.0, nan, -2.0};
  const std::vector<double> zero(4, 0.0);
  EXPECT_EQ(markov_bias_argmax(logits.data(), zero.data(), 4), 3);
  std::vector<double> all_nan(3, nan);
  EXPECT_EQ(markov_bias_argmax(all_nan.data(), zero.data(), 3), 0);
}

TEST(MarkovBiasArgmax, RejectsAnEmptyVocabulary) {
  float x = 0.0f;
  EXPECT_ANY_THROW(markov_bias_argmax(&x, &x, 0));
}

}  // namespace
}  // namespace di::cpu
