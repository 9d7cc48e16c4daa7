#include "kernels/cpu/sparse_attn.h"

#include <cmath>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/quant.h"

namespace di::cpu {

template <typename T>
void sparse_attention(const T* q, int64_t rows, int64_t heads, int64_t dim, const T* kv,
                      int64_t entries, const T* sink, const int32_t* idx, int64_t topk, T scale,
                      T* out, bool bf16_probs) {
  std::vector<T> s(static_cast<size_t>(topk));
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t* ids = idx + i * topk;
    for (int64_t t = 0; t < topk; ++t) {
      DI_CHECK(ids[t] < entries, "sparse_attention: index {} outside {} entries", ids[t], entries);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const T* qh = q + (i * heads + h) * dim;
      T m = -INFINITY;
      for (int64_t t = 0; t < topk; ++t) {
        if (ids[t] < 0) continue;
        const T* k = kv + static_cast<int64_t>(ids[t]) * dim;
        T acc = 0;
        for (int64_t d = 0; d < dim; ++d)
          acc += qh[d] * k[d];
        s[static_cast<size_t>(t)] = acc * scale;
        m = std::max(m, s[static_cast<size_t>(t)]);
      }
      T* o = out + (i * heads + h) * dim;
      for (int64_t d = 0; d < dim; ++d)
        o[d] = 0;
      if (m == -INFINITY) continue;  // nothing visible: the sink alone gives a zero output
      T den = 0;
      for (int64_t t = 0; t < topk; ++t) {
        if (ids[t] < 0) continue;
        const T p = std::exp(s[static_cast<size_t>(t)] - m);
        den += p;
        const T pv = bf16_probs ? round_bf16(p) : p;
        const T* k = kv + static_cast<int64_t>(ids[t]) * dim;
        for (int64_t d = 0; d < dim; ++d)
          o[d] += pv * k[d];
      }
      den += std::exp(sink[h] - m);
      for (int64_t d = 0; d < dim; ++d)
        o[d] /= den;
    }
  }
}

template void sparse_attention<float>(const float*, int64_t, int64_t, int64_t, const float*,
                                      int64_t, const float*, const int32_t*, int64_t, float, float*,
                                      bool);
template void sparse_attention<double>(const double*, int64_t, int64_t, int64_t, const double*,
                                       int64_t, const double*, const int32_t*, int64_t, double,
                                       double*, bool);

}  // namespace di::cpu
