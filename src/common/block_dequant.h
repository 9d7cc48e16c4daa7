#pragma once

// CPU reference dequantization of block-scaled FP8 / FP4 checkpoint tensors. These are the
// references the CUDA kernels (kernels/cuda/dequant.cu) are checked against bit for bit.
//
// FP8: weight F8_E4M3 [N, K] with one ue8m0 scale per bn x bk block, scale F8_E8M0
//      [ceil(N/bn), ceil(K/bk)]: out[n, k] = e4m3(w[n, k]) * 2^(scale[n/bn, k/bk] - 127).
//      Layouts in use: 32x32 (V4.1), 128x128 (V4), 1x32 (Engram table rows).
// FP4: weight I8 (or U8) [N, K/2] of packed e2m1 pairs (low nibble = even element), scale F8_E8M0
//      [N, ceil(K/32)]: out[n, k] = e2m1(nibble(n, k)) * 2^(scale[n, k/32] - 127).
// N and K need not be multiples of the block. Every function can convert a row range only (so
// callers can stream large tensors); `out` then holds just those rows, [rows.end - rows.begin, K].

#include <cstdint>
#include <span>

#include "core/shape.h"
#include "core/tensor_view.h"

namespace di {

inline constexpr int kFp4BlockSize = 32;

// Scale bytes s for which every e4m3 * 2^(s-127) is exactly representable in bf16: the products
// are multiples of 2^(s-136) (bf16's smallest step is 2^-133) up to 448 * 2^(s-127) (bf16 max is
// just under 2^128).
inline constexpr uint8_t kFp8Bf16ExactMinScale = 3;
inline constexpr uint8_t kFp8Bf16ExactMaxScale = 246;
// Likewise for e2m1 * 2^(s-127): multiples of 2^(s-128), up to 6 * 2^(s-127).
inline constexpr uint8_t kFp4Bf16ExactMaxScale = 252;

// Rows [begin, end) of the weight; end = -1 means through the last row.
struct RowRange {
  int64_t begin = 0;
  int64_t end = -1;
};

// The scale shape for an [n, k] FP8 weight with bn x bk blocks: [ceil(n/bn), ceil(k/bk)].
Shape fp8_block_scale_shape(int64_t n, int64_t k, int bn, int bk);
// The scale shape for an [n, k] FP4 weight (k logical elements): [n, ceil(k/32)].
Shape fp4_row_scale_shape(int64_t n, int64_t k);

// FP8 block dequantization. float: exact (products only overflow for scale bytes > 246); double:
// always exact. NaN weights or scales give NaN.
void dequant_fp8_blocks(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                        std::span<float> out, RowRange rows = {});
void dequant_fp8_blocks(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                        std::span<double> out, RowRange rows = {});
// bf16 bits, bf16_from_float(e4m3 * scale). Exact; throws di::Error when a scale byte of the
// converted rows is outside [kFp8Bf16ExactMinScale, kFp8Bf16ExactMaxScale] (0xFF NaN included).
void dequant_fp8_blocks_bf16(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                             std::span<uint16_t> out, RowRange rows = {});

// FP4 row-block dequantization (blocks of 1 x 32). K = 2 * weight.shape[1]. float: exact
// (products only overflow for scale bytes > 252); double: always exact. A NaN scale gives NaN.
void dequant_fp4_rows(ConstTensorView weight, ConstTensorView scale, std::span<float> out,
                      RowRange rows = {});
void dequant_fp4_rows(ConstTensorView weight, ConstTensorView scale, std::span<double> out,
                      RowRange rows = {});
// bf16 bits, exact; throws di::Error when a scale byte of the converted rows is above
// kFp4Bf16ExactMaxScale (0xFF NaN included).
void dequant_fp4_rows_bf16(ConstTensorView weight, ConstTensorView scale, std::span<uint16_t> out,
                           RowRange rows = {});

}  // namespace di
