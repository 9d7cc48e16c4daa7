#pragma once

// Params of the element-wise helper ops of the CUDA forward. Raw pointers and sizes only (no CUDA
// types); launchers in kernels/cuda/ops/scale.cuh validate, never allocate, never synchronize.

#include <cstdint>

namespace di {

// x[i] = fp32(x[i] * s) in place (one rounded product, as the CPU's `v = v * s`): e.g. the
// indexer's weights_proj output times 128^-1/2 * 32^-1/2.
struct ScaleParams {
  float* x = nullptr;
  int64_t n = 0;
  float s = 1.0f;
};

}  // namespace di
