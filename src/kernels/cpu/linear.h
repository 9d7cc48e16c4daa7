#pragma once

// Dense and quantised weights, decoded exactly into the working precision, and the GEMM of the
// CPU reference: y[m, n] = sum_k x[m, k] * W[n, k], each output accumulated in T in ascending k
// order. Every row's arithmetic is independent of the other rows (batch invariance by
// construction). Activation quantisation is the caller's job (it is a model-level site).

#include <cstdint>
#include <span>

#include "common/dtype.h"
#include "core/tensor_view.h"

namespace di::cpu {

enum class WeightFormat {
  kDense,     // BF16 or F32 tensor [rows, cols]
  kFp8Block,  // F8_E4M3 [rows, cols] + F8_E8M0 [ceil(rows/bn), ceil(cols/bk)]
  kFp4Row,    // I8 [rows, cols/2] e2m1 pairs (low nibble = even column) + F8_E8M0 [rows, cols/32]
};

// A weight matrix as stored in the checkpoint (zero-copy views into the shards).
struct WeightRef {
  WeightFormat format = WeightFormat::kDense;
  ConstTensorView weight;
  ConstTensorView scale;  // empty for kDense
  int64_t rows = 0;
  int64_t cols = 0;
  int bn = 1;  // kFp8Block block rows
  int bk = 1;  // kFp8Block block columns

  // Rows [r0, r1) as a weight of their own (r0 must be a multiple of bn for kFp8Block).
  WeightRef slice_rows(int64_t r0, int64_t r1) const;
};

// Builds a WeightRef, checking dtypes and shapes (di::Error naming `name`).
WeightRef dense_weight(const ConstTensorView& w, const std::string& name);
WeightRef fp8_block_weight(const ConstTensorView& w, const ConstTensorView& scale, int bn, int bk,
                           const std::string& name);
WeightRef fp4_row_weight(const ConstTensorView& w, const ConstTensorView& scale,
                         const std::string& name);

// Decodes rows [r0, r1) exactly into out[(r1 - r0) * cols].
template <typename T>
void decode_rows(const WeightRef& w, int64_t r0, int64_t r1, T* out);

// y[m, rows] = x[m, cols] * W^T.
template <typename T>
void linear(const T* x, int64_t m, const WeightRef& w, T* y);

}  // namespace di::cpu
