#pragma once

// One Params struct per op: raw pointers, sizes and the tensor contract (shape, dtype) of every
// argument. Framework-free and backend-free: no CUDA types here. The launchers taking these live
// beside each backend's kernels (kernels/cuda/<op>.cuh); they never allocate and never synchronize.

#include <cstdint>

namespace di {

// Block-scaled FP8 weight -> bf16: out[n, k] = bf16(e4m3(weight[n, k]) * 2^(scale[n/bn, k/bk] -
// 127)). Exact for scale bytes in [3, 246] (see common/block_dequant.h); bit-identical to
// dequant_fp8_blocks_bf16 (the CPU reference). n and k need not be multiples of the block.
struct DequantFp8Params {
  const uint8_t* weight = nullptr;  // [n, k] e4m3fn codes, row-major
  const uint8_t* scale = nullptr;   // [ceil(n/bn), ceil(k/bk)] ue8m0 bytes, row-major
  int64_t n = 0;
  int64_t k = 0;
  int bn = 0;                    // block rows: 32 (V4.1), 128 (V4), 1 (Engram rows)
  int bk = 0;                    // block columns: 32, 128
  uint16_t* out_bf16 = nullptr;  // [n, k] bf16 bits, row-major
};

// FP4 (e2m1) weight with one ue8m0 scale per 32 consecutive elements of a row -> bf16:
// out[n, k] = bf16(e2m1(nibble(n, k)) * 2^(scale[n, k/32] - 127)). Exact for scale bytes <= 252;
// bit-identical to dequant_fp4_rows_bf16 (the CPU reference).
struct DequantFp4Params {
  const uint8_t* weight = nullptr;  // [n, k/2] packed e2m1 pairs: low nibble = element 2j
  const uint8_t* scale = nullptr;   // [n, ceil(k/32)] ue8m0 bytes
  int64_t n = 0;
  int64_t k = 0;                 // logical elements per row; must be even
  uint16_t* out_bf16 = nullptr;  // [n, k] bf16 bits
};

}  // namespace di
