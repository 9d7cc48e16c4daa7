#include "kernels/cpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "kernels/cpu/moe_gate.h"
#include "kernels/cpu/quant.h"

namespace di::cpu {

template <typename T>
void indexer_score(const T* q, const T* weights, const T* keys, int64_t n_keys, int64_t visible,
                   int64_t heads, int64_t dim, T* out, bool bf16_steps) {
  DI_CHECK(dim > 0 && dim % kIndexerDotBlock == 0,
           "indexer_score: dim {} must be a positive multiple of {}", dim, kIndexerDotBlock);
  DI_CHECK(n_keys >= 0 && heads > 0, "indexer_score: n_keys {}, heads {}", n_keys, heads);
  auto step = [bf16_steps](T v) { return bf16_steps ? round_bf16(v) : v; };
  const int64_t live = std::clamp<int64_t>(visible, 0, n_keys);
  for (int64_t t = 0; t < live; ++t) {
    const T* k = keys + t * dim;
    T score = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const T* qh = q + h * dim;
      T dot = 0;
      for (int64_t b = 0; b < dim; b += kIndexerDotBlock) {
        T block = 0;
        for (int64_t d = b; d < b + kIndexerDotBlock; ++d) {
          const T prod = qh[d] * k[d];
          block = block + prod;
        }
        dot = dot + block;
      }
      const T relu = std::max(step(dot), T(0));
      const T term = step(relu * weights[h]);
      score = score + term;
    }
    out[t] = step(score);
  }
  for (int64_t t = live; t < n_keys; ++t)
    out[t] = -std::numeric_limits<T>::infinity();
}

template <typename T>
void candidate_pool(const T* scores, int64_t n, int64_t visible, int64_t block_size,
                    int64_t topk_blocks, uint8_t* mask) {
  DI_CHECK(block_size > 0 && topk_blocks >= 0 && n >= 0,
           "candidate_pool: n {}, block_size {}, topk_blocks {}", n, block_size, topk_blocks);
  const T inf = std::numeric_limits<T>::infinity();
  const int64_t n_blocks = (n + block_size - 1) / block_size;
  std::vector<T> bscore(static_cast<size_t>(n_blocks), -inf);
  for (int64_t t = 0; t < n; ++t) {
    T& b = bscore[static_cast<size_t>(t / block_size)];
    b = std::max(b, scores[t]);
  }
  // The newest visible position's block is always kept (Python floor division: visible == 0
  // gives block -1, nothing pinned).
  if (visible >= 1) {
    const int64_t last = (visible - 1) / block_size;
    if (last < n_blocks) bscore[static_cast<size_t>(last)] = inf;
  }
  std::fill(mask, mask + n, uint8_t{0});
  const auto top = topk_indices(bscore.data(), n_blocks, std::min(topk_blocks, n_blocks));
  for (int64_t b : top) {
    if (bscore[static_cast<size_t>(b)] == -inf) continue;
    for (int64_t t = b * block_size; t < std::min(n, (b + 1) * block_size); ++t)
      mask[t] = 1;
  }
}

template <typename T>
void apply_candidate_mask(T* scores, int64_t n, const uint8_t* mask, int64_t mask_len) {
  for (int64_t t = 0; t < n; ++t) {
    if (t >= mask_len || mask[t] == 0) scores[t] = -std::numeric_limits<T>::infinity();
  }
}

template <typename T>
std::vector<int32_t> select_topk(const T* scores, int64_t n, int64_t visible, int64_t k) {
  DI_CHECK(n >= 0 && k >= 0, "select_topk: n {}, k {}", n, k);
  const int64_t k_eff = std::min(k, n);
  const std::vector<int64_t> top = topk_indices(scores, n, k_eff);
  std::vector<int32_t> sel;
  sel.reserve(static_cast<size_t>(k_eff));
  for (int64_t t : top) {
    if (t < visible && scores[t] != -std::numeric_limits<T>::infinity())
      sel.push_back(static_cast<int32_t>(t));
  }
  std::sort(sel.begin(), sel.end());
  sel.resize(static_cast<size_t>(k_eff), -1);
  return sel;
}

#define DI_INSTANTIATE_INDEXER(T)                                                                  \
  template void indexer_score<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, \
                                 T*, bool);                                                        \
  template void candidate_pool<T>(const T*, int64_t, int64_t, int64_t, int64_t, uint8_t*);         \
  template void apply_candidate_mask<T>(T*, int64_t, const uint8_t*, int64_t);                     \
  template std::vector<int32_t> select_topk<T>(const T*, int64_t, int64_t, int64_t);
DI_INSTANTIATE_INDEXER(float)
DI_INSTANTIATE_INDEXER(double)
#undef DI_INSTANTIATE_INDEXER

}  // namespace di::cpu
