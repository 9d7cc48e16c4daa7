#pragma once

// MoE router of V4/V4.1 (reference `Gate`): scores = sqrtsoftplus(x . W^T / gate_temp);
// selection = top-k of (scores + bias) with the lower expert id winning ties; weights = the
// unbiased scores of the selected experts, normalised by (sum + 1e-20) when norm_topk_prob and
// k > 1, times route_scale. Expert order in the output: by descending selection score.

#include <cstdint>
#include <vector>

namespace di::cpu {

// logits: [experts] router logits of one token (x . W^T, before gate_temp).
template <typename T>
void route_token(const T* logits, int64_t experts, const T* bias, int64_t topk, double gate_temp,
                 bool norm_topk_prob, double route_scale, int64_t* ids, T* weights);

// torch.nn.functional.softplus (beta 1, threshold 20).
template <typename T>
T softplus(T x);

// Indices of the k largest values (descending; ties -> lower index first).
template <typename T>
std::vector<int64_t> topk_indices(const T* v, int64_t n, int64_t k);

}  // namespace di::cpu
