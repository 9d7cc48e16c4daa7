#pragma once

// Logits comparisons shared by the forward tests: the fixture README's row error and argmax.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace di::testing_support {

// max |a - b| / std(b)  (the fixture README's relative error of a logits row)
inline double rel_err(std::span<const double> a, std::span<const double> b) {
  double mean = 0;
  for (double v : b)
    mean += v;
  mean /= static_cast<double>(b.size());
  double var = 0, mx = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    var += (b[i] - mean) * (b[i] - mean);
    mx = std::max(mx, std::fabs(a[i] - b[i]));
  }
  return mx / std::sqrt(var / static_cast<double>(b.size()));
}

// Index of the largest value (the first one on ties).
inline int64_t argmax(std::span<const double> v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

}  // namespace di::testing_support
