#pragma once

// Params of the CSA2 sparse attention on the GPU (issue 7, delta spec §5.2 step 3d-4): per query
// row, the 64 query heads of 512 dims attend to one shared K = V latent per entry over
//   window:     the positions max(0, pos - window + 1) .. pos, FP8 SWA entries (528 B) read from
//               the sequence's paged ring (positions < chunk_start) or from the chunk's own
//               freshly written entries (positions >= chunk_start, contiguous [*, 528]);
//   compressed: the row's top-k compressed indices (-1 = masked), FP4 entries (288 B) of the
//               kv-source owner's paged table;
// with the per-head sink as an extra softmax logit and scale `scale` (512^-1/2); the output gets
// the inverse RoPE on its last rope_dim values. Reference: cpu::sparse_attention on the unpacked
// entries (kernels/cpu/kv_pack.h) followed by RopeTable::apply(inverse).
//
// Batch invariance: every row is split into the same fixed chunks of entries (the window, then
// 128 top-k slots at a time), whatever the batch; the chunks are merged in chunk order. No
// workspace: the chunks of a row are one thread-block cluster and merge in shared memory.

#include <cstddef>
#include <cstdint>

#include "kernels/params/dense_ops.h"
#include "kernels/params/kv_cache.h"

namespace di {

inline constexpr int kAttnHeads = 64;
inline constexpr int kAttnChunk = 128;  // entries per split (one CTA)

struct SparseAttnParams {
  const void* q = nullptr;  // [rows, 64, 512] fp32 or bf16 (precision), RoPE already applied
  void* out = nullptr;      // [rows, 64, 512] same precision
  int64_t rows = 0;
  ActPrecision precision = ActPrecision::kF32;

  // Per query row (device arrays of `rows` elements).
  const int32_t* seq = nullptr;          // batch row of the page tables for this row's sequence
  const int64_t* pos = nullptr;          // absolute position of the query
  const int64_t* chunk_start = nullptr;  // first position held in chunk_kv for this sequence
  const int64_t* chunk_row0 = nullptr;   // chunk_kv row that holds position chunk_start

  // Window: the SWA table (entry_bytes 528) and the ring of this layer (block index ring_block).
  PagedTable swa;
  int32_t ring_block = 0;
  int32_t window = 128;
  const uint8_t* chunk_kv = nullptr;  // [*, 528] entries of positions >= chunk_start (may be null
                                      // when every window position comes from the ring)

  // Compressed entries (layers with ratio > 0): table of the kv source (entry_bytes 288) and the
  // row's top-k indices [rows, topk_width] (-1 = masked). topk_width 0 = window only; at most
  // 7 * 128 = 896 (a cluster of 8 CTAs per row). All topk_width slots of a row are read: the
  // caller fills the slots past the indexer's output with -1 (indexer_topk writes only min(k, n)
  // of them).
  PagedTable comp;
  const int32_t* topk = nullptr;
  int32_t topk_width = 0;
  int64_t comp_entries = 0;  // > 0: indices >= comp_entries are masked; the table's pages must
                             // hold that many entries per row (checked)

  const float* sink = nullptr;        // [64] fp32
  float scale = 0.0f;                 // softmax scale (512^-1/2)
  const float* rope_freqs = nullptr;  // [rope_dim / 2] fp32: inverse RoPE of the output tail
  int32_t rope_dim = 64;
};

}  // namespace di
