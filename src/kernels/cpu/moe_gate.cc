#include "kernels/cpu/moe_gate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/check.h"

namespace di::cpu {

template <typename T>
T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

template <typename T>
std::vector<int64_t> topk_indices(const T* v, int64_t n, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    if (v[a] != v[b]) return v[a] > v[b];
    return a < b;
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

template <typename T>
void route_token(const T* logits, int64_t experts, const T* bias, int64_t topk, double gate_temp,
                 bool norm_topk_prob, double route_scale, int64_t* ids, T* weights) {
  DI_CHECK(topk >= 1 && topk <= experts, "route_token: top-{} of {} experts", topk, experts);
  std::vector<T> scores(static_cast<size_t>(experts)), biased(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    scores[static_cast<size_t>(e)] = std::sqrt(softplus(logits[e] / static_cast<T>(gate_temp)));
    biased[static_cast<size_t>(e)] = scores[static_cast<size_t>(e)] + bias[e];
  }
  const std::vector<int64_t> top = topk_indices(biased.data(), experts, topk);
  T sum = 0;
  for (int64_t j = 0; j < topk; ++j) {
    ids[j] = top[static_cast<size_t>(j)];
    weights[j] = scores[static_cast<size_t>(ids[j])];
    sum += weights[j];
  }
  for (int64_t j = 0; j < topk; ++j) {
    if (norm_topk_prob && topk > 1) weights[j] /= (sum + static_cast<T>(1e-20));
    weights[j] *= static_cast<T>(route_scale);
  }
}

template float softplus<float>(float);
template double softplus<double>(double);
template std::vector<int64_t> topk_indices<float>(const float*, int64_t, int64_t);
template std::vector<int64_t> topk_indices<double>(const double*, int64_t, int64_t);
template void route_token<float>(const float*, int64_t, const float*, int64_t, double, bool, double,
                                 int64_t*, float*);
template void route_token<double>(const double*, int64_t, const double*, int64_t, double, bool,
                                  double, int64_t*, double*);

}  // namespace di::cpu
