// The DSpark Markov step on the GPU (kernels/cuda/ops/markov.cuh) against cpu::markov_bias_argmax:
// the biased logits bitwise (NaNs as NaNs) and the same argmax, at V4.1's vocabulary (129,280) and
// a small one, with planted ties (the lower index must win) and NaNs (never win), rows in a strided
// batch.

#include "kernels/cuda/ops/markov.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/error.h"
#include "dense_ops_test_util.h"
#include "kernels/cpu/markov.h"

namespace di::markov_test {
namespace {

TEST(MarkovStepGpu, BiasedLogitsAndArgmaxEqualTheCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  for (const int64_t vocab : {int64_t{1280}, int64_t{129280}}) {
    const int64_t rows = 6, stride = 5 * vocab;  // row r of 5 draft rows per sequence
    std::vector<float> logits =
        dense_test::random_normal(static_cast<size_t>(rows * stride), 5 + vocab, 3.0f);
    std::vector<float> bias =
        dense_test::random_normal(static_cast<size_t>(rows * vocab), 9 + vocab, 0.5f);
    // Row 1: a tie between two large values (index 7 must win over vocab - 3); row 2: a NaN
    // before the maximum; row 3: all NaN (0); row 4: a tie at the very first index.
    auto at = [&](int64_t b, int64_t v) -> float& {
      return logits[static_cast<size_t>(b * stride + v)];
    };
    // Exact sums: a bias of 0.25 or 0.5 on a logit with the complementary fraction.
    auto set = [&](int64_t b, int64_t v, float logit, float bv) {
      at(b, v) = logit;
      bias[static_cast<size_t>(b * vocab + v)] = bv;
    };
    set(1, 7, 99.75f, 0.25f);
    set(1, vocab - 3, 99.5f, 0.5f);
    at(2, 0) = std::numeric_limits<float>::quiet_NaN();
    at(2, 11) = 1e30f;
    for (int64_t v = 0; v < vocab; ++v)
      at(3, v) = std::numeric_limits<float>::quiet_NaN();
    set(4, 0, 49.5f, 0.5f);
    set(4, 1000, 49.75f, 0.25f);

    std::vector<float> want = logits;
    std::vector<int64_t> want_ids(static_cast<size_t>(rows));
    for (int64_t b = 0; b < rows; ++b) {
      want_ids[static_cast<size_t>(b)] =
          cpu::markov_bias_argmax(want.data() + b * stride, bias.data() + b * vocab, vocab);
    }
    EXPECT_EQ(want_ids[3], 0);

    DeviceBuffer d_logits = dense_test::upload(logits, st);
    DeviceBuffer d_bias = dense_test::upload(bias, st);
    DeviceBuffer d_next = dense_test::poisoned<int64_t>(static_cast<size_t>(rows), st);
    DeviceBuffer d_drafts = dense_test::poisoned<int64_t>(static_cast<size_t>(rows * 5), st);
    MarkovStepParams p;
    p.logits = d_logits.as<float>();
    p.logits_stride = stride;
    p.bias = d_bias.as<float>();
    p.next = d_next.as<int64_t>();
    p.drafts = d_drafts.as<int64_t>() + 2;  // draft row 2 of each sequence
    p.drafts_stride = 5;
    p.rows = rows;
    p.vocab = vocab;
    markov_step(p, st);
    const auto got = dense_test::download<float>(d_logits, logits.size(), st);
    const auto next = dense_test::download<int64_t>(d_next, static_cast<size_t>(rows), st);
    const auto drafts = dense_test::download<int64_t>(d_drafts, static_cast<size_t>(rows * 5), st);
    int64_t bad = 0;
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t v = 0; v < stride; ++v) {
        // Only the first `vocab` values of each stride are the step's row; the rest untouched.
        const size_t k = static_cast<size_t>(b * stride + v);
        const float w = v < vocab ? want[k] : logits[k];
        // A NaN stays a NaN; its payload is not specified (the GPU's NaN + x is the canonical
        // NaN, the CPU keeps the operand's), so NaNs compare as a class, all else bitwise.
        const bool both_nan = std::isnan(got[k]) && std::isnan(w);
        bad += !both_nan && dense_test::float_bits(got[k]) != dense_test::float_bits(w);
      }
      EXPECT_EQ(next[static_cast<size_t>(b)], want_ids[static_cast<size_t>(b)])
          << "vocab " << vocab << " row " << b;
      EXPECT_EQ(drafts[static_cast<size_t>(b * 5 + 2)], want_ids[static_cast<size_t>(b)]);
    }
    EXPECT_EQ(bad, 0) << "vocab " << vocab;
    EXPECT_EQ(want_ids[1], 7);
    EXPECT_EQ(want_ids[2], 11);
    EXPECT_EQ(want_ids[4], 0);
  }
}

TEST(MarkovStepGpu, BadParamsAreRejected) {
  MarkovStepParams p;
  p.rows = 1;
  p.vocab = 0;
  EXPECT_THROW(markov_step(p, nullptr), Error);
  p.vocab = 10;
  EXPECT_THROW(markov_step(p, nullptr), Error);  // null pointers
}

}  // namespace
}  // namespace di::markov_test
