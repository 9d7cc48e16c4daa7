#include "kernels/cpu/engram.h"

#include <algorithm>
#include <cmath>

namespace di::cpu {

template <typename T>
void engram_gate_mix(T* h, const T* kv, const T* wqk, int64_t rows, int64_t hc, int64_t dim, T eps,
                     const uint8_t* image_mask, T* gates) {
  const T inv_sqrt_d = T(1) / std::sqrt(static_cast<T>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    const T* krow = kv + r * (hc + 1) * dim;
    const T* value = krow + hc * dim;
    for (int64_t c = 0; c < hc; ++c) {
      T* hc_row = h + (r * hc + c) * dim;
      const T* key = krow + c * dim;
      const T* wqk_c = wqk + c * dim;
      T hss = 0, kss = 0, dot = 0;
      for (int64_t d = 0; d < dim; ++d) {
        hss += hc_row[d] * hc_row[d];
        kss += key[d] * key[d];
      }
      for (int64_t d = 0; d < dim; ++d)
        dot += hc_row[d] * wqk_c[d] * key[d];
      const T rstd = (T(1) / std::sqrt(hss / static_cast<T>(dim) + eps)) *
                     (T(1) / std::sqrt(kss / static_cast<T>(dim) + eps));
      dot = dot * rstd * inv_sqrt_d;
      const T mag = std::sqrt(std::max(std::fabs(dot), static_cast<T>(1e-6)));
      // Image-span positions take no Engram contribution (the reference masks the gate).
      const bool image = image_mask != nullptr && image_mask[r] != 0;
      const T gate = image ? T(0) : T(1) / (T(1) + std::exp(-std::copysign(mag, dot)));
      if (gates != nullptr) gates[r * hc + c] = gate;
      for (int64_t d = 0; d < dim; ++d)
        hc_row[d] = hc_row[d] + gate * value[d];
    }
  }
}

template void engram_gate_mix<float>(float*, const float*, const float*, int64_t, int64_t, int64_t,
                                     float, const uint8_t*, float*);
template void engram_gate_mix<double>(double*, const double*, const double*, int64_t, int64_t,
                                      int64_t, double, const uint8_t*, double*);

}  // namespace di::cpu
