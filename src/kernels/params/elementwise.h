#pragma once

// Params of the element-wise helper ops of the CUDA forward. Raw pointers and sizes only (no CUDA
// types); launchers in kernels/cuda/ops/scale.cuh validate, never allocate, never synchronize.

#include <cstdint>

#include "kernels/params/dense_ops.h"

namespace di {

// x[i] = fp32(x[i] * s) in place (one rounded product, as the CPU's `v = v * s`): e.g. the
// indexer's weights_proj output times 128^-1/2 * 32^-1/2.
// round_bf16: x holds bf16-declared values in fp32 storage (the bf16 forward): x[i] is rounded to
// bf16 before the product and the product again after it, x[i] = bf16(bf16(x[i]) * s) — one
// launch for what is otherwise narrow, widen, scale, narrow, widen.
struct ScaleParams {
  float* x = nullptr;
  int64_t n = 0;
  float s = 1.0f;
  bool round_bf16 = false;
};

// dst[i] = src[i] in another activation precision: fp32 -> bf16 rounds to nearest even (NaN stays
// NaN), bf16 -> fp32 is exact, same -> same copies. For the bf16 forward's fp32-only consumers
// (the bf16-weight GEMMs, the LM head) and its bf16-declared fp32 results.
struct ConvertParams {
  const void* src = nullptr;
  ActPrecision src_precision = ActPrecision::kF32;
  void* dst = nullptr;
  ActPrecision dst_precision = ActPrecision::kF32;
  int64_t n = 0;
};

}  // namespace di
