#pragma once

// CUDA launchers of the fused single-pass mHC ops (kernels/params/mhc.h). Host-only
// declarations: safe to include from .cc files. Launchers validate their Params (di::Error),
// never allocate and never synchronize; a launch failure throws via DI_CUDA_CHECK.
// Design and measurements: docs/design/cuda_mhc.md.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/params/mhc.h"

namespace di {

// Number of fixed splits of the D axis on the pre side. A function of dim alone, so that a row's
// reduction order never depends on the number of tokens; at most kMhcPreMaxSplits.
inline constexpr int kMhcPreMaxSplits = 16;
int mhc_pre_splits(int64_t dim);

// Bytes of MhcPreParams::workspace for `tokens` rows (partial sums, [splits, T, 25] fp32).
size_t mhc_pre_workspace_bytes(int64_t tokens, int64_t dim);

// 32-bit words of the packed fn: 576 per 16 k (32 lanes x 18 words), 1.5x the bytes of fn.
inline size_t mhc_fn_packed_words(int64_t dim) {
  return static_cast<size_t>(kMhcStreams) * static_cast<size_t>(dim) / 16 * 576;
}

// Host-side, once per weight at load time: fn [24, 4 * dim] row-major fp32 -> every value split
// into three bf16 pieces f = p0 + p1 + p2 (p0 = bf16_rn(f), p1 = bf16_rn(f - p0), p2 =
// bf16_rn(f - p0 - p1); exact for normal values), stored as the tensor-core B fragments of the
// pre kernel: per 16 k, [4 chunks][32 lanes][4 words] then [32 lanes][2 words]; lane word
// 6 p + 2 n + h holds piece p of the pair (k = 2q + 8h, 2q + 8h + 1) of mix 8n + g (low half
// first), lane = 4g + q. Each lane reads its 18 words with four 16-byte and one 8-byte
// coalesced load.
void mhc_pack_fn(const float* fn, int64_t dim, uint32_t* packed);

// Pre side: mixes (pre / post / comb) and the collapse with the carried pre. Two launches on
// `stream`: the fused pass over the stream (partial sums per split) and a per-token finalize.
void mhc_pre(const MhcPreParams& params, cudaStream_t stream);

// The pre side in its two launches, for a caller that puts a kernel between them: mhc_pre_pass
// (the pass over the stream: afterwards `collapsed` is complete, the mixes are not), then
// mhc_pre_finalize (pre / post / comb). kAfterPass: the finalize waits for the kernel launched
// before it, like every kernel. kBesidePrevious: it runs beside that kernel and waits for it only
// before it exits (the kernels after it still see the whole stream order). Use it only when every
// kernel launched since mhc_pre_pass waits for its predecessor before letting its dependents start
// (pdl.cuh's contract: the FP8 GEMM, which starts its dependents at once, does not) and none of
// them writes the workspace, pre, post or comb. Outputs are bitwise those of mhc_pre.
enum class MhcFinalizeOrder : uint8_t { kAfterPass, kBesidePrevious };
void mhc_pre_pass(const MhcPreParams& params, cudaStream_t stream);
void mhc_pre_finalize(const MhcPreParams& params, cudaStream_t stream, MhcFinalizeOrder order);

// Grid of the pre pass. kPersistent: as many CTAs as the device holds at once, each a contiguous
// range of (split, token tile) items with one pipeline across them. kPerItem: one CTA per item.
enum class MhcPreGrid : uint8_t { kPersistent, kPerItem };

// Token tile of the pre pass. kLarge: 64 (bf16) / 32 (fp32) rows, fn read from global memory
// by each warp; kSmall: 16 rows, fn staged with the rows in the cp.async pipeline (the decode
// shape: few tiles per split, so fn loads must be in flight together). kAuto: small up to
// kMhcPreSmallTileMaxTokens tokens (the small tiles of all splits then fit about one wave of an
// H200 at 2 CTAs per SM; measured faster there: 22 vs 29 us at 256 bf16 tokens).
// kDecode: up to kMhcPreDecodeMaxTokens tokens, one CTA per (split, 16-d block of a chunk) with
// a warp per n-tile of mixes and everything staged at once (the stages and grid are then unused);
// kAuto picks it there.
enum class MhcPreTile : uint8_t { kAuto, kLarge, kSmall, kDecode };
inline constexpr int64_t kMhcPreSmallTileMaxTokens = 256;
inline constexpr int64_t kMhcPreDecodeMaxTokens = 16;

// mhc_pre with a chosen pipeline depth (2 or 3 shared-memory stages), grid and tile, for
// benchmarks and tests; mhc_pre uses the measured best (docs/design/cuda_mhc.md). Results are
// bitwise the same for all.
void mhc_pre_with_config(const MhcPreParams& params, int stages, MhcPreGrid grid,
                         cudaStream_t stream, MhcPreTile tile = MhcPreTile::kAuto);

// Post side (hc_expand). One launch.
void mhc_post(const MhcPostParams& params, cudaStream_t stream);
// Collapse with a given pre-mix (the head's input). One launch.
void mhc_collapse(const MhcCollapseParams& params, cudaStream_t stream);

}  // namespace di
