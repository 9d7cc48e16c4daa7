#pragma once

// CUDA launcher of RoPE / inverse RoPE on the rope tail of head vectors
// (kernels/params/dense_ops.h). Host-only declaration; validates, never allocates or
// synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void apply_rope(const RopeApplyParams& params, cudaStream_t stream);

}  // namespace di
