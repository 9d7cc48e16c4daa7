#pragma once

// CUDA launchers of the MoE routing ops (kernels/params/moe.h). Host-only declarations; the
// launchers validate (di::Error naming the op and sizes), never allocate or synchronize.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/params/moe.h"

namespace di {

// Router top-k and routing weights from the gate logits.
void moe_route(const MoeRouteParams& params, cudaStream_t stream);

// Workspace of moe_permute for rows x topk pairs over `experts` (host query, no device work).
size_t moe_permute_workspace_bytes(int64_t rows, int32_t topk, int32_t experts);

// Expert-contiguous order of the (row, slot) pairs, expert offsets and the inverse permutation.
// kRadixSort: CUB's stable radix sort and two small kernels (any size); kCount: one CTA, a counting
// sort (decode steps: one launch instead of four). Both give the same arrays; kAuto counts up to
// kMoePermuteCountMaxPairs pairs.
enum class MoePermuteAlgo : uint8_t { kAuto, kRadixSort, kCount };
inline constexpr int64_t kMoePermuteCountMaxPairs = 2048;
// Returns true when it also wrote params.tiles (counting algorithm and tiles != nullptr); false:
// the caller runs moe_expert_tiles.
bool moe_permute(const MoePermuteParams& params, cudaStream_t stream,
                 MoePermuteAlgo algo = MoePermuteAlgo::kAuto);

// moe_route, then moe_permute's counting algorithm, in one launch (one CTA; decode steps): when
// 0 < rows <= kMoeRoutePermuteMaxRows and rows * topk <= kMoePermuteCountMaxPairs. Bitwise the
// two launches' arrays (ids, weights, offsets, pair order, tiles when permute.tiles is set);
// permute.ids must be route.ids. Returns false, having launched nothing, for other sizes.
inline constexpr int64_t kMoeRoutePermuteMaxRows = 32;
bool moe_route_permute(const MoeRouteParams& route, const MoePermuteParams& permute,
                       cudaStream_t stream);

// y = expert outputs summed per row in ascending expert id, plus the shared expert.
void moe_combine(const MoeCombineParams& params, cudaStream_t stream);

}  // namespace di
