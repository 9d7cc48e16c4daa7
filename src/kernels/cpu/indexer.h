#pragma once

// The lightning indexer of DeepSeek-V4.1 (delta spec §5.2) as CPU reference ops, shared by the
// CPU model (Model<T>::indexer) and the GPU parity tests (kernels/cuda/indexer):
//   score[t] = sum_h w_h * relu(q_h . k_t)           over the visible compressed positions t
//   candidate pool (layer 20): best blocks of 8 positions by block max, newest block pinned
//   Reindex layers: score = -inf outside the pool
//   top-k: the k best positions (lower index wins ties), re-sorted by position, -1 padded.
//
// Summation order of indexer_score (fixed so that the GPU kernel can be bitwise equal): the
// per-head dot is a sum of 32-wide blocks, dot = ((b0 + b1) + b2) + ..., each block summed
// sequentially; heads are added in order as score = score + relu(dot_h) * w_h with a rounded
// product (no fused multiply-add; the build never enables FMA contraction for x86-64 baseline
// code). With FP4-simulated inputs (e2m1 values sharing one power-of-two scale per 32) every
// product and partial sum inside a block is exact, so a block sum is the exact value the GPU
// computes with integer tensor-core dots.

#include <cstdint>
#include <vector>

namespace di::cpu {

inline constexpr int64_t kIndexerDotBlock = 32;  // the UE8M0 scale block of q and k

// q: [heads, dim] one query row; weights: [heads] (already scaled by dim^-1/2 * heads^-1/2);
// keys: [>= min(visible, n_keys), dim] row-major; out: [n_keys]. out[t] = score for
// t < visible, -inf for visible <= t < n_keys. dim % 32 == 0. `bf16_steps`: the reference's bf16
// run (its default dtype bf16): each head's dot is rounded to bf16, relu, times the (bf16) weight
// rounded to bf16, the heads summed in T and the sum rounded to bf16.
template <typename T>
void indexer_score(const T* q, const T* weights, const T* keys, int64_t n_keys, int64_t visible,
                   int64_t heads, int64_t dim, T* out, bool bf16_steps = false);

// Layer-20 candidate pool of one query row. scores: [n] (the row's indexer scores, -inf at
// t >= visible); mask: [n] out, 1 = position kept. Block b = positions [b*block_size,
// (b+1)*block_size) scored by its maximum; the block holding the newest visible position
// (visible - 1) is pinned to +inf; the best min(topk_blocks, n_blocks) blocks (lower block index
// wins ties) with a finite (> -inf) score are kept.
template <typename T>
void candidate_pool(const T* scores, int64_t n, int64_t visible, int64_t block_size,
                    int64_t topk_blocks, uint8_t* mask);

// Reindex layers: scores[t] = -inf where t >= mask_len or mask[t] == 0, for t < n.
template <typename T>
void apply_candidate_mask(T* scores, int64_t n, const uint8_t* mask, int64_t mask_len);

// Top-k of one row: the min(k, n) best of scores[0, n) (lower index wins ties), then positions
// t >= visible and -inf scores dropped, the rest sorted ascending and padded with -1 to
// min(k, n) entries. Scores must not be NaN.
template <typename T>
std::vector<int32_t> select_topk(const T* scores, int64_t n, int64_t visible, int64_t k);

}  // namespace di::cpu
