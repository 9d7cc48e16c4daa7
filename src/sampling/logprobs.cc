#include "sampling/logprobs.h"

#include <cmath>
#include <limits>

#include "common/check.h"

namespace di {
namespace {

// (value, id) ordering of ranks: larger value first, then lower id.
bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

}  // namespace

RowLogprobs compute_row_logprobs(std::span<const float> logits, int64_t token_id, int64_t top_n) {
  const auto vocab = static_cast<int64_t>(logits.size());
  DI_CHECK(token_id >= 0 && token_id < vocab, "logprob token id {} out of range [0, {})", token_id,
           vocab);
  DI_CHECK(top_n >= 0 && top_n <= vocab, "top_n {} out of range [0, {}]", top_n, vocab);

  // Pass 1: max, invalid values, and the top_n ids by insertion into a small sorted buffer
  // (top_n <= 20 in practice; the insertion runs only when a value beats the current last).
  float max = -std::numeric_limits<float>::infinity();
  bool invalid = false;
  std::vector<int64_t> top;
  top.reserve(static_cast<size_t>(top_n) + 1);
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[static_cast<size_t>(i)];
    invalid |= std::isnan(v) || v == std::numeric_limits<float>::infinity();
    max = v > max ? v : max;
    if (top_n == 0) continue;
    if (static_cast<int64_t>(top.size()) == top_n &&
        !ranks_before(v, i, logits[static_cast<size_t>(top.back())], top.back())) {
      continue;
    }
    if (std::isnan(v)) continue;
    size_t pos = top.size();
    while (pos > 0 && ranks_before(v, i, logits[static_cast<size_t>(top[pos - 1])], top[pos - 1])) {
      --pos;
    }
    top.insert(top.begin() + static_cast<std::ptrdiff_t>(pos), i);
    if (static_cast<int64_t>(top.size()) > top_n) top.pop_back();
  }
  DI_CHECK(!invalid, "logits row contains NaN or +inf");
  DI_CHECK(max > -std::numeric_limits<float>::infinity(), "logits row is entirely -inf");

  // Pass 2: log-sum-exp in double, and the token's rank.
  const auto tv = logits[static_cast<size_t>(token_id)];
  const double dmax = max;
  double sum = 0;
  int64_t rank = 1;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[static_cast<size_t>(i)];
    sum += std::exp(static_cast<double>(v) - dmax);
    rank += ranks_before(v, i, tv, token_id) ? 1 : 0;
  }
  const double lse = dmax + std::log(sum);

  RowLogprobs out;
  out.token = {token_id, static_cast<double>(tv) - lse, rank};
  out.top.reserve(top.size());
  for (size_t r = 0; r < top.size(); ++r) {
    out.top.push_back({top[r], static_cast<double>(logits[static_cast<size_t>(top[r])]) - lse,
                       static_cast<int64_t>(r) + 1});
  }
  return out;
}

}  // namespace di
