#pragma once

// Host-side dispatch of row_norm_quant_kernel (include from .cu files): the CTA size is a function
// of dim alone, so a row's arithmetic never depends on the number of rows.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/row_norm_quant.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/params/dense_ops.h"

namespace di::ops_detail {

inline constexpr int64_t kRowMaxDim = 4 * kRowMaxChunks * 1024;

inline bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <bool kNorm, bool kQuant>
void launch_row_kernel(const RowKernelArgs& args, int64_t rows, ActPrecision precision,
                       cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(rows);
  const bool small = args.dim <= 4 * kRowMaxChunks * 256;
  if (precision == ActPrecision::kF32) {
    if (small) {
      cuda_detail::launch_pdl(row_norm_quant_kernel<float, 256, kNorm, kQuant>, grid, 256, 0,
                              stream, args);
    } else {
      cuda_detail::launch_pdl(row_norm_quant_kernel<float, 1024, kNorm, kQuant>, grid, 1024, 0,
                              stream, args);
    }
  } else {
    if (small) {
      cuda_detail::launch_pdl(row_norm_quant_kernel<uint16_t, 256, kNorm, kQuant>, grid, 256, 0,
                              stream, args);
    } else {
      cuda_detail::launch_pdl(row_norm_quant_kernel<uint16_t, 1024, kNorm, kQuant>, grid, 1024, 0,
                              stream, args);
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

// Shape and pointer checks shared by the three ops; `op` names the op in the messages.
inline void check_rows(const char* op, int64_t rows, int64_t dim, int64_t x_stride, const void* x,
                       ActPrecision precision) {
  DI_CHECK(rows >= 0 && rows <= INT32_MAX, "{}: rows must be in [0, 2^31), got {}", op, rows);
  DI_CHECK(dim > 0 && dim % 4 == 0 && dim <= kRowMaxDim,
           "{}: dim must be a positive multiple of 4 and <= {}, got {}", op, kRowMaxDim, dim);
  DI_CHECK(x_stride >= dim && x_stride % 4 == 0,
           "{}: row stride {} must be >= dim {} and a multiple of 4", op, x_stride, dim);
  const uintptr_t vec = precision == ActPrecision::kF32 ? 16 : 8;
  DI_CHECK(rows == 0 || (x != nullptr && aligned_to(x, vec)),
           "{}: x must be non-null and {}-byte aligned", op, vec);
}

inline void check_quant(const char* op, int64_t rows, int64_t dim, int block, const uint8_t* codes,
                        const uint8_t* scales) {
  DI_CHECK(block >= 4 && block <= 128 && (block & (block - 1)) == 0,
           "{}: block must be a power of two in [4, 128] (32 V4.1, 128 V4), got {}", op, block);
  DI_CHECK(dim % block == 0, "{}: dim {} is not a multiple of the block {}", op, dim, block);
  DI_CHECK(rows == 0 || (codes != nullptr && scales != nullptr && aligned_to(codes, 4)),
           "{}: codes ({} x {}) and scales must be non-null, codes 4-byte aligned", op, rows, dim);
}

}  // namespace di::ops_detail
