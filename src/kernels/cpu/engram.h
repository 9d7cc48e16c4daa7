#pragma once

// Engram gate and mix of the reference (delta spec §2), after the wkv projection: for every token
// row r and hc stream c, with key_c = kv[r, c, :] and value = kv[r, hc, :],
//   rstd = 1/sqrt(mean(h^2) + eps) * 1/sqrt(mean(key_c^2) + eps)
//   s    = sum_d(h[d] * wqk[c, d] * key_c[d]) * rstd / sqrt(dim)
//   gate = sigmoid(sign(s) * sqrt(max(|s|, 1e-6)))           (0 on image-span rows)
//   h   += gate * value
// Sums run in ascending d in T; the GPU op (kernels/cuda/engram) computes the same in fp32.

#include <cstdint>

namespace di::cpu {

// h: [rows, hc, dim] in place; kv: [rows, (hc + 1) * dim] (hc keys, then the value); wqk:
// [hc, dim]; image_mask: [rows], nonzero = image-span row (nullptr: none); gates: [rows, hc]
// out (nullptr: not stored).
template <typename T>
void engram_gate_mix(T* h, const T* kv, const T* wqk, int64_t rows, int64_t hc, int64_t dim, T eps,
                     const uint8_t* image_mask, T* gates);

}  // namespace di::cpu
