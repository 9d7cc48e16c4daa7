#pragma once

// CUDA launchers of the element-wise helpers (kernels/params/elementwise.h): the in-place scale
// and the precision conversion. Host-only declarations; validate, never allocate or synchronize.

#include <cuda_runtime_api.h>

#include "kernels/params/elementwise.h"

namespace di {
void scale_values(const ScaleParams& params, cudaStream_t stream);
void convert_values(const ConvertParams& params, cudaStream_t stream);
}  // namespace di
