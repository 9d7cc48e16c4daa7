#pragma once

// Params of the exact-order linear layers of the CUDA backend's fp32 precision (--precision fp32).
// Raw pointers and sizes only (no CUDA types); launchers in kernels/cuda/linear_exact.
//
// y[r, c] = sum_k x[r, k] * W[c, k], each output accumulated in fp32 in ascending k exactly as the
// CPU reference cpu::linear<float> does (acc = 0; acc = acc + x * w, no contraction), with the
// weights decoded exactly (e4m3 or e2m1 code times its UE8M0 scale, or bf16 widened;
// cpu::decode_rows) and the activations either fp32 rows used as they are or e4m3 codes with UE8M0
// scales per 32 (the values act_quant's fake quantisation leaves in the CPU's rows). So the outputs
// are bitwise the CPU's. The tensor-core kernels (fp8_gemm, moe_expert_gemm) sum 32-product block
// partials in the tensor cores' reduced-precision FP8 accumulation (~2^-13 relative), which is fine
// for the bf16 run but moves quantisation decisions of the fp32 run away from the reference. CUDA
// cores, weight tiles reused over 8 rows: a validation-grade speed, not the fast path.

#include <cstdint>

#include "kernels/params/moe.h"

namespace di {

enum class ExactWeightFormat : uint8_t {
  kFp8Block,        // e4m3 codes [n, k], UE8M0 scales [ceil(n / bn), ceil(k / bk)]
  kFp4Row,          // e2m1 pairs [n, k / 2] (low nibble = even column), UE8M0 scales [n, k / 32]
  kFp4ExpertTiled,  // the same codes in the GPU's tiled expert order (kernels/params/moe.h)
  kFp8WoATiled,     // kFp8Block codes in wo_a's tiled order (kernels/params/wo_a.h), k = its
                    // group_width
  kBf16,            // bf16 [n, k] (weight_scale unused)
};

struct LinearExactParams {
  // Activations: fp32 rows x [m, k] (row stride x_stride), or e4m3 codes xq [m, k] (row stride
  // k) with UE8M0 scales xs [m, k / 32].
  const float* x = nullptr;
  int64_t x_stride = 0;  // 0 = k
  const uint8_t* xq = nullptr;
  const uint8_t* xs = nullptr;
  ExactWeightFormat format = ExactWeightFormat::kFp8Block;
  const uint8_t* weight = nullptr;
  const uint8_t* weight_scale = nullptr;
  int bn = 32, bk = 32;  // kFp8Block scale block
  int64_t m = 0, n = 0, k = 0;
  float* y = nullptr;    // [m, n], row stride y_stride
  int64_t y_stride = 0;  // 0 = n
};

// The routed experts over their (token, slot) pairs, in the tile order of moe_expert_tiles: for
// pair p of tile expert e and column c < mats * n, out[p, c] = sum_k x[a(p), k] * W_{c / n, e}[c %
// n, k] with a(p) = pair_index[p] / topk (pair_index given) or p. FP4 weights (Fp4ExpertMatrix,
// tiled codes, [mats * experts] as for moe_expert_gemm), activations e4m3 codes + UE8M0 scales per
// 32 in the natural column order.
struct GroupedLinearExactParams {
  const uint8_t* xq = nullptr;  // [activation rows, k]
  const uint8_t* xs = nullptr;  // [activation rows, k / 32]
  const int32_t* pair_index = nullptr;
  int32_t topk = 1;
  const MoeExpertTile* tiles = nullptr;
  int64_t tile_count = 0;
  int32_t tile_tokens = kMoeTileTokens;
  const Fp4ExpertMatrix* weights = nullptr;
  int32_t experts = 0;
  int32_t mats = 1;
  int64_t n = 0;         // % 32 == 0
  int64_t k = 0;         // % 32 == 0
  float* out = nullptr;  // [pairs, mats * n]
};

}  // namespace di
