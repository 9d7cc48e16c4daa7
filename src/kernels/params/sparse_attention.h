#pragma once

// Params of the CSA2 sparse attention on the GPU (issue 7, delta spec §5.2 step 3d-4): per query
// row, the `heads` query heads of `head_dim` dims (V4.1: 64 x 512) attend to one shared K = V
// latent per entry over
//   window:     the positions max(0, pos - window + 1) .. pos, FP8 SWA entries
//               (swa_entry_bytes(head_dim), 528 B at 512) read from the sequence's paged ring
//               (positions < chunk_start) or from the chunk's own freshly written entries
//               (positions >= chunk_start, contiguous rows of one entry each);
//   compressed: the row's top-k compressed indices (-1 = masked), FP4 entries
//               (comp_entry_bytes(head_dim), 288 B at 512) of the kv-source owner's paged table;
// with the per-head sink as an extra softmax logit and scale `scale` (head_dim^-1/2); the output
// gets the inverse RoPE on its last rope_dim values. Reference: cpu::sparse_attention on the
// unpacked entries (kernels/cpu/kv_pack.h) followed by RopeTable::apply(inverse).
//
// Dimensions: 64 heads x 512 run a tensor-core kernel (rope_dim 64, topk_width <= 896): wgmma
// in bf16 precision (sparse_attention_wgmma.cu), mma.sync in fp32 (sparse_attention.cu). Any
// other heads / head_dim (the small fixture models) run a simple fp32 kernel
// (sparse_attention_generic.cu) of the same semantics: heads in [1, 128], head_dim a multiple of
// 32 in [32, 1024], rope_dim even in [0, head_dim], topk_width <= 2048.
//
// Batch invariance: every row is split into the same fixed chunks of entries (the window, then
// 128 top-k slots at a time), whatever the batch; the chunks are merged in chunk order. No
// workspace: the chunks of a row are one thread-block cluster and merge in shared memory. (The
// generic kernel: one CTA per (row, head), every reduction in one order fixed by the block shape.)

#include <cstddef>
#include <cstdint>

#include "kernels/params/dense_ops.h"
#include "kernels/params/kv_cache.h"

namespace di {

inline constexpr int kAttnHeads = 64;
inline constexpr int kAttnChunk = 128;  // entries per split (one CTA)
// Limits of the dimension-generic kernel (heads x head_dim other than 64 x 512).
inline constexpr int kAttnGenericMaxHeads = 128;
inline constexpr int kAttnGenericMaxDim = 1024;
inline constexpr int kAttnGenericMaxTopk = 2048;

enum class AttnTensorKernel : int8_t { kAuto, kMmaSync, kWgmma };

struct SparseAttnParams {
  const void* q = nullptr;  // [rows, heads, head_dim] fp32 or bf16 (precision), RoPE applied
                            // (or not yet: q_rope)
  void* out = nullptr;      // [rows, heads, head_dim] same precision
  int64_t rows = 0;
  ActPrecision precision = ActPrecision::kF32;
  int32_t heads = kAttnHeads;  // query heads (64: V4.1)
  int32_t head_dim = kKvDim;   // K = V latent width (512: V4.1)

  // Per query row (device arrays of `rows` elements).
  const int32_t* seq = nullptr;          // batch row of the page tables for this row's sequence
  const int64_t* pos = nullptr;          // absolute position of the query
  const int64_t* chunk_start = nullptr;  // first position held in chunk_kv for this sequence
  const int64_t* chunk_row0 = nullptr;   // chunk_kv row that holds position chunk_start

  // Window: the SWA table (entry_bytes swa_entry_bytes(head_dim)) and the ring of this layer
  // (block index ring_block).
  PagedTable swa;
  int32_t ring_block = 0;
  int32_t window = 128;
  const uint8_t* chunk_kv = nullptr;  // [*, swa_entry_bytes(head_dim)] entries of positions >=
                                      // chunk_start (may be null when every window position comes
                                      // from the ring)

  // Compressed entries (layers with ratio > 0): table of the kv source (entry_bytes
  // comp_entry_bytes(head_dim)) and the row's top-k indices [rows, topk_width] (-1 = masked).
  // topk_width 0 = window only; at most 7 * 128 = 896 at 64 x 512 (a cluster of 8 CTAs per row),
  // kAttnGenericMaxTopk at other dims. All topk_width slots of a row are read: the
  // caller fills the slots past the indexer's output with -1 (indexer_topk writes only min(k, n)
  // of them).
  PagedTable comp;
  const int32_t* topk = nullptr;
  int32_t topk_width = 0;
  int64_t comp_entries = 0;  // > 0: indices >= comp_entries are masked; the table's pages must
                             // hold that many entries per row (checked)

  // DSpark draft block (delta spec §4.2): > 0 replaces the window rule. Every row of a
  // sequence's block then attends to the ring positions max(0, chunk_start - window) ..
  // chunk_start - 1 (the accepted context, from the ring: main_kv(p) is its newest entry) and to
  // all block_rows entries chunk_kv rows chunk_row0 .. chunk_row0 + block_rows - 1 (the block's
  // own kv at positions chunk_start ..; bidirectional within the block). No compressed entries
  // (topk_width 0). The tensor-core kernel reads the block's entries as a second chunk of FP8
  // entries, so block_rows <= 128 (kAttnChunk); the reference is cpu::sparse_attention over the
  // ring ∪ block entries (Model::dspark_attention).
  int32_t block_rows = 0;

  const float* sink = nullptr;        // [heads] fp32
  float scale = 0.0f;                 // softmax scale (head_dim^-1/2)
  const float* rope_freqs = nullptr;  // [rope_dim / 2] fp32: inverse RoPE of the output tail
  int32_t rope_dim = 64;
  // true: q holds the heads before their RoPE, and the kernel rotates each head's tail as it
  // reads q (apply_rope's arithmetic and its rounding to the activation precision: bitwise
  // apply_rope followed by this op, without the launch; q itself is not written).
  bool q_rope = false;
  // true: the fp32 CUDA-core kernel (sparse_attention_generic.cu) at any dims, also 64 x 512:
  // scores, softmax and the weighted sum all in fp32 (~1e-7 of the CPU reference, where the
  // tensor-core kernel's hi + lo bf16 operands give ~1e-5). The fp32 forward's exact mode uses it
  // so that rounding differences stay below the fixtures' recorded near-ties.
  bool fp32_reference = false;
  // Which tensor-core kernel runs 64 x 512 (tests and benchmarks pin it; the forward passes
  // CudaForwardOptions::attention_kernel, kAuto unless --attention-kernel says otherwise): kAuto =
  // wgmma in bf16 precision, mma.sync in fp32; kMmaSync = mma.sync (sparse_attention.cu, either
  // precision); kWgmma = wgmma (sparse_attention_wgmma.cu, bf16 only). The two give different bits
  // (different product groupings), each batch-invariant, so the choice depends on the precision
  // and the run's configuration, never on the batch.
  AttnTensorKernel tensor_kernel = AttnTensorKernel::kAuto;
  // mma.sync kernel: CTAs per (row, chunk), each with 64 / head_split heads. 0: chosen by the
  // grid (2 while twice the CTAs fit one wave of the device's SMs, else 1); 1 or 2: forced (the
  // tests). Either gives the same bits. The wgmma kernel has one CTA per (row, chunk).
  int32_t head_split = 0;
};

}  // namespace di
