#pragma once

// Single-pass manifold hyper-connections (delta spec §5.3) on one token row:
// mixes = (fn . flatten(X)) * rsqrt(mean(X^2) + eps), split into pre / post / comb with a
// Sinkhorn-normalised comb; collapse (pre-weighted sum of the copies) and expand (post * y +
// comb^T mixes of the residual copies).

#include <cstdint>

namespace di::cpu {

// x: [hc * dim] one token's stream; fn: [(2 + hc) * hc, hc * dim]; scale: [3]; base: [mix].
template <typename T>
void hc_mixes(const T* x, int64_t hc, int64_t dim, const T* fn, const T* scale, const T* base,
              double norm_eps, int64_t sinkhorn_iters, double hc_eps, T* pre, T* post, T* comb);

// y[dim] = sum_j pre[j] * x[j][dim].
template <typename T>
void hc_collapse(const T* x, int64_t hc, int64_t dim, const T* pre, T* y);

// out[k][dim] = post[k] * y[dim] + sum_j comb[j][k] * res[j][dim].
template <typename T>
void hc_expand(const T* y, const T* res, int64_t hc, int64_t dim, const T* post, const T* comb,
               T* out);

}  // namespace di::cpu
