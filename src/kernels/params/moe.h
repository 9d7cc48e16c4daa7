#pragma once

// Params of the MoE routing ops on the GPU (issue 8, delta spec §5.4): the router's top-k
// selection from the gate logits, the permutation of (token, slot) pairs into expert-contiguous
// order for the grouped expert GEMMs, and the combine of the expert outputs. Raw pointers and
// sizes only (no CUDA types). Launchers: kernels/cuda/moe/moe_route.cuh; they validate, never
// allocate, never synchronize.
//
// Semantics are the CPU reference's (kernels/cpu/moe_gate.h route_token and Model::moe):
//   score_e  = sqrt(softplus(logit_e / gate_temp)); selection = top-k of score_e + bias_e (the
//              image-span rows use bias_vl), lower expert id first on ties, ids in descending
//              selection order; weight_j = score_{id_j} / (sum_j score + 1e-20) when
//              norm_topk_prob and k > 1, times route_scale.
//   permute  pairs (row, j) sorted by (expert id, row, j): expert e's pairs are
//            [offsets[e], offsets[e + 1]) of `pair_rows` / `pair_weights` (a stable, deterministic
//            order that does not depend on the batch's other rows beyond their count).
//   combine  y[row] = (sum over the row's k experts in ascending expert id of expert_out[pos]) +
//            shared[row], added left to right in fp32 (the CPU's order).

#include <cstddef>
#include <cstdint>

#include "kernels/params/dense_ops.h"

namespace di {

struct MoeRouteParams {
  const float* logits = nullptr;        // [rows, experts] gate logits (x . W^T), fp32
  const float* bias = nullptr;          // [experts] selection bias
  const float* bias_vl = nullptr;       // [experts] bias of image-span rows (nullable: bias)
  const uint8_t* image_mask = nullptr;  // [rows] 1 = image-span row (nullable: none)
  int32_t* ids = nullptr;               // [rows, topk] selected experts, descending selection
  float* weights = nullptr;             // [rows, topk] routing weights
  int64_t rows = 0;
  int32_t experts = 0;  // <= 1024
  int32_t topk = 0;     // <= 16
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  float route_scale = 1.0f;
};

struct MoePermuteParams {
  const int32_t* ids = nullptr;  // [rows, topk] from moe_route
  int64_t rows = 0;
  int32_t topk = 0;
  int32_t experts = 0;
  int32_t* offsets = nullptr;     // [experts + 1] start of each expert's pairs; offsets[E] = pairs
  int32_t* pair_index = nullptr;  // [rows * topk] sorted pairs as row * topk + j
  int32_t* pair_pos = nullptr;    // [rows * topk] inverse: position of pair row * topk + j
  void* workspace = nullptr;      // moe_permute_workspace_bytes(rows, topk) bytes, 256-aligned
  size_t workspace_bytes = 0;
};

struct MoeCombineParams {
  const void* expert_out = nullptr;   // [rows * topk, dim] expert outputs in permuted order
  const void* shared = nullptr;       // [rows, dim] shared-expert output (nullable: none)
  const int32_t* ids = nullptr;       // [rows, topk]
  const int32_t* pair_pos = nullptr;  // [rows * topk] from moe_permute
  void* y = nullptr;                  // [rows, dim]
  int64_t rows = 0;
  int32_t topk = 0;
  int64_t dim = 0;                              // % 4 == 0
  ActPrecision precision = ActPrecision::kF32;  // storage of expert_out, shared and y
};

}  // namespace di
