#pragma once

// Params of the lightning-indexer ops on the GPU (delta spec §5.2; CPU references in
// kernels/cpu/indexer.h). Framework-free: raw pointers, sizes and the tensor contract of every
// argument; no CUDA types, so model code fills these from .cc files.
//
//   score      scores[r, t] = sum_h w[r, h] * relu(q[r, h] . k_t), t < visible[r]; -inf up to
//              n_cols. Bitwise equal to cpu::indexer_score<float> on the unpacked FP4 values.
//   candidates layer-20 pool: block max over block_size positions, the newest visible block
//              pinned, the best topk_blocks finite blocks -> uint8 mask (cpu::candidate_pool).
//   mask       Reindex layers: scores = -inf outside the pool (cpu::apply_candidate_mask).
//   top-k      the best k of a row (lower index wins ties), sorted by position, -1 padded
//              (cpu::select_topk).
//   query pack the RoPE'd fp32/bf16 query heads -> FP4 e2m1 / UE8M0-32 index-key rows
//              (cpu::fp4_quant_ue8m0 + cpu::pack_index_key, bytes identical).

#include <cstdint>

#include "kernels/params/dense_ops.h"
#include "kernels/params/kv_cache.h"

namespace di {

inline constexpr int kIndexHeads = 32;                                 // index_n_heads
inline constexpr int kIndexQueryBytes = kIndexHeads * kIndexKeyBytes;  // 2176 per query row
inline constexpr int kIndexTopkMax = 2048;                             // largest k of one CTA

// Scoring, decode (one row per sequence) and prefill (many rows per sequence) alike. Query row r
// reads the index keys of page-table batch row row_seq[r]; its keys t < row_visible[r] must be
// valid entries (positions past it are never read, so their page ids may be anything).
struct IndexerScoreParams {
  const uint8_t* q = nullptr;            // [rows, 32, 68] per head the index key format: 64 B
                                         // packed e2m1 (even element low nibble), 4 UE8M0 bytes
  const float* weights = nullptr;        // [rows, 32] weights_proj(x) * 128^-1/2 * 32^-1/2
  PagedTable keys;                       // index keys, entry_bytes == kIndexKeyBytes
  const int32_t* row_seq = nullptr;      // [rows] batch row of `keys` for each query row
  const int32_t* row_visible = nullptr;  // [rows] visible keys: floor((pos + 1) / ratio)
  int64_t rows = 0;
  // Work split only (results are bitwise the same): true for prefill chunks, where runs of
  // consecutive rows read the same sequence; 8 rows then share each key the CTA converts once.
  // false (decode, one row per sequence): 8 warps split one row's keys.
  bool rows_share_keys = false;
  int64_t n_cols = 0;        // columns written per row (>= every visible, or scores stop there)
  int64_t score_stride = 0;  // >= n_cols, floats between rows
  float* scores = nullptr;   // [rows, score_stride] fp32 out; -inf for visible <= t < n_cols
  // Widths. The comments above give the production 32 x 128 (the tensor-core kernel); other
  // widths (the small test models: 8 x 64) run a generic kernel with the same exactness: q row
  // = heads * index_key_bytes(dim) bytes, weights [rows, heads], key entries index_key_bytes(dim).
  // Generic: dim a positive multiple of 32, heads * (dim + 1) <= kIndexerGenericMaxFloats.
  int32_t heads = kIndexHeads;
  int32_t dim = kIndexDim;
};
inline constexpr int kIndexerGenericMaxFloats = 8192;  // shared q floats of the generic kernel

// Packs the indexer query heads like index keys: each head row of dim values is quantised exactly
// as cpu::fp4_quant_ue8m0 (block 32) and stored as cpu::pack_index_key does (dim / 2 bytes of
// packed e2m1, even element in the low nibble, then dim / 32 UE8M0 bytes): bytes identical to the
// CPU packer. Any heads >= 1 and dim a positive multiple of 32 (production 32 x 128, the small
// models 8 x 64).
struct IndexQueryPackParams {
  const void* q = nullptr;  // [rows, heads, dim] fp32 or bf16 (precision), RoPE already applied
                            // unless rope_dim > 0
  uint8_t* out = nullptr;   // [rows, heads, index_key_bytes(dim)]
  int64_t rows = 0;
  int32_t heads = kIndexHeads;
  int32_t dim = kIndexDim;
  ActPrecision precision = ActPrecision::kF32;
  // rope_dim > 0 (even, <= min(dim, kIndexPackMaxRope)): each head's last rope_dim values are
  // rotated first as apply_rope does (positions [rows], rope_freqs [rope_dim / 2]) and rounded to
  // the activation precision: bitwise apply_rope followed by the packing, without its launch.
  // q itself is not written.
  const int64_t* positions = nullptr;
  const float* rope_freqs = nullptr;
  int32_t rope_dim = 0;
};
inline constexpr int kIndexPackMaxRope = 512;

// Top-k of every row: out[r, 0 .. min(k, n)) = cpu::select_topk(scores[r], n, visible[r], k).
// Rows must not hold NaN.
struct IndexerTopkParams {
  const float* scores = nullptr;         // [rows, score_stride], 16-byte aligned rows
  const int32_t* row_visible = nullptr;  // [rows] positions >= visible are dropped after
                                         // selection; nullptr: every position is visible
  int64_t rows = 0;
  int64_t n = 0;             // columns of a row taking part, < 2^31
  int64_t score_stride = 0;  // multiple of 4
  int k = 512;               // 1 .. kIndexTopkMax
  int32_t* out = nullptr;    // [rows, out_stride] int32 out: min(k, n) sorted positions, -1 pad
  int64_t out_stride = 0;    // >= min(k, n)
  // CTAs sharing a row (1, 2, 4 or 8: each holds a slice of the row in shared memory); -1: one
  // CTA per row reading the row from global memory twice; -2: one CTA per row reading it once and
  // keeping its 16-bit keys (n <= 73,728); 0 chooses from rows and n. The output does not depend
  // on it (the selection is exact).
  int ctas_per_row = 0;
};

// Candidate pool of every row (cpu::candidate_pool). Works through the block scores and the
// selected block ids in caller-provided scratch (indexer_candidates_workspace_bytes).
struct IndexerCandidateParams {
  const float* scores = nullptr;         // [rows, score_stride] the builder layer's scores
  const int32_t* row_visible = nullptr;  // [rows] visible positions (for the pinned block)
  int64_t rows = 0;
  int64_t n = 0;  // positions of a row (the mask length)
  int64_t score_stride = 0;
  int block_size = 8;         // candidate_block_size
  int topk_blocks = 2048;     // candidate_topk_blocks, 1 .. kIndexTopkMax
  void* workspace = nullptr;  // 16-byte aligned scratch
  uint8_t* mask = nullptr;    // [rows, mask_stride] uint8 out: 1 = kept, for t < n
  int64_t mask_stride = 0;    // >= n
};

// Reindex layers: scores[r, t] = -inf where t >= mask_len or mask[r, t] == 0, for t < n.
struct IndexerMaskParams {
  float* scores = nullptr;  // [rows, score_stride] in place
  int64_t rows = 0;
  int64_t n = 0;
  int64_t score_stride = 0;
  const uint8_t* mask = nullptr;  // [rows, mask_stride]
  int64_t mask_stride = 0;
  int64_t mask_len = 0;  // valid mask columns (the builder's n)
};

}  // namespace di
