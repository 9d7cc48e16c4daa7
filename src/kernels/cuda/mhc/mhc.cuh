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
// reduction order never depends on the number of tokens.
int mhc_pre_splits(int64_t dim);

// Bytes of MhcPreParams::workspace for `tokens` rows (partial sums, [splits, T, 25] fp32).
size_t mhc_pre_workspace_bytes(int64_t tokens, int64_t dim);

// Floats of the packed fn (same count as fn: 24 * 4 * dim).
inline size_t mhc_fn_packed_floats(int64_t dim) {
  return static_cast<size_t>(kMhcMixes) * kMhcStreams * static_cast<size_t>(dim);
}

// Host-side, once per weight at load time: fn [24, 4 * dim] row-major fp32 -> packed
// [4 * dim / 16][3][32][4] fp32, the order in which each lane of the pre kernel reads its tensor
// core B fragments (one 16-byte coalesced load per lane per chunk). Values are unchanged.
void mhc_pack_fn(const float* fn, int64_t dim, float* packed);

// Pre side: mixes (pre / post / comb) and the collapse with the carried pre. Two launches on
// `stream`: the fused pass over the stream (partial sums per split) and a per-token finalize.
void mhc_pre(const MhcPreParams& params, cudaStream_t stream);

// Grid of the pre pass. kPersistent: as many CTAs as the device holds at once, each a contiguous
// range of (split, token tile) items with one pipeline across them. kPerItem: one CTA per item.
enum class MhcPreGrid : uint8_t { kPersistent, kPerItem };

// mhc_pre with a chosen pipeline depth (2 or 3 shared-memory stages) and grid, for benchmarks;
// mhc_pre uses the measured best (docs/design/cuda_mhc.md). Results are bitwise the same for all.
void mhc_pre_with_config(const MhcPreParams& params, int stages, MhcPreGrid grid,
                         cudaStream_t stream);
void mhc_pre_with_stages(const MhcPreParams& params, int stages, cudaStream_t stream);

// Post side (hc_expand). One launch.
void mhc_post(const MhcPostParams& params, cudaStream_t stream);

}  // namespace di
