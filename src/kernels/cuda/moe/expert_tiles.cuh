#pragma once

// The expert tile list of the grouped GEMM (kernels/params/moe.h MoeExpertTile) from per-expert
// pair counts, written by one CTA: moe_expert_tiles' kernel and the one-CTA counting permutation
// both use it. Device code only: include from .cu files.

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/params/moe.h"

namespace di::moe_detail {

// Thread e of the CTA's kThreads holds expert e's first pair position and pair count (count 0
// for threads past the experts). Writes ceil(count / tile_tokens) tiles per expert in expert
// order, then expert = -1 entries up to bound. `total` is one shared int of the caller; the
// scan's storage may be reused once the caller has synchronized after its previous use.
// Bound: the list length's integer type (the caller's).
template <int kThreads, typename Bound>
__device__ void write_expert_tiles(typename cub::BlockScan<int32_t, kThreads>::TempStorage& scan,
                                   int32_t& total, int32_t e, int32_t first, int32_t count,
                                   int32_t tile_tokens, Bound bound, MoeExpertTile* tiles) {
  const int32_t n = (count + tile_tokens - 1) / tile_tokens;
  int32_t base = 0;
  cub::BlockScan<int32_t, kThreads>(scan).ExclusiveSum(n, base);
  for (int32_t j = 0; j < n && base + j < bound; ++j) {
    MoeExpertTile t;
    t.expert = e;
    t.first_pair = first + j * tile_tokens;
    t.count = min(tile_tokens, count - j * tile_tokens);
    tiles[base + j] = t;
  }
  if (e == kThreads - 1) total = base + n;
  __syncthreads();
  for (Bound i = total + e; i < bound; i += kThreads)
    tiles[i] = MoeExpertTile{};
}

}  // namespace di::moe_detail
