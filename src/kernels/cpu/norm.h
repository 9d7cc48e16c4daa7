#pragma once

// RMSNorm of the reference: y = w * (x * rsqrt(mean(x^2) + eps)), row by row, in T.

#include <cstdint>

namespace di::cpu {

// x: [rows, dim] in place; weight: [dim] (nullptr = no weight).
template <typename T>
void rms_norm(T* x, int64_t rows, int64_t dim, const T* weight, double eps);

// rsqrt(mean(x^2) + eps) of one row.
template <typename T>
T rms_rsqrt(const T* x, int64_t dim, double eps);

}  // namespace di::cpu
