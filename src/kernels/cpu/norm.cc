#include "kernels/cpu/norm.h"

#include <cmath>

namespace di::cpu {

template <typename T>
T rms_rsqrt(const T* x, int64_t dim, double eps) {
  T ss = 0;
  for (int64_t i = 0; i < dim; ++i)
    ss += x[i] * x[i];
  return T(1) / std::sqrt(ss / static_cast<T>(dim) + static_cast<T>(eps));
}

template <typename T>
void rms_norm(T* x, int64_t rows, int64_t dim, const T* weight, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T* p = x + r * dim;
    const T s = rms_rsqrt(p, dim, eps);
    for (int64_t i = 0; i < dim; ++i) {
      const T v = p[i] * s;
      p[i] = weight != nullptr ? weight[i] * v : v;
    }
  }
}

template float rms_rsqrt<float>(const float*, int64_t, double);
template double rms_rsqrt<double>(const double*, int64_t, double);
template void rms_norm<float>(float*, int64_t, int64_t, const float*, double);
template void rms_norm<double>(double*, int64_t, int64_t, const double*, double);

}  // namespace di::cpu
