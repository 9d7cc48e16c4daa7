#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace di::cpu {

template <typename T>
std::vector<T> rope_frequencies(const RopeParams& p) {
  const int64_t half = p.rope_dim / 2;
  std::vector<T> f(static_cast<size_t>(half));
  const T dim = static_cast<T>(p.rope_dim);
  for (int64_t i = 0; i < half; ++i) {
    const T e = static_cast<T>(2 * i) / dim;
    f[static_cast<size_t>(i)] = T(1) / std::pow(static_cast<T>(p.base), e);
  }
  if (p.original_seq_len > 0) {
    // The corrected-dimension bounds are plain Python floats (double) in the reference.
    auto corrected = [&](double rotations) {
      return static_cast<double>(p.rope_dim) *
             std::log(static_cast<double>(p.original_seq_len) /
                      (rotations * 2 * std::numbers::pi)) /
             (2 * std::log(p.base));
    };
    const double low = std::max(std::floor(corrected(p.beta_fast)), 0.0);
    const double high =
        std::min(std::ceil(corrected(p.beta_slow)), static_cast<double>(p.rope_dim - 1));
    const T denom = static_cast<T>(std::max(high - low, 1e-3));
    for (int64_t i = 0; i < half; ++i) {
      T ramp = (static_cast<T>(i) - static_cast<T>(low)) / denom;
      ramp = std::clamp(ramp, T(0), T(1));
      const T smooth = T(1) - ramp;
      T& fi = f[static_cast<size_t>(i)];
      fi = fi / static_cast<T>(p.factor) * (T(1) - smooth) + fi * smooth;
    }
  }
  return f;
}

template <typename T>
RopeTable<T>::RopeTable(const RopeParams& p)
    : rope_dim_(p.rope_dim), freqs_(rope_frequencies<T>(p)) {}

template <typename T>
void RopeTable<T>::apply(T* x, int64_t pos, bool inverse) const {
  const int64_t half = rope_dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const T angle = static_cast<T>(pos) * freqs_[static_cast<size_t>(i)];
    const T c = std::cos(angle);
    const T s = inverse ? -std::sin(angle) : std::sin(angle);
    const T a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

template std::vector<float> rope_frequencies<float>(const RopeParams&);
template std::vector<double> rope_frequencies<double>(const RopeParams&);
template class RopeTable<float>;
template class RopeTable<double>;

}  // namespace di::cpu
