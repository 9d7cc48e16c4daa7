#pragma once

// CUDA launchers of the routed-expert FFN pieces (kernels/params/moe.h): the expert tile list,
// the grouped FP4-weight GEMM (w1/w3 together, then w2) and the SwiGLU + act_quant between them.
// Host-only declarations; the launchers validate (di::Error naming the op and sizes), never
// allocate or synchronize.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/params/moe.h"

namespace di {

// Entries of the tile list for `pairs` pairs over `experts` experts in tiles of `tile_tokens`
// (kMoeTileTokens or kMoeTileTokensPrefill): enough for any routing.
int64_t moe_expert_tile_bound(int32_t experts, int64_t pairs, int32_t tile_tokens = kMoeTileTokens);

// The tile size for a step: prefill tiles once the experts average 32+ pairs (host-side choice;
// outputs are bitwise the same either way).
int32_t moe_expert_tile_tokens(int32_t experts, int64_t pairs);

// The checkpoint's row-major e2m1 codes [n, k / 2] of one expert matrix regrouped into the tiled
// order of the GPU (kernels/params/moe.h): dst holds fp4_expert_codes_bytes(n, k) bytes. Host
// code, done once at upload; k % 32 == 0, else di::Error.
void pack_fp4_expert_codes(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst);

// Tile list (expert, first pair, count) from moe_permute's offsets.
void moe_expert_tiles(const MoeExpertTilesParams& params, cudaStream_t stream);

// The expert GEMM's activation order (even elements, then odd ones, per 32-block).
void moe_interleave_act(const MoeInterleaveParams& params, cudaStream_t stream);

// out = the routed experts' FP4 GEMM over their pairs (decode regime: weight streaming).
void moe_expert_gemm(const MoeExpertGemmParams& params, cudaStream_t stream);

// The wgmma m64 tiles of weight rows per CTA moe_expert_gemm uses for `params` on a device of
// `sm_count` SMs: 1 where 2 would leave slots of the wave idle (w2 at small decode batches),
// else 2. Host-side choice; outputs are bitwise the same either way.
int moe_expert_cta_mtiles(const MoeExpertGemmParams& params, int sm_count);

// The w2 input: act_quant(routing weight * SwiGLU(g, u)).
void moe_swiglu_quant(const MoeSwigluQuantParams& params, cudaStream_t stream);

}  // namespace di
