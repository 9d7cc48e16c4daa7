#pragma once

// CUDA launcher of the in-place scale (kernels/params/elementwise.h). Host-only declaration;
// validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/elementwise.h"

namespace di {
void scale_values(const ScaleParams& params, cudaStream_t stream);
}  // namespace di
