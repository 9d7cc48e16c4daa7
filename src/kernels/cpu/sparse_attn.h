#pragma once

// Sparse MLA-style attention with a per-head sink (reference `sparse_attn`): for query row i and
// head h, s_t = (q_h . kv_t) * scale over the listed entries t (index -1 = masked);
// o_h = sum_t exp(s_t - m) kv_t / (sum_t exp(s_t - m) + exp(sink_h - m)), m = max_t s_t.
// K = V (one shared latent per entry). P is not rounded (fp32/fp64 reference semantics) unless
// `bf16_probs`: then each exp(s_t - m) is rounded to bf16 before it multiplies kv_t, while the
// denominator sums the unrounded values in T (the tilelang kernel's bf16 P.V, fixtures README
// §5.3).

#include <cstdint>

namespace di::cpu {

// q: [rows, heads, dim]; kv: [entries, dim]; sink: [heads]; idx: [rows, topk] int32 (-1 masked);
// out: [rows, heads, dim].
template <typename T>
void sparse_attention(const T* q, int64_t rows, int64_t heads, int64_t dim, const T* kv,
                      int64_t entries, const T* sink, const int32_t* idx, int64_t topk, T scale,
                      T* out, bool bf16_probs = false);

}  // namespace di::cpu
