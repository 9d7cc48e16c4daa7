#include "kernels/cpu/mhc.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/norm.h"

namespace di::cpu {
namespace {

template <typename T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

}  // namespace

template <typename T>
void hc_mixes(const T* x, int64_t hc, int64_t dim, const T* fn, const T* scale, const T* base,
              double norm_eps, int64_t sinkhorn_iters, double hc_eps, T* pre, T* post, T* comb) {
  const int64_t width = hc * dim;
  const int64_t mix = (2 + hc) * hc;
  const T r = rms_rsqrt(x, width, norm_eps);
  std::vector<T> m(static_cast<size_t>(mix));
  for (int64_t j = 0; j < mix; ++j) {
    const T* f = fn + j * width;
    T acc = 0;
    for (int64_t i = 0; i < width; ++i)
      acc += x[i] * f[i];
    m[static_cast<size_t>(j)] = acc * r;
  }
  const T eps = static_cast<T>(hc_eps);
  for (int64_t j = 0; j < hc; ++j) {
    pre[j] = sigmoid(m[static_cast<size_t>(j)] * scale[0] + base[j]) + eps;
    post[j] = T(2) * sigmoid(m[static_cast<size_t>(hc + j)] * scale[1] + base[hc + j]);
  }
  // comb: row-wise softmax + eps, then column normalisation, then (iters - 1) row/column rounds.
  for (int64_t j = 0; j < hc; ++j) {
    T* row = comb + j * hc;
    T mx = -INFINITY;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = m[static_cast<size_t>(2 * hc + j * hc + k)] * scale[2] + base[2 * hc + j * hc + k];
      mx = std::max(mx, row[k]);
    }
    T sum = 0;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - mx);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k)
      row[k] = row[k] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      T s = 0;
      for (int64_t j = 0; j < hc; ++j)
        s += comb[j * hc + k];
      for (int64_t j = 0; j < hc; ++j)
        comb[j * hc + k] /= (s + eps);
    }
  };
  normalize_columns();
  for (int64_t it = 0; it + 1 < sinkhorn_iters; ++it) {
    for (int64_t j = 0; j < hc; ++j) {
      T s = 0;
      for (int64_t k = 0; k < hc; ++k)
        s += comb[j * hc + k];
      for (int64_t k = 0; k < hc; ++k)
        comb[j * hc + k] /= (s + eps);
    }
    normalize_columns();
  }
}

template <typename T>
void hc_collapse(const T* x, int64_t hc, int64_t dim, const T* pre, T* y) {
  for (int64_t d = 0; d < dim; ++d) {
    T acc = 0;
    for (int64_t j = 0; j < hc; ++j)
      acc += pre[j] * x[j * dim + d];
    y[d] = acc;
  }
}

template <typename T>
void hc_expand(const T* y, const T* res, int64_t hc, int64_t dim, const T* post, const T* comb,
               T* out) {
  for (int64_t k = 0; k < hc; ++k) {
    for (int64_t d = 0; d < dim; ++d) {
      T acc = 0;
      for (int64_t j = 0; j < hc; ++j)
        acc += comb[j * hc + k] * res[j * dim + d];
      out[k * dim + d] = post[k] * y[d] + acc;
    }
  }
}

#define DI_INSTANTIATE(T)                                                                     \
  template void hc_mixes<T>(const T*, int64_t, int64_t, const T*, const T*, const T*, double, \
                            int64_t, double, T*, T*, T*);                                     \
  template void hc_collapse<T>(const T*, int64_t, int64_t, const T*, T*);                     \
  template void hc_expand<T>(const T*, const T*, int64_t, int64_t, const T*, const T*, T*);
DI_INSTANTIATE(float)
DI_INSTANTIATE(double)
#undef DI_INSTANTIATE

}  // namespace di::cpu
